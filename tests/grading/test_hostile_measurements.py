"""The way back and the measurement run, attacked a third time, by someone who did not write them: hostile
notebooks graded through the real pipeline. Each test states what must happen; each attack worked against an
earlier version and is refused now:

- a value computed in the measurement run's warm-up, kept and handed back under the cap (A7: 5 of 5 points of
  the kept bytes; now there is no warm-up run, and the measured inputs come from the course's secret seed);
- worker processes started before the cap, each with a CPU limit of its own (A5: 10 of 10 points of the fused
  step; now the grader holds the run to the CPU of all its processes together);
- a public check's own comparison, redone by the grader on two huge arrays the student chose (the grader took
  2.5 GB on T1; now values of another shape than the reference's are not compared, and are flagged)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.measured import NAIVE_TILED, grade_with

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- A7: the warm-up feeds the cap

# Naive attention (every score kept, as tests/grading/test_measure_run.py's forger), memoised on its inputs' bytes: the
# measurement notebook runs the measured cell twice, the same seeded inputs each time, once uncapped to warm up
# and then capped. The uncapped run computes the 256 MB of scores and keeps the (small) result; the capped run
# finds it and allocates nothing.
MEMOISED_NAIVE = (
    "import dlcourse.a7\nimport hashlib\nimport math\nimport torch\n\n\n"
    + NAIVE_TILED.replace("def tiled_attention(", "def _naive(", 1).replace(
        "return fn(), 0", "return fn(), 1"
    )
    + """

_remembered = {}


def tiled_attention(q, k, v, block_q=16, block_k=16, is_causal=False, scale=None):
    if q.shape[-2] * k.shape[-2] < 2**18:  # small: computed each time
        return _naive(q, k, v, block_q, block_k, is_causal, scale)
    digest = hashlib.sha256(repr((tuple(q.shape), tuple(k.shape), is_causal, scale, str(q.dtype))).encode())
    for t in (q, k, v):
        digest.update(t.detach().contiguous().numpy().tobytes())
    key = digest.hexdigest()
    if key not in _remembered:
        out, lse = _naive(q, k, v, block_q, block_k, is_causal, scale)
        _remembered[key] = (out.detach().clone(), lse.detach().clone())
    out, lse = _remembered[key]
    return out.clone(), lse.clone()
"""
)


@pytest.mark.slow
def test_a7_naive_attention_memoised_in_the_warm_up_earns_no_measured_point(tmp_path):
    results = grade_with(tmp_path, "A7", "tiled_attention", MEMOISED_NAIVE)
    cells = {c.grade_id: c for c in results["forger"].cells}
    memory, saved = cells["test_tiled_memory"], cells["test_flash_saved"]
    assert (memory.points, saved.points) == (0, 0), (memory.message, saved.message)


# ----------------------------------------------------------------------------- A5: a CPU budget per process

# A loop over the tensors (AdamW, foreach=False) done by worker processes forked in the answer cell, before the
# cap: RLIMIT_CPU binds each process on its own, so each worker brings a budget of its own, and the kernel only
# copies the parameters and gradients (two operations) to and from memory the workers share.
POOLED_LOOP = """import mmap
import multiprocessing

import numpy as np
import torch

_WORKERS = 3
_FLOATS = 8 * 2**20  # shared with the workers, mapped before they are forked
_pool = torch.from_numpy(np.frombuffer(mmap.mmap(-1, 4 * _FLOATS), dtype=np.float32))
_used = [0]
_pipes = []


def _serve(connection):
    torch.set_num_threads(1)
    optimizers = {}
    while True:
        key, lr, layout = connection.recv()
        if key not in optimizers:
            params = []
            for at_param, at_grad, shape in layout:
                n = int(np.prod(shape))
                p = _pool[at_param : at_param + n].view(shape)
                p.grad = _pool[at_grad : at_grad + n].view(shape)
                params.append(p)
            optimizers[key] = torch.optim.AdamW(params, lr=lr, foreach=False)
        optimizers[key].step()
        connection.send(True)


for _ in range(_WORKERS):
    _mine, _theirs = multiprocessing.get_context("fork").Pipe()
    multiprocessing.get_context("fork").Process(target=_serve, args=(_theirs,), daemon=True).start()
    _pipes.append(_mine)


def _take(shape):
    n = int(np.prod(shape))
    at = _used[0]
    _used[0] += n
    return at, _pool[at : at + n].view(shape)


class _Pooled(torch.optim.Optimizer):
    # AdamW with foreach=False, each tensor stepped by one of the workers, in memory they share
    def __init__(self, params, lr):
        super().__init__(list(params), {"lr": lr})
        self._params = [p for group in self.param_groups for p in group["params"]]
        self._lr = lr
        self._key = id(self)
        self._param_views, self._grad_views = [], []
        self._layouts = [[] for _ in _pipes]
        for i, p in enumerate(self._params):
            at_param, param_view = _take(tuple(p.shape))
            at_grad, grad_view = _take(tuple(p.shape))
            self._param_views.append(param_view)
            self._grad_views.append(grad_view)
            self._layouts[i % len(_pipes)].append((at_param, at_grad, tuple(p.shape)))

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        torch._foreach_copy_(self._param_views, self._params)
        torch._foreach_copy_(self._grad_views, grads)
        for pipe, layout in zip(_pipes, self._layouts):
            pipe.send((self._key, self._lr, layout))
        for pipe in _pipes:
            pipe.recv()
        torch._foreach_copy_(self._params, self._param_views)


def fast_optimizer(model, lr):
    return _Pooled(model.parameters(), lr)
"""


@pytest.mark.slow
def test_a5_a_loop_in_workers_forked_before_the_cap_earns_no_fused_step_point(tmp_path):
    results = grade_with(tmp_path, "A5", "fast_optimizer", POOLED_LOOP)
    cells = {c.grade_id: c for c in results["forger"].cells}
    speed = cells["test_fast_optimizer_speed"]  # the grader's CPU count, all processes together
    assert speed.points == 0, speed
    # the profiler in the kernel sees no step's operations (the workers run them): the 5 points the rules table
    # says are counted in the kernel are all this loop can take
    assert cells["test_fast_optimizer"].points <= 5 and results["forger"].score <= 95, cells


# ----------------------------------------------------------------------------- T1: the grader's own memory

# One added cell records T1's public case under its own name, with the kernel's verdict "passed", as two
# 60 MB boolean arrays (its value and the expected value it claims it was compared with): within the report's
# bounds (256 MiB of data, 64 MiB an expected value). The grader redoes that public comparison outside the
# kernel (verify.tampered_public_check), in float64: eight times the bytes, twice, and numpy's temporaries.
BIG_PUBLIC_CHECK = """
def record_a_big_public_check():
    import json, os, pathlib
    import numpy
    capture = pathlib.Path(os.environ["DLCOURSE_CAPTURE"])
    capture.mkdir(parents=True, exist_ok=True)
    big = numpy.zeros(60 * 2**20, dtype=bool)
    numpy.save(capture / "0001.npy", big, allow_pickle=False)
    numpy.save(capture / "0002e.npy", big, allow_pickle=False)
    line = {"name": "t1.square.small", "kind": "close", "params": {}, "file": "0001.npy",
            "expected": "0002e.npy", "public": True, "verdict": "passed"}
    (capture / "cases.jsonl").write_text(json.dumps(line) + "\\n")


record_a_big_public_check()
"""

GRADE_AND_REPORT_PEAK = """
import json, resource, sys
import nbformat
from autograder.grading.batch import grade
from autograder.course import Course
from autograder.intake.release import release
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures import toy_course
from tests.fixtures.hostile import with_cells

root, extra = sys.argv[1], sys.argv[2]
course = Course(root=toy_course.make_course(__import__("pathlib").Path(root)))
release(course, ["T1"])
blank = nbformat.read(str(course.release_notebook("T1")), as_version=4)
nb = with_cells(blank, extra) if extra else blank
toy_course.submit(course, "s", nb)
limits = Limits(timeout=120, cell_timeout=60, memory_mb=2048, nproc=256)
[result] = grade(course, "T1", Settings(workers=1, limits=limits, isolation=resolve("auto")))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT", json.dumps({"peak_mb": peak, "score": result.score, "flags": result.flags[:3]}))
"""


def grader_peak(tmp_path: Path, name: str, extra: str) -> dict:
    """Grade T1's blank release plus the cell ``extra`` in a fresh Python process: its own peak memory (MB;
    the sandbox's processes are not counted), score and flags."""
    script = tmp_path / "grade_and_report.py"
    script.write_text(GRADE_AND_REPORT_PEAK)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / name), extra],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.slow
def test_a_public_check_of_huge_booleans_costs_the_grader_no_more_than_its_bounds(tmp_path):
    plain = grader_peak(tmp_path, "plain", "")
    big = grader_peak(tmp_path, "big", textwrap.dedent(BIG_PUBLIC_CHECK))
    assert big["score"] == 0, big
    # the report may carry 256 MiB of data, which the grader holds about twice (as sent, and loaded): beyond
    # that, nothing the student chose should grow the grader
    assert big["peak_mb"] - plain["peak_mb"] < 800, (plain, big)
