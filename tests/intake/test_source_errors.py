"""A source whose ungraded cell raises (a 3D plot through ``gca(projection=...)``, which today's matplotlib
removed) is graded as nbgrader grades it: the instructor is told once, with the cell and the fix, the canary
still needs the solutions' full marks, and grading goes on. A graded cell or an answer that raises in the
source is still refused."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import nbformat
import pytest

from autograder.grading.reference import ReferenceError, _check_run

PLOT = "import matplotlib.pyplot as plt\nax = plt.figure().gca(projection='3d')"


def source() -> nbformat.NotebookNode:
    def meta(cell, **kw):
        cell.metadata["nbgrader"] = {
            "schema_version": 3,
            "grade": False,
            "solution": False,
            "locked": False,
            **kw,
        }
        return cell

    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(PLOT),
            meta(nbformat.v4.new_code_cell("def f():\n    return 1"), grade_id="f", solution=True),
            meta(nbformat.v4.new_code_cell("assert f() == 1"), grade_id="test_f", grade=True, points=1),
        ]
    )


def outcome(failing: int) -> SimpleNamespace:
    cells = [{"index": i, "status": "ok"} for i in range(3)]
    cells[failing].update(
        status="error", ename="TypeError", evalue="unexpected keyword argument 'projection'"
    )
    return SimpleNamespace(status="finished", summary={"cells": cells, "stopped": None}, detail="")


def test_an_ungraded_cell_that_raises_is_told_with_its_cell_and_fix_not_refused():
    told = _check_run("hw", 1, outcome(0), None, source())
    assert len(told) == 1
    assert "code cell 1" in told[0] and "import matplotlib.pyplot as plt" in told[0]
    assert "TypeError: unexpected keyword argument 'projection'" in told[0]
    assert "Grading goes on" in told[0] and "Fix the cell" in told[0]


@pytest.mark.parametrize("failing", [1, 2], ids=["answer", "graded test"])
def test_an_answer_or_a_graded_cell_that_raises_is_still_refused(failing):
    with pytest.raises(ReferenceError, match="failed in cell"):
        _check_run("hw", 1, outcome(failing), None, source())


@pytest.mark.slow
def test_an_nbgrader_course_whose_ungraded_cell_raises_gets_nbgraders_scores(tmp_path):
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    from tests.fixtures.nbgrader_courses import (
        autograded_points,
        generate_assignment,
        hand_in,
        nbgrader,
        ours,
        quickstart,
    )

    root = quickstart(tmp_path)
    path = root / "source" / "ps1" / "problem1.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(PLOT))
    nbformat.write(nb, str(path))
    (root / "source" / "ps1" / "problem2.ipynb").unlink()
    generate_assignment(root, "ps1")
    hand_in(root, "solutions", "ps1", {"problem1": nbformat.read(str(path), as_version=4)})
    release = nbformat.read(str(root / "release" / "ps1" / "problem1.ipynb"), as_version=4)
    hand_in(root, "release", "ps1", {"problem1": release})
    notices: list[str] = []
    results = ours(root, "ps1", on_notice=notices.append)
    assert results["solutions"].score == results["solutions"].max_score == 3.0
    assert results["release"].score == 0.0
    told = [n for n in notices if "not graded" in n and "projection" in n]
    assert len(told) == 1, notices  # once, not per thread count or per student
    assert "import matplotlib.pyplot as plt" in told[0] and "Fix the cell" in told[0]
    nbgrader(root, "autograde", "ps1")  # nbgrader, on the same hand-ins, agrees
    assert autograded_points(root, "ps1")[("solutions", "problem1")] == 3.0
