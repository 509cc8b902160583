"""What ``grade`` and ``run`` print: a reason cut at a word's end (never in the middle of one), and at the end
only what the progress lines (one per submission, printed as each finishes) did not say: the totals, or the
sorted table when asked (``--table``)."""

from __future__ import annotations

import pytest

from autograder.commands import cli, workflows
from autograder.result import Result

WORDS = "the test cell test_predict raised AssertionError: expected the shape of the logits batch to match"


def long_reason(width: int) -> str:
    """A reason whose ``width``-th character falls inside a word, whatever the prefix."""
    reason = " ".join([WORDS] * 3)
    while reason[width - 2] == " " or reason[width - 1] == " " or reason[width] == " ":
        reason = "x" + reason
    return reason


def assert_cut_at_a_word_end(shown: str, reason: str) -> None:
    assert shown.endswith("\u2026"), shown
    kept = shown[:-1]
    assert reason.startswith(kept) and reason[len(kept)] in " ,;:", (shown, reason)


@pytest.mark.parametrize("width", [90, 70])
def test_reasons_are_cut_at_a_words_end(width):
    reason = long_reason(width)
    result = Result("s1", "A1", 10, 4, "graded", reason=reason)
    line = workflows.status_line(result) if width == 90 else workflows.grade_table([result]).splitlines()[-1]
    shown = line[line.index(reason[:10]) :]
    assert_cut_at_a_word_end(shown, reason)
    assert len(shown) <= width


def rows() -> list[Result]:
    return [
        Result("ada", "A1", 10, 10, "graded", reason="all tests passed"),
        Result("bob", "A1", 10, 2.5, "graded", reason="test_b failed"),
        Result("cy", "A1", 10, 0, "error", reason="the sandbox could not start"),
    ]


@pytest.mark.parametrize("command", [["grade", "A1"], ["run", "A1", "subs", "--out", "out"]])
def test_grade_ends_with_the_totals_not_the_lines_again(monkeypatch, capsys, tmp_path, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(workflows, "grade_with_progress", lambda *a, **k: rows())
    monkeypatch.setattr(workflows, "run", lambda *a, **k: rows())
    monkeypatch.setattr(cli.sys, "platform", "linux")
    cli.main(["--course", str(tmp_path), *command])
    out = capsys.readouterr().out
    assert "2 graded" in out and "1 error" in out and "3 submission(s)" in out
    assert "mean score 6.25 of 10" in out  # (10 + 2.5) / 2: a grader error has no score
    for r in rows():  # each student's row was the progress line: not printed again
        assert r.student_id not in out and r.reason not in out, out
    cli.main(["--course", str(tmp_path), *command, "--table"])
    table = capsys.readouterr().out
    assert all(r.student_id in table for r in rows())
    assert table.index("ada") < table.index("bob") < table.index("cy")
