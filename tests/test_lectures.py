"""Every lecture executes top to bottom in a fresh kernel, on the CPU, offline, within the time limit its
metadata states, and each of its hidden solutions passes its own self-check."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograder.intake.notebooks import execute_notebook

ROOT = Path(__file__).resolve().parents[1]
LECTURES = sorted((ROOT / "lectures").glob("[0-9][0-9]_*.ipynb"))


def lecture_number(path: Path) -> int:
    return int(path.name[:2])


def time_limit(path: Path) -> float:
    """Seconds the lecture may take on a 2-core CPU, from its metadata (``dlcourse.time_limit_s``)."""
    limit = nbformat.read(str(path), as_version=4).metadata.get("dlcourse", {}).get("time_limit_s")
    assert limit, f"{path.name}: set metadata.dlcourse.time_limit_s (seconds on a 2-core CPU)"
    return float(limit)


def is_hidden_solution(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("jupyter", {}).get("source_hidden"))


@pytest.mark.slow
@pytest.mark.parametrize("path", LECTURES, ids=[p.stem for p in LECTURES])
def test_lecture_executes_within_limit(path, tmp_path):
    limit = time_limit(path)
    run = execute_notebook(path, timeout=limit, workdir=tmp_path)
    assert run.seconds <= limit, f"{path.name} took {run.seconds:.0f} s"
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
