"""The kernel's word is worth at most 5 points a test cell (SECURITY.md): a cell decided in the kernel, or the cases
it says are measured there, are refused by the convention check beyond that, and every real source meets it."""

from __future__ import annotations

import nbformat
import pytest

from autograder.intake.conventions import MAX_KERNEL_POINTS, kernel_points_problems
from tests.fixtures.warm import AIDS, MAIN


def test_cell(points, dlcourse):
    cell = nbformat.v4.new_code_cell("check('x', 1)")
    cell.metadata = {
        "nbgrader": {
            "grade": True,
            "grade_id": "test_x",
            "points": points,
            "locked": True,
            "solution": False,
        },
        "dlcourse": dlcourse,
    }
    return cell


test_cell.__test__ = False


def test_a_cell_decided_in_the_kernel_is_worth_five_points_at_most():
    assert kernel_points_problems(test_cell(MAX_KERNEL_POINTS, {"decided_in_kernel": "timings"})) == []
    found = kernel_points_problems(test_cell(10, {"decided_in_kernel": "timings"}))
    assert len(found) == 1 and "worth 10 points" in found[0] and "at most 5" in found[0]


def test_cases_measured_in_the_kernel_declare_their_points_and_hold_five_at_most():
    why = "course helpers"
    assert (
        kernel_points_problems(
            test_cell(15, {"measured_in_kernel": {"a.flops": why}, "case_points": {"a.flops": 5}})
        )
        == []
    )
    undeclared = kernel_points_problems(test_cell(15, {"measured_in_kernel": {"a.flops": why}}))
    assert any("need their points in case_points: a.flops" in p for p in undeclared)
    too_many = kernel_points_problems(
        test_cell(
            15,
            {
                "measured_in_kernel": {"a.flops": why, "a.bytes": why},
                "case_points": {"a.flops": 3, "a.bytes": 3},
            },
        )
    )
    assert any("worth 6 points, at most 5" in p for p in too_many)


@pytest.mark.parametrize("aid", AIDS)
def test_no_source_gives_the_kernel_more_than_five_points_a_cell(aid):
    nb = MAIN.read_source(aid)
    assert [p for c in nb.cells for p in kernel_points_problems(c)] == []
    # A4's compile timings were 10 points on the kernel's word; half now come from values decided outside
    if aid == "A4":
        in_kernel = [c for c in nb.cells if c.metadata.get("dlcourse", {}).get("decided_in_kernel")]
        assert in_kernel and sum(c.metadata["nbgrader"]["points"] for c in in_kernel) == 5
