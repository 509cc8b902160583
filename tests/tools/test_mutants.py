"""The mutation harness (benchmarks/mutants.py): its operators, its sampling, and one mutant graded for real."""

from __future__ import annotations

import ast

import pytest

from autograder.course import Course, is_solution, nbgrader_meta
from autograder.intake.samples import filled
from benchmarks.mutants import (
    OPERATORS,
    AnswerCell,
    all_mutants,
    cell_mutants,
    mutant_notebook,
    sample,
    solution_lines,
)

SOURCE = '''def f(x, y, n, optimizer):
    """A docstring: 1 < 2."""
    ### BEGIN SOLUTION
    z = x @ y.T + 1.5
    if n < 3:
        z = z - np.maximum(x, 0)
    for i in range(n):
        z = z * 2
    total = z.mean(axis=0, keepdims=True).sum(1)
    optimizer.zero_grad()
    with torch.no_grad():
        w = z[1:n]
    return total
    ### END SOLUTION


def untouched(a, b):
    return a + b - 1
'''


def toy_cell() -> AnswerCell:
    from autograder.intake.samples import SOLUTION_BLOCK

    text = SOLUTION_BLOCK.sub(lambda m: m.group(1), SOURCE)
    return AnswerCell("toy", text, solution_lines(SOURCE))


def test_every_operator_makes_valid_distinct_code_within_the_solution():
    cell = toy_cell()
    original = ast.unparse(ast.parse(cell.text))
    mutants = cell_mutants("T0", cell)
    codes = [m.code for m in mutants]
    assert len(set(codes)) == len(codes) and original not in codes
    for m in mutants:
        compile(m.code, "<mutant>", "exec")
        # the code outside the solution block (the signature, the docstring, the second function) is kept
        assert '"""A docstring: 1 < 2."""' in m.code and "return a + b - 1" in m.code
        assert m.code.startswith("def f(x, y, n, optimizer):")
    assert {m.operator for m in mutants} == set(OPERATORS)
    described = {m.description.split(": ", 1)[1] for m in mutants}
    for expected in (
        "x @ y.T + 1.5 -> x @ y.T - 1.5",
        "n < 3 -> n <= 3",
        "1.5 -> 1.515",
        "optimizer.zero_grad() -> (dropped)",
        "return total -> return None",
        "with torch.no_grad() -> (its body, unwrapped)",
        "z.mean(axis=0, keepdims=True) -> z.sum(axis=0, keepdims=True)",
        "y.T -> y",
        "x @ y.T -> y.T @ x",
        "axis=0 -> axis=1",
        "keepdims=True -> keepdims=False",
        "n -> n + 1",
        "z.mean(axis=0, keepdims=True).sum(1) -> z.mean(axis=0, keepdims=True).sum(0)",
    ):
        assert expected in described, (expected, sorted(described))
    (swap,) = [m for m in mutants if "np.maximum(0, x)" in m.description]
    assert swap.equivalent and all(not m.equivalent for m in mutants if m is not swap)


def test_mutants_and_their_sample_are_deterministic():
    course = Course()
    first, second = all_mutants(course, "A1"), all_mutants(course, "A1")
    assert [m.code for ms in first.values() for m in ms] == [m.code for ms in second.values() for m in ms]
    drawn = sample(first, 25, 0, "A1")
    again = sample(second, 25, 0, "A1")
    assert [(m.id, m.code) for m in drawn] == [(m.id, m.code) for m in again]
    assert len(drawn) == 25 and [m.id for m in drawn] == [f"m{n:02d}" for n in range(1, 26)]
    assert len({m.code for m in drawn}) == 25
    assert {m.cell for m in drawn} == set(first)  # spread over every answer cell
    assert [m.code for m in sample(first, 25, 1, "A1")] != [m.code for m in drawn]


def test_a_mutant_touches_exactly_one_answer_cell():
    course = Course()
    perfect = filled(course, "A1")
    for m in sample(all_mutants(course, "A1"), 8, 0, "A1"):
        nb = mutant_notebook(course, "A1", m)
        changed = [
            nbgrader_meta(a).get("grade_id") for a, b in zip(nb.cells, perfect.cells) if a.source != b.source
        ]
        assert changed == [m.cell]
        assert next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == m.cell).source == m.code


@pytest.mark.slow
@pytest.mark.tooling
def test_a_wrong_mutant_is_killed_and_the_control_is_not(tmp_path):
    """The toy assignment T1 graded for real: ``x ** 2 -> x * 2`` loses points, the round-tripped perfect
    submission gets full marks."""
    from autograder.intake.release import release
    from benchmarks.mutants import grade_mutants
    from tests.fixtures.toy_course import make_course

    course = Course(root=make_course(tmp_path / "course"))
    release(course, ["T1"])
    by_cell = all_mutants(course, "T1")
    (wrong,) = [m for m in by_cell["square"] if m.description.endswith("x ** 2 -> x * 2")]
    wrong.id = "m01"
    control, (row,) = grade_mutants(course, "T1", [wrong], workers=1, log=lambda _: None)
    assert control["full_marks"], control
    assert row["outcome"] == "killed" and row["score"] < row["max_score"], row
    assert any(f.startswith("test_square") for f in row["failed"]), row


def test_a_mutant_of_the_accepted_answers_is_shown_equivalent_and_no_other_is():
    """A2's bug report keeps the grader's accepted lines in its solution cell (ACCEPTED): check_one_of reads them
    from the reference's run only, so a mutant that changes them cannot change a grade; the BUGS answer beside
    them is the student's, and its mutants are not excused."""
    import ast

    from benchmarks.mutants import all_mutants, answer_cells
    from tests.fixtures.warm import MAIN

    cell = next(c for c in answer_cells(MAIN, "A2") if c.grade_id == "bug_report")
    original = ast.unparse(ast.parse(cell.text)).splitlines()

    def changed(m):  # the names the mutated lines assign
        return {b.split(" =")[0] for a, b in zip(original, m.code.splitlines()) if a != b}

    bug_report = all_mutants(MAIN, "A2")["bug_report"]
    accepted = [m for m in bug_report if changed(m) == {"ACCEPTED"}]
    answers = [m for m in bug_report if changed(m) == {"BUGS"}]
    assert accepted and answers and len(accepted) + len(answers) == len(bug_report)
    assert all("check_one_of" in m.equivalent for m in accepted)
    assert not any(m.equivalent for m in answers)


def test_an_answer_no_test_grades_is_not_mutated():
    """A8's Triton kernel is an optional answer, run on a GPU in the student's own notebook and graded by no test:
    its mutants could only survive. Every other answer cell of A8 is mutated."""
    from benchmarks.mutants import answer_cells
    from tests.fixtures.warm import MAIN

    source = MAIN.read_source("A8")
    answers = {nbgrader_meta(c)["grade_id"] for c in source.cells if is_solution(c) and c.cell_type == "code"}
    optional = {g for g in answers if next(c for c in source.cells if nbgrader_meta(c).get("grade_id") == g)
                .metadata.get("dlcourse", {}).get("optional")}  # fmt: skip
    assert optional == {"triton_kernel"}
    assert {c.grade_id for c in answer_cells(MAIN, "A8")} == answers - optional
