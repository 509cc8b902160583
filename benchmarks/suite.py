"""The test suite's time, kept beside RESULTS.md.

A test session of 50 or more tests writes its slowest-tests table to ``.grading/suite/durations.json``
(``tests/suite_durations.py``); every ``python -m benchmarks`` copies a table newer than the last kept one to
``results/suite-<UTC timestamp of the session's end>.json``, and RESULTS.md shows the latest kept table. Only a
table of the whole suite is kept (``"whole_suite": true``: no paths, ``-k`` or ``--lf`` chose part of it; such a session
writes ``durations-part.json`` instead, never over the whole suite's table), so that a
session of one file's 200 tests never stands for the suite's time.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

PREFIX = "suite-"  # results/suite-<timestamp>.json
IN_WORK = (
    Path("suite") / "durations.json"
)  # a test session's table, in the grader's folder (tests/conftest.py)
BUDGET_SECONDS = 12 * 60  # make test's pytest time on a 2-core machine
BUDGET_CORES = 2
SLOWEST = 25
FILES = 15


def stamp(table: dict) -> str:
    """``2026-11-27T07:00:46Z`` -> ``2026-11-27T070046Z``, as the other result files are named."""
    name = table["finished_utc"].replace(":", "")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d{6}Z", name):
        raise ValueError(f"not a UTC time: {table['finished_utc']!r}")
    return name


def written() -> Path:
    """Where this repository's test sessions write their table: in the grader's folder of the course here."""
    from autograder.api import ROOT, Course

    return Course(root=ROOT).work / IN_WORK


def keep_latest(results: Path, table: Path | None = None) -> Path | None:
    """Copy ``table`` (default: ``written()``) into ``results`` if it is newer than the latest kept one; the
    kept path, or None."""
    table = table or written()
    try:
        text = table.read_text(encoding="utf-8")
        table_data = json.loads(text)
        name = PREFIX + stamp(table_data) + ".json"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none yet, or not a table
        return None
    if table_data.get("whole_suite") is not True:  # part of the suite: not its time
        return None
    kept = sorted(p.name for p in results.glob(PREFIX + "*.json"))
    if kept and kept[-1] >= name:
        return None
    results.mkdir(parents=True, exist_ok=True)
    path = results / name
    path.write_text(text, encoding="utf-8")
    return path


def latest(results: Path) -> tuple[str, dict] | None:
    for path in sorted(results.glob(PREFIX + "*.json"), reverse=True):
        try:
            return path.name, json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return None


def md_table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table, as ``benchmarks.report.table`` writes one (that module imports this one)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""]


def code(text: str) -> str:
    """A test id as code in a table cell: a parameter's newline or ``|`` would end the row or the cell."""
    return "`" + text.replace("\n", "\\n").replace("|", "\\|").replace("`", "'") + "`"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def suite_section(results: Path) -> list[str]:
    """RESULTS.md's section from the latest kept table; nothing when none is kept."""
    chosen = latest(results)
    if not chosen:
        return []
    name, run = chosen
    tests = run.get("tests", {})
    wall = run.get("wall_seconds", 0.0)
    within = "within" if wall <= BUDGET_SECONDS else "**over**"
    args = " ".join(run.get("args") or []) or "(none)"
    marker = f"; marker expression `{run['markexpr']}`" if run.get("markexpr") else ""
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(run.get("counts", {}).items()))
    out = [f"## The test suite's time (run `{name}`)", "",
           f"The latest test session's table that `make bench` kept: {len(tests)} tests, each one's setup, call and "
           f"teardown seconds (any session of 50 tests or more writes its table, `tests/suite_durations.py`; "
           f"`make test` runs the whole suite on {BUDGET_CORES} workers). Budget: `make test`'s pytest time at most "
           f"{minutes(BUDGET_SECONDS)} on a {BUDGET_CORES}-core machine.", "",
           f"Wall time {minutes(wall)}: {within} the budget. Arguments `{args}`{marker}; "
           f"{run.get('xdist_workers') or 'no'} xdist workers; {run.get('cpu_count')} cores; load average "
           f"{run.get('load_average_start')} at the start, {run.get('load_average_end')} at the end (1, 5, 15 min). "
           f"Tests: {counts}; pytest's exit status {run.get('exit_status')}.", ""]  # fmt: skip
    if run.get("note"):  # what the person who kept the table by hand said of it
        out += [f"Note: {run['note']}", ""]
    if run.get("cpu_count") != BUDGET_CORES:
        out += [f"(Measured on {run.get('cpu_count')} cores, not the budget's {BUDGET_CORES}.)", ""]
    slowest = sorted(tests.items(), key=lambda item: -item[1]["seconds"])[:SLOWEST]
    out += [f"### The {len(slowest)} slowest tests (setup, call and teardown)", ""]
    out += md_table(["seconds", "test", "outcome"], [[f"{t['seconds']:.2f}", code(nodeid), t["outcome"]]
                                                     for nodeid, t in slowest])  # fmt: skip
    per_file: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for nodeid, t in tests.items():
        per_file[nodeid.split("::")[0]] += t["seconds"]
        count[nodeid.split("::")[0]] += 1
    files = sorted(per_file.items(), key=lambda item: -item[1])[:FILES]
    total = sum(per_file.values())
    out += [f"### Seconds by test file (the {len(files)} largest of {len(per_file)}; {total:.0f} s in all, "
            f"summed over the workers)", ""]  # fmt: skip
    out += md_table(["seconds", "file", "tests"], [[f"{s:.1f}", code(f), count[f]] for f, s in files])
    return out
