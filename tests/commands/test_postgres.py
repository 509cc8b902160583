"""Several graders share one PostgreSQL gradebook through nbgrader's db_url: tested against a real
server started on loopback (:mod:`tests.fixtures.postgres`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autograder.course import Course
from autograder.intake.release import release
from autograder.intake.samples import filled
from tests.fixtures.postgres import fresh_database
from tests.fixtures.toy_course import make_course, submit

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def postgres_url(postgres):
    """A database of this module's own on the session's server, as nbgrader's db_url names it."""
    return fresh_database(postgres).replace("postgresql://", "postgresql+psycopg2://", 1)


def test_two_graders_share_one_postgres_gradebook(postgres_url, tmp_path):
    course = Course(root=make_course(tmp_path / "course"), db=postgres_url)
    release(course, ["T1"])
    submit(course, "pg_full", filled(course, "T1"))
    submit(course, "pg_half", filled(course, "T1", {"square"}))
    env = {**os.environ, "DLCOURSE_DB_URL": postgres_url}
    graders = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autograder",
                "--course",
                str(course.root),
                "grade",
                "T1",
                "--student",
                sid,
                "--workers",
                "1",
                "--timeout",
                "60",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for sid in ("pg_full", "pg_half")
    ]
    deadline = time.monotonic() + 240
    for grader in graders:
        out, _ = grader.communicate(timeout=max(1, deadline - time.monotonic()))
        assert grader.returncode == 0, out[-2000:]

    from nbgrader.api import Gradebook

    with Gradebook(postgres_url) as gb:
        scores = {s.student.id: s.score for s in gb.find_assignment("T1").submissions}
    assert scores == {"pg_full": 100, "pg_half": 40}
    assert not (course.root / "gradebook.db").exists(), "nothing went to a local SQLite file"
    # graded again: the existing rows are updated (in a few statements), not added to
    again = subprocess.run(
        [sys.executable, "-m", "autograder", "--course", str(course.root), "grade", "T1", "--force",
         "--workers", "1", "--timeout", "60"],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert again.returncode == 0, (again.stdout + again.stderr)[-2000:]
    with Gradebook(postgres_url) as gb:
        submissions = gb.find_assignment("T1").submissions
        assert sorted((s.student.id, s.score) for s in submissions) == [("pg_full", 100), ("pg_half", 40)]


def test_deadline_and_extension_on_postgres(postgres_url, tmp_path, monkeypatch):
    from datetime import datetime

    from autograder.commands import cli
    from autograder.grading.record import Recorder
    from autograder.intake.late import deadlines, late_penalty, write_timestamp
    from autograder.result import CellResult, Result

    course = Course(root=make_course(tmp_path / "late"), db=postgres_url)
    release(course, ["T1"])
    monkeypatch.setenv("DLCOURSE_DB_URL", postgres_url)  # the command line's course uses it
    for args in (
        ["deadline", "T1", "--due", "2026-12-01 23:59 UTC"],
        ["extension", "T1", "pg_ext", "--hours", "24"],
    ):
        assert cli.main(["--course", str(course.root), *args]) == 0
    known = deadlines(course, "T1")
    assert str(known.due) == "2026-12-01 23:59:00" and str(known.due_for("pg_ext")) == "2026-12-02 23:59:00"
    for sid in ("pg_ext", "pg_late"):  # both handed in half a day late; one had a day more
        submit(course, sid, filled(course, "T1"))
        write_timestamp(course.submission("T1", sid).parent, datetime(2026, 12, 2, 12, 0))
    result = Result("pg_late", "T1", max_score=100, score=40, status="graded",
                    cells=[CellResult("test_square", 40, 40, True), CellResult("test_scale", 0, 60, False)])  # fmt: skip
    with Recorder(postgres_url) as recorder:
        recorder.record("T1", result)
        recorder.record("T1", Result("pg_ext", "T1", max_score=100, score=0, status="graded"))
        assert recorder.gradebook.find_submission("T1", "pg_ext").extension.total_seconds() == 24 * 3600
    assert late_penalty(course, "T1", result).seconds_late == 12 * 3600 + 60
    extended = Result("pg_ext", "T1", max_score=100, score=40, status="graded")
    assert late_penalty(course, "T1", extended).seconds_late == 0
    assert not (course.root / "gradebook.db").exists(), "nothing went to a local SQLite file"
