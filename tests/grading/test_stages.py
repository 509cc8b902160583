"""One submission through the pipeline's stages, without a kernel: the runs are prepared outcomes
(:mod:`tests.fixtures.fake_sandbox`), made as a child makes them, so every stage after the run (repair, the
tamper scan, verify, status, keep) does what it does for a real run. The real sandbox has its own tests."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.grading.pipeline import (
    STAGES,
    WRITES,
    Grading,
    Job,
    decide_kept,
    grade_one,
    grade_with_retry,
    kept_outcome,
    make_batch,
    run_stages,
    stages,
    writes,
)
from autograder.grading.reference import build_reference
from tests.fixtures.fake_sandbox import (
    FakeSandboxes,
    answers,
    grader_failed,
    hand_in,
    run_here,
    settings,
)

WRONG_SQUARE = "def square(x):\n    return x**3"


def batch_of(course, prepared: dict | None = None):
    """The toy course's batch, its reference built from the source run as prepared outcomes too; the fake."""
    fake = FakeSandboxes(answers(prepared or {}))
    given = settings(fake)
    return make_batch(course, "T1", build_reference(course, "T1", given), given), fake


def test_a_right_and_a_wrong_hand_in_go_through_every_stage_in_order(toy_course):
    batch, fake = batch_of(toy_course)
    hand_in(toy_course, "alice")
    hand_in(toy_course, "bob", square=WRONG_SQUARE)
    alice, bob = grade_one(batch, Job("alice")), grade_one(batch, Job("bob"))
    assert (alice.score, alice.status, alice.reason) == (100.0, "graded", "all tests passed")
    assert (bob.score, bob.status) == (60.0, "graded")
    assert bob.reason.startswith("1 of 2 tests failed; first: t1.square.small")
    assert [c.points for c in bob.cells] == [0.0, 60.0] and all(c.notebook == "T1" for c in bob.cells)
    assert [name for name in alice.timings if not name.startswith("child_")] == [name for name, _ in STAGES]
    assert fake.runs()[-2:] == ["alice", "bob"]  # (the reference's runs before them)
    assert fake.left_running == []  # every sandbox started was cleaned up


@pytest.mark.parametrize(
    "make, status, score, words",
    [
        (lambda nb: run_here(nb, status="memory", stop_after="test_square"), "memory", 40.0, "used more than 1024 MB"),
        (lambda nb: run_here(nb, status="timeout", stop_after="test_square"), "timeout", 40.0, "ran past the 60 s limit"),
        (lambda nb: run_here(nb, status="crashed", stop_after="square"), "crashed", 0.0, "the kernel died"),
        (lambda nb: run_here(nb, cell_timeout="test_scale"), "timeout", 40.0, "per-cell time limit"),
    ],
    ids=["memory", "timeout", "crashed", "cell-timeout"],
)  # fmt: skip
def test_a_run_stopped_by_a_limit_is_graded_on_what_ran_before_it(toy_course, make, status, score, words):
    batch, _ = batch_of(toy_course, {"carol": make})
    hand_in(toy_course, "carol")
    result = grade_one(batch, Job("carol"))
    assert (result.status, result.score) == (status, score), result.reason
    assert words in result.reason and "graded on what ran before" in result.reason
    kept = kept_outcome(toy_course.kept_run("T1", "carol"), result.submission_sha256)
    assert kept.status == make(toy_course.read_source("T1")).status  # the run kept as it ended
    assert result.detail == kept.detail[-2000:]


def test_a_grader_error_is_tried_once_more_in_a_fresh_sandbox_and_never_kept_or_scored(toy_course):
    batch, fake = batch_of(toy_course, {"dan": [grader_failed(), run_here], "eve": grader_failed()})
    hand_in(toy_course, "dan")
    hand_in(toy_course, "eve")
    dan = grade_with_retry(batch, Job("dan"))
    assert (dan.status, dan.score) == ("graded", 100.0)
    assert any(
        "graded a second time after a grader error: grader error: the sandbox's kernel" in n
        for n in dan.notes
    )
    eve = grade_with_retry(batch, Job("eve"))
    assert eve.status == "error" and eve.reason.startswith("grader error: the sandbox's kernel did not start")
    assert fake.runs().count("eve") == 2
    # nothing of a run the grader failed is kept: no kept run, no notebook for formgrader
    assert not toy_course.kept_run("T1", "eve").exists() and not toy_course.executed("T1", "eve").exists()
    assert toy_course.kept_run("T1", "dan").is_dir() and toy_course.executed("T1", "dan").is_file()


def test_the_keep_stage_writes_last_and_what_it_keeps_decides_again_the_same(toy_course):
    batch, fake = batch_of(toy_course)
    hand_in(toy_course, "bob", square=WRONG_SQUARE)
    result = grade_one(batch, Job("bob"))
    assert list(result.timings)[-1] == "keep" and WRITES == ("keep",) and STAGES[-1][0] == "keep"
    kept = kept_outcome(toy_course.kept_run("T1", "bob"), result.submission_sha256)
    assert kept is not None and kept.status == "finished"
    executed = nbformat.read(
        str(toy_course.executed("T1", "bob")), as_version=4
    )  # for formgrader, with outputs
    shown = {c.metadata.get("nbgrader", {}).get("grade_id"): (c.source, c.outputs) for c in executed.cells}
    assert "return x**3" in shown["square"][0] and "t1.scale.small" in shown["test_scale"][1][0]["text"]
    runs = len(fake.runs())
    again = decide_kept(batch, Job("bob", keep=str(toy_course.kept_run("T1", "bob").parent)))
    assert (again.score, again.status, again.reason) == (result.score, result.status, result.reason)
    assert len(fake.runs()) == runs  # decided again from what was kept: nothing ran


def test_a_hand_in_that_cannot_be_read_runs_nothing_and_its_earlier_kept_run_goes(toy_course):
    batch, fake = batch_of(toy_course)
    hand_in(toy_course, "frank")
    assert grade_one(batch, Job("frank")).score == 100.0
    assert toy_course.kept_run("T1", "frank").is_dir()
    runs = len(fake.runs())
    toy_course.submission("T1", "frank").write_text("{ not a notebook")
    result = grade_one(batch, Job("frank"))
    assert (result.status, result.score) == ("unreadable", 0.0) and "invalid JSON" in result.reason
    assert [name for name in result.timings] == [
        "repair",
        "keep",
    ]  # stopped at the repair; the writes all the same
    assert not toy_course.kept_run("T1", "frank").exists()
    assert len(fake.runs()) == runs


def g(course, job: Job, **left) -> Grading:
    return Grading(job, None, Path("T1.ipynb"), None, nb="T1", **left)


def test_what_is_written_follows_from_what_the_stages_decided(toy_course):
    """:func:`writes` is a plain function of the grading's state: no disk is touched to decide it."""
    from types import SimpleNamespace

    from autograder.intake.repair import Repaired

    batch = SimpleNamespace(course=toy_course, aid="T1")
    run, executed = toy_course.kept_run("T1", "ada"), toy_course.executed("T1", "ada")
    done = {"repaired": Repaired(None, None), "verdict": object(), "outcome": object()}
    assert writes(batch, g(toy_course, Job("ada"), **done)) == [("executed", executed), ("run", run)]
    unreadable = Repaired(None, "the file is empty")
    assert writes(batch, g(toy_course, Job("ada"), repaired=unreadable)) == [("forget", run)]
    assert writes(batch, g(toy_course, Job("ada"), repaired=Repaired(None, None))) == []  # a grader error
    canary = Job("canary/solutions", path="/somewhere", keep="/kept/solutions")
    assert writes(batch, g(toy_course, canary, **done)) == [("run", Path("/kept/solutions/T1"))]
    assert writes(batch, g(toy_course, canary, repaired=unreadable)) == []
    assert writes(batch, g(toy_course, Job("x", path="/somewhere"), **done)) == []
    assert not run.exists() and not executed.exists()


def test_the_writes_run_after_a_stage_says_stop_and_the_other_stages_do_not():
    from types import SimpleNamespace

    from autograder.result import Result

    ran = []

    def stage(name, go_on=True):
        return name, lambda b, g: ran.append(name) or go_on

    grading = SimpleNamespace(result=Result("s", "T1"))
    run_stages(None, grading, [stage("repair", go_on=False), stage("verify"), stage("keep")])
    assert ran == ["repair", "keep"] and list(grading.result.timings) == ["repair", "keep"]
    assert [name for name, _ in stages("verify", "status")] == ["verify", "status"]
