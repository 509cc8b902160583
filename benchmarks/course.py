"""Course run time: every lecture and every source assignment, top to bottom in a fresh kernel.

Each notebook runs as the test suite runs it (``autograder.intake.notebooks.execute_notebook``, in a temporary
folder), and its wall time, kernel start included, is set against its limit on a 2-core CPU: a lecture's is
its own metadata's (``dlcourse.time_limit_s``), an assignment's 120 s. This is where the limits are checked:
the test suite runs every lecture too, but a suite's time depends on what else the machine does (at load 6-9,
lecture 6 took 122 s against its 90), so there a run only has to stay within :data:`HANG_FACTOR` times its limit in CPU time.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from autograder.api import ROOT, execute_notebook
from benchmarks.machine import load_average
from dlcourse.grading import CAPTURE_ENV

ASSIGNMENT_LIMIT = 120.0
CELL_TIMEOUT = 300  # generous: a slow notebook is measured and reported, not cut short
HANG_FACTOR = 4  # the test suite's cut-off: a run this many times over its limit hangs, it is not slow


def time_limit(path: Path) -> float:
    """Seconds a lecture may take on a 2-core CPU, from its metadata (``dlcourse.time_limit_s``)."""
    import nbformat

    limit = nbformat.read(str(path), as_version=4).metadata.get("dlcourse", {}).get("time_limit_s")
    assert limit, f"{path.name}: set metadata.dlcourse.time_limit_s (seconds on a 2-core CPU)"
    return float(limit)


def limit_for(path: Path) -> float:
    """A lecture's own limit (its metadata); an assignment's: 120 s."""
    return ASSIGNMENT_LIMIT if path.parent.parent.name == "source" else time_limit(path)


def notebooks(quick: bool) -> list[Path]:
    lectures = sorted((ROOT / "lectures").glob("[0-9][0-9]_*.ipynb"))
    assignments = sorted((ROOT / "source").glob("*/*.ipynb"))
    assignments = [p for p in assignments if p.stem == p.parent.name]
    return lectures[:1] if quick else lectures + assignments


def time_notebook(path: Path) -> dict:
    """Run one notebook. A source assignment runs as the grader's reference run runs it, with its checks'
    results captured (without that, its hidden checks stop the run: only the grader has their answers)."""
    limit = limit_for(path)
    entry = {"notebook": str(path.relative_to(ROOT)), "limit_seconds": limit, "error": None}
    env = (
        {CAPTURE_ENV: tempfile.mkdtemp(prefix="bench-capture-")}
        if path.parent.parent.name == "source"
        else None
    )
    start = time.perf_counter()
    try:
        execute_notebook(path, timeout=CELL_TIMEOUT, env=env)
    except Exception as err:  # an error ends the run; the time until then is still reported
        entry["error"] = (
            f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300] if str(err).strip() else ''}"
        )
    seconds = time.perf_counter() - start
    if env:
        shutil.rmtree(env[CAPTURE_ENV], ignore_errors=True)
    entry.update(
        seconds=round(seconds, 2),
        within_limit=entry["error"] is None and seconds <= limit,
        load_average_after=load_average(),
    )
    return entry


def run_course(quick: bool = False) -> dict:
    """The course section of a run: one entry per notebook, in order."""
    entries = []
    for path in notebooks(quick):
        print(f"[{time.strftime('%H:%M:%S')}] course: {path.relative_to(ROOT)}", flush=True)
        entries.append(time_notebook(path))
    notes = ["--quick: the first lecture only"] if quick else []
    lecture_numbers = {int(p.name[:2]) for p in (ROOT / "lectures").glob("[0-9][0-9]_*.ipynb")}
    missing = sorted(set(range(1, 12)) - lecture_numbers)
    if missing:
        notes.append(f"lectures not in lectures/ at the time of the run: {', '.join(map(str, missing))}")
    return {
        "notebooks": entries,
        "all_within_limits": all(e["within_limit"] for e in entries),
        "total_seconds": round(sum(e["seconds"] for e in entries), 2),
        "notes": notes,
    }
