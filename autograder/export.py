"""Stage 7, export: grades to CSV for nbgrader's own format, for Canvas, and the results table."""

from __future__ import annotations

import csv
from pathlib import Path

from autograder.course import Course
from autograder.record import load_results
from autograder.release import run_nbgrader
from autograder.result import Result

RESULT_COLUMNS = ["student_id", "score", "max_score", "status", "reason"]


def write_csv(target: Path, header: list[str], rows: list[list[str]]) -> Path:
    """The one CSV writer of the grader's exports."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return target


def result_row(r: Result) -> list[str]:
    return [r.student_id, r.exported_score(), f"{r.max_score:g}", r.status, r.reason, "; ".join(r.flags)]


def write_results_csv(course: Course, aid: str, target: Path) -> Path:
    """``student_id,score,max_score,status,reason,flags``: one row per submission, whatever happened to it
    (a grader error has an empty score)."""
    return write_csv(target, [*RESULT_COLUMNS, "flags"], [result_row(r) for r in load_results(course, aid)])


def export_canvas(course: Course, target: Path, aids: list[str] | None = None) -> Path:
    """A CSV for Canvas's gradebook import: students by SIS Login ID, one column per assignment."""
    aids = aids or course.assignments()
    table: dict[str, dict[str, str]] = {}
    maxima = {}
    for aid in aids:
        for r in load_results(course, aid):
            table.setdefault(r.student_id, {})[aid] = r.exported_score()
            maxima[aid] = r.max_score
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    header += [f"{a} ({maxima.get(a, 100):g})" for a in aids]
    rows = [["Points Possible", "", "", "", "", *[f"{maxima.get(a, 100):g}" for a in aids]]]
    rows += [[sid, "", "", sid, "", *[table[sid].get(a, "") for a in aids]] for sid in sorted(table)]
    return write_csv(target, header, rows)


def export_nbgrader(course: Course, target: Path) -> Path:
    """nbgrader's own CSV export of the gradebook (every assignment, every student)."""
    run_nbgrader(course, "export", f"--to={target}", "--log-level=WARN")
    return target
