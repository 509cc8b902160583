"""``python -m benchmarks.parts``: a notebook's cells grouped into its parts and timed from nbclient's stamps,
and RESULTS.md's section built from the recorded run."""

from __future__ import annotations

import json

import nbformat

from benchmarks import parts
from benchmarks.report import parts_section


def stamped(source: str, start: str, stop: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": stop}
    return cell


def test_cells_are_grouped_by_their_heading_and_timed_from_start_to_reply():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        stamped("import torch", "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:01.500000Z"),
        nbformat.v4.new_markdown_cell("# A7: the title, not a part\n\ntext"),
        nbformat.v4.new_markdown_cell("## Part 1: attention (10 points)\n\nwhat to write"),
        stamped("def attention(): ...", "2026-01-01T00:00:02Z", "2026-01-01T00:00:02.250000Z"),
        nbformat.v4.new_markdown_cell("### a sub-heading stays in its part"),
        stamped("check()", "2026-01-01T00:00:03Z", "2026-01-01T00:00:05Z"),
        nbformat.v4.new_code_cell("never ran"),
        nbformat.v4.new_markdown_cell("## Before you hand in"),
    ]
    assert parts.parts_of(nb) == [
        {"part": parts.SETUP, "code_cells": 1, "seconds": 1.5},
        {"part": "Part 1: attention (10 points)", "code_cells": 3, "seconds": 2.25},
        {"part": "Before you hand in", "code_cells": 0, "seconds": 0.0},
    ]


def test_the_report_shows_the_latest_run_of_each_assignment(tmp_path):
    def run(stamp: str, seconds: float) -> dict:
        entry = {"assignment": "A7", "parts": [{"part": "Part 1", "code_cells": 2, "seconds": seconds}],
                 "cells_seconds": seconds, "total_seconds": seconds + 1, "load_average_after": [1.0, 1.0, 1.0]}  # fmt: skip
        return {"started_utc": stamp, "machine": {"cores": 2}, "assignments": [entry]}

    for stamp, seconds in (("2026-01-01T000000Z", 9.0), ("2026-01-02T000000Z", 0.5)):
        (tmp_path / f"{parts.PREFIX}{stamp}.json").write_text(json.dumps(run(stamp, seconds)))
    text = "\n".join(parts_section(tmp_path))
    assert "### A7 (run `parts-2026-01-02T000000Z.json`)" in text
    assert "| Part 1 | 2 | 0.50 |" in text and "9.00" not in text
