"""Lecture 15's cells that need an earlier section say which to run first (a RuntimeError, not a NameError),
when a student runs them after the imports only."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

LECTURE = Path(__file__).resolve().parents[1] / "lectures" / "15_attention.ipynb"


def code_cell(marker: str) -> str:
    cells = nbformat.read(str(LECTURE), as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and marker in c.source)


@pytest.mark.parametrize(
    ("marker", "section"),
    [("import keras", "section 4"), ("def prefill", "section 9"), ("torch.compile(block)", "section 9")],
    ids=["keras-needs-the-heads", "kv-cache-needs-the-model", "compile-needs-the-model"],
)
def test_cell_run_too_early_says_what_to_run_first(marker, section):
    namespace: dict = {}
    exec(compile(code_cell("from dlcourse.attention import"), "imports", "exec"), namespace)
    with pytest.raises(RuntimeError, match=rf"Run {section}'s cells first"):
        exec(compile(code_cell(marker), marker, "exec"), namespace)
