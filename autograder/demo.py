"""``make demo``: release every assignment and grade the bundled sample submissions, sandboxed.

For each assignment it runs the whole pipeline (collect, grade, feedback, export) on the samples in
``source/<AID>/samples/`` in a throwaway workspace, then prints one grade table for the course and
writes ``<out>/grades.csv`` and ``<out>/<AID>/feedback/<student>.html``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from autograder.export import result_row, write_csv
from autograder.release import release
from dlcourse.runtime import banner_text


def demo(out: Path, args) -> int:
    from autograder.cli import errors_text, grade_table, isolation_from, run_pipeline

    course = args.course
    print(banner_text())
    started = time.monotonic()
    released = release(course)
    print(
        f"released {len(released)} assignments into assignments/: {', '.join(p.parent.name for p in released)}"
    )
    print(f"isolation: {isolation_from(args).describe()}\n")
    graded_rows: list[tuple[str, dict]] = []  # (assignment, result)
    refused = []
    for aid in course.assignments():
        samples = course.samples(aid)
        if not samples.is_dir():
            print(f"{aid}: no sample submissions in {samples.relative_to(course.root)}; skipped")
            continue
        print(f"== {aid}: grading {len(list(samples.glob('*.ipynb')))} sample submissions")
        try:
            graded = run_pipeline(aid, samples, out / aid, args)
        except RuntimeError as err:  # the isolation, reference or canary check refused: nothing recorded
            print(f"error: {err}\n", file=sys.stderr)
            refused.append(aid)
            continue
        graded_rows += [(aid, row) for row in graded]
        print()
    rows = [{**row, "student_id": f"{aid}/{row['student_id']}"} for aid, row in graded_rows]
    print(grade_table(rows))
    header = ["assignment", "student_id", "score", "max_score", "status", "reason"]
    write_csv(out / "grades.csv", header, [[aid, *result_row(row)[:5]] for aid, row in graded_rows])
    print(
        f"\ngrades: {out / 'grades.csv'}; feedback: {out}/<AID>/feedback/; {time.monotonic() - started:.0f} s in all"
    )
    errors = errors_text(rows)
    if errors:
        print(errors, file=sys.stderr)
    if refused:
        print(f"NOT graded (the grader failed its own check): {', '.join(refused)}", file=sys.stderr)
    return 1 if refused or errors else 0
