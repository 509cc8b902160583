"""Grades to CSV for nbgrader's own format, for Canvas, and the results table.

Scores leave here as final scores: the raw score less the late penalty (:mod:`autograder.intake.late`), decided now
from the gradebook's due date and extensions and the hand-in's ``timestamp.txt``. The raw score is the
autograded points plus the manual points an instructor has given the written answers so far, read from the
gradebook now; the results table says which written answers still await manual grading, and a Canvas
export (which takes no column but scores) lists them in :func:`awaiting_manual_grading`."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from autograder.course import Course
from autograder.grading.record import load_results, with_manual_grades
from autograder.intake.late import format_utc
from autograder.intake.release import run_nbgrader
from autograder.outputs.gradesheet import Line, gradesheet, record_in_gradebook, total
from autograder.result import Result

RESULT_COLUMNS = ["student_id", "score", "max_score", "status", "reason"]
# After the flags: the autograded points and the written answers' (graded by hand) apart, and what awaits
# manual grading ("" when the assignment has no written answers).
WRITTEN_COLUMNS = ["autograded_score", "autograded_max", "written_score", "written_max", "manual_grading"]
# Last, as nbgrader's own export names them; ``score`` is the final one, raw_score less the penalty.
LATE_COLUMNS = ["raw_score", "late_submission_penalty", "timestamp", "duedate"]


def write_csv(target: Path, header: list[str], rows: list[list[str]]) -> Path:
    """The one CSV writer of the grader's exports."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return target


def graded_results(course: Course, aid: str) -> list[Result]:
    """Every stored result of ``aid``, with the manual scores the gradebook holds now."""
    return with_manual_grades(course, aid, load_results(course, aid))


def result_row(line: Line) -> list[str]:
    """The columns of :data:`RESULT_COLUMNS`, the flags, those of :data:`WRITTEN_COLUMNS`, then those of
    :data:`LATE_COLUMNS`, from the student's line of the gradesheet."""
    r, late, whole = line.result, line.late, line.raw
    penalty = "" if r.is_error else f"{late.penalty:g}"
    times = [format_utc(late.submitted), format_utc(late.due)]
    flags = [*r.flags, *(f.describe() for f in r.code_flags)]
    row = [r.student_id, line.final, f"{whole.max_score:g}", r.status, r.reason, "; ".join(flags)]
    if r.written and not r.is_error:
        written = [r.exported_score(), f"{r.max_score:g}", f"{r.written_score:g}", f"{r.written_max:g}"]
        written.append(r.manual_grading())
    else:
        written = [r.exported_score(), f"{r.max_score:g}", "", "", ""]
    return [*row, *written, whole.exported_score(), penalty, *times]


def write_results_csv(course: Course, aid: str, target: Path) -> Path:
    """``student_id,score,max_score,status,reason,flags,autograded_score,autograded_max,written_score,
    written_max,manual_grading,raw_score,late_submission_penalty,timestamp,duedate``: one row per
    submission, whatever happened to it (a grader error has empty scores); ``score`` is final, over the
    autograded and the manually graded points."""
    header = [*RESULT_COLUMNS, "flags", *WRITTEN_COLUMNS, *LATE_COLUMNS]
    return write_csv(target, header, [result_row(line) for line in gradesheet(course, aid).values()])


def awaiting_manual_grading(course: Course, aids: list[str] | None = None) -> dict[str, list[str]]:
    """Assignment -> the students whose written answers still await manual grading (their exported score
    counts only what has been graded)."""
    found = {}
    for aid in aids or course.assignments():
        waiting = [r.student_id for r in graded_results(course, aid) if not r.is_error and r.awaiting]
        if waiting:
            found[aid] = waiting
    return found


CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def canvas_column(aid: str, canvas_id: str | None) -> str:
    """An assignment's column as Canvas's importer reads it: ``name (id)`` is Canvas's assignment ``id``
    (any other number in parentheses would make a new assignment), a bare name is matched on the title."""
    if canvas_id is not None:
        if not re.fullmatch(r"\d+", canvas_id):
            raise ValueError(f"{aid}: a Canvas assignment id is a number, not {canvas_id!r}")
        return f"{aid} ({canvas_id})"
    if re.fullmatch(r".*\s\(\d+\)", aid, re.DOTALL):
        raise ValueError(f"Canvas would read the end of {aid!r} as an assignment id: give --canvas-id")
    return aid


def canvas_students(course: Course) -> dict[str, tuple[str, str]]:
    """Student id -> (Canvas user id or "", name) as the gradebook holds them (collect keeps the user id)."""
    from autograder.gradebook import open_gradebook

    book = open_gradebook(course)
    if book is None:
        return {}
    with book as gb:
        return {s.id: (s.lms_user_id or "", s.last_name or s.id) for s in gb.students}


def export_canvas(
    course: Course, target: Path, aids: list[str], canvas_ids: dict[str, str] | None = None
) -> Path:
    """A CSV for Canvas's gradebook import (*Grades > Import*): the columns it matches students on, ``Student,
    ID, SIS User ID, SIS Login ID, Section``, with ``ID`` the Canvas user id that ``collect`` kept from the
    download, then one column per named assignment, ``A1 (<Canvas assignment id>)`` where ``canvas_ids`` gives
    it, else ``A1`` (matched on the title), holding the final score (autograded and manually graded points,
    late penalty taken; empty for a grader error, which leaves Canvas's cell as it is). No "Points Possible"
    row: Canvas keeps its own. Who still awaits manual grading: :func:`awaiting_manual_grading`."""
    if not aids:
        raise ValueError("name the assignment(s) to export to Canvas: --assignment A1")
    canvas_ids = canvas_ids or {}
    header = CANVAS_STUDENT_COLUMNS + [canvas_column(aid, canvas_ids.get(aid)) for aid in aids]
    table: dict[str, dict[str, str]] = {}
    for aid in aids:
        for sid, line in gradesheet(course, aid).items():
            table.setdefault(sid, {})[aid] = line.final
    people = canvas_students(course)
    rows = []
    for sid in sorted(table):
        user, name = people.get(sid, ("", sid))
        rows.append([name, user, "", "", "", *[table[sid].get(aid, "") for aid in aids]])
    return write_csv(target, header, rows)


def without_canvas_id(course: Course, aids: list[str]) -> list[str]:
    """The students with a result in ``aids`` whom Canvas cannot match: no Canvas user id is known for them
    (they were not collected from a Canvas download, or the roster gave none)."""
    people = canvas_students(course)
    graded = {r.student_id for aid in aids for r in load_results(course, aid)}
    return sorted(sid for sid in graded if not people.get(sid, ("", ""))[0])


def points_possible(course: Course, aid: str) -> float:
    """What a full score of ``aid`` is in the export (autograded and written points)."""
    return max((total(r).max_score for r in graded_results(course, aid)), default=0.0)


def export_nbgrader(course: Course, target: Path) -> Path:
    """nbgrader's own CSV export of the gradebook (every assignment, every student), its hand-in times and
    late penalties brought up to date first."""
    for aid in course.assignments():
        record_in_gradebook(course, aid)
    run_nbgrader(course, "export", f"--to={target}", "--log-level=WARN")
    return target
