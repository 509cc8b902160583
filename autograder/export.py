"""Stage 7, export: grades to CSV for nbgrader's own format, for Canvas, and the results table.

Scores leave here as final scores: the raw score less the late penalty (:mod:`autograder.late`), decided now
from the gradebook's due date and extensions and the hand-in's ``timestamp.txt``."""

from __future__ import annotations

import csv
from pathlib import Path

from autograder.course import Course
from autograder.late import Late, format_utc, late_penalties, record_in_gradebook
from autograder.record import load_results
from autograder.release import run_nbgrader
from autograder.result import Result

RESULT_COLUMNS = ["student_id", "score", "max_score", "status", "reason"]
# After the flags, as nbgrader's own export names them; ``score`` is the final one, raw_score less the penalty.
LATE_COLUMNS = ["raw_score", "late_submission_penalty", "timestamp", "duedate"]


def write_csv(target: Path, header: list[str], rows: list[list[str]]) -> Path:
    """The one CSV writer of the grader's exports."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return target


def final_score(r: Result, late: Late | None) -> str:
    """The score as exported: empty for a grader error, else less the late penalty (if any)."""
    return r.exported_score() if late is None or late.final is None else f"{late.final:g}"


def result_row(r: Result, late: Late | None = None) -> list[str]:
    """The columns of :data:`RESULT_COLUMNS`, the flags, then those of :data:`LATE_COLUMNS`."""
    penalty = "" if late is None or r.is_error else f"{late.penalty:g}"
    times = [format_utc(late.submitted), format_utc(late.due)] if late else ["", ""]
    row = [r.student_id, final_score(r, late), f"{r.max_score:g}", r.status, r.reason, "; ".join(r.flags)]
    return [*row, r.exported_score(), penalty, *times]


def write_results_csv(course: Course, aid: str, target: Path) -> Path:
    """``student_id,score,max_score,status,reason,flags,raw_score,late_submission_penalty,timestamp,duedate``:
    one row per submission, whatever happened to it (a grader error has empty scores); ``score`` is final."""
    results = load_results(course, aid)
    lates = late_penalties(course, aid, results)
    header = [*RESULT_COLUMNS, "flags", *LATE_COLUMNS]
    return write_csv(target, header, [result_row(r, lates[r.student_id]) for r in results])


def export_canvas(course: Course, target: Path, aids: list[str] | None = None) -> Path:
    """A CSV for Canvas's gradebook import: students by SIS Login ID, one column per assignment holding the
    final score (late penalty taken; nothing else, since Canvas reads any other column as an assignment)."""
    aids = aids or course.assignments()
    table: dict[str, dict[str, str]] = {}
    maxima = {}
    for aid in aids:
        results = load_results(course, aid)
        lates = late_penalties(course, aid, results)
        for r in results:
            table.setdefault(r.student_id, {})[aid] = final_score(r, lates[r.student_id])
            maxima[aid] = r.max_score
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    header += [f"{a} ({maxima.get(a, 100):g})" for a in aids]
    rows = [["Points Possible", "", "", "", "", *[f"{maxima.get(a, 100):g}" for a in aids]]]
    rows += [[sid, "", "", sid, "", *[table[sid].get(a, "") for a in aids]] for sid in sorted(table)]
    return write_csv(target, header, rows)


def export_nbgrader(course: Course, target: Path) -> Path:
    """nbgrader's own CSV export of the gradebook (every assignment, every student), its hand-in times and
    late penalties brought up to date first."""
    for aid in course.assignments():
        record_in_gradebook(course, aid)
    run_nbgrader(course, "export", f"--to={target}", "--log-level=WARN")
    return target
