"""The toy course served once per module: ``python -m autograder serve`` on the loopback interface, T1 open."""

from __future__ import annotations

import pytest

from tests.fixtures import service

STUDENTS = ("alice", "bob", "carol", "rita", "pat")  # pat: the browser tests


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The toy course released, tokens issued, the service started with T1 open (4 submissions an hour)."""
    settings = 'open = ["T1"]\nper_hour = 4\nmax_notebook_mb = 0.5\n'
    with service.toy_service(
        tmp_path_factory.mktemp("service"), settings, STUDENTS, "--workers", "1"
    ) as made:
        yield made[:4]
