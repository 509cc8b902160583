"""Written answers graded by hand: a markdown answer cell with points, after a read-only prompt, whose
source holds a rubric and a model answer. They reach nbgrader's gradebook as formgrader's manual grading
expects, never count in the autograded score (nor in the canary's rule), keep an instructor's manual score
across a regrade, and show in the export and the feedback."""

from __future__ import annotations

import csv
import json

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell

from autograder.course import Course, nbgrader_meta
from autograder.grading.canary import canary_problems
from autograder.intake.conventions import problems, written_problems
from autograder.intake.samples import TEXT_STUB, filled, model_answer, strip_nbgrader_metadata, untouched
from autograder.result import Result, WrittenResult
from autograder.runner.sandbox import Limits
from tests.fixtures.toy_course import meta, source_notebook

PROMPT = "**Written question (5 points).** Why can a float32 sum of the same numbers differ in another order?"
MODEL = "Floating-point addition is not associative: a different order rounds differently."
LIMITS = Limits(timeout=90, cell_timeout=60)
ANSWER = f"""### BEGIN SOLUTION
**Rubric (5 points):**
- (3 points) says that float addition is not associative, so the order of the sum matters
- (2 points) relates it to rounding at each step

**Model answer:** {MODEL}
### END SOLUTION"""


def notebook_with_written_question(answer: str = ANSWER) -> nbformat.NotebookNode:
    """The toy T1 with a written question at the end, in the format instructors write."""
    nb = source_notebook()
    nb.cells += [
        new_markdown_cell(PROMPT, metadata=meta("written_order_prompt", locked=True)),
        new_markdown_cell(answer, metadata=meta("written_order", grade=True, solution=True, points=5)),
    ]
    return nb


# ----------------------------------------------------------------------------------- the source's format


def test_conventions_accept_a_written_answer_and_refuse_one_without_a_rubric():
    assert written_problems(notebook_with_written_question()) == []
    no_rubric = ANSWER.replace("**Rubric (5 points):**", "Grading notes:")
    found = "\n".join(written_problems(notebook_with_written_question(no_rubric)))
    assert "written answer written_order has no rubric" in found
    wrong = "\n".join(
        written_problems(notebook_with_written_question(ANSWER.replace("(3 points)", "(4 points)")))
    )
    assert "criteria give 6 points, the cell is worth 5" in wrong
    no_model = "\n".join(
        written_problems(notebook_with_written_question(ANSWER.split("**Model")[0] + "### END SOLUTION"))
    )
    assert "has no model answer" in no_model
    nb = notebook_with_written_question()
    nbgrader_meta(nb.cells[-2])["locked"] = False  # the prompt must be read-only
    assert any("read-only markdown prompt" in p for p in written_problems(nb))


def test_the_conventions_check_of_a_source_refuses_a_written_answer_without_rubric(tmp_path):
    from tests.fixtures.toy_course import make_course

    nb = notebook_with_written_question(ANSWER.replace("**Rubric (5 points):**", ""))
    course = Course(root=make_course(tmp_path / "course", notebook=nb))
    assert any("has no rubric" in p for p in problems(course, "T1"))


def test_the_model_answer_is_what_a_perfect_sample_writes():
    assert model_answer(ANSWER) == MODEL


# ------------------------------------------------------------------------------------ graded, end to end


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The toy course with a written question, released, and three hand-ins graded: ada answers everything
    (the model answer), bob hands in the untouched release, col's notebook lost its metadata in Colab."""
    from autograder.grading.batch import grade
    from autograder.intake.release import release
    from autograder.settings import Settings
    from tests.fixtures.toy_course import make_course, submit

    root = tmp_path_factory.mktemp("written")
    course = Course(root=make_course(root / "course", notebook=notebook_with_written_question()))
    release(course, ["T1"])
    submit(course, "ada", filled(course, "T1"))
    submit(course, "bob", untouched(course, "T1"))
    submit(course, "col", strip_nbgrader_metadata(filled(course, "T1")))
    results = {
        r.student_id: r for r in grade(course, "T1", Settings(workers=2, limits=LIMITS, isolation="auto"))
    }
    return course, results


def grade_row(course: Course, sid: str):
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        g = gb.find_grade("written_order", "T1", "T1", sid)
        comment = gb.find_comment("written_order", "T1", "T1", sid)
        return g.auto_score, g.manual_score, g.needs_manual_grade, comment.auto_comment


def test_samples_answer_the_written_question_with_the_model_answer_and_blank_keeps_the_stub(graded):
    course, _ = graded
    answer = lambda nb: next(
        c.source for c in nb.cells if nbgrader_meta(c).get("grade_id") == "written_order"
    )  # noqa: E731
    assert answer(filled(course, "T1")) == MODEL
    assert (
        answer(untouched(course, "T1"))
        == TEXT_STUB
        == answer(nbformat.read(course.release_notebook("T1"), 4))
    )


def test_written_answers_reach_the_gradebook_for_manual_grading_apart_from_the_score(graded):
    course, results = graded
    ada, bob, col = results["ada"], results["bob"], results["col"]
    # the canary passed (grade ran): the solutions got all autograded points, the release 0
    assert (ada.score, ada.max_score, ada.status) == (100, 100, "graded")
    assert ada.written == [WrittenResult("written_order", 5.0, None, True, notebook="T1")]
    assert grade_row(course, "ada") == (None, None, True, None)  # as nbgrader records a markdown grade cell
    assert col.score == 100 and col.awaiting and grade_row(course, "col")[2] is True
    assert any("written_order had lost its nbgrader metadata" in n for n in col.notes)
    # the untouched stub: 0 with nothing to grade, as nbgrader's autograde does
    assert bob.score == 0 and bob.written == [WrittenResult("written_order", 5.0, 0.0, False, notebook="T1")]
    assert grade_row(course, "bob") == (0.0, None, False, "No response.")
    # formgrader's notebook: the answer stays markdown, after its prompt, never run as code
    run = nbformat.read(course.executed("T1", "ada"), 4)
    index = next(i for i, c in enumerate(run.cells) if nbgrader_meta(c).get("grade_id") == "written_order")
    assert run.cells[index].cell_type == "markdown" and run.cells[index].source == MODEL
    assert run.cells[index - 1].source == PROMPT
    assert not any("SyntaxError" in json.dumps(c.get("outputs", [])) for c in run.cells)


def test_feedback_says_the_written_answers_await_manual_grading(graded):
    from autograder.outputs.feedback import write_feedback

    course, _ = graded
    write_feedback(course, "T1", students=["ada", "bob"])
    page = course.feedback_page("T1", "ada").read_text()
    assert "Written answers (graded by hand)" in page and "await manual grading" in page
    assert "100 / 105 (tests 100 / 100, written answers 0 / 5)" in page
    assert "Rubric" not in page
    assert "left unanswered" in course.feedback_page("T1", "bob").read_text()


def test_gradescope_lists_written_answers_unscored():
    from autograder.commands.gradescope import results_json

    result = Result("s", "T1", 100, 100, "graded", written=[WrittenResult("written_order", 5.0)])
    data = results_json(result)
    assert data["score"] == 100
    assert data["tests"][-1]["name"].startswith("written_order") and "score" not in data["tests"][-1]
    assert (
        "await manual grading" in data["output"] and "awaiting manual grading" in data["tests"][-1]["output"]
    )


def test_the_canarys_rule_counts_autograded_points_only():
    solutions = Result("solutions", "T1", 100, 100, "graded", written=[WrittenResult("written_order", 5.0)])
    release = Result(
        "release", "T1", 100, 0, "graded", written=[WrittenResult("written_order", 5.0, 0.0, False)]
    )
    assert canary_problems({"solutions": solutions, "release": release}, LIMITS) == []
    release.score = 3
    assert canary_problems({"solutions": solutions, "release": release}, LIMITS)


def read_csv(path) -> dict[str, dict]:
    with open(path, newline="") as fh:
        return {row.get("student_id") or row["Student"]: row for row in csv.DictReader(fh)}


def test_a_manual_score_survives_a_regrade_and_shows_in_the_export(graded, tmp_path):
    from nbgrader.api import Gradebook

    from autograder.commands.regrade import regrade
    from autograder.grading.batch import grade
    from autograder.outputs.export import awaiting_manual_grading, export_canvas, write_results_csv
    from autograder.outputs.feedback import write_feedback
    from autograder.runner.isolation import resolve
    from autograder.settings import Settings

    course, _ = graded
    with Gradebook(course.db_url) as gb:  # what formgrader does when an instructor grades the answer
        grade_row_ = gb.find_grade("written_order", "T1", "T1", "ada")
        grade_row_.manual_score, grade_row_.needs_manual_grade = 4.0, False
        gb.find_comment("written_order", "T1", "T1", "ada").manual_comment = "Rounding: yes; order: say more."
        gb.db.commit()
    # a hidden case's tolerance edited: decided again from the kept runs, recorded again
    path = course.source_notebook("T1")
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_square")
    cell.source = cell.source.replace(
        "square(rng.normal(size=13)))", "square(rng.normal(size=13)), rtol=1e-6)"
    )
    nbformat.write(nb, str(path))
    report = regrade(course, "T1", Settings(limits=LIMITS, isolation=resolve("auto"), workers=2))
    assert {c.student_id for c in report.decided_again} == {"ada", "bob", "col"}
    assert grade_row(course, "ada")[:3] == (None, 4.0, False)
    assert grade_row(course, "col")[:3] == (None, None, True)
    # and a run again of the same hand-in keeps it too
    again = grade(
        course, "T1", Settings(workers=1, limits=LIMITS, isolation="auto"), students=["ada"], force=True
    )[0]
    assert grade_row(course, "ada")[:3] == (None, 4.0, False)
    assert again.written[0].points == 4.0

    rows = read_csv(write_results_csv(course, "T1", tmp_path / "results.csv"))
    assert (rows["ada"]["score"], rows["ada"]["max_score"], rows["ada"]["raw_score"]) == ("104", "105", "104")
    assert (rows["ada"]["autograded_score"], rows["ada"]["written_score"]) == ("100", "4")
    assert rows["ada"]["manual_grading"] == "written answers graded: 4 / 5"
    assert rows["col"]["score"] == "100" and rows["col"]["manual_grading"].startswith(
        "awaiting manual grading"
    )
    assert rows["bob"]["score"] == "0" and rows["bob"]["manual_grading"] == "written answers graded: 0 / 5"
    canvas = read_csv(export_canvas(course, tmp_path / "canvas.csv", ["T1"]))
    assert "Points Possible" not in canvas and canvas["ada"]["T1"] == "104"  # Canvas keeps its own points
    assert awaiting_manual_grading(course, ["T1"]) == {"T1": ["col"]}
    write_feedback(course, "T1", students=["ada"])
    page = course.feedback_page("T1", "ada").read_text()
    assert "received manual grading" in page and "4 / 5, graded by hand" in page and "say more" in page


def test_one_student_has_one_final_grade_with_written_points_and_a_late_penalty(graded, tmp_path):
    """Written points and a late penalty together: nbgrader's gradebook, the results CSV, the Canvas CSV and
    the feedback page all take the penalty from autograded + written points, and agree on the final grade.
    (Before one gradesheet, nbgrader's gradebook took it from the autograded points alone.)"""
    from datetime import datetime

    from nbgrader.api import Gradebook

    from autograder.commands import cli
    from autograder.intake.late import write_timestamp
    from autograder.outputs.export import export_canvas, write_results_csv
    from autograder.outputs.feedback import write_feedback
    from autograder.outputs.gradesheet import record_in_gradebook

    course, _ = graded
    with Gradebook(course.db_url) as gb:
        row = gb.find_grade("written_order", "T1", "T1", "ada")
        row.manual_score, row.needs_manual_grade = 4.0, False
        gb.db.commit()
    config = course.root / "nbgrader_config.py"
    config.write_text(
        config.read_text() + '\nc.LateWork.penalty_method = "per_day"\nc.LateWork.penalty_per_day = 0.1\n'
    )
    assert cli.main(["--course", str(course.root), "deadline", "T1", "--due", "2026-12-01 23:59 UTC"]) == 0
    write_timestamp(
        course.submission("T1", "ada").parent, datetime(2026, 12, 2, 12, 0)
    )  # one started day late

    rows = read_csv(write_results_csv(course, "T1", tmp_path / "results.csv"))
    assert (rows["ada"]["raw_score"], rows["ada"]["late_submission_penalty"], rows["ada"]["score"]) == (
        "104",
        "10.4",
        "93.6",
    )
    assert read_csv(export_canvas(course, tmp_path / "canvas.csv", ["T1"]))["ada"]["T1"] == "93.6"
    write_feedback(course, "T1", students=["ada"])
    assert "93.6" in course.feedback_page("T1", "ada").read_text()
    assert record_in_gradebook(course, "T1") >= 1
    with Gradebook(course.db_url) as gb:
        submission = gb.find_submission("T1", "ada")
        penalty = sum(n.late_submission_penalty or 0 for n in submission.notebooks)
        assert (submission.score, penalty, submission.score - penalty) == (104, 10.4, 93.6)


def test_the_kept_capture_holds_every_case_the_reference_has_and_the_blank_none_of_its_values(graded):
    """What ``regrade`` and the mutation benchmark read back of a student's run (``kept_values``): the values
    the checks captured, kept in one file per run."""
    import numpy as np

    from autograder.api import kept_values
    from dlcourse.grading import load_cases

    course, _ = graded
    _, expected, _ = load_cases(course.reference_dir / "T1")
    ada = kept_values(course, "T1", "ada")
    assert ada.keys() == expected.keys() and expected
    assert all(np.array_equal(ada[name], expected[name]) for name in expected)  # the solution's own values
    assert kept_values(course, "T1", "nobody") == {}
