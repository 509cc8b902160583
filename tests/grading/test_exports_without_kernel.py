"""What leaves the grader, from results graded without a kernel (:mod:`tests.fixtures.fake_sandbox`): the results
table lists every submission whatever happened to it, a grader error with no score, a run stopped by a limit
with the points of what ran before; the gradebook holds the scores and no grader error; a feedback page the
grader fails to make shows the score alone and costs no other page."""

from __future__ import annotations

import csv

from autograder.grading.batch import grade
from autograder.grading.record import Recorder
from autograder.outputs.export import write_results_csv
from autograder.outputs.gradesheet import gradesheet
from tests.fixtures.fake_sandbox import FakeSandboxes, answers, grader_failed, hand_in, run_here, settings


def test_the_results_table_and_the_gradebook_say_what_happened_to_each_hand_in(toy_course, tmp_path):
    stopped = lambda nb: run_here(nb, status="memory", stop_after="test_square")  # noqa: E731
    fake = FakeSandboxes(answers({"carol": grader_failed(), "dan": stopped}))
    hand_in(toy_course, "alice")
    hand_in(toy_course, "bob", square="def square(x):\n    return x**3")
    hand_in(toy_course, "carol")
    hand_in(toy_course, "dan")
    grade(toy_course, "T1", settings(fake))
    with open(write_results_csv(toy_course, "T1", tmp_path / "results.csv"), encoding="utf-8") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    shown = {sid: (row["score"], row["max_score"], row["status"]) for sid, row in rows.items()}
    assert shown == {
        "alice": ("100", "100", "graded"),
        "bob": ("60", "100", "graded"),
        "carol": ("", "100", "error"),  # the grader's failure is never a student's score
        "dan": ("40", "100", "memory"),
    }
    assert rows["carol"]["reason"].startswith("grader error:") and "1024 MB" in rows["dan"]["reason"]
    assert rows["bob"]["reason"].startswith("1 of 2 tests failed; first: t1.square.small")
    assert gradesheet(toy_course, "T1")["dan"].final == "40"
    with Recorder(toy_course.db_url) as recorder:
        assert recorder.scores("T1") == {"alice": 100.0, "bob": 60.0, "dan": 40.0}


def test_a_page_the_grader_fails_to_make_shows_the_score_and_costs_no_other_page(
    toy_course, monkeypatch, capsys
):
    """A fault of the page writer's on one student's page (none is known: this one is made up) leaves that page
    with the score and a sentence that says so, the instructor told on stderr, and the next student's page
    whole; the service's worker writes its pages the same way."""
    from autograder.grading.batch import grade
    from autograder.outputs import feedback
    from autograder.service import worker
    from tests.fixtures.fake_sandbox import FakeSandboxes, answers, hand_in, settings

    hand_in(toy_course, "alice")
    hand_in(toy_course, "bob", square="def square(x):\n    return x**3")
    grade(toy_course, "T1", settings(FakeSandboxes(answers({}))))
    real = feedback._run_notebook

    def failing(course, aid, sid, nb):
        if sid == "alice":
            raise RuntimeError("a fault of the page writer's")
        return real(course, aid, sid, nb)

    monkeypatch.setattr(feedback, "_run_notebook", failing)
    feedback.write_feedback(toy_course, "T1")
    alice = _text_of(toy_course.feedback_page("T1", "alice", "T1").read_text())
    bob = _text_of(toy_course.feedback_page("T1", "bob", "T1").read_text())
    assert "T1: 100 / 100" in alice and "could not be made: the grader failed to make it" in alice
    assert "Your answers and their output" not in alice
    assert "T1: 60 / 100" in bob and "Your answers and their output" in bob and "could not be made" not in bob
    assert "alice's page of T1 shows the score alone" in capsys.readouterr().err
    assert worker.page_of is feedback.page_of


def _text_of(page: str) -> str:
    """A page's text as a reader sees it (tags out, entities read)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", page))
