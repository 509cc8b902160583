"""Shared fixtures. Tests import the project from the repository root."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcourse._lazy import quiet

ROOT = Path(__file__).resolve().parents[1]
quiet()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per test session (its import takes seconds)."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A course directory with the toy assignment T1, released (its gradebook knows T1): a fresh one for each
    test module, so no module's results depend on another's."""
    from autograder.course import Course
    from autograder.intake.release import release
    from tests.fixtures.toy_course import make_course

    course = Course(root=make_course(tmp_path_factory.mktemp("toy")))
    release(course, ["T1"])
    return course
