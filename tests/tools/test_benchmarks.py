"""The benchmarks are not tests: no measured figure is checked here. What is checked is that
``python -m benchmarks --quick`` runs and records a well-formed run, and that RESULTS.md is exactly what
the recorded runs give (so every figure in it comes from a recorded run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from benchmarks.grading import TARGETS, per_submission
from benchmarks.report import worker_memory, write_report


@pytest.mark.slow
@pytest.mark.tooling
def test_quick_run_records_a_well_formed_run(root, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = sorted((tmp_path / "results").glob("*.json"))
    assert [p.name for p in runs] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d{6}Z\.json", runs[0].name)
    run = json.loads(runs[0].read_text())
    assert run["quick"] is True and set(run["sections"]) == {"grading", "course", "claims", "service"}
    served = run["sections"]["service"]  # the grading service: idle A1, and a small deadline
    (idle,) = served["idle"]["A1"]["submissions"][:1]
    assert idle["score"] == 100.0 and idle["seconds"] > idle["cell_seconds"] > 0
    spike = served["spike"]
    assert (
        spike["acknowledged"] == spike["graded"] == spike["submissions"] == 20 and spike["status_p95_ms"] > 0
    )

    machine = run["machine"]
    assert machine["cores"] >= 1 and machine["cpu_model"]
    assert all(machine["versions"][name] for name in ("torch", "tensorflow", "nbgrader"))
    assert isinstance(machine["bubblewrap"], bool) and len(machine["load_average_start"]) == 3

    grading = run["sections"]["grading"]
    (a1,) = grading["assignments"]
    assert a1["assignment"] == "A1" and sum(a1["kinds"].values()) == 4
    for way in ("nbgrader", "lower_bound", "autograder"):
        assert a1[way]["submissions"] == 4 and a1[way]["seconds"] > 0 and a1[way]["per_minute"] > 0
    assert a1["scores"]["honest_compared"] == a1["kinds"]["partial"] + a1["kinds"]["blank"]
    assert {s["status"] for s in a1["submissions"] if s["kind"] == "broken"} == {"unreadable"}
    assert set(grading["targets"]["met"]) == set(TARGETS)
    first = grading["first_class"]  # a first class: nothing cached, the proof's steps timed, then nbgrader
    assert first["assignment"] == "A1" and first["submissions"] == 2 and first["autograder_vs_nbgrader"] > 0
    steps = dict(first["autograder"]["proof_steps"])
    assert list(steps)[:2] == ["probe (the warm parents start meanwhile)", "reference"] and "proved" in steps
    assert list(steps.values()) == sorted(steps.values())
    assert steps["proved"] <= first["autograder"]["first_result_seconds"] <= first["autograder"]["seconds"]
    assert first["autograder"]["cell_seconds"] > 0 and first["nbgrader"]["seconds"] > 0
    measured = grading["targets"]["measured"]
    for key in ("first_class_vs_nbgrader", "overhead_vs_nbgrader_overhead", "wall_vs_cells_per_core"):
        assert measured[key] > 0, key
    assert a1["autograder"]["proof_steps"]  # the main run is graded as a first class too
    for key in ("a4_vs_a3_per_submission", "a4_vs_a3_besides_cells"):  # --quick measures no A4
        assert grading["targets"]["measured"][key] is None and not grading["targets"]["met"].get(key)
    assert "memory_mb" not in a1["autograder"]  # the main run is timed without the memory sampler
    if a1["autograder"]["runner"] == "fork":  # each worker's warm parent and its children, RSS and PSS
        memory = worker_memory(a1)  # (from the scaling run of the whole class)
        assert memory and all(m["peak_pss"] <= m["peak_rss"] for m in memory.values())
    ran = [s for s in a1["submissions"] if s["kind"] != "broken"]
    assert all({"sandbox_run", "child_notebook", "verify", "record"} <= set(s["timings"]) for s in ran)
    regrade = a1["regrade"]  # a tolerance edit: decided again, the proof too, nothing run
    assert regrade["anew_vs_regrade"] > 0  # every one decided again, the unreadable one too: nothing runs
    assert regrade["decided_again"] == regrade["submissions"] == 4 and regrade["run_again"] == 0
    assert (
        regrade["proof"]
        == "reference decided again from its kept runs, canary decided again from its kept runs"
    )

    (lecture,) = run["sections"]["course"]["notebooks"]
    assert lecture["seconds"] > 0 and lecture["limit_seconds"] == 90
    claims = {c["name"]: c for c in run["sections"]["claims"]["claims"]}
    assert set(claims) == {"numpy_vs_torch", "loops_vs_vectorised", "static_graphs", "tf_function",
                           "dataloader_workers", "matmul_cpu", "gpu"}  # fmt: skip
    assert not any(c.get("error") for c in claims.values())
    assert all(c["rows"] or c["skipped"] for c in claims.values())

    text = (tmp_path / "RESULTS.md").read_text()
    for heading in ("## Grading throughput", "### A first class", "### Targets", "### Overhead per submission", "## Course run time",
                    "## The lectures' speed claims"):  # fmt: skip
        assert heading in text
    assert runs[0].name in text and (tmp_path / "results" / "summary.png").stat().st_size > 0


def test_results_md_is_what_the_recorded_runs_give(root, tmp_path):
    recorded = sorted((root / "benchmarks" / "results").glob("*.json"))
    assert recorded, "benchmarks/results/ has no recorded run, yet RESULTS.md reports one"
    (tmp_path / "results").mkdir()
    for path in recorded:
        shutil.copy(path, tmp_path / "results")
    write_report(tmp_path)
    assert (tmp_path / "RESULTS.md").read_text() == (root / "benchmarks" / "RESULTS.md").read_text(), (
        "benchmarks/RESULTS.md differs from what benchmarks/results/*.json give: "
        "run `.venv/bin/python -m benchmarks --report-only`"
    )


def test_the_stage_spread_agrees_with_the_recorded_medians():
    """RESULTS.md's p50 / p90 table is worked out from each submission's timings: its p50 of the critical path is
    the median the grading section records, and the quantiles interpolate as numpy's do."""
    import numpy as np

    from benchmarks.grading import overhead
    from benchmarks.report import critical_path, percentile

    rng = np.random.default_rng(3)
    rows = [
        {"seconds": float(s), "timings": {"repair": 0.01, "sandbox_run": float(s) - 0.2, "child_notebook": 1.0,
                                           "verify": 0.02, "record": float(r)}}
        for s, r in zip(rng.uniform(1.5, 3.0, 9), rng.uniform(0.05, 0.2, 9))
    ]  # fmt: skip
    paths = [critical_path(r["timings"], r["seconds"]) for r in rows]
    assert percentile(paths, 0.5) == pytest.approx(
        overhead(rows, 10.0, 2)["median_overhead_on_critical_path"], abs=1e-3
    )
    values = list(rng.normal(size=11))
    assert percentile(values, 0.9) == pytest.approx(np.percentile(values, 90))
    assert percentile([], 0.5) is None


def test_a_submissions_seconds_besides_its_cells_are_what_the_grader_added():
    rows = [
        {"seconds": 4.0, "timings": {"sandbox_run": 3.9, "child_notebook": 3.5}},
        {"seconds": 1.0, "timings": {"sandbox_run": 0.9, "child_notebook": 0.2}},
        {"seconds": 2.0, "timings": {"sandbox_run": 1.9, "child_notebook": 1.6}},
        {"seconds": 0.05, "timings": {"repair": 0.01}},  # unreadable: never ran, not counted
    ]
    assert per_submission(rows) == {
        "median_submission_seconds": 2.0,
        "median_cell_seconds": 1.6,
        "median_seconds_besides_cells": 0.5,
    }
