"""The instructor's workflows, each a fixed sequence of the stages:

    grade AID      grade (prove, then the stages of :data:`autograder.grading.pipeline.STAGES`; record)
    run AID DIR    copy the course -> release -> collect DIR -> grade -> results CSV -> feedback
    demo           release all -> for each assignment: ``run`` on its samples -> one grade table
    gradescope     release -> one submission -> grade -> results.json  (:mod:`autograder.commands.gradescope`)

and what they print: one progress line per submission, a grade table, the grader's errors at the end
(never a score). The command line (:mod:`autograder.commands.cli`) only parses arguments and calls these.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from autograder.course import Course
from autograder.result import Result, shorten
from autograder.runner.isolation import resolved
from autograder.settings import Settings


def settings_from(args, course: Course | None = None) -> Settings:
    """The settings the command line asked for (:meth:`Settings.from_args`), the isolation resolved."""
    return resolved(Settings.from_args(args, course))


def status_line(result: Result) -> str:
    return (
        f"{result.symbol} {result.student_id:<20} {result.score_text():>11} {result.status:<10} "
        f"{shorten(result.reason, 90)}"
    )


def grade_table(rows: list[Result]) -> str:
    lines = [f"{'student':<20} {'score':>11}  {'status':<10} reason", "-" * 90]
    lines += [
        f"{r.student_id:<20} {r.score_text():>11}  {r.status:<10} {shorten(r.reason, 70)}"
        for r in sorted(rows, key=lambda r: r.student_id)
    ]
    return "\n".join(lines)


def totals_line(rows: list[Result]) -> str:
    """What the progress lines (one per submission) do not say: how many of each status, the mean score."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    text = f"{len(rows)} submission(s) graded: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    scored = [r for r in rows if not r.is_error]
    if scored:
        mean = sum(r.score for r in scored) / len(scored)
        text += f"; mean score {mean:.4g} of {max(r.max_score for r in scored):g}"
    return text


def errors_text(rows: list[Result]) -> str:
    """The submissions the grader failed on (never scored): listed at the end, with what to do."""
    errors = [r for r in rows if r.is_error]
    if not errors:
        return ""
    lines = [
        f"{len(errors)} submission(s) NOT graded because of a grader error (no score recorded; run again):"
    ]
    lines += [f"  {r.student_id}: {shorten(r.reason, 150)}" for r in errors]
    return "\n".join(lines)


def report_errors(rows: list[Result]) -> int:
    """Exit status of a grading command: 1 while any submission is left with a grader error."""
    text = errors_text(rows)
    if text:
        print(text, file=sys.stderr)
    return 1 if text else 0


def grade_with_progress(course: Course, aid: str, args, students: list[str] | None = None) -> list[Result]:
    """``grade``: every submission of ``aid`` not graded yet, with a progress bar and a line per result."""
    from tqdm import tqdm

    from autograder.grading.batch import Listeners, grade
    from autograder.intake.handin import submissions

    total = len(submissions(course, aid, students))
    settings = settings_from(args, course)
    print(f"isolation: {settings.isolation.describe()}")
    with tqdm(total=total, desc=f"grading {aid}", unit="nb", file=sys.stderr, disable=None) as bar:

        def show(result: Result) -> None:
            bar.write(status_line(result))
            bar.update(1)

        listeners = Listeners(
            on_result=show, on_notice=lambda t: bar.write(f"note: {t}"), on_progress=bar.write
        )
        rows = grade(course, aid, settings, students=students, force=args.force, listeners=listeners)
        bar.update(total - bar.n)
    skipped = total - len(rows)
    if skipped:
        print(f"{skipped} submission(s) already graded and unchanged: skipped (use --force to grade again)")
    return rows


def regrade_with_report(course: Course, aid: str, args) -> int:
    """``regrade``: decide every stored submission again after a source edit; one line per student."""
    from autograder.commands.regrade import regrade

    settings = settings_from(args, course)
    print(f"isolation: {settings.isolation.describe()}")
    print(f"{'student':<20} {'old':>11}    {'new':<11} how [test cells whose points changed]")
    report = regrade(
        course,
        aid,
        settings,
        on_change=lambda c: print(c.line()),
        say=lambda line: print(line, flush=True),  # the proof's progress
    )
    for sid, why in sorted(report.skipped.items()):
        print(f"  {sid}: not regraded: {why}")
    moved = sum(c.moved for c in report.changes)
    print(
        f"{len(report.decided_again)} decided again from their kept runs, {len(report.run_again)} run again, "
        f"{moved} score(s) moved (their feedback pages were written again); {report.seconds:.1f} s. "
        f"Old results: {course.results_dir(aid) / 'history'}"
    )
    return report_errors([c.new for c in report.changes])


def throwaway_course(main: Course, aids: list[str]) -> Course:
    """A temporary copy of ``main`` with ``aids``, released there (its own gradebook, ``main``'s cache)."""
    from autograder.intake.release import release

    course = main.copy(aids)
    release(course, aids)
    return course


def run(course: Course, aid: str, submissions: Path, out: Path, args) -> list[Result]:
    """Collect, grade, feedback and export in a throwaway workspace; keep only ``out``: ``grades.csv``,
    ``feedback/<student>.html`` and ``results/<student>.json``."""
    from autograder.intake.collect import collect
    from autograder.outputs.export import write_results_csv
    from autograder.outputs.feedback import write_feedback

    work = throwaway_course(course, [aid])
    try:
        found = collect(work, aid, submissions)
        for note in found.notes:
            print(f"note: {note}")
        rows = grade_with_progress(work, aid, args)
        out.mkdir(parents=True, exist_ok=True)
        write_results_csv(work, aid, out / "grades.csv")
        write_feedback(work, aid, out / "feedback")
        shutil.copytree(work.results_dir(aid), out / "results", dirs_exist_ok=True)
    finally:
        shutil.rmtree(work.root, ignore_errors=True)
    return rows


def demo(course: Course, out: Path, args) -> int:
    """``make demo``: release every assignment, then ``run`` each one on its bundled samples
    (``source/<AID>/samples/``); one grade table for the course, ``<out>/grades.csv`` and
    ``<out>/<AID>/feedback/<student>.html``. Exit 1 when an assignment was refused or a grader error is left."""
    from autograder.intake.release import release
    from autograder.outputs.export import write_csv
    from autograder.outputs.gradesheet import total
    from dlcourse.runtime import banner_text

    print(banner_text())
    started = time.monotonic()
    released = release(course)
    print(
        f"released {len(released)} assignments into assignments/: {', '.join(p.parent.name for p in released)}"
    )
    print(f"isolation: {settings_from(args, course).isolation.describe()}\n")
    graded: list[Result] = []
    refused = []
    for aid in course.assignments():
        samples = course.samples(aid)
        if not samples.is_dir():
            print(f"{aid}: no sample submissions in {samples.relative_to(course.root)}; skipped")
            continue
        notebooks = sorted(
            samples.glob("*.ipynb")
        )  # the samples; wrong/ beside them is the test suite's corpus
        print(f"== {aid}: grading {len(notebooks)} sample submissions")
        try:
            with tempfile.TemporaryDirectory(prefix=f"{aid}-samples-") as folder:
                for path in notebooks:
                    shutil.copy(path, Path(folder) / path.name)
                graded += run(course, aid, Path(folder), out / aid, args)
        except RuntimeError as err:  # the isolation, reference or canary check refused: nothing recorded
            print(f"error: {err}\n", file=sys.stderr)
            refused.append(aid)
            continue
        print()
    shown = [replace(r, student_id=f"{r.assignment}/{r.student_id}") for r in graded]
    print(grade_table(shown))
    header = ["assignment", "student_id", "score", "max_score", "status", "reason"]
    rows = [
        [r.assignment, r.student_id, total(r).exported_score(), f"{total(r).max_score:g}", r.status, r.reason]
        for r in graded
    ]
    write_csv(out / "grades.csv", header, rows)
    print(
        f"\ngrades: {out / 'grades.csv'}; feedback: {out}/<AID>/feedback/; {time.monotonic() - started:.0f} s in all"
    )
    errors = errors_text(shown)
    if errors:
        print(errors, file=sys.stderr)
    if refused:
        print(f"NOT graded (the grader failed its own check): {', '.join(refused)}", file=sys.stderr)
    return 1 if refused or errors else 0
