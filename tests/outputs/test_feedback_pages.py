"""The student's feedback page: per notebook its own score and failures; for a test of plain asserts, where it
failed (the public line, or which hidden check, never hidden code) with the assert's message; the rule of
such tests said once per page; marks that mean passed; nothing cut in the middle of a word. Compared with
nbgrader's own feedback for the same hand-ins of a plain-assert course (the browser's view of the same pages
is in tests/browser/test_browser.py)."""

from __future__ import annotations

import html
import re
import sys

import pytest

from autograder.outputs.feedback import failing_line, where_failed
from autograder.result import CellResult, Result, shorten

HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
TEST = (
    '"""Check squares"""\n'
    "assert squares(1) == [1]\n"
    "assert (squares(2)\n        == [1, 4])\n"
    "### BEGIN HIDDEN TESTS\n"
    "assert squares(3) == [1, 4, 9], 'squares(3) is not [1, 4, 9]'\n"
    "assert squares(4)[-1] == 16\n"
    "### END HIDDEN TESTS"
)


def error(line: int, evalue: str = "") -> dict:
    """An error output as IPython leaves it (colours and all), stopped at ``line`` of the cell."""
    return {
        "output_type": "error",
        "ename": "AssertionError",
        "evalue": evalue,
        "traceback": [
            "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
            "\x1b[31mAssertionError\x1b[39m                            Traceback (most recent call last)",
            f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[4]\x1b[39m\x1b[32m, line {line}\x1b[39m\n"
            f"\x1b[32m----> \x1b[39m\x1b[32m{line}\x1b[39m assert ...\n",
            f"\x1b[31mAssertionError\x1b[39m: {evalue}",
        ],
    }


def test_a_public_assert_shows_its_statement_and_line():
    where = where_failed(TEST, [error(3)], HIDDEN)
    assert where.line == 3 and where.hidden is None
    assert where.code == "assert (squares(2)\n        == [1, 4])"  # the whole statement, over two lines
    assert where.error == "AssertionError (no message)"


def test_a_hidden_assert_shows_its_number_and_message_never_its_code():
    where = where_failed(TEST, [error(6, "squares(3) is not [1, 4, 9]")], HIDDEN)
    assert (where.hidden, where.hidden_of, where.code) == (1, 2, "")
    assert where.error == "AssertionError: squares(3) is not [1, 4, 9]"
    silent = where_failed(TEST, [error(7)], HIDDEN)
    assert (silent.hidden, silent.hidden_of, silent.code) == (2, 2, "")


def test_a_message_that_spells_out_a_hidden_test_is_withheld():
    from autograder.grading.pipeline import squeezed

    leaked = "assert squares(4)[-1] == 16"
    where = where_failed(TEST, [error(7, leaked)], HIDDEN, frozenset({squeezed(leaked)}))
    assert "squares(4)" not in where.error and "withheld" in where.error
    # an exception class named after a hidden line: its name is withheld too
    named = {**error(7, "x"), "ename": squeezed(leaked)}
    where = where_failed(TEST, [named], HIDDEN, frozenset({squeezed(leaked)}))
    assert squeezed(leaked) not in squeezed(where.error) and "name is withheld" in where.error


def test_no_traceback_line_no_code_and_no_error_no_failure():
    assert failing_line(["AssertionError: x"]) is None
    assert where_failed(TEST, [{**error(2), "traceback": []}], HIDDEN).code == ""
    assert where_failed(TEST, [{"output_type": "stream", "name": "stdout", "text": "hi"}], HIDDEN) is None


def test_shorten_never_cuts_a_word():
    text = "correct_squares: the test cell raised AssertionError: squares(3) is not what it should be"
    for width in range(20, len(text) + 5):
        cut = shorten(text, width)
        assert len(cut) <= width
        if cut != text:
            kept = cut.rstrip("\u2026")
            assert text.startswith(kept) and text[len(kept)] in " ,;:", (width, cut)


def test_the_progress_mark_of_a_graded_submission_with_failures_is_not_a_tick():
    passed = CellResult("t1", 1.0, 1.0, True)
    failed = CellResult("t2", 0.0, 1.0, False, "t2: failed")
    assert Result("a", "A1", 2, 1, "graded", cells=[passed]).symbol == "\u2713"
    assert Result("b", "A1", 2, 0, "graded", cells=[passed, failed]).symbol != "\u2713"


# ---- the same hand-ins, graded by nbgrader and by this autograder ----------------------------------------


@pytest.fixture
def graded(tmp_path):
    """The course of tests/fixtures/plain_asserts.py graded by nbgrader and by this autograder, feedback written
    (once a run: the browser tests read it too)."""
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    from tests.fixtures.plain_asserts import graded

    return graded(tmp_path)


def text_of(page: str) -> str:
    """What a reader sees of an HTML page: its text, tags dropped, entities read."""
    body = page[page.index("<body") :]
    body = re.sub(r"<(script|style)\b.*?</\1>", "", body, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def pages(root, plain, sid: str, nb: str = "problem1") -> tuple[str, str]:
    ours = (root / "feedback" / sid / "ps1" / f"{nb}.html").read_text(encoding="utf-8")
    theirs = (plain / "feedback" / sid / "ps1" / f"{nb}.html").read_text(encoding="utf-8")
    return text_of(ours), text_of(theirs)


@pytest.mark.slow
def test_a_failed_public_assert_shows_the_line_nbgrader_shows(graded):
    root, plain, results = graded
    ours, theirs = pages(root, plain, "public")
    # nbgrader's traceback points at the line that failed: the same line, by number and text, on ours
    arrow = re.search(r"----> (\d+) (assert squares\(1\) == \[1\])", theirs)
    assert arrow, theirs[:2000]
    assert f"Failed at line {arrow.group(1)} of the test:" in ours and arrow.group(2) in ours
    assert "AssertionError (no message)" in ours


@pytest.mark.slow
def test_a_failed_hidden_assert_shows_its_message_and_number_never_its_code(graded):
    root, plain, results = graded
    ours, theirs = pages(root, plain, "message")
    assert "squares(3) is not [1, 4, 9]" in theirs and "squares(3) is not [1, 4, 9]" in ours
    assert "hidden check 1 of 2" in ours
    silent, theirs = pages(root, plain, "silent")
    assert "assert squares(4)[-1] == 16" in theirs  # nbgrader's page shows the hidden test
    assert "hidden check 2 of 2" in silent
    for page in (ours, silent):
        assert "squares(4)" not in page and "BEGIN HIDDEN" not in page


@pytest.mark.slow
def test_each_notebook_has_its_own_score_and_failures(graded):
    root, plain, results = graded
    result = results["public"]
    mine = [c for c in result.cells if c.notebook == "problem1"]
    problem1, _ = pages(root, plain, "public")
    problem2, _ = pages(root, plain, "public", "problem2")
    heading = re.search(r"ps1, problem1\.ipynb: (\S+) / (\S+)", problem1)
    written1 = [w for w in result.written if w.notebook == "problem1"]
    assert float(heading.group(2)) == sum(c.max_points for c in mine) + sum(w.max_points for w in written1)
    assert f"tests {sum(c.points for c in mine):g} / {sum(c.max_points for c in mine):g}" in problem1
    assert f"of {len(mine)} tests failed" in problem1
    # problem2 has written answers only: its score is theirs, and it names no test of problem1
    written2 = sum(w.max_points for w in result.written if w.notebook == "problem2")
    assert re.search(rf"ps1, problem2\.ipynb: 0 / {written2:g}\b", problem2)
    assert "correct_squares" not in problem2 and "tests failed" not in problem2


@pytest.mark.slow
def test_the_kernels_rule_is_one_sentence_and_marks_mean_passed(graded):
    root, plain, results = graded
    ours, _ = pages(root, plain, "public")
    assert ours.count("decided in the kernel") == 1  # once per page, never per row
    assert "this test has no checks" not in ours
    cells = [c for c in results["public"].cells if c.notebook == "problem1"]
    assert ours.count("\u2713 passed") == sum(c.passed for c in cells)
    assert ours.count("\u2717 failed") == sum(not c.passed for c in cells)
    assert results["public"].symbol != "\u2713"


def test_an_optional_part_shows_the_output_of_the_check_that_runs_it_and_no_test_output():
    """A8's Triton kernel earns no points: what the student gets back for it is the output of the read-only cell
    after it, which checks the kernel against ``F.rms_norm`` and times it (on a GPU). The page shows that output
    under the kernel; which cells those are is read from the source, so a test cell's output (hidden checks'
    lines among it) never joins an answer's, and an ordinary answer shows only its own output."""
    import nbformat

    from autograder.course import Course
    from autograder.outputs.feedback import _answers, optional_checks

    source = Course().read_source("A8")
    checks = optional_checks(source)
    assert checks == {"triton_kernel": ["triton_demo"]}
    run = nbformat.from_dict(nbformat.v4.reads(nbformat.v4.writes(source)))
    timing = "your Triton kernel    :     21.3 us,  3150.2 GB/s\n"
    for cell in run.cells:
        if cell.cell_type == "code":
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"[{gid} printed]\n")]
            if gid == "triton_demo":
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=timing))
    shown = {gid: out for gid, _, out in _answers(run, checks)}
    assert shown["triton_kernel"] == "[triton_kernel printed]\n[triton_demo printed]\n" + timing
    tests_after = [
        c.metadata["nbgrader"]["grade_id"] for c in run.cells if c.metadata.get("nbgrader", {}).get("grade")
    ]
    assert all(f"[{t} printed]" not in "".join(shown.values()) for t in tests_after)
    assert shown["tokenizer"] == "[tokenizer printed]\n"  # (the cell after it, a test, is not shown)
    assert {gid: out for gid, _, out in _answers(run)}["triton_kernel"] == "[triton_kernel printed]\n"


def test_an_optional_answer_is_said_to_be_optional_on_the_page(tmp_path, monkeypatch):
    import nbformat

    from autograder.course import Course
    from autograder.outputs import feedback

    course = Course()
    run = nbformat.from_dict(nbformat.v4.reads(nbformat.v4.writes(course.read_source("A8"))))
    for cell in run.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "triton_demo":
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text="largest difference 2.4e-07\n")
            ]
    monkeypatch.setattr(feedback, "_run_notebook", lambda *args: run)
    page = feedback.render(course, "A8", Result(student_id="s1", assignment="A8", status="graded", cells=[]))
    text = text_of(page)
    assert "triton_kernel (optional, not graded)" in text
    assert "Output, and the check that runs it:largest difference 2.4e-07" in text


def test_a_page_never_shows_a_hidden_test_however_the_notebook_it_reads_was_written(monkeypatch):
    """The page checks its own text against the hidden tests, whichever program wrote the notebook it reads.
    Two ways past the run's own check (which reads the outputs in the order the cells ran): the optional
    answer prints half of a hidden line and a ``pre_run_cell`` hook the other half as the check after it runs,
    with a cell of the student's between them printing something else (the page puts the two halves side by
    side); and ``autograded/`` written by nbgrader's own Autograde (formgrader's button), which withholds
    nothing, where an answer printed IPython's history (``In``) with a hidden test in it."""
    import nbformat

    from autograder.course import Course
    from autograder.grading.pipeline import WITHHELD, WITHHELD_ALL, hidden_test_lines, squeezed
    from autograder.outputs import feedback

    course = Course()
    hidden = hidden_test_lines(course, "A8")
    source = course.read_source("A8")
    lines = [line for c in source.cells for line in c.source.splitlines() if squeezed(line) in hidden]
    first, second = lines[0], lines[-1]
    assert squeezed(first) != squeezed(second)
    run = nbformat.from_dict(nbformat.v4.reads(nbformat.v4.writes(source)))
    half = len(second) // 2
    printed = {"triton_kernel": second[:half] + "\n", "triton_demo": second[half:] + "\n", "sampling": first}
    for cell in run.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in printed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed[gid])]
    monkeypatch.setattr(feedback, "_run_notebook", lambda *args: run)
    page = feedback.render(course, "A8", Result(student_id="s1", assignment="A8", status="graded", cells=[]))
    text = squeezed(text_of(page))
    assert not [line for line in hidden if line in text]
    assert squeezed(WITHHELD) in text
    # halves in two answers the page shows one after the other (in the run, a cell of the student's between
    # them printed something else): every output on the page is withheld; the code is still shown
    answers = [c for c in run.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for cell in run.cells:
        cell.outputs = []
    half = len(first) // 2
    answers[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=first[:half])]
    answers[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=first[half:])]
    page = feedback.render(course, "A8", Result(student_id="s1", assignment="A8", status="graded", cells=[]))
    text = squeezed(text_of(page))
    assert squeezed(first) not in text and text.count(squeezed(WITHHELD_ALL)) == 2
    assert squeezed(answers[1].source) in text
    # an output that spells out nothing is still shown
    answers[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="sampled 40 tokens\n")]
    page = feedback.render(course, "A8", Result(student_id="s1", assignment="A8", status="graded", cells=[]))
    assert "sampled 40 tokens" in text_of(page)
