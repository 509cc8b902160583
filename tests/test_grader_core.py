"""The grader's pure core, table-driven and without kernels: repairing submissions (the hostile batch's
notebooks, as data), reading the child's run summary, and the status table every report shares."""

from __future__ import annotations

import json

import pytest

from autograder.course import Course
from autograder.pipeline import STATUS
from autograder.release import release
from autograder.repair import repair
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
