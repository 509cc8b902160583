"""The status of a run and its reason, as a pure function of plain values (:func:`run_status`): how the run
ended, the verdict's cells, whether anything flagged it, and the limits in force. No kernel, no disk."""

from __future__ import annotations

import pytest

from autograder.grading.pipeline import grader_error, run_status
from autograder.result import STATUS, CellResult
from autograder.runner.sandbox import Limits, Outcome

LIMITS = Limits(timeout=60, cell_timeout=20, memory_mb=512, processes=48)


def cells(*failed: str) -> list[CellResult]:
    """Two test cells, those named in ``failed`` failed with a message of their own."""
    return [
        CellResult(
            gid,
            0.0 if gid in failed else 50.0,
            50.0,
            gid not in failed,
            f"{gid}: wrong" if gid in failed else "",
        )
        for gid in ("test_square", "test_scale")
    ]


def ended(status: str, *cell_statuses: str, detail: str = "the child's last lines") -> Outcome:
    summary = {"cells": [{"index": i, "status": s} for i, s in enumerate(cell_statuses)]}
    return Outcome(status, 1.0, {}, summary, detail)


# (how the run ended, the cells' statuses in its summary, failed tests, flagged) -> (status, words in the reason)
RULES = [
    (ended("finished", "ok", "ok"), (), False, "graded", "all tests passed"),
    (ended("finished", "ok", "error"), ("test_scale",), False, "graded", "1 of 2 tests failed; first: test_scale: wrong"),
    (ended("finished", "ok", "ok"), ("test_square", "test_scale"), False, "graded", "2 of 2 tests failed; first: test_square"),
    (ended("finished", "ok", "ok"), (), True, "flagged", "all tests passed"),
    (ended("finished", "ok", "ok"), ("test_square",), True, "flagged", "1 of 2 tests failed"),
    (ended("finished", "ok", "timeout"), ("test_scale",), False, "timeout", "per-cell time limit; graded on what ran"),
    (ended("finished", "ok", "timeout"), (), True, "timeout", "per-cell time limit"),  # a limit outranks a flag
    (ended("timeout", "ok"), ("test_scale",), False, "timeout", "ran past the 60 s limit; graded on what ran before"),
    (ended("memory", "ok"), (), True, "memory", "used more than 512 MB; graded on what ran before"),
    (ended("processes"), ("test_square",), False, "processes", "started more than 48 processes"),
    (ended("crashed", "ok"), ("test_scale",), False, "crashed", "the kernel died"),
    (ended("error", detail="the sandbox's kernel did not start\nmore"), (), False, "error", "grader error: the sandbox's kernel did not start"),
]  # fmt: skip


@pytest.mark.parametrize("outcome, failed, flagged, status, words", RULES)
def test_the_status_and_reason_follow_from_the_run_the_verdict_and_the_limits(
    outcome, failed, flagged, status, words
):
    got, reason = run_status(outcome, cells(*failed), LIMITS, flagged)
    assert got == status and got in STATUS
    assert words in reason, reason


def test_a_grader_error_gives_its_detail_s_first_line_only_and_never_fails_on_an_empty_detail():
    assert grader_error(ended("error", detail="first\nsecond")) == "grader error: first"
    assert run_status(ended("error", detail=""), [], LIMITS)[0] == "error"
    assert run_status(ended("error", detail=""), [], LIMITS)[1].startswith("grader error: ")


def test_the_status_is_decided_from_its_arguments_alone_and_changes_none_of_them():
    outcome, verdict = ended("finished", "ok", "ok"), cells("test_scale")
    before = (repr(outcome), repr(verdict))
    first = run_status(outcome, verdict, LIMITS)
    assert run_status(outcome, verdict, LIMITS) == first
    assert (repr(outcome), repr(verdict)) == before


def test_the_limits_in_force_are_the_ones_the_reason_names():
    memory = ended("memory")
    assert "used more than 512 MB" in run_status(memory, [], LIMITS)[1]
    assert "used more than 2048 MB" in run_status(memory, [], Limits(memory_mb=2048))[1]


def test_the_status_stage_keeps_the_detail_of_a_stopped_run_only(tmp_path):
    from types import SimpleNamespace

    from autograder.grading.pipeline import Grading, Job, status_stage
    from autograder.result import Result

    batch = SimpleNamespace(limits=LIMITS)
    for status, kept in (("memory", "the child's last lines"), ("finished", "")):
        result = Result("s", "T1", 100, cells=cells())
        g = Grading(Job("s"), None, tmp_path, result, outcome=ended(status, "ok", "ok"))
        assert status_stage(batch, g) is True
        assert (result.status, result.reason) == run_status(g.outcome, result.cells, LIMITS)
        assert result.detail == kept
