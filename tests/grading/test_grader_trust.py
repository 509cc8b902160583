"""The grade depends on the submission alone: the grader proves itself before it records anything, its own
failures are never a student's score, and it works (or refuses, saying why) in the configurations users
have: no bubblewrap, root with Python behind a private directory, other thread counts, a cold cache."""

from __future__ import annotations

import csv
import json
import os
import queue
import subprocess
import sys
import threading
import time
import types
import warnings
from dataclasses import replace
from pathlib import Path

import nbformat
import numpy as np
import pytest

from autograder.commands import cli, workflows
from autograder.course import Course, nbgrader_meta
from autograder.grading import batch, canary, pipeline
from autograder.grading.batch import Listeners, grade
from autograder.grading.canary import CanaryFailed
from autograder.grading.reference import ReferenceError, build_reference, calibrate
from autograder.grading.verify import verify
from autograder.intake.release import release, run_nbgrader
from autograder.intake.samples import filled
from autograder.outputs.export import write_results_csv
from autograder.runner import isolation
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Limits, Sandbox
from autograder.settings import Settings
from dlcourse import grading
from dlcourse.grading import Case
from tests.fixtures.hostile import record
from tests.fixtures.toy_course import ROOT, make_course, submit

LIMITS = Limits(timeout=90, cell_timeout=30, memory_mb=2048)


def toy_course(tmp_path: Path, hidden_square: str | None = None, public_square: str | None = None) -> Course:
    """A fresh toy course; ``hidden_square`` (and ``public_square``) replace the hidden (and public) part of
    T1's first test cell."""
    course = Course(root=make_course(tmp_path / "course"))
    if hidden_square is not None:
        path = course.source_notebook("T1")
        nb = nbformat.read(str(path), as_version=4)
        test = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_square")
        head, _, _ = test.source.partition("### BEGIN HIDDEN TESTS")
        head = head if public_square is None else f"from dlcourse.grading import check\n{public_square}\n"
        test.source = f"{head}### BEGIN HIDDEN TESTS\n{hidden_square}\n### END HIDDEN TESTS"
        nbformat.write(nb, str(path))
    release(course, ["T1"])
    return course


# ----------------------------------------------------------------------------- fast: no kernels


def test_bubblewrap_mode_is_refused_where_bubblewrap_is_missing(monkeypatch):
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    monkeypatch.setattr(isolation, "_CACHE", {})
    with pytest.raises(IsolationError, match="apt-get install bubblewrap"):
        resolve("bubblewrap")
    assert resolve("auto").mode == "basic"
    with pytest.raises(IsolationError, match="unknown isolation mode"):
        resolve("docker")


@pytest.mark.slow
def test_under_bubblewrap_a_kernel_gets_the_gpus_device_nodes(monkeypatch):
    """bubblewrap's /dev holds only the basic nodes; an NVIDIA GPU's are bound in (CUDA opens them), or a GPU
    machine's kernels would run the graded GPU branches as on a CPU. A node this machine has stands in."""
    import nbformat

    from autograder.runner import visibility
    from autograder.runner.sandbox import Limits, Sandbox

    try:
        bubblewrap = resolve("bubblewrap")
    except IsolationError as err:
        pytest.skip(str(err))
    node = next((n for n in ("/dev/cpu_dma_latency", "/dev/kmsg", "/dev/fuse") if Path(n).exists()), None)
    if node is None:
        pytest.skip("no device node outside bubblewrap's basic /dev to stand in for a GPU's")
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(f"import os\nos.path.exists({node!r})")]
    )
    seen = []
    for nodes in ([node], []):
        monkeypatch.setattr(visibility, "gpu_device_nodes", lambda nodes=nodes: nodes)
        sandbox = Sandbox(Limits(timeout=120, cell_timeout=60), 0, (), bubblewrap).start()
        try:
            outcome = sandbox.run(notebook)
        finally:
            sandbox.cleanup()
        assert outcome.status == "finished", outcome.detail
        seen.append(outcome.summary["cells"][0]["output"].strip())
    assert seen == ["True", "False"]
    monkeypatch.undo()
    assert visibility.gpu_device_nodes() == sorted(str(n) for n in Path("/dev").glob("nvidia*"))


def test_calibration_refuses_a_tolerance_that_thread_noise_uses_up():
    noisy = np.float32(10.0) + np.array([0.0, 2e-4, 0.0], dtype=np.float32)
    base = np.full(3, 10.0, dtype=np.float32)
    tight = {"c": Case("c", "close", {"rtol": 1e-5, "atol": 1e-4})}
    report, problems = calibrate(tight, {1: {"c": base}, 4: {"c": noisy}})
    assert (
        problems and "c: differs by up to 0.000" in problems[0] and "between 1 and 4 threads" in problems[0]
    )
    assert report["cases"]["c"]["share_of_tolerance"] > 0.5
    wide = {"c": Case("c", "close", {"rtol": 1e-3, "atol": 1e-3})}
    assert calibrate(wide, {1: {"c": base}, 4: {"c": noisy}})[1] == []
    # a float check with no tolerance (A8's stochastic rounding: its exact bits) allows no spread at all, and one
    # entry that moves is found among entries that do not (0 / 0 must not hide x / 0)
    zero = {"z": Case("z", "close", {"rtol": 0.0, "atol": 0.0})}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert calibrate(zero, {1: {"z": base}, 4: {"z": base.copy()}})[1] == []
        assert calibrate(zero, {1: {"z": base}, 4: {"z": noisy}})[1]
    exact = {"e": Case("e", "equal", {})}
    assert calibrate(exact, {1: {"e": np.array([1, 2])}, 2: {"e": np.array([1, 3])}})[1]
    assert calibrate(exact, {1: {"e": np.array([1, 2])}, 2: {"e": np.array([1, 2])}})[1] == []


def reference_with(tmp_path: Path, value) -> grading.Case:
    from autograder.grading.reference import CELLS_FILE, load_reference

    directory = tmp_path / "reference"
    record(directory, "x.public", value, expected=np.asarray(value))
    (directory / CELLS_FILE).write_text(json.dumps({"cell": {"points": 10, "cases": ["x.public"]}}))
    return load_reference(directory)


@pytest.mark.parametrize(
    ("got", "expected", "recorded", "kernel", "points", "flagged"),
    [
        ([1.0, 2.0], [1.0, 2.0], True, "ok", 10, False),  # right
        ([1.0, 2.5], [1.0, 2.5], True, "ok", 0, False),  # consistently wrong: its own public check passed
        ([1.0, 2.5], [1.0, 2.0], True, "ok", 0, True),  # failed its own check, yet the kernel saw it pass
        ([1.0, 2.5], [1.0, 2.0], True, "error", 0, False),  # failed, and the kernel saw it fail
        (None, None, False, "ok", 0, True),  # the check never ran, yet the cell passed
        ([1.0, 2.0 + 1e-7], [1.0, 2.0], True, "ok", 10, False),  # noise well within tolerance
    ],
)
def test_tampering_is_flagged_only_on_evidence(tmp_path, got, expected, recorded, kernel, points, flagged):
    reference = reference_with(tmp_path, [1.0, 2.0])
    capture = tmp_path / "capture"
    capture.mkdir()
    if recorded:
        record(capture, "x.public", got, expected=np.asarray(expected))
    verdict = verify(reference, capture, {"cells": [{"index": 3, "grade_id": "cell", "status": kernel}]})
    assert verdict.score == points
    assert bool(verdict.disagreements) == flagged, verdict.disagreements


# ----------------------------------------------------------------------------- slow: real sandboxes


@pytest.mark.slow
def test_memory_too_small_to_start_a_kernel_refuses_and_scores_nobody(tmp_path, capsys):
    course = toy_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "ada.ipynb").write_text(nbformat.writes(filled(course, "T1")))
    out = tmp_path / "out"
    code = cli.main(
        ["--course", str(course.root), "run", "T1", str(inbox), "--out", str(out), "--memory", "64"]
    )
    assert code != 0
    err = capsys.readouterr().err
    assert "could not start Python" in err and "--memory" in err
    assert not (out / "grades.csv").exists()


@pytest.mark.slow
def test_a_source_whose_release_earns_points_is_refused_and_nothing_is_recorded(tmp_path, monkeypatch):
    course = toy_course(
        tmp_path, hidden_square='check("t1.square.constant", [0, 1, 2])', public_square="import numpy as np"
    )
    students = [f"s{i}" for i in range(8)]
    for sid in students:
        submit(course, sid, filled(course, "T1"))
    taken, started, failed_at = [], [], []

    class Taking(queue.Queue):  # the order the workers take jobs off the batch's queue in (under its lock)
        def _get(self):
            item = super()._get()
            if isinstance(item, pipeline.Job):
                taken.append(item.sid)
            return item

    monkeypatch.setattr(pipeline, "queue", types.SimpleNamespace(Queue=Taking, Empty=queue.Empty))
    grade_one, stops = pipeline.grade_with_retry, []
    run_jobs = batch.run_jobs
    monkeypatch.setattr(batch, "run_jobs", lambda *args: stops.append(args[-1]) or run_jobs(*args))

    def grading(b, job, *args):
        started.append((job.sid, time.monotonic()))
        if not job.sid.startswith("canary/"):  # a student's run lasts until the batch says stop
            assert stops[-1].wait(60), "the batch never told its workers to stop"
        return grade_one(b, job, *args)

    monkeypatch.setattr(pipeline, "grade_with_retry", grading)
    arrive = canary.CanaryBeside.arrive

    def arriving(self, result):
        try:
            return arrive(self, result)
        except CanaryFailed:
            failed_at.append(time.monotonic())
            raise

    monkeypatch.setattr(canary.CanaryBeside, "arrive", arriving)
    with pytest.raises(CanaryFailed, match="untouched release got 40 points: the tests of test_square pass"):
        grade(course, "T1", Settings(workers=2, limits=LIMITS, isolation="basic"))
    # the canary went first to the students' two workers (students ran beside it until it failed). Which of
    # them calls the grading first is not the order they took it in: a worker still starting its sandbox
    # can be overtaken by one that already graded its canary half and took a student (seen on CI). Once it
    # failed, no other submission started but those a worker had already taken (at most one each)
    assert sorted(taken[:2]) == ["canary/release", "canary/solutions"]
    assert {"canary/release", "canary/solutions"} <= {sid for sid, _ in started}
    assert len([sid for sid, at in started if at > failed_at[0]]) <= 2 and len(started) < 2 + len(students)
    assert not (course.work / "results").exists()
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        assert gb.find_assignment("T1").submissions == []
    # nothing of the students run beside the canary is left: no autograded notebook, no kept run
    assert not any(course.executed("T1", sid).exists() for sid in students)
    assert not any(course.kept_run("T1", sid).exists() for sid in students)
    (record,) = (course.cache / "canary").glob("T1-*.json")
    assert json.loads(record.read_text())["passed"] is False


@pytest.mark.slow
def test_results_graded_beside_the_canary_are_recorded_only_after_it_passed(tmp_path, monkeypatch):
    course = toy_course(tmp_path)
    for sid in ("ada", "ben", "cyd", "dan"):
        submit(course, sid, filled(course, "T1"))
    order = []
    conclude = canary.conclude
    monkeypatch.setattr(canary, "conclude", lambda *a, **k: order.append("proved") or conclude(*a, **k))
    rows = grade(
        course,
        "T1",
        Settings(workers=2, limits=LIMITS, isolation="basic"),
        listeners=Listeners(on_result=lambda r: order.append(r.student_id)),
    )
    assert order[0] == "proved" and sorted(order[1:]) == ["ada", "ben", "cyd", "dan"]
    assert {r.student_id: r.score for r in rows} == {"ada": 100, "ben": 100, "cyd": 100, "dan": 100}
    # a second batch finds the canary passed in the cache: nothing of it runs
    monkeypatch.setattr(canary, "canary_jobs", lambda *a, **k: pytest.fail("the canary ran again"))
    assert len(grade(course, "T1", Settings(workers=2, limits=LIMITS, isolation="basic"), force=True)) == 4


@pytest.mark.slow
def test_results_that_differ_between_runs_refuse_the_reference(tmp_path):
    course = toy_course(
        tmp_path, hidden_square='check("t1.square.unseeded", square(np.random.normal(size=4)))'
    )
    with pytest.raises(
        ReferenceError, match=r"(?s)Widen these cases.*t1\.square\.unseeded: differs by up to"
    ):
        build_reference(course, "T1", Settings(limits=LIMITS, isolation=resolve("basic")))


@pytest.mark.slow
def test_grader_errors_are_retried_listed_and_never_scored(tmp_path, monkeypatch):
    course = toy_course(tmp_path)
    submit(course, "ada", filled(course, "T1"))
    first = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation="basic"))
    assert [(r.student_id, r.score) for r in first] == [("ada", 100)]

    # A second batch: the canary is cached (not run again), then every kernel fails to start.
    ran = []
    monkeypatch.setattr(canary, "run_canary", lambda *a, **k: ran.append(a) or {})
    monkeypatch.setattr(canary, "canary_jobs", lambda *a, **k: ran.append(a) or [])
    monkeypatch.setattr(
        Sandbox, "command", lambda self, probe=False: [sys.executable, "-c", "raise SystemExit(3)"]
    )
    request = Sandbox.request  # the forked runner's child fails before its kernel, too
    monkeypatch.setattr(
        Sandbox, "request", lambda self, probe=False: replace(request(self, probe), scratch="/nonexistent")
    )
    submit(course, "ben", filled(course, "T1", {"square"}))
    rows = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation="basic"), force=True)
    assert ran == []
    assert {r.student_id: r.status for r in rows} == {"ada": "error", "ben": "error"}
    assert all("grader error: the sandbox's kernel did not start" in r.reason for r in rows)
    assert all(any("graded a second time" in n for n in r.notes) for r in rows)
    assert workflows.report_errors(rows) == 1 and "NOT graded" in workflows.errors_text(rows)
    table = {
        r["student_id"]: r for r in csv.DictReader(open(write_results_csv(course, "T1", tmp_path / "g.csv")))
    }
    assert table["ben"]["score"] == "" and table["ben"]["status"] == "error"
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:  # ada keeps her recorded 100; ben has no score at all
        assert {s.student.id: s.score for s in gb.find_assignment("T1").submissions} == {"ada": 100}

    monkeypatch.undo()  # the grader works again: the errors are graded on the next run, nothing else
    again = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation="basic"))
    assert {r.student_id: (r.score, r.status) for r in again} == {
        "ada": (100, "graded"),
        "ben": (40, "graded"),
    }


def private_python(tmp_path: Path) -> Path:
    """A Python environment inside a directory only root may enter (mode 0700), as /root is in a container
    whose Python comes from a version manager: it reaches this project's packages through a .pth file."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    venv = private / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    main_site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "dlcourse-main.pth").write_text(f"{main_site}\n{ROOT}\n")
    return venv


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0, reason="the per-submission user id exists only when the grader is root"
)
def test_basic_mode_as_root_runs_python_from_a_private_directory(tmp_path, monkeypatch):
    course = toy_course(tmp_path)
    submit(course, "ada", filled(course, "T1"))
    venv = private_python(tmp_path)
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))  # what the sandbox starts
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(canary, "_PROBED", {})
    basic = resolve("basic")
    if basic.namespaces:  # the sandbox user reaches the interpreter through its own mount namespace
        rows = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=basic))
        assert [(r.student_id, r.score, r.status) for r in rows] == [("ada", 100, "graded")]
    # Without namespaces the unprivileged user cannot reach that Python: refused up front, with the fix.
    bare = isolation.Isolation("basic", namespaces=False, separate_uid=True)
    with pytest.raises(IsolationError, match="cannot reach this Python .* install bubblewrap"):
        grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=bare), force=True)


@pytest.mark.slow
def test_plain_nbgrader_autograde_finds_the_reference_or_refuses(tmp_path, monkeypatch):
    monkeypatch.delenv(grading.REFERENCE_ENV, raising=False)
    course = toy_course(tmp_path)
    submit(course, "ada", filled(course, "T1"))
    run_nbgrader(course, "autograde", "T1", "--log-level=WARN")  # no DLCOURSE_REFERENCE anywhere
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        assert gb.find_submission("T1", "ada").score == 100

    # A source whose own solution fails its test: no reference can be built, and nbgrader stops.
    broken = toy_course(tmp_path / "broken", hidden_square="assert False, 'the source is broken'")
    submit(broken, "ben", filled(broken, "T1"))
    with pytest.raises(RuntimeError, match="python -m autograder grade T1"):
        run_nbgrader(broken, "autograde", "T1", "--log-level=ERROR")


def test_namespaces_as_a_normal_user_hide_the_course_and_cut_the_network():
    """The basic mode's namespaces where the grader is not root: made inside a user namespace."""
    import tempfile

    course = Path(tempfile.mkdtemp(prefix="dlcourse-userns-"))
    try:
        os.chmod(course, 0o755)
        (course / "gradebook.db").write_text("secret")
        (course / "code").mkdir(mode=0o755)
        (course / "code" / "module.py").write_text("x = 1\n")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a single-threaded child, as the sandbox's own child process is
            report = {}
            try:
                os.close(read)
                if os.geteuid() == 0:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    # a process that changed its user is not dumpable, which locks its /proc files; a
                    # grader started as a normal user is (PR_SET_DUMPABLE)
                    __import__("ctypes").CDLL(None).prctl(4, 1)
                # as the sandbox covers them: a folder at /, and the temporary folders (one inside it)
                # a link on the way to the grader's Python made again (Visibility.links), never over what is there
                made = [(str(course / "bin" / "python3"), str(course / "code" / "module.py"))]
                made.append((str(course / "code" / "module.py"), "/etc/hostname"))
                isolation.enter_namespaces(
                    [str(course), "/var", *isolation.SHARED_TEMP[1:]], [str(course / "code")], links=made
                )
                report["listing"] = sorted(os.listdir(course))
                report["link"] = [os.listdir(course / "bin"), (course / "bin" / "python3").read_text()]
                report["var"] = os.listdir("/var")
                report["temp"] = [os.listdir(p) for p in isolation.SHARED_TEMP[1:]]
                Path("/var/tmp/mine").write_text("a file of its own")
                report["code"] = (course / "code" / "module.py").read_text()
                report["interfaces"] = sorted(name for _, name in __import__("socket").if_nameindex())
                try:
                    (course / "code" / "module.py").write_text("tampered")
                    report["writable"] = True
                except OSError:
                    report["writable"] = False
            except OSError as err:
                report["refused"] = str(err)
            finally:
                os.write(write, json.dumps(report).encode())
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(pid, 0)
        if "refused" in report:
            pytest.skip(f"this kernel gives normal users no namespaces: {report['refused']}")
        assert report == {
            "listing": ["bin", "code"],
            "link": [["python3"], "x = 1\n"],
            "var": ["tmp"],
            "temp": [[], []],
            "code": "x = 1\n",
            "interfaces": ["lo"],
            "writable": False,
        }
        assert not Path("/var/tmp/mine").exists()
        assert (course / "code" / "module.py").read_text() == "x = 1\n"
    finally:
        import shutil

        shutil.rmtree(course, ignore_errors=True)


@pytest.mark.slow
def test_a_probe_that_fails_beside_the_reference_refuses_the_batch_and_keeps_no_reference(
    tmp_path, monkeypatch
):
    """The probe and the reference build run at once (the reference runs the instructor's own source): a probe
    that fails still refuses everything, records nothing, and the reference made beside it is not kept."""
    course = toy_course(tmp_path)
    submit(course, "ada", filled(course, "T1"))
    began, waited = threading.Event(), []

    def failing_probe(*args, **kwargs):
        waited.append(began.wait(60))  # the reference begins while the probe runs, not after it
        time.sleep(1.0)  # its runs are under way meanwhile
        raise IsolationError("the probe found the solutions visible")

    monkeypatch.setattr(canary, "probe_isolation", failing_probe)
    built = []
    real_build = canary.build_reference

    def build(*args, **kwargs):
        built.append(time.monotonic())
        began.set()
        return real_build(*args, **kwargs)

    monkeypatch.setattr(canary, "build_reference", build)
    with pytest.raises(IsolationError, match="solutions visible"):
        grade(course, "T1", Settings(workers=1, limits=LIMITS))
    assert built and waited == [True]  # the reference did not wait for the probe
    assert not (course.reference_dir / "T1").exists()
    assert not any(course.results_dir("T1").glob("*.json"))  # nothing recorded
