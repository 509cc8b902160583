"""The grading service measured (``python -m benchmarks --only service``): ``python -m autograder serve`` on the
loopback interface of this machine, driven over HTTP as ``dlcourse.submit`` drives it.

- **Idle:** one submission at a time of A1's and A3's perfect samples; the time from the request to the moment a
  client polling every 20 ms sees it graded, beside the notebook's own cell time in the sandbox (the grader's
  ``child_notebook``): the difference is what the service adds (target: at most 0.3 s beyond the cell time and the
  measured cells' runs).
- **A deadline spike:** 300 submissions of A1 from 150 students spread over 60 s (``--quick``: 20 from 10 in 10 s);
  each one's wait from its acknowledgement to the moment it is seen graded (p50, p95, max), against the spike's lower
  bound (every submission's cell time, summed, over the workers); meanwhile, students asking after their waiting
  submissions (the latency of those requests); and that every acknowledged submission was graded once.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from autograder.api import Course, throwaway_course

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``autograder serve`` over a throwaway copy of the course with ``aid`` open, and its students' tokens."""

    def __init__(self, aid: str, students: list[str], workers: int, per_hour: int = 6):
        self.aid = aid
        self.course = throwaway_course(Course(), [aid])
        (self.course.root / "service.toml").write_text(f'open = ["{aid}"]\nper_hour = {per_hour}\n')
        command = [sys.executable, "-m", "autograder", "--course", str(self.course.root)]
        out = Path(tempfile.mkdtemp(prefix="bench-tokens-")) / "tokens.csv"
        subprocess.run([*command, "tokens", "issue", "--out", str(out), *[a for s in students for a in ("--student", s)]], check=True, capture_output=True, cwd=ROOT)  # fmt: skip
        self.tokens = {row["student_id"]: row["token"] for row in csv.DictReader(out.open())}
        self.instructor = subprocess.run([*command, "tokens", "instructor"], check=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()  # fmt: skip
        self.port = free_port()
        self.log = open(Path(tempfile.mkdtemp(prefix="bench-service-")) / "service.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*command, "serve", "--port", str(self.port), "--workers", str(workers)],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, token: str, body: bytes | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(self.url + path, data=body, method=method, headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def wait_open(self, seconds: float = 900) -> float:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            try:
                state = self.call("GET", "/api/assignments", self.instructor)[1]["assignments"][self.aid][
                    "state"
                ]
            except (OSError, KeyError, ValueError):
                state = "starting"
            if state == "open":
                return time.monotonic() - started
            if state == "closed" or self.process.poll() is not None:
                raise RuntimeError(f"{self.aid} did not open: {state}")
            time.sleep(0.5)
        raise RuntimeError(f"{self.aid} did not open in {seconds:.0f} s")

    def cell_seconds(self, student: str) -> float | None:
        path = self.course.work / "results" / self.aid / f"{student}.json"
        try:
            return json.loads(path.read_text())["timings"]["child_notebook"]
        except (OSError, KeyError, ValueError):
            return None

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()


def idle(aid: str, repeats: int, workers: int) -> dict:
    students = [f"idle{i}" for i in range(repeats)]
    served = Served(aid, students, workers)
    try:
        proof = served.wait_open()
        body = (served.course.samples(aid) / "perfect.ipynb").read_bytes()
        rows = []
        for sid in students:
            started = time.perf_counter()
            status, state = served.call(
                "POST", f"/api/assignments/{aid}/submissions", served.tokens[sid], body
            )
            if status != 202:
                raise RuntimeError(f"{aid}: submission refused: {status} {state}")
            while state["state"] in ("queued", "running"):
                time.sleep(0.02)
                state = served.call("GET", f"/api/submissions/{state['id']}", served.tokens[sid])[1]
            seen = time.perf_counter() - started
            cell = served.cell_seconds(sid)
            rows.append({"seconds": round(seen, 3), "cell_seconds": cell, "score": state.get("score"),
                         "added": None if cell is None else round(seen - cell, 3)})  # fmt: skip
        return {"proof_seconds": round(proof, 1), "submissions": rows}
    finally:
        served.stop()


def spike(students: int, each: int, window: float, workers: int) -> dict:
    names = [f"s{i:03d}" for i in range(students)]
    served = Served("A1", names, workers, per_hour=max(6, each))
    try:
        served.wait_open()
        bodies = [(served.course.samples("A1") / f"{n}.ipynb").read_bytes() for n in ("perfect", "partial")]
        acked: dict[str, float] = {}
        owners: dict[str, int] = {}  # id -> the sender's index (its student: index % students)
        seen: dict[str, float] = {}
        latencies: list[float] = []
        lock, stop = threading.Lock(), threading.Event()

        def send(index: int) -> None:
            time.sleep(index * window / (students * each))
            sid = names[index % students]
            status, state = served.call(
                "POST", "/api/assignments/A1/submissions", served.tokens[sid], bodies[index % 2]
            )
            if status == 202:
                with lock:
                    acked[state["id"]] = time.monotonic()
                    owners[state["id"]] = index

        def watch() -> None:  # which are graded, from the instructor's list (not timed)
            while not stop.is_set():
                listed = served.call("GET", "/api/submissions?assignment=A1&limit=5000", served.instructor)[1]
                now = time.monotonic()
                for s in listed.get("submissions", []):
                    if s["state"] in ("graded", "error"):
                        seen.setdefault(s["id"], now)
                time.sleep(0.25)

        def ask() -> None:  # students asking how their submission does, as dlcourse.submit asks (timed)
            while not stop.is_set():
                with lock:
                    waiting = [i for i in acked if i not in seen][-20:]
                for one in waiting[:4]:
                    owner = names[owners[one] % students]
                    started = time.perf_counter()
                    served.call("GET", f"/api/submissions/{one}", served.tokens[owner])
                    latencies.append(time.perf_counter() - started)
                time.sleep(0.1)

        watcher, asker = threading.Thread(target=watch), threading.Thread(target=ask)
        watcher.start()
        asker.start()
        senders = [threading.Thread(target=send, args=(i,)) for i in range(students * each)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline and len(set(acked) & set(seen)) < len(acked):
            time.sleep(0.5)
        stop.set()
        watcher.join()
        asker.join()
        waits = sorted(seen[i] - acked[i] for i in acked if i in seen)
        cells = [c for c in (served.cell_seconds(s) for s in names) if c is not None]  # each student's last
        total_cell = sum(cells) / max(1, len(cells)) * len(acked)  # the class's cell time, from the mean
        bound = total_cell / workers
        latencies.sort()
        return {
            "students": students, "submissions": students * each, "window_seconds": window, "workers": workers,
            "acknowledged": len(acked), "graded": len(waits),
            "wait_p50": _q(waits, 0.5), "wait_p95": _q(waits, 0.95), "wait_max": waits[-1] if waits else None,
            "lower_bound_seconds": round(bound, 2),
            "status_asked": "student",
            "status_p50_ms": round(1000 * _q(latencies, 0.5), 1), "status_p95_ms": round(1000 * _q(latencies, 0.95), 1),
        }  # fmt: skip
    finally:
        served.stop()


def _q(values: list[float], q: float) -> float | None:
    return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None


def run_service(quick: bool = False) -> dict:
    workers = os.cpu_count() or 1
    result = {"workers": workers, "idle": {}}
    for aid in ("A1",) if quick else ("A1", "A3"):
        result["idle"][aid] = idle(aid, 2 if quick else 5, workers)
    result["spike"] = spike(10, 2, 10.0, workers) if quick else spike(150, 2, 60.0, workers)
    result["note"] = (
        "the grader runs in the service's own process, its threads and kernels at niceness 5 below the requests; the "
        "status latency is a student's request for one submission, as dlcourse.submit polls"
    )
    return result
