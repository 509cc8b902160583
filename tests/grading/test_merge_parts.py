"""One submission's result from its notebooks' (:func:`merge_parts`): a new result, its inputs left as they
were; the worst status, its reason named by notebook where there are several. No kernel, no disk."""

from __future__ import annotations

import copy

from autograder.grading.pipeline import merge_parts
from autograder.result import CellResult, Flag, Result, WrittenResult


def part(nb: str, status: str = "graded", reason: str = "all tests passed", **given) -> Result:
    failed = given.pop("failed", False)
    cell = CellResult(
        f"test_{nb}", 0.0 if failed else 10.0, 10.0, not failed, f"test_{nb}: wrong" if failed else ""
    )
    return Result(
        "ada", "T1", 10.0, status=status, reason=reason, cells=[cell],
        written=[WrittenResult(f"why_{nb}", 5.0)], notes=[f"note of {nb}"], flags=given.pop("flags", []),
        code_flags=[Flag("answer", 2, "g.check = print", "changes check")], timings={"sandbox_run": 1.0},
        seconds_in_sandbox=given.pop("seconds", 2.0), peak_memory_mb=given.pop("peak", 100.0), **given,
    )  # fmt: skip


def test_the_merged_result_is_new_and_its_parts_are_left_as_they_were():
    base = Result("ada", "T1", 20.0, submission_sha256="sha", isolation="basic", reference="ref")
    parts = [("one", part("one")), ("two", part("two", failed=True))]
    before = copy.deepcopy((base, parts))
    merged = merge_parts(base, parts, ["a note of the hand-in"])
    assert merged is not base
    assert (base, parts) == before  # not a cell's notebook, not a list of the base's
    assert [c.notebook for c in merged.cells] == ["one", "two"] and [w.notebook for w in merged.written] == [
        "one",
        "two",
    ]
    assert [f.notebook for f in merged.code_flags] == ["one", "two"]
    assert (merged.submission_sha256, merged.isolation, merged.reference) == ("sha", "basic", "ref")
    assert merged.notes == ["a note of the hand-in", "one.ipynb: note of one", "two.ipynb: note of two"]
    assert (merged.score, merged.status, merged.seconds_in_sandbox, merged.peak_memory_mb) == (
        10.0,
        "graded",
        4.0,
        100.0,
    )
    assert merged.reason == "1 of 2 tests failed; first: two.ipynb: test_two: wrong"
    assert set(merged.timings) == {"one:sandbox_run", "two:sandbox_run"}


def test_one_notebook_takes_its_reason_and_detail_as_they_are():
    only = part(
        "T1", status="memory", reason="the notebook used more than 512 MB", detail="last lines", failed=True
    )
    merged = merge_parts(Result("ada", "T1", 10.0), [("T1", only)], [])
    assert (merged.status, merged.reason, merged.detail) == (
        "memory",
        "the notebook used more than 512 MB",
        "last lines",
    )
    assert merged.score == 0.0 and merged.cells[0].notebook == "T1"


def test_the_worst_status_wins_and_a_grader_error_is_named_by_its_notebook():
    parts = [("one", part("one", flags=["a public check"], status="flagged")),
             ("two", part("two", status="error", reason="grader error: no kernel", traceback="tb"))]  # fmt: skip
    merged = merge_parts(Result("ada", "T1", 20.0), parts, [])
    assert (merged.status, merged.reason, merged.traceback) == (
        "error",
        "two.ipynb: grader error: no kernel",
        "tb",
    )
    assert merged.flags == ["one.ipynb: a public check"]


def test_a_notebook_not_handed_in_beside_others_that_ran_leaves_them_the_status_and_says_why():
    missing = part("two", status="unreadable", reason="two.ipynb was not handed in", failed=True)
    merged = merge_parts(Result("ada", "T1", 20.0), [("one", part("one")), ("two", missing)], [])
    assert merged.status == "graded"
    assert (
        merged.reason
        == "1 of 2 tests failed; first: two.ipynb: test_two: wrong (two.ipynb was not handed in)"
    )
