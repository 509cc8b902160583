"""``python -m benchmarks``: measure, record the run as ``results/<UTC timestamp>.json``, keep the test suite's
latest slowest-tests table (``results/suite-<UTC timestamp>.json``), rebuild RESULTS.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from dlcourse._lazy import quiet

HERE = Path(__file__).resolve().parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test: 4 A1 submissions, one lecture, tiny sizes"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE, help="where results/ and RESULTS.md go (default: benchmarks/)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["grading", "course", "claims", "service", "mutants"],
        help="run only this section (repeatable)",
    )
    parser.add_argument("--workers", type=int, default=None, help="autograder workers (default: the cores)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="keep the test suite's latest table and rebuild RESULTS.md from the recorded runs; measure nothing",
    )
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> dict:
    from benchmarks.claims import run_claims
    from benchmarks.course import run_course
    from benchmarks.grading import run_grading
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.service import run_service

    entry = {
        "grading": lambda: run_grading(quick=args.quick, workers=args.workers),
        "course": lambda: run_course(quick=args.quick),
        "claims": lambda: run_claims(quick=args.quick),
        "service": lambda: run_service(quick=args.quick),
    }
    started = time.time()
    run = {
        "schema": 1,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "quick": args.quick,
        "command": " ".join(["python -m benchmarks", *sys.argv[1:]]),
        "machine": describe_machine(),
        "sections": {},
    }
    for name in [n for n in args.only or list(entry) if n in entry]:
        try:
            run["sections"][name] = entry[name]()
        except Exception as err:  # record the failure and go on: the other sections still count
            run["sections"][name] = {
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()[-4000:],
            }
            print(f"{name} failed: {type(err).__name__}: {err}", file=sys.stderr)
    run["seconds"] = round(time.time() - started, 1)
    run["load_average_end"] = load_average()
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    quiet()
    from benchmarks.report import write_report
    from benchmarks.suite import keep_latest

    failed = False
    # the mutation score (benchmarks.mutants): full runs only, about 5 minutes an assignment
    mutants = not args.quick and (not args.only or "mutants" in args.only)
    if not args.report_only and (not args.only or set(args.only) - {"mutants"}):
        run = measure(args)
        results = args.out / "results"
        results.mkdir(parents=True, exist_ok=True)
        path = results / (run["started_utc"].replace(":", "") + ".json")
        path.write_text(json.dumps(run, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        print(f"recorded {path} ({run['seconds']:.0f} s)")
        failed = any("error" in section for section in run["sections"].values())
    if not args.report_only and mutants:
        from benchmarks.mutants import run_and_record

        path = run_and_record(args.out, workers=1)  # results/mutants-<timestamp>.json
        failed = failed or any(
            "error" in a for a in json.loads(path.read_text(encoding="utf-8"))["assignments"]
        )
    kept = keep_latest(args.out / "results")  # the table a test session wrote, if newer than the last kept
    if kept:
        print(f"kept the test suite's table as {kept}")
    print(f"wrote {write_report(args.out)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
