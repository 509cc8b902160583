"""``python -m benchmarks.parts A7``: how long each part of an assignment's source solution takes to run.

The source runs top to bottom in a fresh kernel as the grader's reference run runs it (its checks' values
captured, so its hidden checks do not stop it), through the same routine as ``benchmarks.course``. nbclient
stamps every cell with when it started and when it replied; a part is a ``## `` heading of the notebook and
every cell up to the next one (the cells before the first heading are the set-up). The run is recorded as
``results/parts-<UTC timestamp>.json`` and RESULTS.md is rebuilt; its section shows the latest run of each
assignment.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from autograder.api import ROOT, execute_notebook
from benchmarks.machine import describe_machine, load_average
from dlcourse.grading import CAPTURE_ENV

HERE = Path(__file__).resolve().parent
PREFIX = "parts-"  # results/parts-<timestamp>.json
SETUP = "set-up (before the first part)"
CELL_TIMEOUT = 300  # generous: a slow part is measured and reported, not cut short


def cell_seconds(cell) -> float:
    """Seconds from the kernel starting the cell to its reply, from nbclient's timing metadata (0 for a
    cell that did not run)."""
    stamps = cell.get("metadata", {}).get("execution", {})
    start = stamps.get("iopub.execute_input") or stamps.get("iopub.status.busy")
    stop = stamps.get("shell.execute_reply")
    if not (start and stop):
        return 0.0
    return (
        datetime.fromisoformat(stop.replace("Z", "+00:00"))
        - datetime.fromisoformat(start.replace("Z", "+00:00"))
    ).total_seconds()


def parts_of(nb) -> list[dict]:
    """``[{"part", "code_cells", "seconds"}]`` in the notebook's order: one per ``## `` heading."""
    parts = [{"part": SETUP, "code_cells": 0, "seconds": 0.0}]
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            parts.append({"part": cell.source.splitlines()[0][3:].strip(), "code_cells": 0, "seconds": 0.0})
        elif cell.cell_type == "code":
            parts[-1]["code_cells"] += 1
            parts[-1]["seconds"] += cell_seconds(cell)
    for part in parts:
        part["seconds"] = round(part["seconds"], 3)
    return [p for p in parts if p["code_cells"] or p["part"] != SETUP]


def time_parts(aid: str) -> dict:
    """Run ``source/<aid>/<aid>.ipynb`` once; its total wall time (kernel start included) and its parts."""
    path = ROOT / "source" / aid / f"{aid}.ipynb"
    capture = tempfile.mkdtemp(prefix="parts-capture-")
    try:
        run = execute_notebook(path, timeout=CELL_TIMEOUT, env={CAPTURE_ENV: capture})
    finally:
        shutil.rmtree(capture, ignore_errors=True)
    parts = parts_of(run.notebook)
    return {
        "assignment": aid,
        "notebook": str(path.relative_to(ROOT)),
        "total_seconds": round(run.seconds, 2),
        "cells_seconds": round(sum(p["seconds"] for p in parts), 2),
        "parts": parts,
        "load_average_after": load_average(),
    }


def record(run: dict, results: Path) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{PREFIX}{run['started_utc'].replace(':', '')}.json"
    path.write_text(json.dumps(run, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("aids", nargs="+", help="assignments, e.g. A7")
    parser.add_argument("--out", type=Path, default=HERE, help="where results/ and RESULTS.md go")
    args = parser.parse_args(argv)
    from benchmarks.report import write_report
    from dlcourse._lazy import quiet

    quiet()
    started = time.time()
    run = {
        "schema": 1,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(["python -m benchmarks.parts", *(argv if argv is not None else sys.argv[1:])]),
        "machine": describe_machine(),
        "assignments": [time_parts(aid) for aid in args.aids],
    }
    run["seconds"] = round(time.time() - started, 1)
    run["load_average_end"] = load_average()
    path = record(run, args.out / "results")
    for entry in run["assignments"]:
        print(f"{entry['assignment']}: {entry['total_seconds']:.1f} s in all, kernel start included")
        for part in entry["parts"]:
            print(f"  {part['seconds']:7.2f} s  {part['part']}")
    print(f"recorded {path}; wrote {write_report(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
