"""The service on a Dask cluster (``serve --scheduler``): a real local cluster, one of its workers declaring a GPU;
an assignment that ``service.toml`` names in ``gpu`` is graded on that worker only, and its result lands in the
same gradebook; a worker killed while it grades loses nothing. A service told to grade on GPU workers without a
cluster refuses to start and says why."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.fixtures import service

pytestmark = pytest.mark.slow


def warm_parents():
    """On a Dask worker: the warm parents (fork servers) grading started there."""
    from autograder.runner import forkserver

    return len(forkserver._SERVERS)


def test_an_assignment_for_gpu_workers_is_graded_on_the_worker_with_a_gpu_only(tmp_path):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        gpu_worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--nthreads", "1",
             "--resources", "GPU=1", "--name", "gpu-worker", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=service.ROOT,
        )  # fmt: skip
        try:
            with Client(cluster) as client:
                client.wait_for_workers(2, timeout=60)
                settings = 'open = ["T1"]\ngpu = ["T1"]\n'
                with service.toy_service(
                    tmp_path,
                    settings,
                    ["alice", "bob"],
                    "--workers",
                    "2",
                    "--scheduler",
                    cluster.scheduler_address,
                ) as made:
                    course, server, tokens, _, _ = made
                    sent = {
                        sid: server.call("POST", "/api/assignments/T1/submissions", tokens[sid], body).body[
                            "id"
                        ]
                        for sid, body in (
                            ("alice", service.notebook_bytes(course)),
                            ("bob", service.notebook_bytes(course, square=service.WRONG_SQUARE)),
                        )
                    }
                    scores = {sid: server.wait_graded(tokens[sid], one)["score"] for sid, one in sent.items()}
                    assert scores == {"alice": 100.0, "bob": 60.0}
                    parents = client.run(warm_parents)
                named = {w: info["name"] for w, info in client.scheduler_info()["workers"].items()}
            assert [named[w] for w, n in parents.items() if n] == [
                "gpu-worker"
            ]  # graded there, and only there
            from autograder.grading.record import Recorder

            with Recorder(course.db_url) as recorder:
                assert recorder.scores("T1") == {"alice": 100.0, "bob": 60.0}
        finally:
            gpu_worker.terminate()
            gpu_worker.wait(30)


def test_gpu_assignments_without_a_cluster_are_refused_at_start(tmp_path):
    from tests.fixtures.toy_course import make_course

    root = make_course(tmp_path / "course")
    (root / "service.toml").write_text('gpu = ["T1"]\n')
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "--course", str(root), "serve", "--port", str(service.free_port())],
        capture_output=True, text=True, cwd=service.ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "start the service with --scheduler" in done.stderr, done.stderr[-2000:]


def test_a_worker_killed_mid_run_loses_nothing_and_grades_the_submission_once(tmp_path):
    """SIGKILL of the Dask worker grading a submission: the cluster runs it again elsewhere (or the service
    tries again), and it is graded once, with its full score, into the gradebook."""
    import os
    import signal

    from distributed import Client, LocalCluster

    slow = "import time\ntime.sleep(4)\ndef square(x):\n    return x**2"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            with service.toy_service(
                tmp_path,
                'open = ["T1"]\n',
                ["alice"],
                "--workers",
                "1",
                "--scheduler",
                cluster.scheduler_address,
            ) as made:
                course, server, tokens, _, store = made
                sid = server.call(
                    "POST", "/api/assignments/T1/submissions", tokens["alice"],
                    service.notebook_bytes(course, square=slow),
                ).body["id"]  # fmt: skip
                deadline = time.monotonic() + 60
                busy = {}
                while not busy and time.monotonic() < deadline:
                    busy = {w: keys for w, keys in client.processing().items() if keys}
                    time.sleep(0.1)
                assert busy, "no worker took the submission"
                (worker,) = busy
                pid = client.run(os.getpid, workers=[worker])[worker]
                os.kill(pid, signal.SIGKILL)
                shown = server.wait_graded(tokens["alice"], sid)
                assert shown["state"] == "graded" and shown["score"] == 100.0, server.stacks()
                assert [r.id for r in store.listed()] == [sid] and store.get(sid).counted
            from autograder.grading.record import Recorder

            with Recorder(course.db_url) as recorder:
                assert recorder.scores("T1") == {"alice": 100.0}
