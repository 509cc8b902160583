"""A spawned run's driver (``python -m autograder.runner.child``) makes its namespaces before anything else, and it
must be one thread when it does: where the grader is not root they are made inside a new user namespace, and
``unshare(CLONE_NEWUSER)`` refuses a process with a second thread (EINVAL). numpy, which the driver imports (through
``dlcourse``), starts OpenBLAS's threads at import where the run asks for more than one, as the reference's runs at 2
and 4 threads do: seen as a normal user, whose spawned references all failed with "could not make the sandbox's
namespaces: unshare: Invalid argument". The namespaces refuse a threaded process as root too, so this test fails
wherever the suite runs, not only where the grader is a normal user."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autograder.runner.isolation import enter_namespaces, namespaces_available
from autograder.runner.protocol import ChildRequest, kernel_env


@pytest.mark.parametrize("threads", [1, 4])
def test_a_spawned_driver_makes_its_namespaces_whatever_thread_count_its_run_asks_for(tmp_path, threads):
    if sys.platform != "linux" or not namespaces_available():
        pytest.skip("this machine gives no namespaces")
    for folder in ("work", "home", "tmp", "capture"):
        (tmp_path / folder).mkdir()
    request = ChildRequest(
        scratch=str(tmp_path), env=kernel_env(tmp_path, threads), memory=4096, cell_timeout=30,
        threads=threads, namespaces=True, writable=(str(tmp_path),), probe=True,
    )  # fmt: skip
    assert request.env["OMP_NUM_THREADS"] == str(threads)
    run = subprocess.run(
        [sys.executable, "-m", "autograder.runner.child", "--request", request.to_json()],
        env=request.env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert "isolation failed" not in run.stdout, run.stdout
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["interfaces"] == ["lo"] and report["python"] == "ok"


def test_namespaces_are_refused_to_a_threaded_process_with_the_reason():
    """In a fork of this process with a thread started: refused before anything is changed, saying why."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        import threading

        os.close(read)
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        try:
            enter_namespaces([], [])
            message = "entered"
        except OSError as err:
            message = str(err)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    assert "2 threads" in message and "one thread" in message, message


THREADS = """
import json, os, torch, threadpoolctl
print(json.dumps({"torch": torch.get_num_threads(), "omp": os.environ["OMP_NUM_THREADS"],
                  "blas": sorted({p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"})}))
"""


@pytest.mark.slow
def test_the_kernel_of_a_spawned_driver_gets_the_threads_its_run_asks_for():
    """The driver imports on one BLAS thread; the kernel it starts has the run's thread count all the same, BLAS's
    too where it is more than the cores (OpenBLAS caps its variable at them), as a forked kernel's."""
    import nbformat
    from nbformat.v4 import new_code_cell

    from autograder.runner.isolation import resolve
    from autograder.runner.sandbox import Limits, Sandbox

    isolation = resolve("basic", "spawn")
    if not isolation.namespaces:
        pytest.skip("this machine gives no namespaces")
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(THREADS)])
    sandbox = Sandbox(
        Limits(timeout=120, cell_timeout=60, memory_mb=4096, threads=3), 0, ("numpy", "torch"), isolation
    )
    try:
        outcome = sandbox.start().run(nb)
    finally:
        sandbox.cleanup()
    assert outcome.status == "finished", outcome.detail
    assert json.loads(outcome.summary["cells"][0]["output"]) == {"torch": 3, "omp": "3", "blas": [3]}
