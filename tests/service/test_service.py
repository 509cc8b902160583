"""The grading service as it runs: ``python -m autograder serve`` (uvicorn on the loopback interface) over the toy
course, driven by ``dlcourse.submit`` (what a student calls in the notebook) and by plain HTTP requests: what each
role may see and do, the checks made before a body is read, and a service killed mid-queue that loses nothing."""

from __future__ import annotations

import csv
import json
import os
import socket
import time
from pathlib import Path

import nbformat
import pytest

from autograder.course import Course
from autograder.intake.release import release
from autograder.service.store import Store
from tests.fixtures import service
from tests.fixtures.postgres import fresh_database
from tests.fixtures.service import WRONG_SQUARE, notebook_bytes
from tests.fixtures.toy_course import make_course
from tests.fixtures.warm import warm_toy


def test_a_student_submits_from_the_notebook_and_sees_which_hidden_cases_failed(served, tmp_path, capsys):
    from dlcourse.submit import submit

    course, server, tokens, _ = served
    path = tmp_path / "T1.ipynb"
    path.write_bytes(notebook_bytes(course, square=WRONG_SQUARE))
    shown = submit("T1", server.url, tokens["bob"], notebook=path)
    assert shown["state"] == "graded" and shown["score"] == 60.0 and shown["max_score"] == 100.0
    parts = {p["grade_id"]: p for p in shown["parts"]}
    assert parts["test_square"]["points"] == 0.0 and parts["test_scale"]["points"] == 60.0
    assert "t1.square.random" in parts["test_square"]["failed_cases"]  # which hidden case, by name
    assert (
        all("message" not in p for p in shown["parts"]) and "feedback_page" not in shown
    )  # before the deadline
    printed = capsys.readouterr().out
    assert "in the queue, number" in printed and "T1: 60 / 100" in printed and "failed: " in printed
    # the same gradebook the command line uses: its export has bob's score
    grades = tmp_path / "grades.csv"
    done = service.subprocess.run(
        [service.sys.executable, "-m", "autograder", "--course", str(course.root), "export", "--to", str(grades),
         "--assignment", "T1"],
        capture_output=True, text=True, cwd=service.ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(grades.open()))
    assert [float(r["score"]) for r in rows if r["student_id"] == "bob"] == [60.0], rows


def test_the_instructor_sees_everything_and_a_student_only_their_own(served):
    course, server, tokens, revoked = served
    sent = server.call("POST", "/api/assignments/T1/submissions", tokens["carol"], notebook_bytes(course))
    assert sent.status == 202, sent.body
    sid = sent.body["id"]
    graded = server.wait_graded(tokens["carol"], sid)
    assert graded["score"] == 100.0
    for who, status in [(None, 401), ("not-a-token", 401), (revoked, 401), (tokens["alice"], 404)]:
        for path in (f"/api/submissions/{sid}", f"/api/submissions/{sid}/feedback"):
            answer = server.call("GET", path, who)
            assert answer.status == status, (who, path, answer.body)
            assert "carol" not in json.dumps(answer.body)  # nothing of hers, not even that it exists
    listed = server.call("GET", "/api/submissions", tokens["alice"]).body["submissions"]
    assert all(s["student"] == "alice" for s in listed)
    everyone = server.call("GET", "/api/submissions?limit=5000", tokens["instructor"]).body["submissions"]
    assert sid in [s["id"] for s in everyone]
    assert [
        s["id"]
        for s in server.call("GET", "/api/submissions?limit=1", tokens["instructor"]).body["submissions"]
    ] == [everyone[0]["id"]]
    for bad in ("0", "5001", "-1", "x"):
        assert server.call("GET", f"/api/submissions?limit={bad}", tokens["instructor"]).status == 400
    assert server.call("GET", "/api/status", tokens["carol"]).status == 403
    status = server.call("GET", "/api/status", tokens["instructor"]).body
    assert any(row["student"] == "carol" and row["score"] == 100.0 for row in status["latest"])
    page = server.call("GET", f"/api/submissions/{sid}/feedback", tokens["instructor"])
    assert page.status == 200 and "carol" in page.body and "<script" not in page.body.lower()
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert (
        server.call("GET", f"/api/submissions/{sid}/feedback", tokens["carol"]).status == 403
    )  # before the deadline
    instructor = server.call(
        "POST", "/api/assignments/T1/submissions", tokens["instructor"], notebook_bytes(course)
    )
    assert instructor.status == 403


def test_what_is_refused_is_refused_before_the_body_is_read_and_says_why(served):
    course, server, tokens, revoked = served
    body = notebook_bytes(course)
    assert server.call("POST", "/api/assignments/T1/submissions", None, body).status == 401
    assert server.call("POST", "/api/assignments/T1/submissions", revoked, body).status == 401
    for aid in ("T9", "..%2F..%2Fetc", "T1%00"):
        answer = server.call("POST", f"/api/assignments/{aid}/submissions", tokens["alice"], body)
        assert answer.status == 404, (aid, answer.body)
    assert server.call("POST", "/api/assignments/T1/submissions", tokens["alice"], b"{not json").status == 400
    assert (
        server.call("POST", "/api/assignments/T1/submissions", tokens["alice"], b'{"cells": 3}').status == 400
    )
    huge = b'{"cells": [], "pad": "' + b"x" * 600_000 + b'"}'  # over the course's 0.5 MB
    assert server.offered("/api/assignments/T1/submissions", tokens["alice"], huge).startswith(
        b"HTTP/1.1 413"
    )
    # a client that declares a huge body is answered at once, before it sends a byte of it
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            f"POST /api/assignments/T1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['alice']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 900000000\r\n\r\n".encode()
        )
        assert raw.recv(200).startswith(b"HTTP/1.1 413")
    mine = server.call("GET", "/api/submissions", tokens["alice"]).body["submissions"]
    assert mine == []  # none of these became a submission


def test_a_retry_with_its_key_makes_no_second_submission_and_the_hourly_limit_says_when(served):
    course, server, tokens, _ = served
    body = notebook_bytes(course)
    first = server.call(
        "POST", "/api/assignments/T1/submissions", tokens["rita"], body, Idempotency_Key="k-1"
    )
    again = server.call(
        "POST", "/api/assignments/T1/submissions", tokens["rita"], body, Idempotency_Key="k-1"
    )
    assert (first.status, again.status) == (202, 200) and first.body["id"] == again.body["id"]
    for n in range(2, 5):
        assert server.call("POST", "/api/assignments/T1/submissions", tokens["rita"], body).status == 202, n
    refused = server.call("POST", "/api/assignments/T1/submissions", tokens["rita"], body)
    assert refused.status == 429 and 3000 < int(refused.headers["retry-after"]) <= 3600
    assert "4 submissions of T1 an hour" in refused.body["error"]
    listed = server.call("GET", "/api/submissions", tokens["rita"]).body["submissions"]
    assert len(listed) == 4  # the retry and the refused one made none
    ids = [s["id"] for s in listed]
    positions = [server.call("GET", f"/api/submissions/{i}", tokens["rita"]).body for i in ids]
    for state in positions:
        server.wait_graded(tokens["rita"], state["id"])


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_service_killed_mid_queue_grades_every_acknowledged_submission_once_after_a_restart(
    tmp_path, request, database
):
    root = warm_toy(make_course(tmp_path / "course"), tmp_path)
    course = Course(root=root)
    release(course, ["T1"])
    url = fresh_database(request.getfixturevalue("postgres")) if database == "postgres" else ""
    (root / "service.toml").write_text(f'open = ["T1"]\ndatabase = "{url}"\n')
    store = Store(course.work / "service", url)
    students = [f"s{i:02d}" for i in range(6)]
    tokens = {sid: store.tokens.issue(sid) for sid in students}
    server = service.start(root, tmp_path / "service.log", "--workers", "1")
    server.wait_open("T1", tokens["s00"])
    acknowledged = []
    for sid in students:
        answer = server.call("POST", "/api/assignments/T1/submissions", tokens[sid], notebook_bytes(course))
        assert answer.status == 202
        acknowledged.append(answer.body["id"])
    # killed once a submission is being graded (not after a fixed time: on a fast machine, as a normal user, all six
    # were graded within the second the test used to wait)
    deadline = time.monotonic() + 120
    while not any(s.state == "running" for s in store.listed()):
        assert time.monotonic() < deadline, "no submission was ever being graded"
        time.sleep(0.02)
    service.stop(server, kill=True)  # SIGKILL: the service and the kernels it started, at once
    rows = {s.id: s for s in store.listed()}
    assert set(rows) == set(acknowledged)  # every acknowledged one was kept
    assert any(r.state != "graded" for r in rows.values())  # the kill came before the queue was done
    cut_short = [r.id for r in rows.values() if r.state == "running"]  # killed while it was being graded
    server = service.start(root, tmp_path / "service.log", "--workers", "1")
    try:
        for sid, one in zip(students, acknowledged):
            assert server.wait_graded(tokens[sid], one)["score"] == 100.0
    finally:
        service.stop(server)
    rows = store.listed()
    assert sorted(r.id for r in rows) == sorted(acknowledged) and all(r.state == "graded" for r in rows)
    assert all(r.counted for r in rows)  # one each: every student's one submission is in the gradebook
    assert all("100" in store.page(r.id) for r in rows)  # each one's feedback page, kept with it
    if url:  # PostgreSQL's: the bytes and pages are in the database, none in the folder
        assert not list(store.files.iterdir()) and not list(store.feedback.iterdir())
    log = Path(tmp_path / "service.log").read_text()
    assert (f"{len(cut_short)} submission(s) the last run was grading are queued again" in log) == bool(
        cut_short
    )


def test_in_colab_the_notebook_as_it_is_open_is_sent_and_failures_are_one_line(served, monkeypatch, tmp_path):
    import sys
    import types

    from dlcourse import submit as client

    course, server, tokens, revoked = served
    unsaved = nbformat.reads(notebook_bytes(course).decode(), as_version=4)  # what the browser holds, unsaved
    asked = []
    message = types.SimpleNamespace(
        blocking_request=lambda what, timeout_sec: asked.append(what) or {"ipynb": unsaved}
    )
    colab = types.ModuleType("google.colab")
    colab._message = message
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab._message", message)
    shown = client.submit("T1", server.url, tokens["alice"])
    assert asked == ["get_ipynb"] and shown["score"] == 100.0
    monkeypatch.delitem(sys.modules, "google.colab")
    # JupyterLab: the saved file of the session's notebook
    saved = tmp_path / "mine.ipynb"
    saved.write_bytes(notebook_bytes(course, square=WRONG_SQUARE))
    monkeypatch.setenv("JPY_SESSION_NAME", str(saved))
    assert client.submit("T1", server.url, tokens["alice"])["score"] == 60.0
    monkeypatch.delenv("JPY_SESSION_NAME")
    heavy = tmp_path / "heavy.ipynb"  # a printed output kept: over the course's 0.5 MB
    printed = nbformat.reads(notebook_bytes(course).decode(), as_version=4)
    next(c for c in printed.cells if c.cell_type == "code").outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="x" * 600_000)
    ]
    nbformat.write(printed, heavy)
    for token, server_url, notebook, said in [
        (revoked, server.url, saved, "did not accept your token"),
        (
            tokens["alice"],
            "http://127.0.0.1:9",
            saved,
            "cannot reach the grading service at http://127.0.0.1:9",
        ),
        (tokens["alice"], server.url, None, "cannot tell which notebook is open here"),
        (tokens["alice"], server.url, heavy, r"is 0\.6 MB and the grading service takes at most 0\.5 MB"),
    ]:
        monkeypatch.setattr(client.time, "sleep", lambda s: None)
        with pytest.raises(client.SubmitError, match=said) as caught:
            client.submit("T1", server_url, token, notebook=notebook)
        assert "\n" not in str(caught.value)


def test_grading_runs_below_the_services_own_priority(served):
    """A deadline's kernels never starve the requests that ask how it goes: they run niced below the service."""
    course, server, tokens, _ = served
    probe = "import os\nprint(f'NICENESS={os.nice(0)}')\n" + "def square(x):\n    return x**2"
    sent = server.call(
        "POST", "/api/assignments/T1/submissions", tokens["carol"], notebook_bytes(course, square=probe)
    )
    assert sent.status == 202, sent.body
    assert server.wait_graded(tokens["carol"], sent.body["id"])["score"] == 100.0
    page = server.call("GET", f"/api/submissions/{sent.body['id']}/feedback", tokens["instructor"]).body
    assert "NICENESS=5" in page, page[-2000:]
    assert os.getpriority(os.PRIO_PROCESS, server.process.pid) == 0  # the service's own requests
