"""Forgers: notebooks with no answer that record the values the tests would record, graded through the real
pipeline. Each must score 0 and be flagged, and an honest submission graded beside them still gets full marks.

The rule they attack (SECURITY.md, "Every point from evidence"): a case earns points only from a value the
student's code returned on inputs whose answer the kernel never held, recorded by the test cell that owns it,
once. Public checks, expected values written in a test, bounds and small booleans are conditions: they can
take a group's points away, never earn them. The cell a recording belongs to is the driver's tag, not the
kernel's claim."""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import Course, nbgrader_meta
from autograder.grading.batch import grade
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures import toy_course
from tests.fixtures.hostile import HOOK, with_cells

LIMITS = Limits(timeout=60, cell_timeout=20, memory_mb=2048, nproc=256)

# T1's square test with a hidden boolean property (the input is left unchanged), as many sources write one
BOOLEAN_CASE = (
    "x_hidden = rng.normal(size=4)\nbefore = x_hidden.copy()\nsquare(x_hidden)\n"
    'check_equal("t1.square.hidden_input_unchanged", bool(np.array_equal(x_hidden, before)))\n'
)


def source_with_a_boolean_case() -> nbformat.NotebookNode:
    nb = toy_course.source_notebook()
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "test_square":
            cell.source = cell.source.replace("import check\n", "import check, check_equal\n").replace(
                "### END HIDDEN TESTS", BOOLEAN_CASE + "### END HIDDEN TESTS"
            )
    return nb


# One extra cell: every public check's expected value, every range bound and True for every boolean,
# recorded under the cases' names before any test cell runs.
RECORD_EVERYTHING = """
def forge_every_recording():
    import numpy
    from dlcourse import grading

    grading.check("t1.square.small", numpy.array([1.0, 4.0]), expected=[1.0, 4.0])
    grading.check("t1.scale.small", numpy.array([3.0, 6.0]), expected=[3.0, 6.0])
    grading.check_equal("t1.square.hidden_input_unchanged", True)


forge_every_recording()
"""


def _source_course(root) -> Course:
    course = Course(root=toy_course.make_course(root, notebook=source_with_a_boolean_case()))
    release(course, ["T1"])
    return course


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = _source_course(tmp_path_factory.mktemp("forgers") / "course")
    blank = nbformat.read(str(course.release_notebook("T1")), as_version=4)
    perfect = filled(course, "T1")
    submissions = {
        "record_everything": with_cells(blank, RECORD_EVERYTHING),
        "hook": with_cells(blank, HOOK),
        "recorded_twice": with_cells(perfect, RECORD_EVERYTHING),
        "zz_perfect": perfect,
    }
    for sid, nb in submissions.items():
        toy_course.submit(course, sid, nb)
    results = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=resolve("auto")))
    return {r.student_id: r for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("sid", ["record_everything", "hook"])
def test_a_notebook_with_no_answer_that_forges_the_recordings_scores_zero_and_is_flagged(graded, sid):
    result = graded[sid]
    assert result.score == 0, (result.score, [c.message for c in result.cells])
    assert result.status == "flagged", "a forger must be flagged for the instructor"


@pytest.mark.slow
def test_a_case_recorded_outside_its_test_cell_earns_nothing_even_beside_right_answers(graded):
    result = graded["recorded_twice"]
    # the forged public values and the boolean come again from the test cell: recorded twice, they earn nothing,
    # and neither do the hidden values grouped with them
    by_cell = {c.grade_id: c for c in result.cells}
    assert by_cell["test_square"].points == 0, by_cell["test_square"]
    assert "recorded 2 times" in by_cell["test_square"].message
    assert result.status == "flagged" and result.flags


@pytest.mark.slow
def test_an_honest_submission_beside_the_forgers_gets_full_marks_unflagged(graded):
    result = graded["zz_perfect"]
    assert result.score == result.max_score == 100, result
    assert result.status == "graded" and not result.flags and not result.code_flags, result


def test_the_driver_tags_each_recording_with_the_cell_that_ran_not_the_kernels_claim(tmp_path):
    import json

    import numpy as np

    from autograder.runner.protocol import Harvest
    from dlcourse.grading import load_cases

    capture = tmp_path / "capture"
    capture.mkdir()

    def record(name, cell_claimed, index=0):
        np.save(capture / f"{index:04d}.npy", np.array([1.0]), allow_pickle=False)
        line = {"name": name, "kind": "close", "params": {}, "file": f"{index:04d}.npy", "cell": cell_claimed}
        with open(capture / "cases.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")

    harvest = Harvest(capture)
    record("a.one", "test_a")  # written while an answer cell ran, claiming the test cell
    harvest.take(None)
    record("a.two", None)
    harvest.take("test_a")
    # a line of a later cell that points at a file an earlier cell wrote is dropped
    with open(capture / "cases.jsonl", "a") as fh:
        fh.write(json.dumps({"name": "a.three", "kind": "close", "params": {}, "file": "0000.npy"}) + "\n")
    harvest.take("test_b")
    files, problems = harvest.result()
    cases, values, _ = load_cases(dict(files))
    assert cases["a.one"].cell is None and cases["a.two"].cell == "test_a"
    assert "a.three" not in cases and any("not written in the same cell" in p for p in problems)
    assert not list(capture.iterdir()), "each harvest empties the folder"


def test_public_checks_bounds_and_small_booleans_earn_nothing_by_themselves():
    import numpy as np

    from autograder.grading.reference import answer_in_kernel, case_groups
    from dlcourse.grading import Case

    public = Case("a.public", "close", {}, public=True)
    given = Case("a.hidden_given", "equal", {}, expected_file="0001e.npy")
    bound = Case("a.hidden_bound", "range", {"low": 0})
    flag = Case("a.hidden_flag", "equal", {})
    value = Case("a.hidden_value", "close", {})
    assert answer_in_kernel(public) and answer_in_kernel(given) and answer_in_kernel(bound)
    assert answer_in_kernel(flag, np.bool_(True)) and not answer_in_kernel(value, np.zeros(3))
    conditions = {"a.public", "a.hidden_given", "a.hidden_bound", "a.hidden_flag"}
    groups = case_groups("cell", [public, given, value, bound, flag], 10.0, None, conditions)
    assert groups == [
        {"name": "a.hidden_value", "cases": ["a.public", "a.hidden_given", "a.hidden_value", "a.hidden_bound",
                                             "a.hidden_flag"], "points": 10.0}
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no case of this cell can earn points"):
        case_groups("cell", [public, bound, flag], 10.0, None, conditions)
    # points a source gave a public check go, with it, to the hidden check beside it
    groups = case_groups("cell", [public, value], 10.0, {"a.public": 4}, conditions)
    assert [(g["cases"], g["points"]) for g in groups] == [(["a.hidden_value", "a.public"], 10.0)]


def test_points_a_source_declares_decided_in_the_kernel_are_labelled_so_on_every_page():
    from autograder.commands.gradescope import results_json
    from autograder.outputs.report import kernel_decided
    from autograder.result import CellResult, Result

    cell = CellResult("test_quiz", 9.0, 9.0, True, decided="kernel-checks")
    result = Result("ada", "A2", 9.0, score=9.0, cells=[cell])
    assert "no evidence for this test outside your notebook" in cell.kernel_note
    assert kernel_decided([result]) == {"test_quiz"}
    assert "decided in the kernel" in results_json(result)["tests"][0]["output"]
    assert CellResult("test_values", 5.0, 5.0, True).kernel_note == ""


def test_a_quiz_with_several_right_answers_keeps_them_from_the_kernel():
    """A2's bug report: the accepted lines are the solution's, recorded by the reference's run only; the release
    (what a student's kernel runs) never names them, and any one of them earns the case."""
    from pathlib import Path

    import numpy as np

    from dlcourse.grading import Case, compare

    case = Case("a2.bug_report.hidden_second", "one_of", {"accepted": [9, 3, 5]})
    assert compare(case, None, np.int64(3)) is None and compare(case, None, np.int64(5)) is None
    assert "not an accepted answer" in compare(case, None, np.int64(4))
    assert compare(case, None, np.array([3, 5])) is not None  # one answer, not a list of guesses
    release = (Path(__file__).resolve().parents[2] / "assignments" / "A2" / "A2.ipynb").read_text()
    assert "ACCEPTED = {" not in release and "{3, 5, 9}" not in release


def test_true_is_not_the_count_one():
    """A forger that records True for every exact case passed A4's hidden graph count (1): numpy finds them equal."""
    import numpy as np

    from dlcourse.grading import Case, compare

    case = Case("a4.breaks.hidden_graphs", "equal", {})
    assert compare(case, np.int64(1), np.bool_(True)) is not None
    assert compare(case, np.int64(1), np.int64(1)) is None
    assert compare(case, np.array([True, False]), np.array([True, False])) is None
