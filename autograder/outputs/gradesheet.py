"""The one gradesheet: per student, the autograded points, the written answers' manual points given so far,
their sum (raw), the late penalty taken from that sum, and the final score, worked out once, when grades
leave the grader. nbgrader's gradebook (``record_in_gradebook``), the results CSV, the Canvas CSV and the
feedback pages all read it, so one student has one final grade everywhere."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autograder.course import Course
from autograder.gradebook import open_gradebook
from autograder.grading.record import load_results, with_manual_grades
from autograder.intake.late import Late, late_penalties
from autograder.result import Result


def total(result: Result) -> Result:
    """The result with the written answers' manual points (given so far) in its score and maximum: the raw
    score a late penalty is taken from."""
    return replace(result, score=result.total_score, max_score=result.total_max) if result.written else result


@dataclass(frozen=True)
class Line:
    result: Result  # as recorded, with the manual scores the gradebook holds now
    late: Late  # assessed on the raw score, autograded + written

    @property
    def raw(self) -> Result:
        return total(self.result)

    @property
    def final(self) -> str:
        """The final score as exported: empty for a grader error, else raw less the penalty."""
        return self.raw.exported_score() if self.late.final is None else f"{self.late.final:g}"


def gradesheet(course: Course, aid: str, results: list[Result] | None = None) -> dict[str, Line]:
    """Student id -> :class:`Line` for every stored result of ``aid`` (or for ``results``): one read of the
    results, the gradebook's manual scores, the config and the deadlines."""
    results = with_manual_grades(course, aid, load_results(course, aid) if results is None else results)
    lates = late_penalties(course, aid, [total(r) for r in results])
    return {r.student_id: Line(r, lates[r.student_id]) for r in results}


def record_in_gradebook(course: Course, aid: str) -> int:
    """Copy each graded submission's hand-in time and late penalty into nbgrader's gradebook
    (``SubmittedAssignment.timestamp``, ``SubmittedNotebook.late_submission_penalty``), where formgrader and
    ``nbgrader export`` read them. Returns how many submissions were updated."""
    from nbgrader.api import MissingEntry

    lines = [line for line in gradesheet(course, aid).values() if not line.result.is_error]
    book = open_gradebook(course) if lines else None
    if book is None:
        return 0
    updated = 0
    with book as gb:
        for line in lines:  # the penalty taken from autograded + written points, as every export takes it
            try:
                submission = gb.find_submission(aid, line.result.student_id)
            except MissingEntry:
                continue
            late = line.late
            submission.timestamp = late.submitted
            for index, notebook in enumerate(submission.notebooks):  # the whole penalty on the first one
                notebook.late_submission_penalty = late.penalty if index == 0 and late.penalty else None
            updated += 1
        gb.db.commit()
    return updated
