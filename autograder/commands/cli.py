"""``python -m autograder``: the command line. It parses arguments and calls the workflows
(:mod:`autograder.commands.workflows`) and the tools; it holds no grading logic of its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.commands import workflows
from autograder.course import Course
from autograder.settings import Limits, Settings, option


def add_grading_options(p: argparse.ArgumentParser) -> None:
    """The options of :class:`~autograder.settings.Settings`, each with the default and help its field gives
    (:meth:`Settings.from_args` reads them back), and ``--force``."""
    from autograder.runner.isolation import MODES, RUNNERS

    p.add_argument("--workers", type=int, **option(Settings, "workers"))
    p.add_argument("--timeout", type=float, **option(Limits, "timeout"))
    p.add_argument("--cell-timeout", type=float, **option(Limits, "cell_timeout"))
    p.add_argument("--memory", type=int, **option(Limits, "memory_mb"))
    p.add_argument("--isolation", choices=MODES, **option(Settings, "isolation"))
    p.add_argument("--runner", choices=RUNNERS, **option(Settings, "runner"))
    p.add_argument("--scheduler", **option(Settings, "scheduler"))
    p.add_argument("--force", action="store_true", help="grade again even if already graded")
    p.add_argument("--strict-canary", action="store_true", **option(Settings, "strict"))


def cmd_release(args) -> int:
    from autograder.intake.release import copied_files, release

    for path in release(args.course, args.aids or None):
        print(f"released {path.relative_to(args.course.root)}")
    for aid in args.aids or args.course.assignments():
        for path in copied_files(args.course, aid):
            print(f"copied {path.relative_to(args.course.root)}")
    return 0


def cmd_reference(args) -> int:
    from autograder.grading.reference import build_reference

    for aid in args.aids or args.course.assignments():
        ref = build_reference(args.course, aid, force=args.force)
        print(f"{aid}: {len(ref.cases)} cases in {len(ref.cells)} graded cells, {ref.max_score:g} points")
    return 0


def cmd_collect(args) -> int:
    from autograder.intake.collect import collect, read_roster, received_rules, summary

    rules = received_rules(args.received or [], args.exchange_timestamps)
    roster = read_roster(Path(args.roster)) if args.roster else None
    found = collect(args.course, args.aid, Path(args.path), args.pattern, roster=roster, rules=rules)
    print("\n".join(summary(found, args.aid)))
    return 1 if found.problems else 0


def cmd_grade(args) -> int:
    rows = workflows.grade_with_progress(args.course, args.aid, args, args.student or None)
    if rows:  # a line per submission was printed as each one finished: the totals, or the table if asked
        print(workflows.grade_table(rows) if args.table else workflows.totals_line(rows))
    return workflows.report_errors(rows)


def cmd_regrade(args) -> int:
    return workflows.regrade_with_report(args.course, args.aid, args)


def cmd_feedback(args) -> int:
    from autograder.outputs.feedback import write_feedback

    written = write_feedback(args.course, args.aid)
    print(f"wrote {len(written)} feedback page(s) under feedback/")
    return 0


def cmd_export(args) -> int:
    from autograder.outputs.export import awaiting_manual_grading, export_canvas, export_nbgrader

    target = Path(args.to)
    if args.format == "canvas":
        aids = args.assignment or []
        export_canvas(args.course, target, aids, canvas_ids(args.canvas_id or [], aids))
    else:
        export_nbgrader(args.course, target.resolve())
    print(f"wrote {target}")
    if args.format == "canvas":
        canvas_notes(args.course, aids)
    for aid, waiting in awaiting_manual_grading(args.course, args.assignment or None).items():
        print(
            f"note: {aid}: the written answers of {len(waiting)} student(s) await manual grading in formgrader "
            f"({', '.join(waiting[:5])}{', ...' if len(waiting) > 5 else ''}); their scores count only what is graded"
        )
    return 0


def canvas_ids(values: list[str], aids: list[str]) -> dict[str, str]:
    """``--canvas-id`` values, ``AID=ID`` or, with one assignment, ``ID``."""
    found = {}
    for value in values:
        aid, sep, number = value.rpartition("=")
        if not sep and len(aids) != 1:
            raise ValueError(f"--canvas-id {value}: say which assignment, as AID={value}")
        found[aid if sep else aids[0]] = number
    unknown = set(found) - set(aids)
    if unknown:
        raise ValueError(
            f"--canvas-id for {', '.join(sorted(unknown))}, which is not exported (--assignment)"
        )
    return found


def canvas_notes(course: Course, aids: list[str]) -> None:
    from autograder.outputs.export import points_possible, without_canvas_id

    for aid in aids:
        print(
            f"note: {aid}: scores out of {points_possible(course, aid):g} points; Canvas keeps its own points possible"
        )
    missing = without_canvas_id(course, aids)
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        print(
            f"note: {len(missing)} student(s) have no Canvas user id ({shown}): Canvas matches them only by name; "
            "collect from a Canvas download, or with a --roster that gives their Canvas user id"
        )


def cmd_deadline(args) -> int:
    from autograder.intake.late import format_utc, late_rule, rule_text, set_due_date

    due = set_due_date(args.course, args.aid, args.due)
    print(f"{args.aid} is due {format_utc(due)}; late work: {rule_text(late_rule(args.course))}")
    return 0


def cmd_extension(args) -> int:
    from autograder.intake.late import deadlines, format_utc, grant_extension

    extension = grant_extension(args.course, args.aid, args.student, hours=args.hours or 0, until=args.until)
    if extension is None:
        print(f"{args.student}: no extension on {args.aid}")
    else:
        due = deadlines(args.course, args.aid).due_for(args.student)
        print(f"{args.student}: {extension} more on {args.aid}" + (f", due {format_utc(due)}" if due else ""))
    return 0


def cmd_report(args) -> int:
    from autograder.outputs.report import page_path, write_report

    out = Path(args.out) if args.out else args.course.root / "reports"  # the course's, wherever we are
    text, png = write_report(args.course, args.aid, out)
    print(text)
    print(f"histogram: {png}")
    print(f"class report: {page_path(out, args.aid)}")
    return 0


def cmd_similarity(args) -> int:
    try:
        from autograder.outputs.similarity import THRESHOLD, write_similarity
    except ModuleNotFoundError as err:  # the grader's extra is not installed
        print(
            f"error: similarity needs {err.name}: `make setup`, or pip install 'dlcourse[grader]'",
            file=sys.stderr,
        )
        return 2

    threshold = THRESHOLD if args.threshold is None else args.threshold
    print(f"flagging pairs with a similarity of {threshold:g} or more (--threshold to change)")
    names = args.course.notebooks(args.aid)
    for nb in names if len(names) > 1 else [None]:  # an assignment of several notebooks: each on its own
        if nb is not None:
            print(f"== {nb}.ipynb")
        result, page, table = write_similarity(args.course, args.aid, threshold, archive=args.archive, nb=nb)
        for pair in result.flagged:
            print(f"! {pair.first} & {pair.second}: {pair.score:.2f}")
        for match in result.flagged_references:
            print(f"! {match.first}: {match.reaches()}")
        print(
            f"{len(result.flagged)} of {len(result.pairs)} pairs flagged; report: {page}; all pairs: {table}"
        )
    return 0


def cmd_gradescope(args) -> int:
    from autograder.commands.gradescope import build_package

    print(f"wrote {build_package(args.course, args.aid, Path(args.to))}")
    return 0


def cmd_gradescope_run(args) -> int:
    from autograder.commands.gradescope import run_on_gradescope

    data = run_on_gradescope(args.course, args.aid, Path(args.submission), Path(args.results))
    print(f"score {data['score']:g}: {data['output']}")
    return 0


def cmd_run(args) -> int:
    out = Path(args.out)
    rows = workflows.run(args.course, args.aid, Path(args.submissions), out, args)
    print(workflows.grade_table(rows) if args.table else workflows.totals_line(rows))
    print(f"grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}")
    return workflows.report_errors(rows)


def cmd_check(args) -> int:
    from autograder.intake.conventions import check

    return check(args.course, args.aids or args.course.assignments(), update=args.update)


def cmd_new(args) -> int:
    from autograder.intake.new import new

    try:
        print(new(args.course, args.aid))
    except (ValueError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_doctor(args) -> int:
    from autograder.commands.doctor import doctor

    return doctor(args.course, args, args.aids or None)


def cmd_demo(args) -> int:
    return workflows.demo(args.course, Path(args.out), args)


def cmd_samples(args) -> int:
    from autograder.intake.samples import write_samples

    for aid in args.aids or args.course.assignments():
        for path in write_samples(args.course, aid):
            print(f"wrote {path.relative_to(args.course.root)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    parser.add_argument("--course", type=Path, help="the course directory (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_intake(sub)
    _add_grading(sub)
    _add_returns(sub)
    _add_dates(sub)
    _add_reports(sub)
    _add_whole_runs(sub)
    _add_service(sub)
    _add_authoring(sub)
    return parser


def _add_intake(sub) -> None:
    """The commands release, reference, collect: the sources and the hand-ins in."""
    p = sub.add_parser("release", help="generate student releases from source/ into assignments/")
    p.add_argument("aids", nargs="*")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("reference", help="record the source solutions' results (done by grade when needed)")
    p.add_argument("aids", nargs="*")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_reference)

    p = sub.add_parser("collect", help="take a folder of notebooks or an LMS zip into submitted/")
    p.add_argument("aid")
    p.add_argument("path")
    from autograder.intake.collect import CANVAS_PATTERN

    p.add_argument(
        "--pattern",
        default=CANVAS_PATTERN,
        help="regex for the names an LMS writes at the top of its download: (?P<student>...) its name, "
        "(?P<user>...) its user id, (?P<late>...) its LATE mark (default: Canvas's)",
    )
    p.add_argument(
        "--roster", help="CSV lms_id,student_id,name: the ids to give (resolves what collect lists)"
    )
    p.add_argument(
        "--received",
        action="append",
        metavar="[STUDENT=]TIME",
        help="hand-in time of one student, or of everyone the LMS gives none (repeatable)",
    )
    p.add_argument(
        "--exchange-timestamps",
        action="store_true",
        help="trust nbgrader exchange timestamp.txt files beside the notebooks (written on students' machines)",
    )
    p.set_defaults(func=cmd_collect)


TABLE_HELP = (
    "end with a table of this run's results sorted by student (default: the totals; a line per submission is "
    "printed as each one finishes)"
)


def cmd_serve(args) -> int:
    from autograder.service.app import serve
    from autograder.service.config import load

    config = load(args.course.root, Path(args.config) if args.config else None)
    serve(args.course, config, Settings.from_args(args, args.course), args.host, args.port)
    return 0


def cmd_tokens(args) -> int:
    import csv
    import os

    from autograder.intake.collect import read_roster
    from autograder.service.config import load
    from autograder.service.store import Store

    store = Store(args.course.work / "service", load(args.course.root).database)  # the service's own
    if args.action == "revoke":
        for sid in args.student or []:
            print(f"{sid}: {store.tokens.revoke(sid)} token(s) revoked")
        return 0
    if args.action == "instructor":
        print(store.tokens.issue("instructor", role="instructor"))
        return 0
    if args.roster:  # the LMS's roster, as collect reads it: bound to the student id and the LMS user id
        pairs = sorted((sid, lms) for lms, sid in read_roster(Path(args.roster)).ids.items())
    else:  # the gradebook's students (nbgrader's, or those collect added), with the LMS ids collect bound
        pairs = gradebook_roster(args.course)
    if args.student:
        known = dict(pairs)
        pairs = [(sid, known.get(sid, "")) for sid in args.student]
    if not pairs:
        print(
            "error: no students: name them with --student, a --roster CSV, or import them into the gradebook"
        )
        return 2
    out = (
        open(os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", newline="")
        if args.out
        else sys.stdout
    )  # noqa: SIM115
    writer = csv.writer(out)
    writer.writerow(["student_id", "lms_id", "token"])
    for sid, lms in pairs:
        writer.writerow([sid, lms, store.tokens.issue(sid, lms_id=lms)])
    if args.out:
        out.close()
        print(
            f"{len(pairs)} token(s) written to {args.out} (readable by you only); each student's earlier one is revoked"
        )
    return 0


def gradebook_roster(course: Course) -> list[tuple[str, str]]:
    """(student id, LMS user id or "") of every student in the course's gradebook."""
    from autograder.gradebook import open_gradebook

    book = open_gradebook(course)
    if book is None:
        return []
    with book as gb:
        return sorted((s.id, s.lms_user_id or "") for s in gb.students)


def _add_service(sub) -> None:
    """The commands serve, tokens: the grader as a service students submit to from the notebook."""
    from autograder.service.config import describe

    p = sub.add_parser(
        "serve",
        help="run the grader as a service students submit to from the notebook (dlcourse.submit)",
        description="Serve the course over HTTP on the loopback interface (put a TLS proxy in front for a "
        "class). Its settings come from service.toml in the course's folder:\n" + describe(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="the interface to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    p.add_argument("--config", help="the settings file (default: service.toml in the course's folder)")
    add_grading_options(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("tokens", help="issue, revoke or make the service's tokens")
    p.add_argument("action", choices=["issue", "revoke", "instructor"])
    p.add_argument("--student", action="append", help="this student only (repeatable)")
    p.add_argument("--roster", help="a CSV of lms_id,student_id[,name], as collect reads it")
    p.add_argument(
        "--out", help="write the tokens to this CSV (made readable by you only) instead of printing"
    )
    p.set_defaults(func=cmd_tokens)


def _add_grading(sub) -> None:
    """The commands grade, regrade."""
    p = sub.add_parser("grade", help="grade the collected submissions, sandboxed and in parallel")
    p.add_argument("aid")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--table", action="store_true", help=TABLE_HELP)
    add_grading_options(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser(
        "regrade",
        help="after editing the source: decide every graded submission again, running code only where needed",
        description="Rebuild the reference from the edited source (and run the canary), then decide every "
        "graded submission again. An edit of hidden cases' tolerances, of points or of the solution "
        "(the expected values) re-decides each one from what its run captured, without running student "
        "code; any other edit of what a test cell runs (its inputs, a check added or removed, a public "
        "check, the set-up) runs those submissions again. Prints old and "
        "new score per student, records the new grading (the old one is kept in results/<AID>/history/) "
        "and rewrites the feedback of those whose score moved.",
    )
    p.add_argument("aid")
    add_grading_options(p)
    p.set_defaults(func=cmd_regrade)


def _add_returns(sub) -> None:
    """The commands feedback, export: what goes back to students and the LMS."""
    p = sub.add_parser("feedback", help="write an HTML feedback page per student")
    p.add_argument("aid")
    p.set_defaults(func=cmd_feedback)

    p = sub.add_parser("export", help="export grades as CSV")
    p.add_argument("--format", choices=["nbgrader", "canvas"], default="nbgrader")
    p.add_argument("--to", required=True)
    p.add_argument(
        "--assignment", action="append", help="the assignment to export (repeatable; canvas: required)"
    )
    p.add_argument(
        "--canvas-id",
        action="append",
        metavar="[AID=]ID",
        help="(canvas) the assignment's id in Canvas, from its address .../assignments/ID (repeatable)",
    )
    p.set_defaults(func=cmd_export)


def _add_dates(sub) -> None:
    """The commands deadline, extension: nbgrader's due dates in the gradebook."""
    p = sub.add_parser(
        "deadline",
        help="set an assignment's due date in the gradebook (late penalties: c.LateWork in nbgrader_config.py)",
        description="Set AID's due date in nbgrader's gradebook (as `nbgrader db assignment add AID --duedate=...` "
        "does). Penalties are worked out at export and feedback time from this date, each student's extension "
        "and the hand-in time collect recorded, with the rule set in nbgrader_config.py (c.LateWork...): "
        "changing any of them needs no regrading. Set it before `collect`, which needs it to apply an LMS's "
        "LATE marks.",
    )
    p.add_argument("aid")
    p.add_argument(
        "--due", required=True, help='e.g. "2026-12-01 23:59 UTC" or "2026-12-01 23:59 Europe/Berlin"'
    )
    p.set_defaults(func=cmd_deadline)

    p = sub.add_parser(
        "extension",
        help="give one student more time on an assignment (replaces an earlier extension)",
        description="Extend STUDENT's due date on AID (nbgrader's per-submission extension, in the gradebook). "
        "It replaces an earlier extension; --hours 0 removes it. The assignment must be released.",
    )
    p.add_argument("aid")
    p.add_argument("student")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--hours", type=float, help="hours after the assignment's due date (0: no extension)")
    when.add_argument("--until", help='the student\'s own due date, e.g. "2026-12-04 12:00 UTC"')
    p.set_defaults(func=cmd_extension)


def _add_reports(sub) -> None:
    """The commands report, similarity, gradescope: for the instructor."""
    p = sub.add_parser("report", help="pass rate per test and a score histogram")
    p.add_argument("aid")
    p.add_argument("--out", help="folder for the page (default: the course's reports/)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "similarity", help="pairs of submissions whose answers are unusually alike (HTML, CSV)"
    )
    p.add_argument("aid")
    p.add_argument("--threshold", type=float, help="flag pairs at or above this similarity (default 0.5)")
    p.add_argument(
        "--archive", type=Path, help="a folder of earlier terms' notebooks to compare every submission with"
    )
    p.set_defaults(func=cmd_similarity)

    p = sub.add_parser("gradescope", help="build a Gradescope autograder zip")
    p.add_argument("aid")
    p.add_argument("--to", required=True)
    p.set_defaults(func=cmd_gradescope)

    p = sub.add_parser("gradescope-run", help=argparse.SUPPRESS)
    p.add_argument("aid")
    p.add_argument("--submission", required=True)
    p.add_argument("--results", required=True)
    p.set_defaults(func=cmd_gradescope_run, workers=1)


def _add_whole_runs(sub) -> None:
    """The commands run, demo: everything in a throwaway workspace."""
    p = sub.add_parser("run", help="collect, grade, feedback and export in a throwaway workspace")
    p.add_argument("aid")
    p.add_argument("submissions")
    p.add_argument("--out", required=True)
    p.add_argument("--table", action="store_true", help=TABLE_HELP)
    add_grading_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="release everything and grade the bundled sample submissions")
    p.add_argument("--out", default="demo-output")
    add_grading_options(p)
    p.set_defaults(func=cmd_demo)


def _add_authoring(sub) -> None:
    """The commands check, new, doctor, samples: writing and checking assignments."""
    from autograder.intake.conventions import CONVENTIONS

    p = sub.add_parser(
        "check",
        help="check assignment sources against the conventions",
        description="The conventions of an assignment in this course's format:\n" + CONVENTIONS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("aids", nargs="*")
    p.add_argument("--update", action="store_true", help="then release each one and regenerate its samples")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("new", help="write a working starter for a new assignment in this course's format")
    p.add_argument("aid")
    p.set_defaults(func=cmd_new)

    p = sub.add_parser(
        "doctor", help="what isolation is in force, what is missing, and each assignment's canary"
    )
    p.add_argument("aids", nargs="*")
    add_grading_options(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("samples", help="regenerate the sample submissions in source/<AID>/samples/")
    p.add_argument("aids", nargs="*")
    p.set_defaults(func=cmd_samples)


NEEDS_LINUX = (
    "runs students' code, and its sandbox is made of Linux namespaces and resource limits, which this "
    "system ({platform}) does not have. Grade on Linux: a Linux machine or server, a Linux virtual machine, "
    "WSL 2 on Windows, or a Linux container with this repository inside (docker run --privileged, or "
    "with bubblewrap installed). Everything else (release, collect, feedback, export, report) works here."
)


def main(argv: list[str] | None = None) -> int:
    import warnings

    from nbformat.warnings import MissingIDFieldWarning

    # An nbgrader course's notebooks of format 4.4 or older have no cell ids; reading them says so once per
    # place that reads. The notebooks the grader writes get ids (autograder.intake.repair).
    warnings.filterwarnings("ignore", category=MissingIDFieldWarning)
    args = build_parser().parse_args(argv)
    if args.func in (cmd_grade, cmd_run, cmd_regrade, cmd_demo, cmd_reference, cmd_doctor) and (
        sys.platform != "linux"
    ):
        print(f"error: `{args.command}` " + NEEDS_LINUX.format(platform=sys.platform), file=sys.stderr)
        return 2
    args.course = Course(root=args.course.resolve()) if args.course else Course()
    try:
        return args.func(args)
    except (FileNotFoundError, KeyError, RuntimeError, ValueError) as err:
        # the isolation, reference and canary checks land here: nothing was graded or recorded
        print(f"error: {err}", file=sys.stderr)
        return 2
