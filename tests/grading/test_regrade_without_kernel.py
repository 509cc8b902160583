"""``regrade`` without a kernel (:mod:`tests.fixtures.fake_sandbox`): an edit of the source that changes only
decisions (a hidden check's tolerance) decides every kept run again, the reference's and the canary's too, and
runs nothing; an edit of what a test runs, or a new hand-in, runs those submissions again."""

from __future__ import annotations

import nbformat

from autograder.commands.regrade import regrade
from autograder.course import nbgrader_meta
from autograder.grading.batch import grade
from tests.fixtures.fake_sandbox import FakeSandboxes, hand_in, settings, toy_kind

HIDDEN_SCALE = 'check("t1.scale.random", scale(rng.normal(size=(3, 4)), -0.5))'
# right on the small public case, off by 1e-4 on larger inputs: what a hidden tolerance decides
NEARLY = "def scale(x, factor):\n    return x * factor + (1e-4 if x.size > 2 else 0.0)"


def edit_source(course, old: str, new: str) -> None:
    path = course.source_notebook("T1")
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_scale")
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, str(path))


def graded_class(course):
    fake = FakeSandboxes()
    hand_in(course, "alice")
    hand_in(course, "bob", scale=NEARLY)
    first = {r.student_id: r.score for r in grade(course, "T1", settings(fake))}
    return fake, first


def test_a_tolerance_edit_decides_every_run_again_and_runs_nothing(toy_course):
    fake, first = graded_class(toy_course)
    assert first["alice"] == 100.0 and first["bob"] < 100.0
    edit_source(toy_course, HIDDEN_SCALE, HIDDEN_SCALE[:-1] + ", atol=1e-3)")
    before = len(fake.notebooks)
    report = regrade(toy_course, "T1", settings(fake))
    assert len(fake.notebooks) == before  # not the reference, not the canary, not a student
    assert "decided again" in report.proof and not report.run_again
    new = {c.student_id: c.new.score for c in report.decided_again}
    assert new == {"alice": 100.0, "bob": 100.0}  # bob's larger inputs are within the new tolerance


def test_an_edit_of_what_a_test_runs_runs_every_submission_again(toy_course):
    fake, first = graded_class(toy_course)
    edit_source(toy_course, "default_rng(8)", "default_rng(9)")
    before = len(fake.notebooks)
    report = regrade(toy_course, "T1", settings(fake))
    kinds = [toy_kind(nb) for nb in fake.notebooks[before:]]
    assert kinds[:3] == ["source"] * 3 and sorted(kinds[3:5]) == ["release", "solutions"]  # rebuilt, proven
    assert sorted(kinds[5:]) == ["alice", "bob"]
    assert {c.student_id: c.how.split(":")[0] for c in report.changes} == {
        "alice": "run again",
        "bob": "run again",
    }
    assert {c.student_id: c.new.score for c in report.changes} == first


def test_a_new_hand_in_runs_again_and_the_others_are_decided_again(toy_course):
    fake, first = graded_class(toy_course)
    hand_in(toy_course, "alice", square="def square(x):\n    return x**3")
    before = len(fake.notebooks)
    report = regrade(toy_course, "T1", settings(fake))
    assert [toy_kind(nb) for nb in fake.notebooks[before:]] == ["alice"]  # the proof found passed, kept
    assert [c.student_id for c in report.decided_again] == ["bob"]
    (alice,) = report.run_again
    assert alice.how == "run again: handed in again" and alice.new.score == 60.0 and alice.moved
