"""What the service answers when the machine fails under it. Without a server process (the application itself,
through httpx's ASGI transport, over a real store, with a grader thread that is not started): a full disk refuses
the new submission with the reason and keeps the earlier ones; a busy or absent store answers 503 with Retry-After
and writes nothing half. With one: its PostgreSQL restarted under it, and a Dask worker killed mid-run."""

from __future__ import annotations

import errno
import sqlite3
import threading
import time
from types import SimpleNamespace

import anyio
import httpx
import pytest

from autograder.course import Course
from autograder.service import store as store_module
from autograder.service.app import Service, application
from autograder.service.config import ServiceConfig
from autograder.service.store import Store
from autograder.service.worker import Door

NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


@pytest.fixture
def client(tmp_path):
    store = Store(tmp_path / "service")
    worker = SimpleNamespace(doors={"T1": Door("open")}, wake=threading.Event())
    worker.door = worker.doors.get
    app = application(Service(Course(root=tmp_path), store, worker, ServiceConfig(open=("T1",))))
    return app, store, store.tokens.issue("alice")


def post(app, token, body=NOTEBOOK) -> httpx.Response:
    async def send():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://service"
        ) as client:
            headers = {"Authorization": f"Bearer {token}"}
            return await client.post("/api/assignments/T1/submissions", content=body, headers=headers)

    return anyio.run(send)


def test_a_full_disk_refuses_the_new_submission_with_the_reason_and_keeps_the_earlier_ones(
    client, monkeypatch
):
    client, store, token = client
    kept = post(client, token)
    assert kept.status_code == 202

    def full(target, body):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "_write_durably", full)
    refused = post(client, token)
    assert refused.status_code == 507 and "No space left on device" in refused.json()["error"]
    assert "nothing was kept" in refused.json()["error"]
    assert [s.id for s in store.listed()] == [kept.json()["id"]]  # the earlier one, and no row without bytes
    assert sorted(p.name for p in store.files.iterdir()) == [kept.json()["id"] + ".ipynb"]


def test_a_row_that_cannot_be_committed_leaves_no_bytes_and_the_client_is_told_to_come_back(
    client, monkeypatch
):
    client, store, token = client

    real = Store.connect
    calls = {"n": 0}

    def flaky(self):
        calls["n"] += 1
        if calls["n"] > 1:  # the rate is read; the insert finds the store locked
            raise sqlite3.OperationalError("database is locked")
        return real(self)

    monkeypatch.setattr(Store, "connect", flaky)
    answer = post(client, token)
    monkeypatch.setattr(Store, "connect", real)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "2"
    assert store.listed() == [] and list(store.files.iterdir()) == []  # nothing half-written
    assert post(client, token).status_code == 202  # once it is back, the retry is taken


@pytest.mark.slow
@pytest.mark.postgres
def test_its_postgresql_restarted_the_service_answers_503_meanwhile_and_grades_everything_after(tmp_path):
    """While the database is away a request is told to come back (503, Retry-After) and nothing is half-written;
    a submission being graded meanwhile is recorded once it is back; the queue goes on without a restart."""
    from tests.fixtures import service
    from tests.fixtures.postgres import fresh_database, postgres_server

    slow = "import time\ntime.sleep(3)\ndef square(x):\n    return x**2"
    with postgres_server() as pg:
        database = fresh_database(pg.url)
        students = ["alice", "bob", "carol"]
        with service.toy_service(
            tmp_path, 'open = ["T1"]\n', students, "--workers", "1", database=database
        ) as made:
            course, server, tokens, _, store = made
            submit = "/api/assignments/T1/submissions"
            first = server.call("POST", submit, tokens["alice"], service.notebook_bytes(course)).body["id"]
            assert server.wait_graded(tokens["alice"], first)["score"] == 100.0
            running = server.call(
                "POST", submit, tokens["carol"], service.notebook_bytes(course, square=slow)
            )
            assert running.status == 202
            pg.stop()  # while carol's notebook runs
            for method, path, token, body in (
                ("POST", submit, tokens["bob"], service.notebook_bytes(course)),
                ("GET", "/api/submissions", tokens["alice"], None),
            ):
                away = server.call(method, path, token, body)
                assert away.status == 503 and away.headers["retry-after"] == "2", away.body
            time.sleep(4)  # carol's run ends while the database is away
            pg.start()
            later = server.call("POST", submit, tokens["bob"], service.notebook_bytes(course))
            assert later.status == 202, later.body
            for sid, one in (("carol", running.body["id"]), ("bob", later.body["id"])):
                assert server.wait_graded(tokens[sid], one)["score"] == 100.0
            rows = store.listed()
            assert sorted(r.student_id for r in rows) == students and all(r.counted for r in rows)
            with store.connect() as db:
                kept = db.execute("SELECT id FROM blobs WHERE kind = 'notebook'").fetchall()
            assert sorted(r["id"] for r in kept) == sorted(r.id for r in rows)  # no bytes without a row
            assert "the store is away" in server.log.read_text()  # the grader waited for it, and went on
