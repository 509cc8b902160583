"""A deadline, small: 40 submissions of A1 from 20 students within 10 s, sent to a real service on the loopback
interface while others ask how their submission is doing. Every acknowledged submission is graded once (none lost,
none doubled) with the score its notebook earns, status requests keep answering fast, and the queue position of a
student's first submission only ever goes down (a second one waits for the first, and others may pass it meanwhile:
its position counts them once they are graded ahead of it). (The full spike, 300 from 150 students, is ``make bench``'s.)
Marker ``load``: the burst keeps both cores busy for half a minute and slows every test beside it, so ``make test``
leaves it out of its time budget; ``make test-load`` runs it, and CI runs it in ``make test``'s session."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from autograder.service.store import Store
from tests.fixtures import service
from tests.fixtures.warm import warm_copy

STUDENTS = 20
EACH = 2
WINDOW_SECONDS = 10.0


@pytest.mark.load  # (its burst keeps both cores busy: make test-load, and CI in make test's session)
def test_a_deadline_of_forty_submissions_is_graded_once_each_and_status_keeps_answering(tmp_path):
    course = warm_copy(["A1"], tmp_path)
    (course.root / "service.toml").write_text('open = ["A1"]\nper_hour = 6\n')
    samples = {n: (course.samples("A1") / f"{n}.ipynb").read_bytes() for n in ("perfect", "partial")}
    store = Store(course.work / "service")
    students = [f"s{i:02d}" for i in range(STUDENTS)]
    tokens = {sid: store.tokens.issue(sid) for sid in students}
    server = service.start(course.root, tmp_path / "service.log", "--workers", "2")
    try:
        server.wait_open("A1", tokens[students[0]], seconds=300)
        sent: dict[str, tuple[str, str]] = {}  # id -> (student, sample)
        latencies: list[float] = []
        positions: dict[str, list[int]] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def hand_in(index: int) -> None:
            sid = students[index % STUDENTS]
            name = "perfect" if index % 3 else "partial"
            time.sleep(index * WINDOW_SECONDS / (STUDENTS * EACH))  # spread over the window
            answer = server.call("POST", "/api/assignments/A1/submissions", tokens[sid], samples[name])
            assert answer.status == 202, answer.body
            with lock:
                sent[answer.body["id"]] = (sid, name)

        def ask() -> None:  # students asking after their submissions, as dlcourse.submit does
            graded: set[str] = set()
            while not stop.is_set():
                with lock:
                    waiting = [(one, sid) for one, (sid, _) in sent.items() if one not in graded]
                for one, sid in waiting[:8]:  # the longest-waiting first: each is asked about until graded
                    started = time.perf_counter()
                    state = server.call("GET", f"/api/submissions/{one}", tokens[sid])
                    latencies.append(time.perf_counter() - started)
                    assert state.status == 200
                    if state.body.get("queue_position") is not None:
                        positions.setdefault(one, []).append(state.body["queue_position"])
                    if state.body.get("state") == "graded":
                        graded.add(one)
                time.sleep(0.05)

        senders = [threading.Thread(target=hand_in, args=(i,)) for i in range(STUDENTS * EACH)]
        asker = threading.Thread(target=ask)
        started = time.monotonic()
        asker.start()
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        sending = time.monotonic() - started
        assert len(sent) == STUDENTS * EACH and sending < WINDOW_SECONDS + 30  # (a busy CI machine)
        expected = {"perfect": 100.0, "partial": None}
        for one, (sid, name) in list(sent.items()):
            done = server.wait_graded(tokens[sid], one, seconds=600)
            assert done["state"] == "graded", done
            if expected[name] is not None:
                assert done["score"] == expected[name], (name, done)
            else:
                assert 0 < done["score"] < 100, done
        stop.set()
        asker.join()
    finally:
        service.stop(server)
    rows = store.listed()
    assert sorted(r.id for r in rows) == sorted(sent)  # every acknowledged one, and nothing else
    assert all(r.state == "graded" and r.attempts == 1 for r in rows)  # each graded once
    scores = {(r.student_id, r.id): r.score for r in rows}
    assert len(scores) == STUDENTS * EACH
    first = {}  # each student's first submission: nothing of their own holds it back
    for r in sorted(rows, key=lambda r: r.seq):
        first.setdefault(r.student_id, r.id)
    for one in first.values():  # its place in the queue only ever moves forward
        seen = positions.get(one, [])
        assert seen == sorted(seen, reverse=True), seen
    assert (
        sum(len(positions.get(one, [])) for one in first.values()) > 20
    )  # it was asked about while it waited
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(
        f"status requests: {len(latencies)}, median {statistics.median(latencies) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"
    )
    # answering, not stalled behind the grading (a blocked event loop waits seconds); the 100 ms target is make
    # bench's to measure (38 ms at the 95th percentile there), not a test's on a machine busy with other tests
    assert len(latencies) > 50 and p95 < 1.0, p95
