"""The grader's pure core, table-driven and without kernels: repairing submissions (the hostile batch's
notebooks, as data), reading the child's run summary, and the status table every report shares."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder.course import Course
from autograder.intake.release import release
from autograder.intake.repair import repair
from autograder.result import STATUS
from autograder.runner.protocol import MAX_HEADER_BYTES, ChildReport, ReportReader
from tests.fixtures.hostile import hostile_batch
from tests.fixtures.toy_course import make_course

# submission -> (what repair must say is fatal, or None; a note it must leave, or None)
REPAIRS = {
    "perfect": (None, None),
    "empty": ("the file is empty", None),
    "badjson": ("invalid JSON", None),
    "nbformat99": ("format 99", None),
    "colab": (None, "found by its content"),
    "duplicated": (None, "more than once"),
    "retyped": (None, "turned into markdown"),
    "tampered_meta": (None, "metadata of test_"),
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    course = Course(root=make_course(tmp_path_factory.mktemp("core") / "course"))
    release(course, ["T1"])
    hostile_batch(course)
    return course


@pytest.mark.parametrize("sid", sorted(REPAIRS))
def test_repair_of_the_hostile_batch(hostile, sid):
    fatal, note = REPAIRS[sid]
    repaired = repair(hostile, "T1", hostile.submission("T1", sid))
    if fatal:
        assert repaired.notebook is None and fatal in repaired.fatal
        return
    assert repaired.fatal is None
    if note:
        assert any(note in n for n in repaired.notes), repaired.notes
    graded = [c for c in repaired.notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    # the test cells always come from the source, whatever the submission did to them
    assert [c.metadata["nbgrader"]["grade_id"] for c in graded] == ["test_square", "test_scale"]
    assert all("BEGIN HIDDEN TESTS" in c.source for c in graded)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", {}),
        ("not json", {}),
        ("[1, 2]", {}),
        ('{"cells": "no"}', {}),
        (
            json.dumps({"cells": [{"index": 1, "status": "ok", "output": "x" * 5000, "nested": {"a": 1}}]}),
            {"cells": [{"index": 1, "status": "ok", "output": "x" * 4000}], "stopped": None, "timings": {}},
        ),
        (
            json.dumps(
                {"cells": [{"index": "1"}, "junk", {"index": 2}], "stopped": 3, "timings": {"a": 1, "b": "x"}}
            ),
            {"cells": [{"index": 2}], "stopped": None, "timings": {"a": 1.0}},
        ),
        (
            json.dumps({"cells": [], "stopped": "DeadKernelError"}),
            {"cells": [], "stopped": "DeadKernelError", "timings": {}},
        ),
        (
            json.dumps({"cells": [], "kernel_peak_mb": 412.5}),
            {"cells": [], "stopped": None, "timings": {}, "kernel_peak_mb": 412.5},
        ),
        *[  # a peak that is not a plain finite size is dropped
            ('{"cells": [], "kernel_peak_mb": ' + forged + "}", {"cells": [], "stopped": None, "timings": {}})
            for forged in ('"9e9"', "true", "-1", "Infinity", "NaN", "[1]")
        ],
    ],
    ids=[
        "empty",
        "not-json",
        "a-list",
        "cells-not-a-list",
        "long-and-nested",
        "junk-entries",
        "stopped",
        "kernel-peak",
        "peak-text",
        "peak-bool",
        "peak-negative",
        "peak-infinite",
        "peak-nan",
        "peak-list",
    ],
)
def test_a_reports_summary_keeps_only_plain_well_formed_data(content, expected):
    header = ('{"version": 2, "summary": ' + (content or '""') + "}").encode()
    try:
        summary = ChildReport.parse(header, b"").summary
    except ValueError:  # not a report at all: the sandbox treats the run as one that sent none
        summary = {}
    assert summary == expected


def test_a_report_over_the_limit_or_cut_off_or_nested_too_deeply_is_refused():
    import io

    def read(frame: bytes) -> ReportReader:
        reader = ReportReader(b"READY")
        reader.feed_from(io.BytesIO(frame), lambda: None)
        return reader

    huge = read(f"DLCOURSE-REPORT {MAX_HEADER_BYTES + 1} 0\n".encode() + b"{}")
    assert huge.report() is None and "larger than the limit" in huge.broken
    cut = read(b"DLCOURSE-REPORT 100 0\n{}")
    assert cut.report() is None and "cut off" in cut.broken
    deep = b'{"version": 2, "summary": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    nested = read(f"DLCOURSE-REPORT {len(deep)} 0\n".encode() + deep)
    assert nested.report() is None and "nested too deeply" in nested.broken
    fine = read(b"log line\nREADY\nDLCOURSE-REPORT 2 0\n{}")
    assert fine.log == ["log line"] and fine.report() is None and "not a report" in fine.broken


def test_one_status_table_covers_every_status():
    from autograder.runner.sandbox import Outcome

    produced = {"graded", "flagged", "unreadable", "error"} | set(Outcome.STATUSES) - {"finished"}
    assert set(STATUS) == produced
    assert all(len(status.mark) == 1 and status.words for status in STATUS.values())


# how the run ended, per-cell timeout?, failed cells, flags -> status, words the reason must hold
STATUS_RULES = [
    ("finished", False, 0, [], "graded", "all tests passed"),
    ("finished", False, 1, [], "graded", "1 of 2 tests failed; first: square: wrong"),
    ("finished", False, 0, ["tampered"], "flagged", "all tests passed"),
    ("finished", True, 1, [], "timeout", "per-cell time limit"),
    ("timeout", False, 1, [], "timeout", "ran past the 60 s limit; graded on what ran before"),
    ("memory", False, 1, [], "memory", "more than 512 MB"),
    ("processes", False, 1, ["tampered"], "processes", "more than 48 processes"),
    ("crashed", False, 2, [], "crashed", "the kernel died"),
]


@pytest.mark.parametrize("ended, cell_timeout, failed, flags, status, words", STATUS_RULES)
def test_status_and_reason_follow_from_the_run_and_the_verdict(
    tmp_path, ended, cell_timeout, failed, flags, status, words
):
    from autograder.grading.pipeline import Grading, Job, status_stage
    from autograder.result import CellResult, Result
    from autograder.runner.sandbox import Limits, Outcome

    limits = Limits(timeout=60, memory_mb=512, processes=48)
    batch = SimpleNamespace(limits=limits)  # the status stage reads only the limits of the batch
    cells = [CellResult("square", 0 if failed else 40, 40, not failed, "square: wrong" if failed else "")]
    cells.append(
        CellResult("scale", 0 if failed > 1 else 60, 60, failed < 2, "scale: wrong" if failed > 1 else "")
    )
    summary = {"cells": [{"grade_id": "square", "status": "timeout" if cell_timeout else "ok"}]}
    result = Result("s", "T1", 100, score=sum(c.points for c in cells), cells=cells, flags=flags)
    g = Grading(Job("s"), None, tmp_path, result, outcome=Outcome(ended, 1.0, {}, summary, "last lines"))
    points = [(c.grade_id, c.points) for c in result.cells]
    assert status_stage(batch, g) is True
    assert (result.status, result.flags) == (status, flags)
    assert words in result.reason
    assert [(c.grade_id, c.points) for c in result.cells] == points  # the status stage decides no points


def test_a_result_reads_back_as_it_was_written(tmp_path):
    from autograder.grading.record import load_result, save_result
    from autograder.result import CellResult, Result

    course = Course(root=tmp_path)
    result = Result(
        "ada", "T1", 100, score=40, status="flagged", reason="r", notes=["n"], flags=["f"],
        cells=[CellResult("square", 40, 40, True, "", "passed"), CellResult("scale", 0, 60, False, "m", "failed")],
        submission_sha256="abc", reference="d1", timings={"repair": 0.1},
    )  # fmt: skip
    save_result(course, result)
    assert load_result(course, "T1", "ada") == result
    assert result.is_current("abc", "d1") and not result.is_current("abc", "d2")
    assert (result.exported_score(), result.symbol) == ("40", "!")
    error = Result("ben", "T1", 100, status="error", submission_sha256="abc", reference="d1")
    assert not error.is_current("abc", "d1")  # a grader error is graded again
    assert (error.exported_score(), error.score_text()) == ("", "not graded")
    course.result("T1", "cyd").write_text('{"student_id": "cyd", "assignment": "T1", "status": "lost"}')
    assert load_result(course, "T1", "cyd") is None  # a status nobody knows is not a result
    with pytest.raises(ValueError, match="never recorded"):
        from autograder.grading.record import Recorder

        Recorder.record(None, "T1", error)


# ----------------------------------------------------------------------------- partial credit per case


def cases(*names: str):
    from dlcourse.grading import Case

    return [Case(n, "close", {}, "cell", public=n.endswith(".public")) for n in names]


# cases of a cell worth 25, the source's case_points -> the groups' (name, cases, points)
GROUPINGS = [
    # a public check earns nothing by itself: it joins the hidden case after it (tests/grading/test_forgers.py)
    (["a.public", "a.hidden1", "a.hidden2"], None,
     [("a.hidden1", ["a.public", "a.hidden1"], 12.5), ("a.hidden2", ["a.hidden2"], 12.5)]),
    (["a.hidden1", "a.hidden2", "b.hidden"], {"a.*": 20},
     [("a.*", ["a.hidden1", "a.hidden2"], 20.0), ("the other cases", ["b.hidden"], 5.0)]),
    (["a.hidden1", "b.hidden"], {"b.hidden": 15, "a.hidden1": 10},
     [("a.hidden1", ["a.hidden1"], 10.0), ("b.hidden", ["b.hidden"], 15.0)]),
]  # fmt: skip


@pytest.mark.parametrize("names, case_points, expected", GROUPINGS)
def test_a_cells_points_are_shared_among_its_cases(names, case_points, expected):
    from autograder.grading.reference import case_groups

    groups = case_groups("cell", cases(*names), 25.0, case_points)
    assert [(g["name"], g["cases"], g["points"]) for g in groups] == expected
    assert sum(g["points"] for g in groups) == pytest.approx(25.0)


@pytest.mark.parametrize(
    "case_points, words",
    [({"a.*": 30}, "give 30 points, the cell is worth 25"), ({"a.hidden1": 10, "a.hidden2": 10}, "no case is left"),
     ({"z.*": 5}, "names no case of this cell")],
)  # fmt: skip
def test_case_points_that_do_not_add_up_are_refused(case_points, words):
    from autograder.grading.reference import case_groups

    with pytest.raises(ValueError, match=words):
        case_groups("cell", cases("a.hidden1", "a.hidden2"), 25.0, case_points)


def test_a_failing_hidden_case_costs_only_its_share(tmp_path):
    import numpy as np

    from autograder.grading.reference import CELLS_FILE, case_groups, load_reference
    from autograder.grading.verify import verify
    from tests.fixtures.hostile import record

    reference_dir, capture = tmp_path / "reference", tmp_path / "capture"
    names = ["a.public", "a.hidden1", "a.hidden2", "a.hidden3"]
    for name in names:
        record(reference_dir, name, [1.0, 2.0], public=name.endswith(".public"))
    groups = case_groups("cell", cases(*names), 25.0)
    (reference_dir / CELLS_FILE).write_text(
        json.dumps({"cell": {"points": 25, "cases": names, "groups": groups}})
    )
    reference = load_reference(reference_dir)
    record(capture, "a.public", [1.0, 2.0], expected=np.array([1.0, 2.0]))
    record(capture, "a.hidden1", [1.0, 2.5], public=False)  # wrong; a.hidden2 never recorded
    record(capture, "a.hidden3", [1.0, 2.0], public=False)
    verdict = verify(reference, capture, {"cells": [{"grade_id": "cell", "status": "ok"}]})
    (cell,) = verdict.cells
    assert (cell.points, cell.max_points, cell.passed) == (8.33, 25.0, False)
    # the public check earns nothing alone: it joined the first hidden case, and passing it saves nothing there
    assert [(g.name, g.points, g.passed) for g in cell.groups] == [
        ("a.hidden1", 0.0, False),
        ("a.hidden2", 0.0, False),
        ("a.hidden3", 8.33, True),
    ]
    assert cell.message.startswith("a.hidden1:") and "not checked" in cell.groups[1].message
    # a reference made before groups existed: the cell is all or nothing, as it was
    (reference_dir / CELLS_FILE).write_text(json.dumps({"cell": {"points": 25, "cases": names}}))
    (old,) = verify(load_reference(reference_dir), capture, {"cells": []}).cells
    assert (old.points, old.groups) == (0.0, [])


def test_no_run_is_handed_a_compile_cache_and_every_run_has_its_own_home(tmp_path):
    """torch.compile's cache from the reference run would hold code inductor generated from the solutions:
    no run gets one; each compiles into its own home, gone with it."""
    from autograder.runner.isolation import Isolation
    from autograder.runner.protocol import COMPILE_CACHE, ChildRequest
    from autograder.runner.sandbox import Limits, Sandbox

    assert "compile_seed" not in ChildRequest.__dataclass_fields__
    runs = [Sandbox(Limits(), isolation=Isolation("basic")) for _ in range(2)]
    try:
        for run in runs:
            run.prepare()
        caches = [run.request().env["TORCHINDUCTOR_CACHE_DIR"] for run in runs]
        assert caches[0] != caches[1]
        assert all(
            c == str(r.scratch / "home" / COMPILE_CACHE) and not Path(c).exists()
            for c, r in zip(caches, runs)
        )
    finally:
        for run in runs:
            run.cleanup()


def test_sandbox_uids_are_taken_in_turn_so_a_freed_one_is_not_reused_at_once(monkeypatch, tmp_path):
    """The run that last had a uid has ended, but its processes may still be exiting: the next run takes the
    next uid (a uid still showing processes would be swept, a fork of the grader, and looked at again). The locks
    are the test's own: the machine's folder of them belongs to root once a grader has run as root (seen: the
    suite run as a normal user after one as root could not open it)."""
    from autograder.runner import sandbox

    swept = []
    monkeypatch.setattr(sandbox, "kill_all_of_uid", swept.append)
    monkeypatch.setattr(sandbox, "UID_LOCKS", tmp_path / "locks")
    taken = []
    for _ in range(3):
        uid, fd = sandbox.allocate_uid()
        os.close(fd)  # freed at once, as a run's clean-up frees it
        taken.append(uid)
    assert len(set(taken)) == 3 and swept == []


def test_the_watchdog_looks_again_when_a_process_ends_while_it_looks():
    """A sample may meet a process that has just ended (bubblewrap's processes come and go as a run starts):
    the watchdog finds no driver this time and looks again at the next sample, instead of failing the run."""
    import psutil

    from autograder.runner.sandbox import Limits
    from autograder.runner.watchdog import Watchdog

    class Ended:
        pid = 2**22 - 1

        def cmdline(self):
            return [sys.executable, "-m", "autograder.runner.child"]

        def ppid(self):
            raise psutil.NoSuchProcess(self.pid)

        def memory_info(self):
            raise psutil.NoSuchProcess(self.pid)

        def children(self, recursive=False):
            raise psutil.NoSuchProcess(self.pid)

    class Root(Ended):
        pid = os.getpid()

        def children(self, recursive=False):
            return [Ended()]

        def memory_info(self):
            return SimpleNamespace(rss=1)

    dog = Watchdog(SimpleNamespace(pid=os.getpid()), Limits(), forked=False, uid=None, folders=("/tmp",))
    dog.root = Root()
    assert dog._driver() is None
    dog.root = Ended()  # a sample of a tree that has ended: one process (the root's), no memory
    assert dog.tree_usage() == (1, 0)


TREE = """
import subprocess, sys, threading, time
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
children = [subprocess.Popen(sleep)]
def from_a_thread():  # (the kernel lists a child under the thread that forked it)
    children.append(subprocess.Popen(sleep))
    time.sleep(60)
threading.Thread(target=from_a_thread, daemon=True).start()
children.append(subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "time.sleep(60)"]))
print("started", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("lists", [True, False])
def test_the_watchdog_sees_every_process_of_the_tree(monkeypatch, lists):
    """Children forked from any thread, and grandchildren, as psutil sees them; where the kernel keeps no
    children lists (CONFIG_PROC_CHILDREN off), psutil's walk of every process is used instead."""
    import builtins
    import subprocess
    import time

    import psutil

    from autograder.runner import watchdog

    if not lists:
        real_open = builtins.open

        def without_lists(path, *args, **kwargs):
            if str(path).endswith("/children"):
                raise FileNotFoundError(path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", without_lists)
    tree = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert tree.stdout.readline().strip() == "started"
        root = psutil.Process(tree.pid)
        deadline = time.monotonic() + 10
        while len(root.children(recursive=True)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # (the grandchild starts after its parent)
        expected = sorted(p.pid for p in root.children(recursive=True))
        assert len(expected) == 4
        assert sorted(watchdog.descendants(root)) == expected
        assert watchdog.resident_bytes(tree.pid) == root.memory_info().rss > 0
    finally:
        for proc in psutil.Process(tree.pid).children(recursive=True):
            proc.kill()
        tree.kill()
        tree.wait()


CHAIN = """
import os, time
for _ in range(3):
    if os.fork():
        break
else:
    print("started", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("lists", [True, False])
def test_the_watchdog_finds_a_forked_runs_own_processes_without_reading_every_process(monkeypatch, lists):
    """A forked run's driver, its outer process and init (no student code runs in them) are found from the
    kernel's children lists; psutil, which reads every process of the machine, only where there are none."""
    import builtins
    import subprocess

    import psutil

    from autograder.runner import watchdog
    from autograder.runner.sandbox import Limits

    real_open = builtins.open
    if lists:

        def read_everything(self):
            raise AssertionError("psutil read every process of the machine")

        monkeypatch.setattr(psutil.Process, "children", read_everything)
    else:

        def without_lists(path, *args, **kwargs):
            if str(path).endswith("/children"):
                raise FileNotFoundError(path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", without_lists)
    chain = subprocess.Popen(
        [sys.executable, "-c", CHAIN], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert chain.stdout.readline().strip() == "started"
        expected, pid = [chain.pid], chain.pid
        for _ in range(2):
            with real_open(f"/proc/{pid}/task/{pid}/children") as fh:
                pid = int(fh.read().split()[0])
            expected.append(pid)
        dog = watchdog.Watchdog(chain, Limits(), forked=True, uid=None)
        assert dog._runner_pids() == set(expected)
    finally:
        os.killpg(chain.pid, 9)  # the whole chain: its own process group
        chain.wait()


def test_a_reference_run_that_raises_says_so_instead_of_a_missing_thread_count():
    from autograder.grading.reference import _run_all

    def run_one(name, threads):
        if threads == 4:
            raise RuntimeError("the sandbox failed")
        return threads

    runs = {}
    with pytest.raises(RuntimeError, match="the sandbox failed"):
        _run_all([("nb", 1), ("nb", 2), ("nb", 4)], runs, run_one)
    assert runs == {("nb", 1): 1, ("nb", 2): 2}


def test_a_results_dict_is_what_asdict_makes_and_a_copy_of_it():
    """Result.to_dict (built field by field, for speed) equals dataclasses.asdict on a result with every field
    set, and shares nothing the caller could change the result through."""
    from dataclasses import asdict, fields

    from autograder.result import CellResult, Flag, GroupResult, Result, WrittenResult

    groups = [GroupResult("public", 1.0, 2.0, False, "off by one"), GroupResult("hidden", 3.0, 3.0, True)]
    result = Result(
        "ada", "A1", 10.0, 4.0, "flagged", "1 of 2 tests failed", ["repaired"],
        [CellResult("test_a", 4.0, 5.0, False, "m", "failed", groups, "part1", "outside"),
         CellResult("test_b", 0.0, 5.0, False, "", "not run", [], "", "kernel")],
        [WrittenResult("q1", 2.0, None, True, "good", "part1"), WrittenResult("q2", 1.0, 0.0, False)],
        ["flag"], "bubblewrap", "ref-digest", "sha", {"cell": "digest"},
        {"verify": 0.1, "child_odd": {"nested": [1, 2]}}, 1.5, 1.2, 300.0, "detail", "traceback",
        [Flag("square", 2, "a7.x = 1", "changes dlcourse.a7.x", "part1")],
    )  # fmt: skip
    blank = Result("", "")
    assert all(getattr(result, f.name) != getattr(blank, f.name) for f in fields(Result))  # every field set
    data = result.to_dict()
    assert data == asdict(result) and list(data) == list(asdict(result))
    assert Result.from_dict(json.loads(json.dumps(data))) == result
    data["notes"].append("x")
    data["cells"][0]["groups"][0]["points"] = 99
    data["timings"]["child_odd"]["nested"].append(3)
    data["inputs"]["cell"] = "other"
    assert result.notes == ["repaired"] and result.cells[0].groups[0].points == 1.0
    assert result.timings["child_odd"] == {"nested": [1, 2]} and result.inputs == {"cell": "digest"}


@pytest.mark.parametrize("gpu", [False, True])
def test_a_runs_memory_is_capped_by_address_space_except_where_cuda_needs_more(monkeypatch, gpu):
    """CUDA reserves address space far beyond any cap of real memory (under a 4096 MB RLIMIT_AS, on an H200,
    kernels died at start): where an NVIDIA GPU's device nodes are, the data segment is capped instead."""
    import resource

    from autograder.runner import child, linux

    monkeypatch.setattr(linux, "nvidia_gpu_here", lambda: gpu)
    pid = os.fork()
    if pid == 0:  # (the limits are the process's own: set and read them in a child)
        try:
            child.drop_privileges(None, None, 1024)
            limits = resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_DATA)
            capped = [lim == (2**30, 2**30) for lim in limits]
            os._exit({(True, False): 10, (False, True): 11}.get(tuple(capped), 12))
        except BaseException:
            os._exit(13)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == (11 if gpu else 10)
