"""Every lecture executes top to bottom in a fresh kernel, on the CPU, offline, and each of its hidden solutions
passes its own self-check. Its time limit (its metadata's ``dlcourse.time_limit_s``) is checked by ``make
bench`` (:mod:`benchmarks.course`), where the machine's load is recorded beside it. Here the kernel's own CPU
time has to stay within :data:`benchmarks.course.HANG_FACTOR` times the limit, and each cell's wall time is cut off
there: a loaded machine stretches the wall time but not the CPU time a lecture needs (the full suite once saw
lecture 6 take 372 s of wall time, 15 s alone), so load cannot fail the suite, and a hang or a runaway cell
still does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.intake.notebooks import execute_notebook
from benchmarks.course import HANG_FACTOR, time_limit
from tests.fixtures.lectures import is_hidden_solution

ROOT = Path(__file__).resolve().parents[2]
LECTURES = sorted((ROOT / "lectures").glob("[0-9][0-9]_*.ipynb"))


def lecture_number(path: Path) -> int:
    return int(path.name[:2])


# The last first: the later lectures run longest, and pytest-xdist's workers steal tests from the end of each
# other's queue, so the ones left to share at the end of a run are the short ones
LAST_FIRST = LECTURES[::-1]


@pytest.mark.slow
@pytest.mark.parametrize("path", LAST_FIRST, ids=[p.stem for p in LAST_FIRST])
def test_lecture_executes_and_its_solutions_pass(path, tmp_path):
    limit = time_limit(path) * HANG_FACTOR  # (the limit itself: make bench)
    run = execute_notebook(path, timeout=limit, workdir=tmp_path)
    assert run.cpu_seconds <= limit, (
        f"{path.name} used {run.cpu_seconds:.0f} s of CPU ({run.seconds:.0f} s of wall time), over {HANG_FACTOR} times"
        " its limit"
    )
    errors = [
        out
        for cell in run.notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    # dlcourse.check never raises, so a hidden solution failing its own exercise would otherwise pass unseen.
    solutions = [cell for cell in run.notebook.cells if is_hidden_solution(cell) and "check(" in cell.source]
    assert solutions, f"{path.name} has no hidden solution that runs its self-check"
    for cell in solutions:
        printed = "".join(
            out.get("text", "") for out in cell.get("outputs", []) if out.get("name") == "stdout"
        )
        assert "all passed." in printed, (
            f"{path.name}: a hidden solution fails its own check:\n{printed[-1500:]}"
        )
    # Warnings that a lecture teaches are shown on purpose and named in its metadata; no others leak out.
    taught = run.notebook.metadata.get("dlcourse", {}).get("taught_warnings", [])
    for cell in run.notebook.cells:
        for out in cell.get("outputs", []):
            if out.get("name") == "stderr":
                for warning in re.findall(r"(\w+Warning): (.*)", out.get("text", "")):
                    assert any(t in " ".join(warning) for t in taught), f"{path.name} leaked {warning}"


def test_lectures_are_numbered_in_sequence():
    numbers = [lecture_number(p) for p in LECTURES]
    assert numbers == list(range(1, len(numbers) + 1))
