"""The measurement run (autograder/grading/measure.py, autograder/runner/caps.py): a measured test cell runs again in a
fresh sandboxed kernel, under caps the driver sets from outside the kernel, and its cases come from that run.
Attacked as the issue's forger attacked A7: naive attention that keeps every score, dressed up by replacing the
course's measurement helpers with functions that return the expected values, earns none of the measured points."""

from __future__ import annotations

import json

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.grading.measure import merge_capture
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits, Sandbox
from tests.fixtures.measured import NAIVE_TILED, grade_with, measured_toy_course

LIMITS = Limits(timeout=120, cell_timeout=60, memory_mb=4096, nproc=256)
MODES = [("basic", "fork"), ("basic", "spawn"), ("bubblewrap", "spawn")]


def measured(code: str, caps: dict) -> nbformat.NotebookNode:
    cell = new_code_cell(code, metadata={"dlcourse": {"caps": caps}})
    warm = new_code_cell("import numpy as np\nimport threading\nx = np.zeros(10)")
    return new_notebook(cells=[warm, cell, new_code_cell("print('after')")])


def run(notebook, mode) -> list[dict]:
    from autograder.runner.isolation import IsolationError

    try:
        isolation = resolve(mode[0], runner=mode[1])
    except IsolationError as err:
        pytest.skip(str(err))
    sandbox = Sandbox(LIMITS, isolation=isolation).start()
    try:
        outcome = sandbox.run(notebook)
    finally:
        sandbox.cleanup()
    assert outcome.status in ("finished", "crashed"), (
        outcome.detail
    )  # crashed: a kernel killed at its CPU cap
    return outcome.summary["cells"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids="-".join)
def test_a_cell_may_use_only_what_its_caps_allow_whatever_it_does(mode):
    # memory: 64 MB more than the kernel holds is refused; 8 MB is not
    big = run(measured("y = np.ones(64 * 2**20 // 8 * 2)", {"memory_mb": 48}), mode)
    small = run(measured("y = np.ones(8 * 2**20 // 8)", {"memory_mb": 48}), mode)
    assert big[1]["status"] == "error" and big[1]["ename"] == "MemoryError", big[1]
    assert small[1]["status"] == "ok" and small[1]["measure"]["memory_limit_mb"] > 0, small[1]
    # raising its own limit back is refused: a hard limit only goes down
    lift = run(
        measured(
            "import resource\nr = resource.RLIMIT_AS if resource.getrlimit(resource.RLIMIT_DATA)[1] == "
            "resource.RLIM_INFINITY else resource.RLIMIT_DATA\nresource.setrlimit(r, (2**40, 2**40))",
            {"memory_mb": 48},
        ),
        mode,
    )
    assert lift[1]["status"] == "error" and lift[1]["ename"] in ("ValueError", "PermissionError"), lift[1]
    # no new thread or process to hand the work to
    thread = run(measured("threading.Thread(target=print).start()", {"memory_mb": 48}), mode)
    assert thread[1]["status"] == "error" and thread[1]["ename"] == "RuntimeError", thread[1]
    fork = run(measured("import subprocess\nsubprocess.run(['true'])", {"memory_mb": 48}), mode)
    assert fork[1]["status"] == "error", fork[1]
    # CPU: a loop past its CPU seconds is stopped (the kernel is killed at its limit); the time is CPU time
    spin = run(measured("while True:\n    pass", {"cpu_seconds": 1}), mode)
    assert spin[1]["status"] == "died", spin[1]


SPREAD = """import subprocess, sys
spin = "import time\\nend = time.process_time() + 1.6\\nwhile time.process_time() < end: pass"
workers = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
for worker in workers:
    worker.wait()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids="-".join)
def test_cpu_work_spread_over_processes_counts_all_together(mode):
    from autograder.runner.caps import over_cpu

    cells = run(measured(SPREAD, {"cpu_seconds": 2}), mode)
    assert cells[1]["status"] == "ok", cells[1]  # each process kept within its own limit
    assert over_cpu(cells[1]["measure"], 2) is not None, cells[1]["measure"]  # but not all of them together
    alone = run(measured("x = sum(range(10**6))", {"cpu_seconds": 2}), mode)
    assert over_cpu(alone[1]["measure"], 2) is None, alone[1]["measure"]


ORPHAN = """import os
pid = os.fork()
if pid == 0:  # a process that leaves the kernel's tree before the measured cell, to work for it unseen
    os.setsid()
    if os.fork() == 0:
        import time
        import numpy
        for _ in range(600):  # until the measured cell has begun (its caps bind from then on)
            if os.path.exists("go"):
                break
            time.sleep(0.1)
        try:
            numpy.ones(2**25)
            verdict = "allocated"
        except MemoryError:
            verdict = "refused"
        with open("orphan.txt", "w") as fh:
            fh.write(verdict)
    os._exit(0)
os.waitpid(pid, 0)
"""


WAIT_FOR_THE_ORPHAN = """import os, time
open("go", "w").close()
for _ in range(600):
    if os.path.exists("orphan.txt") and open("orphan.txt").read():
        break
    time.sleep(0.1)
print(open("orphan.txt").read())
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids="-".join)
def test_a_process_started_before_the_measured_cell_is_capped_too(mode):
    notebook = measured(WAIT_FOR_THE_ORPHAN, {"memory_mb": 48})
    notebook.cells.insert(0, new_code_cell(ORPHAN))
    cells = run(notebook, mode)
    assert cells[2]["output"].strip() == "refused", cells


def test_the_capped_runs_recordings_replace_the_cells_own_and_nothing_else():
    def capture(*entries):
        files = {}
        lines = []
        for i, (name, cell, value) in enumerate(entries, 1):
            buffer = __import__("io").BytesIO()
            np.save(buffer, np.array(value), allow_pickle=False)
            files[f"{i:06d}.npy"] = buffer.getvalue()
            lines.append(
                json.dumps(
                    {"name": name, "kind": "close", "params": {}, "file": f"{i:06d}.npy", "cell": cell}
                )
            )
        files["cases.jsonl"] = ("\n".join(lines) + "\n").encode()
        return files

    main = capture(("a.one", "test_a", 1.0), ("b.one", "test_b", 2.0), ("b.two", "test_b", 3.0))
    run_again = capture(("b.one", None, 9.0), ("b.one", "test_b", 5.0), ("a.one", "test_a", 7.0))
    merged = merge_capture(main, run_again, "test_b")
    from dlcourse.grading import load_cases

    cases, values, problems = load_cases(merged)
    assert not problems
    assert {n: float(v) for n, v in values.items()} == {
        "a.one": 1.0,
        "b.one": 5.0,
    }  # b.two: not recorded again
    assert cases["b.one"].cell == "test_b"


# ----------------------------------------------------------------------------- A7, end to end


@pytest.mark.slow
def test_a7_naive_attention_behind_forged_helpers_earns_no_measured_point(tmp_path):
    naive = "import dlcourse.a7\nimport math\nimport torch\n\n\n" + NAIVE_TILED
    results = grade_with(tmp_path, "A7", "tiled_attention", naive)
    cells = {c.grade_id: c for c in results["forger"].cells}
    memory = cells["test_tiled_memory"]
    assert memory.points == 0, memory
    assert "fresh kernel" in memory.message and "MB" in memory.message, memory.message
    saved = cells["test_flash_saved"]  # its forward keeps every weight: refused too
    assert saved.points == 0, saved
    assert results["forger"].code_flags, "replacing the course's helper is flagged"
    assert "measure" in results["forger"].timings


# A loop over the tensors (AdamW with foreach=False) that passes for a fused step: torch's profiler replaced by one
# that counts one operation in the forger's own steps and a thousand in anyone else's.
LOOP_BEHIND_A_FAKE_PROFILER = """import torch

_stepping = {"mine": False}


class _Counted(torch.optim.AdamW):
    def step(self, closure=None):
        _stepping["mine"] = True
        return super().step(closure)


class _FakeProfile:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        _stepping["mine"] = False
        return self

    def __exit__(self, *exc):
        return False

    def key_averages(self):
        return [type("Event", (), {"count": 1 if _stepping["mine"] else 1000})()]


torch.profiler.profile = _FakeProfile


def fast_optimizer(model, lr):
    return _Counted(model.parameters(), lr=lr, foreach=False)
"""


@pytest.mark.slow
def test_a5_a_loop_behind_a_fake_profiler_earns_no_fused_step_point(tmp_path):
    results = grade_with(tmp_path, "A5", "fast_optimizer", LOOP_BEHIND_A_FAKE_PROFILER)
    cells = {c.grade_id: c for c in results["forger"].cells}
    speed = cells["test_fast_optimizer_speed"]  # the grader's own count of CPU time
    assert speed.points == 0, speed
    assert "CPU" in speed.message and "fresh kernel" in speed.message, speed.message
    # its same updates in "fewer" operations (counted by the profiler it replaced) earn at most that test's 5,
    # which the rules table says are counted in the kernel; the replaced profiler is flagged
    assert cells["test_fast_optimizer"].points <= 5
    assert results["forger"].score <= 95
    assert any("torch.profiler.profile" in flag.why for flag in results["forger"].code_flags), results[
        "forger"
    ].code_flags
    assert results["forger"].timings.get("measure", 0) > 0


@pytest.mark.slow
@pytest.mark.load  # (its busy loops take both cores from every test beside it: make test-load, and CI)
def test_a5s_correct_samples_get_full_marks_on_a_loaded_machine(tmp_path):
    """A grade must not move with the grading machine's load: A5's correct samples (its timed part now measured in
    CPU seconds relative to the solutions') graded while two processes keep every core busy."""
    import subprocess
    import sys

    from autograder.grading.batch import grade
    from autograder.intake.samples import samples
    from autograder.settings import Settings
    from tests.fixtures.warm import MAIN, warm_copy

    course = warm_copy(["A5"], tmp_path)  # (the reference built once, as a course's is; the grading loaded)
    for name in ("perfect", "colab"):
        path = course.submission("A5", name)
        path.parent.mkdir(parents=True)
        path.write_text(samples(MAIN, "A5")[name])
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        results = {
            r.student_id: r for r in grade(course, "A5", Settings(workers=2, isolation=resolve("auto")))
        }
    finally:
        for process in busy:
            process.kill()
    for name, result in results.items():
        assert result.score == 100, (name, [(c.grade_id, c.message) for c in result.cells if not c.passed])


def test_a_measured_cell_over_its_cpu_cap_is_tried_once_more_and_only_then(tmp_path, monkeypatch):
    """A loaded grader can push one run past its CPU cap: the cell is measured again, and only a second run
    over it takes its points. A cell that fails on its own (an exception) is not run again."""
    import autograder.grading.pipeline as pipeline
    from autograder.grading.batch import grade
    from autograder.intake.samples import filled
    from autograder.settings import Settings
    from tests.fixtures.hostile import answered
    from tests.fixtures.toy_course import submit

    course = measured_toy_course(tmp_path)
    perfect = filled(course, "T1")
    submit(course, "perfect", perfect)
    mode = resolve("basic", runner="fork")
    (result,) = grade(course, "T1", Settings(workers=1, isolation=mode))  # the reference and the canary, kept
    assert result.score == 100
    calls = []
    real = pipeline.over_cpu

    def loaded_once(report, seconds):
        calls.append(seconds)
        return (
            "its processes used 31 s of CPU together (a loaded machine)"
            if len(calls) == 1
            else real(report, seconds)
        )

    monkeypatch.setattr(pipeline, "over_cpu", loaded_once)
    (result,) = grade(course, "T1", Settings(workers=1, isolation=mode), force=True)
    assert result.score == 100 and len(calls) == 2, (result.score, calls, result.cells)

    monkeypatch.setattr(pipeline, "over_cpu", lambda report, seconds: calls.append(seconds) or "always over")
    calls.clear()
    (result,) = grade(course, "T1", Settings(workers=1, isolation=mode), force=True)
    scale = next(c for c in result.cells if c.grade_id == "test_scale")
    assert scale.points == 0 and len(calls) == 2 and result.score == 40, (result.score, calls)

    monkeypatch.setattr(
        pipeline, "over_cpu", lambda report, seconds: calls.append(seconds) or real(report, seconds)
    )
    calls.clear()
    submit(course, "perfect", answered(perfect, scale="def scale(x, factor):\n    raise ValueError('no')"))
    (result,) = grade(course, "T1", Settings(workers=1, isolation=mode), force=True)
    assert result.score == 40 and len(calls) == 1, (result.score, calls)
