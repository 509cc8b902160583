"""Shared fixtures. Tests import the project from the repository root."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcourse._lazy import quiet

ROOT = Path(__file__).resolve().parents[1]
quiet()


def pytest_configure(config):
    """The slowest-tests table (tests/suite_durations.py), written by the process that reports: not an xdist worker."""
    if not hasattr(config, "workerinput"):
        from autograder.course import Course
        from benchmarks.suite import IN_WORK  # make bench keeps the table from there
        from tests.suite_durations import SuiteDurations

        table = Course(root=ROOT).work / IN_WORK
        config.pluginmanager.register(SuiteDurations(config, table), "suite-durations")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per test session (its import takes seconds)."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server on loopback for this session (each xdist worker its own); tests take a fresh database
    on it with :func:`tests.fixtures.postgres.fresh_database`."""
    from tests.fixtures.postgres import postgres_server

    with postgres_server() as server:
        yield server.url


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
