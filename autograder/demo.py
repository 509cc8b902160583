"""``make demo``: release every assignment and grade the bundled sample submissions, sandboxed.

For each assignment it runs the whole pipeline (collect, grade, feedback, export) on the samples in
``autograder/samples/<AID>/`` in a throwaway workspace, then prints one grade table for the course and
writes ``<out>/grades.csv`` and ``<out>/<AID>/feedback/<student>.html``.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from autograder.release import release
from autograder.sandbox import isolation_description
from dlcourse.runtime import banner_text


def demo(out: Path, args) -> int:
    from autograder.cli import grade_table, run_pipeline

    course = args.course
    print(banner_text())
    started = time.monotonic()
    released = release(course)
    print(
        f"released {len(released)} assignments into assignments/: {', '.join(p.parent.name for p in released)}"
    )
    print(f"isolation: {isolation_description(not args.no_sandbox)}\n")
    rows = []
    for aid in course.assignments():
        samples = course.root / "autograder" / "samples" / aid
        if not samples.is_dir():
            print(f"{aid}: no sample submissions in {samples.relative_to(course.root)}; skipped")
            continue
        print(f"== {aid}: grading {len(list(samples.glob('*.ipynb')))} sample submissions")
        for row in run_pipeline(aid, samples, out / aid, args):
            rows.append({**row, "student_id": f"{aid}/{row['student_id']}"})
        print()
    print(grade_table(rows))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["assignment", "student_id", "score", "max_score", "status", "reason"])
        for r in rows:
            aid, sid = r["student_id"].split("/", 1)
            writer.writerow([aid, sid, f"{r['score']:g}", f"{r['max_score']:g}", r["status"], r["reason"]])
    print(
        f"\ngrades: {out / 'grades.csv'}; feedback: {out}/<AID>/feedback/; {time.monotonic() - started:.0f} s in all"
    )
    return 0
