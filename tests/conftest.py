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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that grades, on a machine where the grader refuses to (no namespace or bubblewrap keeps a submission
    away from the course: :class:`autograder.runner.isolation.OpenCourse`, raised here or said by a grader this
    test started), is skipped with the grader's reason and its fixes, as the bubblewrap tests skip where bubblewrap
    cannot run: the refusal is the feature there. Only where ``--isolation auto`` has neither, so a test that
    fails on another machine with the refusal in its message (one of the refusal's own tests) still fails."""
    from autograder.runner.isolation import OPEN_COURSE, OpenCourse
    from tests.fixtures.refusal import grading_refused_here

    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None:
        return
    text = report.longreprtext + "".join(content for _, content in report.sections)  # what it printed, too
    said = call.excinfo.errisinstance(OpenCourse) or OPEN_COURSE in text
    if said and grading_refused_here():
        where = text.find(OPEN_COURSE)
        reason = text[where : where + 600] if where >= 0 else str(call.excinfo.value)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: grading refused here: {reason}")


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
