"""The toy course T1 released once a session (nbgrader's release is a subprocess of seconds), copied for each
test that grades it without a kernel (:mod:`tests.fixtures.fake_sandbox`)."""

from __future__ import annotations

import shutil

import pytest

from autograder.course import Course


@pytest.fixture(scope="session")
def released_toy(tmp_path_factory):
    from autograder.intake.release import release
    from tests.fixtures.toy_course import make_course

    root = make_course(tmp_path_factory.mktemp("toy-released") / "course")
    release(Course(root=root), ["T1"])
    return root


@pytest.fixture
def toy_course(released_toy, tmp_path) -> Course:
    """A copy of the released toy course T1 of this test's own (its gradebook, workspace and cache)."""
    root = tmp_path / "course"
    shutil.copytree(released_toy, root, symlinks=True)
    return Course(root=root)
