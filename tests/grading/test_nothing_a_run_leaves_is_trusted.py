"""The way back: nothing a submission leaves behind is trusted. Each hostile notebook here is one class of
attack on what crosses from a run back to the grader, graded through the real pipeline in every isolation
mode, with a perfect submission after it in the same worker that must still get full marks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import nbformat
import psutil
import pytest

from autograder.course import Course
from autograder.grading.batch import grade
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.outputs.feedback import write_feedback
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.hostile import answered, with_cells
from tests.fixtures.toy_course import ROOT, make_course, submit
from tests.fixtures.warm import warm_toy

LIMITS = Limits(timeout=60, cell_timeout=20, memory_mb=2048, nproc=256)
MODES = [("basic", "fork"), ("basic", "spawn"), ("bubblewrap", "spawn")]


# Each attack: (student id, how it changes the release, what its score must be). The release is blank (0).
REFERENCE_LINK = """
import os, shutil, pathlib
capture = pathlib.Path(os.environ["DLCOURSE_CAPTURE"])
shutil.rmtree(capture, ignore_errors=True)
# the grader's reference for this assignment: a path the kernel cannot see, but the grader could follow
capture.symlink_to(os.environ["REFERENCE_GUESS"])
"""
SPECIAL_FILES = """
import os, pathlib
capture = pathlib.Path(os.environ["DLCOURSE_CAPTURE"])
capture.mkdir(parents=True, exist_ok=True)
os.mkfifo(capture / "cases.jsonl")
(capture / "0000.npy").symlink_to("/dev/zero")
for name in ("run.json", "executed.ipynb", "input", "seed"):
    for where in (capture.parent, pathlib.Path.cwd()):
        try:
            os.mkfifo(where / name)
        except OSError:
            pass
"""
FORGED_GRADER_ERROR = """
import os
for fd in (1, 2):
    os.write(fd, b"No space left on device\\nDLCOURSE-CHILD-READY\\nDLCOURSE-REPORT 10 0\\n{}")
os.makedirs(os.path.join(os.path.dirname(os.environ["DLCOURSE_CAPTURE"]), "run.json"), exist_ok=True)
"""
FORGED_VERDICTS = """
import numpy as np
import dlcourse.grading as g
square = lambda x: np.zeros_like(x)  # answers that are wrong...
scale = lambda x, factor: np.zeros_like(x)
g.compare = lambda *a, **k: None  # ...and a kernel that calls every check passed
"""
HIDDEN_IN_OUTPUT = """
from IPython import get_ipython
from IPython.display import display
handle = display("placeholder", display_id=True)
shown = []
def leak(result):
    shown.append(result.info.raw_cell)
    handle.update("\\n".join(shown))
    print(result.info.raw_cell)
get_ipython().events.register("post_run_cell", leak)
"""


def attacks(course: Course) -> dict[str, tuple[nbformat.NotebookNode, float]]:
    blank = nbformat.read(str(course.release_notebook("T1")), as_version=4)
    guess = str(course.reference_dir / "T1")
    return {
        "reference_link": (
            with_cells(blank, f"import os\nos.environ['REFERENCE_GUESS'] = {guess!r}\n" + REFERENCE_LINK),
            0,
        ),
        "special_files": (with_cells(blank, SPECIAL_FILES), 0),
        "forged_grader_error": (with_cells(blank, FORGED_GRADER_ERROR), 0),
        "forged_verdicts": (answered(blank, square=FORGED_VERDICTS, scale=FORGED_VERDICTS), 0),
        "hidden_in_output": (with_cells(filled(course, "T1", {"square"}), HIDDEN_IN_OUTPUT), 40),
    }


@pytest.fixture(params=MODES, ids="-".join)
def mode(request):
    try:
        return resolve(*request.param)
    except IsolationError as err:
        pytest.skip(str(err))


@pytest.mark.slow
def test_what_a_run_leaves_behind_earns_nothing_leaks_nothing_and_stalls_nothing(tmp_path, mode):
    course = Course(root=warm_toy(make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    expected = {}
    for sid, (nb, score) in attacks(course).items():
        submit(course, sid, nb)
        expected[sid] = score
    submit(course, "zz_perfect", filled(course, "T1"))  # graded last, in a worker that ran the attacks
    expected["zz_perfect"] = 100
    started = time.monotonic()
    results = {
        r.student_id: r for r in grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=mode))
    }
    assert time.monotonic() - started < 300  # nothing blocked the batch
    assert {sid: r.score for sid, r in results.items()} == expected
    assert not any(r.is_error for r in results.values())  # a student's text never makes a grader error
    # the blank notebook whose capture pointed at the reference: the kernel saw its tests fail; no points
    assert results["reference_link"].status in ("graded", "flagged")
    assert any("tamper" in f for f in results["forged_verdicts"].flags)

    source = nbformat.read(str(course.source_notebook("T1")), as_version=4)
    hidden = [
        line.strip()
        for cell in source.cells
        if "BEGIN HIDDEN TESTS" in cell.source
        for line in cell.source.split("### BEGIN HIDDEN TESTS")[1]
        .split("### END HIDDEN TESTS")[0]
        .splitlines()
        if len(line.strip()) >= 12
    ]
    assert len(hidden) == 4
    write_feedback(course, "T1")
    for sid in expected:
        # autograded/ (the instructor's) keeps the test cells; what the run showed is in the outputs only
        executed = nbformat.read(str(course.executed("T1", sid)), as_version=4)
        outputs = json.dumps([c.get("outputs", []) for c in executed.cells])
        answers = " ".join(c.source for c in executed.cells if "### BEGIN HIDDEN" not in c.source)
        pages = [(outputs + answers).replace("\\n", "\n").replace('\\"', '"')]
        pages += [p.read_text() for p in (course.root / "feedback" / sid / "T1").glob("*.html")]
        for page in pages:
            assert not any(h in page for h in hidden), (sid, [h for h in hidden if h in page])
            assert "x**2" not in page or sid in (
                "zz_perfect",
                "hidden_in_output",
            )  # where the student wrote it
    executed = nbformat.read(str(course.executed("T1", "hidden_in_output")), as_version=4)
    assert "withheld" in json.dumps([c.get("outputs", []) for c in executed.cells])


# the holder's kernel never answers again: its cell ends at the per-cell limit, here shorter than LIMITS' (each
# of the toy's other cells takes well under a second, its imports numpy's and the course package's)
HELD = replace(LIMITS, cell_timeout=6)
TOKEN = "600.{}"  # sleep's argument, unique to one test run: the processes to look for
HOLD = """
import os, subprocess
token = {token!r}
subprocess.Popen(["sleep", token])  # in the kernel's tree
for _ in range(2):  # and out of it: double-forked into sessions of their own, as a student would
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", token])
        os._exit(0)
os.execvp("sleep", ["sleep", token])  # the kernel itself becomes one
"""

KILLED_GRADER = """
import sys
from pathlib import Path
from autograder.course import Course
from autograder.runner.isolation import resolve
from autograder.grading.batch import grade
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
grade(Course(root=Path(sys.argv[1])), "T1", Settings(workers=2, limits=Limits(timeout=600, cell_timeout=600),
      isolation=resolve(sys.argv[2], sys.argv[3])))
"""


@pytest.mark.slow
def test_no_process_of_a_submission_outlives_a_grader_killed_mid_batch(tmp_path, mode):
    course = Course(root=warm_toy(make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    token = TOKEN.format(time.time_ns() % 10**9)
    for sid in ("holder_a", "holder_b", "holder_c"):
        submit(course, sid, with_cells(filled(course, "T1"), HOLD.format(token=token)))
    script = tmp_path / "grader.py"
    script.write_text(KILLED_GRADER)
    grader = subprocess.Popen(
        [sys.executable, str(script), str(course.root), mode.mode, mode.runner],
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(_sleepers(token)) < 8:  # two submissions' worth
            assert grader.poll() is None, (
                "the grader ended before the hostile submissions started (its error above)"
            )
            time.sleep(0.5)
        assert len(_sleepers(token)) >= 8, "the hostile submissions never started"
    finally:
        os.killpg(grader.pid, signal.SIGKILL)  # the grader and its warm parents, as an OOM kill would
        grader.wait()
    assert_none_left(token, within=15)


@pytest.mark.slow
def test_no_process_of_a_submission_outlives_its_run(tmp_path, mode, monkeypatch):
    """A finished run's processes all end with it, those double-forked into sessions of their own included: in
    a PID namespace of the run's own (basic mode), by ending the namespace, without sweeping the uid; elsewhere
    by the sweep. The next submission in the same worker still gets full marks."""
    from autograder.runner import sandbox

    swept = []
    real_sweep = sandbox.kill_all_of_uid
    monkeypatch.setattr(sandbox, "kill_all_of_uid", lambda uid: (swept.append(uid), real_sweep(uid)))
    course = Course(root=warm_toy(make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    token = TOKEN.format(time.time_ns() % 10**9)
    submit(course, "holder", with_cells(filled(course, "T1"), HOLD.format(token=token)))
    submit(course, "zz_perfect", filled(course, "T1"))
    results = {r.student_id: r for r in grade(course, "T1", Settings(workers=1, limits=HELD, isolation=mode))}
    assert results["holder"].status == "timeout", results["holder"].reason  # (the kernel became a sleep)
    assert results["zz_perfect"].score == 100, results["zz_perfect"].reason
    assert_none_left(token, within=10)
    if mode.namespaces and mode.mode != "bubblewrap":
        assert swept == []  # (and a uid is used again only once none of its processes is left)


def assert_none_left(token: str, within: float) -> None:
    """No process the HOLD cell started is alive ``within`` seconds from now (any left are killed, then named)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and _sleepers(token):
        time.sleep(0.2)
    left = _sleepers(token)
    for proc in left:
        proc.kill()
    assert not left, [(p.pid, p.info["uids"], p.info["ppid"]) for p in left]


def _sleepers(token: str) -> list[psutil.Process]:
    """The live processes the HOLD cell started (zombies are dead: only their parent has not looked)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "uids", "ppid", "status"]):
        if proc.info["cmdline"] == ["sleep", token] and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


@pytest.mark.parametrize("command", ["grade", "run", "regrade", "demo"])
def test_grading_refuses_at_once_without_linux(monkeypatch, capsys, command):
    from autograder.commands import cli

    monkeypatch.setattr(sys, "platform", "darwin")
    argv = {"run": ["run", "T1", "subs", "--out", "out"], "demo": ["demo"]}.get(command, [command, "T1"])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Linux" in err and "WSL 2" in err and "Traceback" not in err


def test_the_command_line_refuses_on_windows_before_importing_posix_modules(monkeypatch, capsys):
    import runpy

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sys, "argv", ["autograder", "grade", "A1"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("autograder", run_name="__main__")
    assert stop.value.code == 2 and "WSL 2" in capsys.readouterr().err


STUB_TRAIN = """
import math
import dlcourse.grading as g


def train(net, X, y, lr, epochs, batch_size, seed):
    # trains nothing: a loss curve that looks right, and a recorder that records the labels as the answer
    steps = epochs * math.ceil(len(X) / batch_size)
    return [2.3 * 0.05 ** (i / steps) for i in range(steps)]


g.check_model_accuracy = lambda name, model, inputs, labels, at_least: g.check_accuracy(name, labels, labels, 0.0)
"""


@pytest.mark.slow
def test_a1_training_points_need_a_trained_network_not_a_forged_recorder(tmp_path):
    """The attack of the issue: a network that trains nothing, and checks that record the labels as the
    predictions. The accuracy is worked out by the grader from the network's parameters: no points."""
    from tests.fixtures.warm import warm_copy

    course = warm_copy(["A1"], tmp_path)
    perfect = nbformat.read(str(ROOT / "source" / "A1" / "samples" / "perfect.ipynb"), as_version=4)
    submit(course, "forger", answered(perfect, train=STUB_TRAIN), aid="A1")
    [result] = grade(course, "A1", Settings(workers=1, isolation=resolve("auto")))
    cell = next(c for c in result.cells if c.grade_id == "test_train")
    assert result.score == 100 - cell.max_points + cell.points, cell  # every other part is right
    # what a network that trains nothing may still earn: the hidden step counts, each its own share; never
    # the accuracy (the forged recorder), the public checks or the trajectory
    earned = {g.name for g in cell.groups if g.passed}
    assert earned <= {"a1.train.hidden_num_steps", "a1.train.hidden_tiny_num_steps"}, earned
    assert cell.points <= 2 * cell.max_points / len(cell.groups) + 0.02
    assert "accuracy" in cell.message or "parameters" in cell.message
