"""``python -m autograder new AID``: a working starter for an assignment in this course's format.

It writes ``source/<AID>/<AID>.ipynb``: the locked set-up cell (copied from the course's first assignment,
so it installs the same package on Colab), a rules box, one answer cell and one test cell worth all
:data:`~autograder.intake.conventions.TOTAL_POINTS` points with a public check (its expected value written out)
and hidden checks (the student's values only: the reference decides them). ``check AID --update`` then
releases it and writes its samples; ``check --help`` lists the conventions it meets.
"""

from __future__ import annotations

import re

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.course import Course, nbgrader_meta
from autograder.intake.conventions import SETUP_ID, TOTAL_POINTS

AID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")

SETUP_FALLBACK = """\
# Set-up: run this cell first.
import dlcourse

dlcourse.banner()"""


def _meta(grade_id: str, *, locked=False, solution=False, grade=False, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def setup_cell(course: Course) -> str:
    """The set-up cell of the course's first assignment that has one (the same package for every one)."""
    for aid in course.assignments():
        for nb in course.notebooks(aid):
            for cell in course.read_source(aid, nb).cells:
                if nbgrader_meta(cell).get("grade_id") == SETUP_ID:
                    return cell.source
    return SETUP_FALLBACK


def starter(course: Course, aid: str) -> nbformat.NotebookNode:
    rules = f"""# {aid}: your title here

One paragraph on what the student builds and why.

## Rules (read before you start)

- Write only in the cells marked `# YOUR CODE HERE`; keep every function's name and signature.
- Each test cell runs public checks you can read (a `✓` line when one passes) and, at grading, hidden
  checks on other inputs: a failing check costs only its own share of the cell's points.
- Use only numpy."""
    answer = '''import numpy as np


def softmax(x):
    """Row-wise softmax of the 2-D array ``x``, computed stably (subtract each row's maximum first)."""
    ### BEGIN SOLUTION
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
    ### END SOLUTION'''
    test = """import numpy as np

from dlcourse.grading import check, check_equal

out = softmax(np.array([[0.0, 0.0], [0.0, np.log(3.0)]]))
check_equal("softmax.shape", out.shape, (2, 2))
check("softmax.small", out, expected=[[0.5, 0.5], [0.25, 0.75]], rtol=1e-7)
### BEGIN HIDDEN TESTS
rng = np.random.default_rng(0)
check("softmax.hidden_random", softmax(rng.normal(size=(5, 7))))
check("softmax.hidden_large_logits", softmax(1000.0 + rng.normal(size=(3, 4))))
### END HIDDEN TESTS"""
    cells = [
        new_code_cell(setup_cell(course), metadata=_meta(SETUP_ID, locked=True)),
        new_markdown_cell(rules, metadata=_meta("rules", locked=True)),
        new_markdown_cell(
            f"## Part 1: softmax ({TOTAL_POINTS} points)\n\nImplement `softmax` below.",
            metadata=_meta("part1_intro", locked=True),
        ),
        new_code_cell(answer, metadata=_meta("softmax", solution=True)),
        new_code_cell(test, metadata=_meta("test_softmax", locked=True, grade=True, points=TOTAL_POINTS)),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def new(course: Course, aid: str) -> str:
    """Write the starter of ``aid``; refuse a bad id or one that exists. Returns what to do next."""
    if not AID_PATTERN.fullmatch(aid):
        raise ValueError(f"{aid!r}: an assignment id is a letter, then letters, digits, _ or - (40 at most)")
    folder = course.source / aid
    if folder.exists():
        raise FileExistsError(f"{folder} exists already: choose another id, or edit it")
    folder.mkdir(parents=True)
    path = folder / f"{aid}.ipynb"
    nbformat.write(starter(course, aid), str(path))
    return (
        f"wrote {path.relative_to(course.root)}: one answer (softmax) and one test cell worth {TOTAL_POINTS} "
        "points with a public and two hidden checks.\n"
        f"next: edit it in JupyterLab (`make lab`), then `python -m autograder check {aid} --update` (checks "
        f"the conventions, releases it, writes its samples); `python -m autograder check --help` lists them"
    )
