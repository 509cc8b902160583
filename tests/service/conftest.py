"""The toy course served once per module: ``python -m autograder serve`` on the loopback interface, T1 open."""

from __future__ import annotations

import pytest

from autograder.course import Course
from autograder.intake.release import release
from autograder.service.store import Store
from tests.fixtures import service
from tests.fixtures.toy_course import make_course
from tests.fixtures.warm import warm_toy

STUDENTS = ("alice", "bob", "carol", "rita", "pat")  # pat: the browser tests


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The toy course released, tokens issued, the service started with T1 open (4 submissions an hour)."""
    tmp = tmp_path_factory.mktemp("service")
    root = warm_toy(make_course(tmp / "course"), tmp / "own")
    course = Course(root=root)
    release(course, ["T1"])
    (root / "service.toml").write_text('open = ["T1"]\nper_hour = 4\nmax_notebook_mb = 0.5\n')
    store = Store(course.work / "service")
    tokens = {sid: store.tokens.issue(sid) for sid in STUDENTS}
    tokens["instructor"] = store.tokens.issue("instructor", role="instructor")
    revoked = store.tokens.issue("mallory")
    store.tokens.revoke("mallory")
    server = service.start(root, tmp / "service.log", "--workers", "1")
    try:
        server.wait_open("T1", tokens["alice"])
        yield course, server, tokens, revoked
    finally:
        service.stop(server)
