"""Which edits of a source change only the grader's decisions (a hidden check's tolerance written as a number,
a cell's points) and so keep every recorded value: :func:`autograder.grading.decisions.run_text` is the same before
and after them, and differs after any edit of what a run records."""

from __future__ import annotations

import copy

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.grading.decisions import recheck_calibration, run_text, static_tolerances
from dlcourse.grading import Case

HIDDEN = 'check("t.hidden", f(x))'
CELL = f'from dlcourse.grading import check\ncheck("t.public", f(1), expected=2)\n{HIDDEN}\n'


def notebook(source: str = CELL, points: float = 10) -> object:
    meta = {
        "nbgrader": {"grade_id": "test_f", "grade": True, "solution": False, "locked": True, "points": points}
    }
    return new_notebook(
        cells=[new_code_cell("def f(x):\n    return 2 * x"), new_code_cell(source, metadata=meta)]
    )


@pytest.mark.parametrize("edited, same", [
    (notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x), rtol=1e-2)')), True),  # a hidden tolerance
    (notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x), atol=0.5, rtol=0)')), True),
    (notebook(points=25), True),  # the cell's points
    (notebook(CELL.replace(HIDDEN, HIDDEN + "  # a comment")), True),
    (notebook(CELL.replace("expected=2)", "expected=2, rtol=1e-2)")), False),  # a public check's: the kernel uses it
    (notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x + 1))')), False),  # its input
    (notebook(CELL.replace(HIDDEN, 'check("t.hid" + "den", f(x), rtol=1e-2)')), False),  # a name not written out
    (notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x), rtol=TOL)')), False),  # a tolerance not a number
    (notebook(CELL.replace(HIDDEN, 'check_equal("t.hidden", f(x))')), False),  # another kind of check
    (notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x), **TOL)')), False),  # tolerances in a splat
])  # fmt: skip
def test_an_edit_keeps_the_run_text_exactly_when_it_changes_only_decisions(edited, same):
    assert (run_text(edited) == run_text(notebook())) is same


@pytest.mark.parametrize("own", [
    "def check(name, got, rtol=1e-5):\n    assert abs(got - 1) < rtol\n",
    "from mytests import check\n",
    "check = print\n",
])  # fmt: skip
def test_a_course_with_its_own_check_keeps_every_tolerance_in_the_run_text(own):
    mine = notebook(own + CELL.replace("from dlcourse.grading import check\n", ""))
    edited = notebook(
        own
        + CELL.replace("from dlcourse.grading import check\n", "").replace(HIDDEN, HIDDEN[:-1] + ", rtol=1)")
    )
    assert run_text(mine) != run_text(edited)
    assert static_tolerances([edited]) == {}


def test_static_tolerances_reads_hidden_checks_written_out_and_defaults_the_rest():
    nb = notebook(CELL.replace(HIDDEN, 'check("t.hidden", f(x), rtol=1e-2)\ncheck(name, f(x), rtol=1e-3)'))
    assert static_tolerances([nb]) == {
        "t.hidden": {"rtol": 1e-2, "atol": 1e-8}
    }  # public and unnamed: not read


def test_a_new_tolerance_narrower_than_the_recorded_spread_is_refused():
    case = Case("t.hidden", "close", {"rtol": 1e-3, "atol": 0.0}, "test_f")
    calibration = {"cases": {"t.hidden": {"kind": "close", "spread": 1e-4, "share_of_tolerance": 0.05}}}
    values = {"t.hidden": [2.0, 4.0]}
    assert (
        recheck_calibration(copy.deepcopy(calibration), values, {"t.hidden": case}, 10.0) == []
    )  # 5% of 2e-3
    tight = Case("t.hidden", "close", {"rtol": 1e-5, "atol": 0.0}, "test_f")
    problems = recheck_calibration(calibration, values, {"t.hidden": tight}, 10.0)
    assert problems and "t.hidden" in problems[0]


def test_a_tolerance_in_a_splat_is_never_read_as_the_default():
    """``check("t.hidden", got, **TOL)``: its tolerance is known only when it runs, so it is not read (a points
    edit must not reset it to the default) and an edit of it changes the run text."""
    splat = CELL.replace(HIDDEN, 'check("t.hidden", f(x), **TOL)')
    assert static_tolerances([notebook(splat)]) == {}
    assert run_text(notebook("TOL = {'rtol': 1e-3}\n" + splat)) != run_text(
        notebook("TOL = {'rtol': 1e-2}\n" + splat)
    )
    # a method of something else called check: its tolerance may be used where it runs
    other = CELL.replace(HIDDEN, 'lib.check("t.other", f(x), rtol=1e-3)')
    assert run_text(notebook(other)) != run_text(notebook(other.replace("1e-3", "1e-2")))
