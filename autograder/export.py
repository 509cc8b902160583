"""Stage 7, export: grades to CSV for nbgrader's own format, for Canvas, and the results table."""

from __future__ import annotations

import csv
from pathlib import Path

from autograder.course import Course
from autograder.record import load_result
from autograder.release import run_nbgrader

RESULT_COLUMNS = ["student_id", "score", "max_score", "status", "reason"]


def results(course: Course, aid: str) -> list[dict]:
    directory = course.results_dir(aid)
    found = (
        [load_result(course, aid, p.stem) for p in sorted(directory.glob("*.json"))]
        if directory.is_dir()
        else []
    )
    return [r for r in found if r]


def score_cell(result: dict) -> str:
    """A result's score as exported: empty for a grader error, which is never a student's score."""
    return "" if result["status"] == "error" else f"{result['score']:g}"


def write_csv(target: Path, header: list[str], rows: list[list[str]]) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return target


def result_row(r: dict) -> list[str]:
    return [
        r["student_id"],
        score_cell(r),
        f"{r['max_score']:g}",
        r["status"],
        r["reason"],
        "; ".join(r.get("flags", [])),
    ]


def write_results_csv(course: Course, aid: str, target: Path) -> Path:
    """``student_id,score,max_score,status,reason,flags``: one row per submission, whatever happened to it
    (a grader error has an empty score)."""
    return write_csv(target, [*RESULT_COLUMNS, "flags"], [result_row(r) for r in results(course, aid)])


def export_canvas(course: Course, target: Path, aids: list[str] | None = None) -> Path:
    """A CSV for Canvas's gradebook import: students by SIS Login ID, one column per assignment."""
    aids = aids or course.assignments()
    table: dict[str, dict[str, str]] = {}
    maxima = {}
    for aid in aids:
        for r in results(course, aid):
            table.setdefault(r["student_id"], {})[aid] = score_cell(r)
            maxima[aid] = r["max_score"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "Student",
                "ID",
                "SIS User ID",
                "SIS Login ID",
                "Section",
                *[f"{a} ({maxima.get(a, 100):g})" for a in aids],
            ]
        )
        writer.writerow(["Points Possible", "", "", "", "", *[f"{maxima.get(a, 100):g}" for a in aids]])
        for sid in sorted(table):
            writer.writerow([sid, "", "", sid, "", *[table[sid].get(a, "") for a in aids]])
    return target


def export_nbgrader(course: Course, target: Path) -> Path:
    """nbgrader's own CSV export of the gradebook (every assignment, every student)."""
    run_nbgrader(course, "export", f"--to={target}", "--log-level=WARN")
    return target
