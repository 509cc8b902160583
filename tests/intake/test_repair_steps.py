"""Each step of :data:`autograder.intake.repair.REPAIR_STEPS`, and the assembly after them, on its own: a table of
student notebooks (cells as repair reads them) and what the step must decide. The source is a small
assignment: a read-only set-up cell, an answer cell ``square``, its test cell, and a written answer after
its prompt."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.intake.repair import (
    REPAIR_STEPS,
    Matching,
    Template,
    build_notebook,
    drop_fixed_copies,
    drop_unlabelled_copies,
    match_by_content,
    match_by_id,
    report_tampered,
)

SQUARE = 'def square(x):\n    """x times x, elementwise."""\n'
TEST = "from dlcourse.grading import check\ncheck('sq.one', square(3), expected=9)\n"
PROMPT = "**Question.** Why does the square of a negative number come out positive?"


def meta(gid: str, **flags) -> dict:
    return {"nbgrader": {"grade_id": gid, "schema_version": 3, "locked": False, "solution": False,
                         "grade": False, **flags}}  # fmt: skip


def template() -> Template:
    def notebook(answer: str, essay: str) -> nbformat.NotebookNode:
        return new_notebook(cells=[
            new_code_cell("import numpy as np", metadata=meta("setup", locked=True)),
            new_code_cell(SQUARE + answer, metadata=meta("square", solution=True)),
            new_code_cell(TEST, metadata=meta("test_square", grade=True, locked=True, points=10)),
            new_markdown_cell(PROMPT, metadata=meta("prompt", locked=True)),
            new_markdown_cell(essay, metadata=meta("essay", solution=True, grade=True, points=5)),
        ])  # fmt: skip

    return Template(
        notebook("    return x * x\n", "Because (-a)(-a) = a*a."),
        notebook("    # YOUR CODE HERE\n    raise NotImplementedError()\n", "YOUR ANSWER HERE"),
    )


def cell(source: str, kind: str = "code", **nbgrader) -> dict:
    """A student's cell as repair reads it."""
    return {"type": kind, "source": source, "nbgrader": nbgrader, "number": 0}


ANSWER = cell(SQUARE + "    return x ** 2\n", grade_id="square", solution=True)
LOST = cell(SQUARE + "    return x ** 2\n")  # the answer, its metadata lost (Colab, copy-paste)


def run(step, student: list[dict], **state) -> Matching:
    m = Matching(template(), student, [], **state)
    step(m)
    return m


@pytest.mark.parametrize("student, matched, note", [
    ([ANSWER], {"square": 0}, None),
    ([ANSWER, cell("print(1)"), ANSWER], {"square": 2}, "appears more than once; the last copy is graded"),
    ([cell(TEST, grade_id="test_square")], {}, None),  # a test cell's id is never an answer
    ([LOST], {}, None),  # no metadata: not this step's
])  # fmt: skip
def test_match_by_id(student, matched, note):
    m = run(match_by_id, student)
    assert m.matched == matched
    assert (note is None and m.notes == []) or any(note in n for n in m.notes)


@pytest.mark.parametrize("student, matched, dropped", [
    ([cell(TEST, grade_id="test_square")], {}, {0}),
    ([cell("x = 1", grade_id="setup"), ANSWER], {"square": 1}, {0}),
    ([ANSWER], {"square": 0}, set()),  # an answer is never dropped
])  # fmt: skip
def test_drop_fixed_copies(student, matched, dropped):
    m = run(drop_fixed_copies, student, matched=dict(matched))
    assert m.dropped == dropped


@pytest.mark.parametrize("student, matched, note", [
    ([cell("import os"), LOST], {"square": 1}, "square had lost its nbgrader metadata and was found by its content"),
    ([cell(PROMPT, "markdown"), cell("My own words.", "markdown")], {"essay": 1}, "essay had lost its nbgrader"),
    ([cell("def cube(x):\n    return x ** 3\n")], {}, "square is missing"),
    ([cell(PROMPT, "markdown")], {}, "essay is missing"),  # a prompt with nothing after it
])  # fmt: skip
def test_match_by_content(student, matched, note):
    m = run(match_by_content, student)
    assert {g: i for g, i in m.matched.items() if g in matched} == matched
    assert any(note in n for n in m.notes), m.notes


def test_match_by_content_never_takes_a_cell_already_matched_or_dropped():
    m = run(match_by_content, [LOST, cell(PROMPT, "markdown"), cell("words", "markdown")], matched={"square": 0},
            dropped={2})  # fmt: skip
    assert m.matched == {"square": 0}
    assert any("essay is missing" in n for n in m.notes)


@pytest.mark.parametrize("student, dropped, note", [
    ([cell(TEST)], {0}, "a copy of the read-only cell test_square without metadata was replaced by the original"),
    ([cell(TEST + "print('mine')\n")], {0}, "test_square without metadata"),  # nine tenths of a copy
    ([cell("check('sq.one', 9, expected=9)")], set(), None),  # the student's own code stays
    ([cell(TEST, "markdown")], set(), None),  # only code runs, so only code is dropped
])  # fmt: skip
def test_drop_unlabelled_copies(student, dropped, note):
    m = run(drop_unlabelled_copies, student)
    assert m.dropped == dropped
    assert (note is None and m.notes == []) or any(note in n for n in m.notes)


@pytest.mark.parametrize("fields, changed", [
    ({"grade": True, "locked": True, "points": 10, "solution": False, "schema_version": 3}, None),
    ({"grade": True, "locked": True, "points": 1000, "solution": False, "schema_version": 3}, "points"),
    ({"grade": False, "locked": False, "points": 10, "solution": True, "schema_version": 3}, "grade, locked, solution"),
])  # fmt: skip
def test_report_tampered(fields, changed):
    m = run(report_tampered, [cell(TEST, grade_id="test_square", **fields)], dropped={0})
    if changed is None:
        assert m.notes == []
    else:
        assert m.notes == [f"nbgrader metadata of test_square was changed ({changed}); the source's was used"]


def test_build_notebook_puts_the_source_cells_after_the_answers_before_them():
    student = [cell("helper = 2"), ANSWER, cell("My words.", "markdown", grade_id="essay", solution=True)]
    m = Matching(template(), student, [], matched={"square": 1, "essay": 2})
    nb, answered = build_notebook(m)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert ids == ["setup", None, "square", "test_square", "prompt", "essay"]
    assert [c.cell_type for c in nb.cells] == ["code", "code", "code", "code", "markdown", "markdown"]
    assert answered == {"square": True, "essay": True}
    assert nb.cells[2].metadata["nbgrader"] == template().source.cells[1].metadata["nbgrader"]  # the source's
    nbformat.validate(nb)


def test_build_notebook_without_answers_runs_the_source_cells_and_says_nothing_was_answered():
    nb, answered = build_notebook(Matching(template(), [], []))
    assert [c.metadata["nbgrader"]["grade_id"] for c in nb.cells] == ["setup", "test_square"]
    assert answered == {"square": False, "essay": False}


def test_the_steps_are_declared_in_the_order_they_must_run():
    assert [step for _, step in REPAIR_STEPS] == [
        match_by_id, drop_fixed_copies, match_by_content, drop_unlabelled_copies, report_tampered
    ]  # fmt: skip
