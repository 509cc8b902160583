"""The grader forks (a sandbox child's preexec_fn, killing a sandbox user's processes) in worker threads while
other worker threads evaluate recorded models with numpy's products. OpenBLAS shuts its thread pool down
before every fork; a product in flight in another thread then waits forever for workers that are gone (seen:
a grader run without OMP_NUM_THREADS stalled at 100% CPU in exec_blas). Run in a fresh process with BLAS on
two threads, whatever this process's environment: the grader's own fork path and its own model comparison,
side by side, must both finish."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import threading, types
    import numpy as np
    from threadpoolctl import threadpool_limits
    from autograder.runner.launchers import spawn
    from autograder.grading.verify import safe_compare
    from dlcourse.grading import Case
    from dlcourse.modeldata import encode

    threadpool_limits(2)
    layers = [["affine", 64, 100], ["relu"], ["affine", 100, 10]]
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(450, 64))
    labels = rng.integers(0, 10, size=450)
    got = encode(layers, [rng.normal(size=(64, 100)), rng.normal(size=100), rng.normal(size=(100, 10)), rng.normal(size=10)])
    params = {"at_least": 0.0, "architecture": "any", "inputs": inputs.tolist(), "labels": labels.tolist()}
    case = Case("m.accuracy", "model_accuracy", params, "test_m")
    reference = None
    done = []

    def evaluate():
        for _ in range(400):
            assert safe_compare(case, reference, got) is None
        done.append("products")

    thread = threading.Thread(target=evaluate, daemon=True)
    thread.start()
    request = types.SimpleNamespace(env=None, scratch="/")
    for _ in range(150):
        spawn(["true"], request).wait()
    thread.join(30)
    print("finished" if done else "stalled")
    """
)


def test_forks_and_model_evaluations_in_threads_side_by_side_both_finish(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "finished"
