"""A read-only demonstration (``metadata.dlcourse.demonstration``, such as A8's scaling sweep: three models trained,
11 s of every run) earns no point and is run by none of the grader's runs: not the reference's, not a hand-in's,
not a measured cell's. The runs are the fake sandbox's (:mod:`tests.fixtures.fake_sandbox`), so each notebook the
grader sends is seen as it was sent."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder.course import DEMONSTRATION, Course, demonstration_problems
from autograder.grading.measure import LEFT_OUT, without_demonstrations
from autograder.grading.pipeline import Job, grade_one, make_batch
from autograder.grading.reference import build_reference
from autograder.intake.release import release
from tests.fixtures.fake_sandbox import FakeSandboxes, hand_in, settings
from tests.fixtures.toy_course import make_course, meta, source_notebook

SWEEP = 'sweep_losses = [4.6, 4.1, 3.9]\nprint("the sweep trained three models")'


def with_demonstration(later: str | None = None, **marks) -> nbformat.NotebookNode:
    """The toy source with a demonstration after the first test (``marks``: its nbgrader metadata changed), and
    ``later``, a read-only cell after it, where given."""
    nb = source_notebook()
    demo = new_code_cell(SWEEP, metadata=meta("sweep", locked=True))
    demo.metadata["nbgrader"].update(marks)
    demo.metadata["dlcourse"] = {DEMONSTRATION: True}
    nb.cells.insert(4, demo)
    if later is not None:
        nb.cells.insert(5, new_code_cell(later, metadata=meta("plot", locked=True)))
    return nb


def sent_sources(fake: FakeSandboxes) -> list[list[str]]:
    return [[c.source for c in nb.cells if c.cell_type == "code"] for nb in fake.notebooks]


def test_no_run_of_the_grader_runs_a_demonstration_and_the_grade_is_whole(tmp_path):
    course = Course(root=make_course(tmp_path / "course", notebook=with_demonstration()))
    release(course, ["T1"])
    released = nbformat.read(str(course.release_notebook("T1")), as_version=4)
    assert SWEEP in [c.source for c in released.cells]  # the student runs it in their own notebook
    fake = FakeSandboxes()
    given = settings(fake)
    batch = make_batch(course, "T1", build_reference(course, "T1", given), given)
    hand_in(course, "alice")
    result = grade_one(batch, Job("alice"))
    assert result.score == 100.0, result.reason
    sent = sent_sources(fake)
    assert len(sent) >= 2  # the reference's runs and alice's
    for sources in sent:
        assert not any("sweep" in s for s in sources), sources  # its code was sent nowhere
        assert sources.count(LEFT_OUT) == 1  # in its place, so every later cell keeps its index


def test_a_demonstration_mark_on_a_cell_that_is_not_read_only_changes_nothing():
    """Repair puts read-only cells back from the source, so a hand-in cannot mark a locked cell; on its own answer
    cell, or a cell it added, the mark is ignored: leaving a cell out only ever takes the student's code away, and
    a graded test is never left out."""
    cells = {
        "answer": new_code_cell("answer = 1", metadata=meta("answer", solution=True)),
        "own": new_code_cell("mine = 2"),
        "test": new_code_cell("check('x', answer)", metadata=meta("t", grade=True, locked=True, points=1)),
        "demo": new_code_cell("demo = 3", metadata=meta("demo", locked=True)),
    }
    for cell in cells.values():
        cell.metadata["dlcourse"] = {DEMONSTRATION: True}
    nb = nbformat.v4.new_notebook(cells=list(cells.values()))
    sent = without_demonstrations(nb)
    assert [c.source for c in sent.cells] == ["answer = 1", "mine = 2", "check('x', answer)", LEFT_OUT]
    assert nb.cells[3].source == "demo = 3"  # the notebook itself is left as it was
    plain = nbformat.v4.new_notebook(cells=[new_code_cell("x = 1")])
    assert without_demonstrations(plain) is plain


@pytest.mark.parametrize(
    "later, problem",
    [
        ("print(sweep_losses[-1])", "cell plot reads 'sweep_losses', which demonstration sweep assigns"),
        (
            "sweep_losses = [1.0]\nprint(sweep_losses)",
            None,
        ),  # its own value: leaving the demonstration out changes nothing
        ("%matplotlib inline\nprint(len(sweep_losses))", "reads 'sweep_losses'"),  # a magic does not hide it
    ],
)
def test_a_source_whose_later_cell_needs_a_demonstration_is_refused(tmp_path, later, problem):
    nb = with_demonstration(later)
    found = demonstration_problems(nb)
    if problem is None:
        assert found == []
        return
    assert len(found) == 1 and problem in found[0], found
    course = Course(root=make_course(tmp_path / "course", notebook=nb))
    fake = FakeSandboxes()
    with pytest.raises(ValueError, match="reads 'sweep_losses'"):
        build_reference(course, "T1", settings(fake))
    assert fake.notebooks == []  # refused before anything ran


def test_a8s_sweep_is_a_demonstration_and_its_triton_demo_is_only_left_out_of_measured_runs():
    from autograder.course import NOT_MEASURED, demonstration, nbgrader_meta

    source = Course().read_source("A8")
    marked = {
        nbgrader_meta(c)["grade_id"]: demonstration(c)
        for c in source.cells
        if c.metadata.get("dlcourse", {}).keys() & {DEMONSTRATION, NOT_MEASURED}
    }
    assert marked == {"sweep": True, "triton_demo": False}  # the feedback shows the Triton check and timing
    assert demonstration_problems(source) == []


def test_a6s_table_runs_in_the_notebooks_run_and_not_in_the_run_that_measures_part_6():
    """A6's table trains four models with the student's own ``make_cnn`` and ``train_cnn`` (2.8 s on the
    solutions): its output belongs in the feedback (the written questions quote it), its CPU time does not belong
    in ``test_cnn``'s measured budget, where a slow ``train_cnn`` would count twice."""
    from autograder.course import demonstration
    from autograder.grading.measure import measurement_notebook

    source = Course().read_source("A6")
    table = [c for c in source.cells if "def measured_row(" in c.source]
    assert len(table) == 1 and not demonstration(table[0])
    measured = measurement_notebook(source, "test_cnn", {"cpu_seconds": 25})
    assert not any("def measured_row(" in c.source for c in measured.cells)
    assert any("def make_cnn(" in c.source for c in measured.cells)
    assert "def measured_row(" in "".join(c.source for c in without_demonstrations(source).cells)
