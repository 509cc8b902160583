"""The measure stage without a kernel: a measured test cell runs again in a sandbox of its own under its caps, and
a run over its CPU cap (or one that died or ran out of time) is tried once more, and only then costs the cell's
points; a cell that failed on its own is not run again. The measured runs are prepared outcomes
(:mod:`tests.fixtures.fake_sandbox`); the caps themselves are the real sandbox's (tests/grading/test_measure_run.py)."""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import nbgrader_meta
from autograder.grading.pipeline import Job, grade_one, kept_outcome, make_batch
from autograder.grading.reference import build_reference
from tests.fixtures.fake_sandbox import FakeSandboxes, answers, grader_failed, hand_in, run_here, settings

MEASURED = "alice/measure:test_scale"


def measured_course(course, spec: dict):
    """The toy course with its scale test measured under ``spec`` (metadata.dlcourse.measure of the source: what
    the reference and the grader read; the release needs no change)."""
    path = course.source_notebook("T1")
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "test_scale":
            cell.metadata["dlcourse"] = {"measure": spec}
    nbformat.write(nb, str(path))
    return course


def graded(course, prepared: dict, spec: dict | None = None, **answered):
    fake = FakeSandboxes(answers(prepared))
    given = settings(fake)
    measured_course(course, spec or {"cpu_seconds": 30})
    batch = make_batch(course, "T1", build_reference(course, "T1", given), given)
    hand_in(course, "alice", **answered)
    result = grade_one(batch, Job("alice"))
    entry = next(
        e
        for e in kept_outcome(course.kept_run("T1", "alice"), result.submission_sha256).summary["cells"]
        if e.get("grade_id") == "test_scale"
    )
    return result, {c.grade_id: c for c in result.cells}, entry, fake.runs().count(MEASURED)


def over(cpu: float):
    return lambda nb: run_here(nb, measure={"cpu_seconds": cpu})


def test_a_measured_cell_over_its_cpu_cap_once_is_tried_again_and_passes(toy_course):
    result, cells, entry, runs = graded(toy_course, {MEASURED: [over(45.0), run_here]})
    assert (result.score, runs) == (100.0, 2)
    assert entry["tries"] == 2 and "45.0 s of CPU" in entry["first_try"] and "30.0 s of CPU" in entry["caps"]
    assert result.timings["measure"] > 0


def test_a_measured_cell_over_its_cap_twice_loses_its_points_only(toy_course):
    result, cells, entry, runs = graded(toy_course, {MEASURED: over(45.0)})
    assert (result.score, runs, cells["test_scale"].points, cells["test_square"].points) == (
        40.0,
        2,
        0.0,
        40.0,
    )
    assert "over its CPU cap" in cells["test_scale"].message and "fresh kernel" in cells["test_scale"].message
    assert result.status == "graded"  # the student's run finished: a cap is not a limit of the run


def test_a_measured_run_that_died_before_the_cell_is_tried_again(toy_course):
    died = lambda nb: run_here(nb, status="crashed", stop_after="scale")  # noqa: E731
    result, _, entry, runs = graded(toy_course, {MEASURED: [died, run_here]})
    assert (result.score, runs, entry["tries"]) == (100.0, 2, 2)
    assert "ended before this test (crashed)" in entry["first_try"]
    # the student is told what to act on: the cap counts their own cells before the test (A8's reviewer added an
    # experiment cell, lost the cell's points and read only "crashed")
    assert "counts from the notebook's first cell, your own added cells included" in entry["first_try"]


def test_a_run_that_died_under_a_memory_cap_only_blames_no_cpu_cap(toy_course):
    died = lambda nb: run_here(nb, status="crashed", stop_after="scale")  # noqa: E731
    _, _, entry, _ = graded(toy_course, {MEASURED: died}, spec={"memory_mb": 64})
    assert entry["error"] == "the measured run ended before this test (crashed)"


def test_a_measured_cell_that_fails_on_its_own_is_not_run_again(toy_course):
    raising = "def scale(x, factor):\n    raise ValueError('no')"
    result, cells, entry, runs = graded(toy_course, {}, scale=raising)
    assert (result.score, runs, cells["test_scale"].points) == (40.0, 1, 0.0)
    assert entry["ename"] == "ValueError" and "tries" not in entry


def test_a_cell_capped_in_memory_only_is_run_once_whatever_happens(toy_course):
    died = lambda nb: run_here(nb, status="crashed", stop_after="scale")  # noqa: E731
    result, cells, entry, runs = graded(toy_course, {MEASURED: died}, spec={"memory_mb": 64})
    assert (runs, cells["test_scale"].points, entry["status"]) == (1, 0.0, "died")


@pytest.mark.parametrize("first", [True, False], ids=["first-try", "second-try"])
def test_a_measured_run_the_grader_failed_makes_the_result_a_grader_error(toy_course, first):
    runs = [grader_failed()] if first else [over(45.0), grader_failed()]
    fake = FakeSandboxes(answers({MEASURED: runs}))
    given = settings(fake)
    measured_course(toy_course, {"cpu_seconds": 30})
    batch = make_batch(toy_course, "T1", build_reference(toy_course, "T1", given), given)
    hand_in(toy_course, "alice")
    result = grade_one(batch, Job("alice"))
    assert result.status == "error" and result.reason.startswith("grader error: the sandbox's kernel")
    assert not toy_course.kept_run("T1", "alice").exists()  # nothing of it kept
    assert fake.left_running == []


def test_a_read_only_demonstration_is_left_out_of_the_measured_run_and_nothing_else():
    """A8's scaling sweep trains three models in a read-only cell the source marks ``not_measured``: run in every
    measured notebook, it would count against each CPU cap. Left out, the cap is the measured cell's own; a cell
    that is not read-only keeps running however it is marked (an answer, or a student's own cell)."""
    from autograder.grading.measure import NOT_MEASURED, measurement_notebook

    def cell(gid, source, **nbgrader):
        made = nbformat.v4.new_code_cell(source)
        if gid:
            made.metadata["nbgrader"] = {"grade_id": gid, **nbgrader}
        return made

    demo = cell("sweep", "sweep = 'trained'", locked=True, solution=False)
    demo.metadata["dlcourse"] = {NOT_MEASURED: True}
    claimed = cell("answer", "answer = 1", locked=False, solution=True)
    claimed.metadata["dlcourse"] = {NOT_MEASURED: True}
    own = cell(None, "mine = 2")
    own.metadata["dlcourse"] = {NOT_MEASURED: True}
    test = cell("test_it", "check('x', answer)", locked=True, solution=False, grade=True, points=1)
    nb = nbformat.v4.new_notebook(
        cells=[cell("setup", "import dlcourse", locked=True), demo, claimed, own, test]
    )
    sources = [c.source for c in measurement_notebook(nb, "test_it", {"cpu_seconds": 5}, seed=3).cells]
    assert sources == ["import dlcourse", "answer = 1", "mine = 2", "MEASURE_SEED = 3", "check('x', answer)"]


def test_the_measured_run_holds_the_code_before_its_cell_as_the_notebooks_run_does():
    """In the notebook's own run a test cell sees only the cells above it. The measured run ran every code cell of
    the notebook before the measured one, later answers and demonstrations too: A7's benchmark cells ran in each of
    its three measured runs and counted against their caps, and a later cell could change what the measured cell
    calls there (``answer`` rebound below) and nowhere else. It now holds what the notebook's run holds."""
    from autograder.grading.measure import measurement_notebook

    def cell(gid, source, **nbgrader):
        made = nbformat.v4.new_code_cell(source)
        made.metadata["nbgrader"] = {"grade_id": gid, **nbgrader}
        return made

    nb = nbformat.v4.new_notebook(
        cells=[
            cell("setup", "import dlcourse", locked=True),
            cell("answer", "answer = 1", locked=False, solution=True),
            cell("test_it", "check('x', answer)", locked=True, solution=False, grade=True, points=1),
            cell("later", "answer = 'rebound'", locked=False, solution=True),
            nbformat.v4.new_code_cell("benchmark()"),  # a student's own cell below the test
            cell("demo", "expensive_demo()", locked=True),
        ]
    )
    sources = [c.source for c in measurement_notebook(nb, "test_it", {"cpu_seconds": 5}, seed=3).cells]
    assert sources == ["import dlcourse", "answer = 1", "MEASURE_SEED = 3", "check('x', answer)"]
