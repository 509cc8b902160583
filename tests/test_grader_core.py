"""The grader's pure core, table-driven and without kernels: repairing submissions (the hostile batch's
notebooks, as data), reading the child's run summary, and the status table every report shares."""

from __future__ import annotations

import json

import pytest

from autograder.course import Course
from autograder.release import release
from autograder.repair import repair
from autograder.result import STATUS
from autograder.sandbox import read_summary
from tests.fixtures.toy_course import make_course
from tests.test_autograder_e2e import hostile_batch

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
    ],
    ids=["empty", "not-json", "a-list", "cells-not-a-list", "long-and-nested", "junk-entries", "stopped"],
)
def test_read_summary_keeps_only_plain_well_formed_data(tmp_path, content, expected):
    path = tmp_path / "run.json"
    path.write_text(content)
    assert read_summary(path) == expected


def test_read_summary_ignores_a_huge_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"cells": [{"index": 1, "output": "x" * 9 * 2**20}]}))
    assert read_summary(path) == {}


def test_one_status_table_covers_every_status():
    from autograder.sandbox import Outcome

    produced = {"graded", "flagged", "unreadable", "error"} | set(Outcome.STATUSES) - {"finished"}
    assert set(STATUS) == produced
    assert all(len(symbol) == 1 and text for symbol, text in STATUS.values())


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
    from autograder.isolation import Isolation
    from autograder.pipeline import Grading, Job, status_stage
    from autograder.result import CellResult, Result
    from autograder.sandbox import Limits, Outcome

    limits = Limits(timeout=60, memory_mb=512, processes=48)
    job = Job("", "", "T1", "s", limits, (), Isolation("basic"))
    cells = [CellResult("square", 0 if failed else 40, 40, not failed, "square: wrong" if failed else "")]
    cells.append(
        CellResult("scale", 0 if failed > 1 else 60, 60, failed < 2, "scale: wrong" if failed > 1 else "")
    )
    summary = {"cells": [{"grade_id": "square", "status": "timeout" if cell_timeout else "ok"}]}
    result = Result("s", "T1", 100, score=sum(c.points for c in cells), cells=cells, flags=flags)
    g = Grading(
        job, None, None, tmp_path, result, outcome=Outcome(ended, 1.0, tmp_path, summary, "last lines")
    )
    assert status_stage(g) is True
    assert (result.status, result.flags) == (status, flags)
    assert words in result.reason
    assert result.score == 100 - (40 if failed else 0) - (60 if failed > 1 else 0)  # points never change here


def test_a_result_reads_back_as_it_was_written(tmp_path):
    from autograder.record import load_result, save_result
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
        from autograder.record import Recorder

        Recorder.record(None, "T1", error)
