"""The service's rules without a server where none is needed: its settings file, its tokens, its store; and, on a
real server, a course whose grader cannot prove itself stays closed and says why."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
from datetime import timedelta

import nbformat
import pytest

from autograder.course import Course, nbgrader_meta
from autograder.intake.release import release
from autograder.service.config import ServiceConfig, load
from autograder.service.store import RateLimited, Store, parse_stamp, utc_now
from tests.fixtures import service
from tests.fixtures.postgres import fresh_database
from tests.fixtures.toy_course import ROOT, make_course


def test_the_settings_file_is_read_whole_and_an_unknown_or_wrong_setting_is_refused(tmp_path):
    assert load(tmp_path) == ServiceConfig()  # no file: the defaults (every assignment, 6 an hour, parts)
    (tmp_path / "service.toml").write_text('open = ["A1"]\nper_hour = 2\nbefore_deadline = "score"\n')
    assert load(tmp_path) == ServiceConfig(open=("A1",), per_hour=2, before_deadline="score")
    for text, said in [
        ("per_hour = 0\n", "per_hour"),
        ('before_deadline = "everything"\n', "before_deadline"),
        ("rate = 3\n", "unknown setting 'rate'"),  # a typo is refused, not ignored
        ('open = "A1"\n', "open must be a list"),
        ('counts = "first"\n', "counts must be one of"),
    ]:
        (tmp_path / "service.toml").write_text(text)
        with pytest.raises(ValueError, match=said):
            load(tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    """The service's store in a SQLite file (the default) and in a fresh PostgreSQL database."""
    made = Store(
        tmp_path, fresh_database(request.getfixturevalue("postgres")) if request.param != "sqlite" else ""
    )
    yield made
    made.close()


def everything_kept(store) -> bytes:
    """Every byte the store keeps: its SQLite file, or a dump of every row of its PostgreSQL tables."""
    if not store.postgres:
        return b"".join(p.read_bytes() for p in store.folder.rglob("*") if p.is_file())
    with store.connect() as db:
        return b"".join(
            repr(row).encode() for table in ("tokens", "sessions", "submissions", "blobs")
            for row in db.execute(f"SELECT * FROM {table}").fetchall()
        )  # fmt: skip


def test_a_token_is_kept_only_as_its_hash_and_a_new_one_revokes_the_old(store):
    first = store.tokens.issue("alice", lms_id="1234")
    assert store.tokens.who(first).student_id == "alice" and store.tokens.who(first).lms_id == "1234"
    session = store.sessions.start(first)
    assert store.sessions.who(session).student_id == "alice"
    kept = everything_kept(store)
    assert first.encode() not in kept and session.encode() not in kept  # only their SHA-256
    second = store.tokens.issue("alice")
    assert store.tokens.who(first) is None and store.tokens.who(second).student_id == "alice"
    assert store.sessions.who(session) is None  # its token revoked: the browser's sign-in ends with it
    assert store.tokens.revoke("alice") == 1 and store.tokens.who(second) is None
    assert store.tokens.who("") is None and store.tokens.who("x" * 10_000) is None
    boss = store.tokens.issue("instructor", role="instructor")
    assert store.tokens.who(boss).instructor and not store.tokens.who(store.tokens.issue("bob")).instructor


def test_the_same_key_sent_twice_at_once_makes_one_submission(store):
    made, barrier = [], threading.Barrier(8)

    def send():
        barrier.wait()
        made.append(store.add("alice", "A1", b'{"cells": []}', key="retry-1"))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.id for s, _ in made}) == 1 and sum(new for _, new in made) == 1
    files = len(list(store.files.glob("*")))
    assert len(store.listed()) == 1 and files == (0 if store.postgres else 1)  # no stray bytes either
    assert store.body(made[0][0]) == b'{"cells": []}'
    other, new = store.add("bob", "A1", b'{"cells": []}', key="retry-1")  # a key is a student's own
    assert new and other.id != made[0][0].id


def test_requests_at_once_cannot_all_pass_the_hourly_limit(store):
    passed, limited, barrier = [], [], threading.Barrier(8)

    def send():
        barrier.wait()
        try:
            passed.append(store.add("alice", "A1", b'{"cells": []}', limit=(3, timedelta(hours=1))))
        except RateLimited as refused:
            limited.append(refused.wait)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(passed) == 3 and len(limited) == 5 and len(store.listed()) == 3
    assert all(timedelta(minutes=59) < wait <= timedelta(hours=1) for wait in limited)


def test_the_server_clock_sets_the_received_time_and_a_student_waits_for_their_own_earlier_one(store):
    before = utc_now()
    first, _ = store.add("alice", "A1", b'{"cells": [], "metadata": {"received": "2020-01-01T00:00:00Z"}}')
    second, _ = store.add("alice", "A1", b'{"cells": []}')
    third, _ = store.add("bob", "A1", b'{"cells": []}')
    assert before <= parse_stamp(first.received_utc) <= utc_now()  # what the notebook claims changes nothing
    claimed = store.claim({"A1"}, limit=10)
    assert [s.id for s in claimed] == [first.id, third.id]  # alice's second waits for her first
    assert store.position(store.get(second.id)) == 3 and store.claim({"A1"}, 10) == []
    assert len(store.recent("alice", "A1", timedelta(hours=1), utc_now())) == 2
    for attempt in range(1, 4):  # the grader fails it three times: then an error, never a score
        state = store.failed(first.id, "grader error: the sandbox did not start")
        assert state == ("error" if attempt == 3 else "queued")
        if state == "queued":
            assert [s.id for s in store.claim({"A1"}, 1)] == [first.id]
    assert store.get(first.id).score is None
    assert store.resume() == 1  # bob's, left running by a stopped service, is queued again


def test_the_store_knows_a_students_best_after_the_late_penalty_and_which_one_the_gradebook_holds(store):
    made = [store.add("alice", "A1", b'{"cells": []}')[0] for _ in range(4)]
    other = store.add("bob", "A1", b'{"cells": []}')[0]
    finals = [80.0, 90.0, 70.0, 90.0]  # the second and fourth tie: the later of equals is the best
    for submission, final in zip([*made, other], [*finals, 100.0]):
        (claimed,) = store.claim({"A1"}, 1)
        assert claimed.id == submission.id
        graded = {"score": final + 5, "max_score": 100.0, "status": "graded", "reason": "", "final": final}
        store.finish(claimed.id, graded, [], counted=True)  # as counts = "latest": each one counts in turn
    ids = [s.id for s in made]
    assert [store.get(i).counted for i in ids] == [False, False, False, True] and store.get(other.id).counted
    assert store.best("alice", "A1", besides=ids[3]).id == ids[1]  # by the final score, not the raw one
    assert store.best("alice", "A1", besides="none").id == ids[3]
    assert store.best("carol", "A1", besides="none") is None
    store.count(ids[1])
    assert [store.get(i).counted for i in ids] == [False, True, False, False]
    assert store.get(other.id).counted  # another student's is theirs


def test_tokens_are_issued_from_an_lms_roster_into_a_file_only_the_instructor_reads(tmp_path):
    root = make_course(tmp_path / "course")
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n9001,alice,Alice A\n9002,bob,Bob B\n")
    out = tmp_path / "tokens.csv"
    command = [sys.executable, "-m", "autograder", "--course", str(root), "tokens"]
    done = subprocess.run([*command, "issue", "--roster", str(roster), "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o077 == 0
    rows = {r["student_id"]: r for r in csv.DictReader(out.open())}
    assert sorted(rows) == ["alice", "bob"] and rows["alice"]["lms_id"] == "9001"
    store = Store(Course(root=root).work / "service")
    assert store.tokens.who(rows["bob"]["token"]).lms_id == "9002"
    done = subprocess.run([*command, "revoke", "--student", "bob"], capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 0 and store.tokens.who(rows["bob"]["token"]) is None
    assert store.tokens.who(rows["alice"]["token"]) is not None


def test_an_assignment_the_grader_cannot_prove_itself_on_stays_closed_and_says_why(tmp_path):
    root = make_course(tmp_path / "course")
    course = Course(root=root)
    path = course.source_notebook("T1")
    nb = nbformat.read(str(path), as_version=4)
    test = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_square")
    # a hidden check of a constant: the untouched release earns its points, so no grade of it can be trusted
    test.source = 'from dlcourse.grading import check\n### BEGIN HIDDEN TESTS\ncheck("t1.square.constant", [0, 1, 2])\n### END HIDDEN TESTS'
    nbformat.write(nb, str(path))
    release(course, ["T1"])
    store = Store(course.work / "service")
    token = store.tokens.issue("alice")
    server = service.start(root, tmp_path / "service.log", "--workers", "1")
    try:
        deadline = utc_now() + timedelta(seconds=240)
        while utc_now() < deadline:
            door = server.call("GET", "/api/assignments", token).body["assignments"]["T1"]
            if door["state"] != "proving":
                break
        assert door["state"] == "closed" and "untouched release got 40 points" in door["reason"], door
        body = nbformat.writes(nb).encode()
        refused = server.call("POST", "/api/assignments/T1/submissions", token, body)
        assert refused.status == 409 and "T1 is closed" in refused.body["error"]
        assert store.listed() == []
    finally:
        service.stop(server)


def test_under_counts_best_a_worse_submission_is_kept_and_the_gradebook_holds_the_best(tmp_path):
    """``counts = "best"``: a worse submission is graded and kept in the history, and the gradebook, the results
    and the course's hand-in (what ``feedback`` and ``regrade`` read) are the best one's; an equal one counts."""
    from autograder.grading.record import Recorder, load_result

    with service.toy_service(
        tmp_path, 'open = ["T1"]\ncounts = "best"\n', ["alice"], "--workers", "1"
    ) as made:
        course, server, tokens, _, store = made
        right, wrong = (
            service.notebook_bytes(course),
            service.notebook_bytes(course, square=service.WRONG_SQUARE),
        )
        shown = []
        for body in (right, wrong, right):
            sent = server.call("POST", "/api/assignments/T1/submissions", tokens["alice"], body)
            assert sent.status == 202, sent.body
            shown.append(server.wait_graded(tokens["alice"], sent.body["id"]))
            if len(shown) == 2:  # after the worse one: the first still counts, and every file is the first's
                assert [s["score"] for s in shown] == [100.0, 60.0]
                assert [store.get(s["id"]).counted for s in shown] == [True, False]
                with Recorder(course.db_url) as recorder:
                    assert recorder.scores("T1") == {"alice": 100.0}
                assert load_result(course, "T1", "alice").score == 100.0
                assert course.submission("T1", "alice").read_bytes() == right
        assert [store.get(s["id"]).counted for s in shown] == [False, False, True]  # the latest of equals
        # each page shows its own run, though the best one was run again after the worse one
        assert "x * 2" in store.page(shown[1]["id"]) and "x * 2" not in store.page(shown[0]["id"])
        mine = server.call("GET", "/api/submissions", tokens["alice"]).body["submissions"]
        assert [(s["score"], s["counted"]) for s in mine] == [(100.0, True), (60.0, False), (100.0, False)]


def test_an_assignment_never_released_stays_closed_and_says_how_to_open_it(tmp_path):
    """The gradebook has nowhere to put its grades: closed at once, as a batch refuses, with the command to run
    (before, it opened, and its first submission stopped the grading thread for good)."""
    from autograder.service.worker import Worker
    from autograder.settings import Settings

    course = Course(root=make_course(tmp_path / "course"))  # T1 in source/, never released
    lines = []
    worker = Worker(
        course, Store(tmp_path / "service"), ServiceConfig(), Settings(workers=1), log=lines.append
    )
    worker.prove_all()
    door = worker.door("T1")
    assert door.state == "closed" and "run `python -m autograder release T1` first" in door.reason, door


def test_a_grading_that_raises_is_a_grader_error_and_the_slot_goes_on_to_the_next(tmp_path):
    """Whatever the grader's own failure, the submission is tried again and then shown as an error (never left
    'running'), and the same slot grades the next one."""
    from autograder.service.worker import Door, Worker
    from autograder.settings import Settings

    course = Course(root=make_course(tmp_path / "course"))
    store = Store(tmp_path / "service")
    lines = []
    worker = Worker(course, store, ServiceConfig(open=("T1",)), Settings(workers=1), log=lines.append)
    worker.doors["T1"] = Door("open")
    alice, _ = store.add("alice", "T1", b"{}")
    bob, _ = store.add("bob", "T1", b"{}")

    def grade_one(submission, slot):
        if submission.student_id == "alice":
            raise RuntimeError("the gradebook is gone")
        graded = {"score": 100.0, "max_score": 100.0, "status": "graded", "reason": "", "final": 100.0}
        store.finish(submission.id, graded, [], counted=True)

    worker.grade_one = grade_one
    thread = threading.Thread(target=worker.slot, args=(0,), daemon=True)
    thread.start()
    deadline = utc_now() + timedelta(seconds=30)
    while utc_now() < deadline and {store.get(s.id).state for s in (alice, bob)} != {"error", "graded"}:
        threading.Event().wait(0.05)
    worker.stop()
    thread.join(10)
    assert store.get(bob.id).state == "graded" and store.get(bob.id).score == 100.0
    failed = store.get(alice.id)
    assert failed.state == "error" and failed.attempts == 3 and "the gradebook is gone" in failed.reason
    assert failed.score is None and any("RuntimeError: the gradebook is gone" in line for line in lines)


def test_a_row_marked_running_that_no_slot_holds_goes_back_to_the_queue(store):
    """A claim committed whose answer was lost (the database went away at that moment; seen in the suite) leaves a
    row running that nobody grades: the worker's sweep puts it back, and never one a slot holds."""
    lost, _ = store.add("alice", "A1", b"{}")
    held, _ = store.add("bob", "A1", b"{}")
    claimed = store.claim({"A1"}, 2)
    assert [(s.id, s.state, s.attempts) for s in claimed] == [
        (lost.id, "running", 1),
        (held.id, "running", 1),
    ]
    assert store.requeue_orphans({held.id}) == 1
    assert (store.get(lost.id).state, store.get(held.id).state) == ("queued", "running")
    assert [s.id for s in store.claim({"A1"}, 2)] == [lost.id]  # and is graded next
