"""RESULTS.md and its plot, rebuilt from the recorded runs (``results/*.json``) and nothing else.

Each section shows the latest full run that measured it (a ``--quick`` run only when there is no full one),
and names that run, so every figure can be traced to its file.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suite import PREFIX as SUITE_PREFIX
from benchmarks.suite import suite_section

SECTIONS = ("grading", "course", "claims", "service")
PLOT_NAME = "summary.png"
WAYS = (("nbgrader", "nbgrader"), ("lower_bound", "lower bound"), ("autograder", "autograder"))
MUTANTS_PREFIX = "mutants-"  # results/mutants-<timestamp>.json: benchmarks.mutants
COLAB_PREFIX = "colab-check-"  # results/colab-check-<timestamp>.json: benchmarks.colab_check
PARTS_PREFIX = "parts-"  # results/parts-<timestamp>.json: benchmarks.parts
OWN_SECTIONS = (MUTANTS_PREFIX, COLAB_PREFIX, PARTS_PREFIX, SUITE_PREFIX)  # suite-: the test suite's tables


def load_runs(results: Path) -> list[tuple[str, dict]]:
    runs = []
    for path in sorted(results.glob("*.json")):
        if path.name.startswith(OWN_SECTIONS):  # mutation runs, Colab checks, ...: their own sections
            continue
        try:
            runs.append((path.name, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    return runs


def latest_with(runs: list[tuple[str, dict]], section: str) -> tuple[str, dict] | None:
    """The latest run that measured ``section`` without an error, full runs before quick ones."""
    usable = [
        (name, run) for name, run in runs if "error" not in run.get("sections", {}).get(section, {"error": 1})
    ]
    full = [r for r in usable if not r[1].get("quick")]
    return (full or usable or [None])[-1]


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def seconds(value) -> str:
    if value is None:
        return "n/a"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def machine_line(run: dict) -> str:
    m = run.get("machine", {})
    v = m.get("versions", {})
    return (
        f"{m.get('cores')} cores ({m.get('cpu_model')}, {m.get('vector_isa')}); load average "
        f"{m.get('load_average_start')} at the start, {run.get('load_average_end')} at the end (1, 5, 15 min); "
        f"Python {m.get('python')}, torch {v.get('torch')}, TensorFlow {v.get('tensorflow')}, nbgrader {v.get('nbgrader')}; "
        f"bubblewrap {'in force' if m.get('bubblewrap') else 'not available'}"
    )


def runs_table(runs: list[tuple[str, dict]]) -> list[str]:
    rows = []
    for name, run in runs:
        m = run.get("machine", {})
        grading = run.get("sections", {}).get("grading", {})
        r = grading.get("total", {}).get("ratios", {})
        rows.append([
            f"`{name}`", "quick" if run.get("quick") else "full", ", ".join(run.get("sections", {})), m.get("cores"),
            m.get("load_average_start"), "yes" if m.get("bubblewrap") else "no",
            fmt(r.get("autograder_vs_nbgrader")), fmt(r.get("lower_bound_vs_autograder")),
        ])  # fmt: skip
    header = ["run", "kind", "sections", "cores", "load at start", "bubblewrap", "autograder / nbgrader",
              "lower bound / autograder"]  # fmt: skip
    return table(header, rows)


def grading_section(name: str, run: dict) -> list[str]:
    g = run["sections"]["grading"]
    out = [f"## Grading throughput (run `{name}`)", "", machine_line(run) + ".", ""]
    out += first_class_section(g.get("first_class"))
    out += ["### The main run", ""] if "first_class" in g else []
    out += [
        f"Each assignment's class was graded three ways in one run: plain sequential `nbgrader autograde`; the bare lower "
        f"bound (every notebook nbgrader would run, executed once by nbclient with no grading, one after another with "
        f"{max(1, g['cores'] // g['workers'])} BLAS thread(s) each, total divided by {g['cores']} cores); and the autograder "
        f"(`autograder.api.grade`, {g['workers']} workers, sandboxed"
        + ("; since 2026-11-26 as a first class too: an empty cache, no warm parent, the proof inside its time, "
           "while nbgrader and the lower bound are given the reference, built untimed" if "first_class" in g else "")
        + "). Submissions per minute:",
        "",
    ]  # fmt: skip
    rows = []
    for a in g["assignments"]:
        kinds = ", ".join(f"{n} {k}" for k, n in a["kinds"].items() if n)
        rows.append([a["assignment"], f"{a['autograder']['submissions']} ({kinds})"] +
                    [fmt(a[key]["per_minute"]) for key, _ in WAYS] +
                    [fmt(a["ratios"]["autograder_vs_nbgrader"]), fmt(a["ratios"]["lower_bound_vs_autograder"])])  # fmt: skip
    t = g["total"]
    rows.append(["**all**", t["autograder"]["submissions"]] + [fmt(t[key]["per_minute"]) for key, _ in WAYS]
                + [fmt(t["ratios"]["autograder_vs_nbgrader"]), fmt(t["ratios"]["lower_bound_vs_autograder"])])  # fmt: skip
    out += table(["assignment", "submissions"] + [label for _, label in WAYS]
                 + ["autograder / nbgrader", "lower bound / autograder"], rows)  # fmt: skip
    out += ["Wall seconds: " + "; ".join(
        f"{a['assignment']}: " + ", ".join(f"{label} {a[key]['seconds']:.0f} s" for key, label in WAYS)
        + f" (run in the order {', '.join(a['order'])})" for a in g["assignments"]) + ".", ""]  # fmt: skip

    regrades = [a for a in g["assignments"] if a.get("regrade")]
    if regrades:
        out += [
            "### Regrade after a source edit",
            "",
            "After the graded run, a hidden case's tolerance was loosened in the source and `regrade` decided "
            "every submission again from its kept run, after bringing the reference up to date and proving it "
            "(the proof column says how: since 2026-11-26 both are decided again from their kept runs when only "
            "tolerances or points changed; earlier runs rebuilt the reference and ran the canary). Grading anew "
            "after the same edit costs the same proof plus the main run's grading.",
            "",
        ]
        rows = [
            [a["assignment"], r["edit"], f"{r['decided_again']} of {r['submissions']}", r["moved"],
             f"{r['seconds']:.1f} s ({r['reference_seconds']:.1f} reference + {r['decide_seconds']:.1f} deciding)",
             f"{r['anew_seconds']:.1f} s", fmt(r["anew_vs_regrade"]), r.get("proof", "rebuilt and run")]
            for a in regrades for r in [a["regrade"]]
        ]  # fmt: skip
        out += table(["assignment", "edit", "decided again", "scores moved", "regrade", "grading anew",
                      "anew / regrade", "proof"], rows)  # fmt: skip

    tg = g["targets"]
    descriptions = {
        "first_class_vs_nbgrader": (
            "first class (nothing cached, proof included): autograder / nbgrader",
            ">=",
        ),
        "autograder_vs_nbgrader": ("autograder throughput / nbgrader throughput, main run", ">="),
        "lower_bound_vs_autograder": ("lower-bound throughput / autograder throughput", "<="),
        "overhead_seconds": (
            "median per-submission overhead on the critical path, worst assignment (s)",
            "<=",
        ),
        "overhead_vs_nbgrader_overhead": ("that overhead / plain nbgrader's per-notebook overhead", "<="),
        "a4_vs_a3_per_submission": (
            "A4's median seconds per submission / A3's (the notebooks' own cells included)",
            "<=",
        ),
        "a4_vs_a3_besides_cells": (
            "the same, besides the seconds the notebook's own cells ran (what the grader adds)",
            "<=",
        ),
        "regrade_anew_vs_regrade": ("grading anew / regrade after a tolerance edit, worst assignment", ">="),
        "wall_vs_cells_per_core": ("main run's wall / (the students' own cell seconds / cores)", "<="),
        "scaling_40_vs_10": ("seconds per submission at 40 / at 10 submissions (flat)", "<="),
        "memory_pss_20_vs_10": (
            "peak PSS of a worker at 20 / at 10 submissions, proof cached (no growth)",
            "<=",
        ),
    }
    rows = []
    for key, (text, op) in descriptions.items():
        if key not in tg["targets"]:  # a run recorded before this target existed, or one only reported
            if tg["measured"].get(key) is not None:
                rows.append([text, "reported", fmt(tg["measured"][key]), "", ""])
            continue
        measured, target = tg["measured"].get(key), tg["targets"][key]
        rows.append(
            [text, f"{op} {target}", fmt(measured), fmt(tg["met"][key]), shortfall(key, measured, target)]
        )
    out += ["### Targets", "", f"({tg['note']}.)", ""]
    out += table(["target", "wanted", "measured", "met", "by how much"], rows)

    memory = [(a["assignment"], worker_memory(a)) for a in g["assignments"] if worker_memory(a)]
    if memory:
        out += ["### Memory per worker (peak of samples every 2 s, MB)", "",
                "Each worker's warm parent and everything forked from it, while the whole class was graded again "
                "after the main run (the proof kept: the scaling run of all its submissions, or a run of its own); "
                "runs before 2026-11-27T05 sampled it in the "
                "main run, whose time then held the sampler's (its PSS reads every process's page tables). RSS counts a "
                "page shared by N processes N times; PSS divides it among them (what the machine spends).",
                ""]  # fmt: skip
        rows = [[aid, slot, m.get("parent_rss"), m.get("parent_pss"), m["peak_rss"], m["peak_pss"], m["processes"]]
                for aid, per in memory for slot, m in per.items()]  # fmt: skip
        out += table(["assignment", "worker", "warm parent RSS", "warm parent PSS", "peak RSS, all",
                      "peak PSS, all", "processes at peak"], rows)  # fmt: skip
    a4 = g.get("a4")
    if a4 and "error" not in a4:
        out += ["### A4 against A3: warm parents", "",
                f"{a4['submissions']} submissions each (perfect, partial, blank, broken), graded side by side in "
                "this run: A4 spawned (a fresh interpreter each) and forked from a warm parent (since 2026-11-26 "
                "one that has also probed the CPU's vector instructions for torch.compile, 8 s a kernel paid on its "
                "first compile; since run 2026-11-26T084339Z also one that precompiled torch's C++ header, which its "
                "kernels compile with, read-only, and whose objects are frozen out of the kernels' garbage "
                "collector), A3 the default way; median seconds of one submission. No run gets another's "
                "compile cache.", ""]  # fmt: skip
        names = [k for k in a4 if isinstance(a4[k], dict) and "median_submission_seconds" in a4[k]]
        rows = [[name, fmt(a4[name]["median_submission_seconds"]), fmt(a4[name].get("median_cell_seconds")),
                 fmt(a4[name].get("median_seconds_besides_cells")), f"{a4[name]['seconds']:.1f}",
                 ", ".join(fmt(x) for x in a4[name]["scores"])] for name in names]  # fmt: skip
        out += table(["way", "median s per submission", "of it, the notebook's cells", "besides the cells",
                      "batch seconds", "scores"], rows)  # fmt: skip
    elif a4:
        out += ["### A4", "", f"Not measured: {a4['error']}", ""]

    out += ["### Scores: nbgrader against the autograder", ""]
    for a in g["assignments"]:
        s = a["scores"]
        line = f"- {a['assignment']}: {s['equal']} of {s['honest_compared']} honest submissions (perfect, partial, blank) scored the same."
        for d in s["differences"]:
            line += (f"\n  - `{d['sid']}`: nbgrader {fmt(d['nbgrader'])}, autograder {fmt(d['autograder'])} "
                     f"({d['autograder_status']}: {d['reason'][:160]})")  # fmt: skip
        statuses = sorted(
            {
                f"nbgrader {fmt(b['nbgrader'])}, autograder {b['autograder_status']} {fmt(b['autograder'])}"
                for b in s["broken"]
            }
        )
        if statuses:
            line += f"\n  - broken (truncated JSON) submissions: {'; '.join(statuses)}"
        if a["nbgrader"].get("exit_error"):
            line += "\n  - `nbgrader autograde` exited with an error status (it does when a submission fails)"
        out.append(line)
    out.append("")

    scaling = [(a["assignment"], e) for a in g["assignments"] for e in a.get("scaling", [])]
    out += ["### Scaling (autograder)", ""]
    if scaling and not any(e.get("note") == "the main run" for _, e in scaling):
        out += ["Each size grades the class again with the proof the main run left (its reference and canary "
                "kept), so the rows compare like with like; the main run above, a first class, also holds the "
                "proof's time.", ""]  # fmt: skip
    if scaling:
        rows = [[aid, e["submissions"], e["workers"], f"{e['seconds']:.1f}", fmt(e["per_minute"]),
                 f"{e['seconds_per_submission']:.2f}", e.get("load_average_after")] for aid, e in scaling]  # fmt: skip
        out += table(["assignment", "submissions", "workers", "seconds", "per minute", "seconds per submission",
                      "load after"], rows)  # fmt: skip
    else:
        out += ["Not measured in this run.", ""]

    out += ["### Overhead per submission (autograder, median seconds)", ""]
    stage_rows = [
        ("repair (trusted, before the run)", "repair"),
        ("kernel start (pre-started while the previous submission ran)", "child_kernel_start"),
        ("framework imports (pre-started)", "child_imports"),
        ("the notebook: student code and the assignment's own cells", "child_notebook"),
        ("trusted verification", "verify"),
        ("gradebook write", "record"),
    ]
    assignments = g["assignments"]
    rows = [
        [label] + [fmt(a["overhead"]["median_seconds"].get(key)) for a in assignments]
        for label, key in stage_rows
    ]
    rows += [
        ["sandbox run minus notebook (start, wait and clean-up left on the critical path)"]
        + [fmt(a["overhead"]["median_sandbox_run_minus_notebook"]) for a in assignments],
        ["rest of grade_one (saving the executed notebook, result)"]
        + [fmt(a["overhead"]["median_grade_one_other"]) for a in assignments],
        ["**overhead on the critical path** (repair + run minus notebook + verify + record + rest)"]
        + [fmt(a["overhead"]["median_overhead_on_critical_path"]) for a in assignments],
        [
            "the measurement run (measured cells again, under caps set outside the kernel), apart from the overhead"
        ]
        + [fmt(a["overhead"].get("median_measurement_run_seconds")) for a in assignments],
        ["whole submission (grade_one)"]
        + [fmt(a["overhead"]["median_submission_seconds"]) for a in assignments],
        ["of the notebook: the assignment's set-up cell (imports, banner)"]
        + [fmt(a["overhead"].get("median_setup_cell_seconds")) for a in assignments],
        ["worker time outside grade_one, per submission (sandbox start and clean-up, end of batch)"]
        + [fmt(a["overhead"]["worker_seconds_outside_grade_one_per_submission"]) for a in assignments],
        ["lower bound: one bare execution, kernel start included"]
        + [fmt(a["lower_bound"]["median_execution_seconds"]) for a in assignments],
        ["plain nbgrader's overhead per notebook (its seconds per submission less the cells' own)"]
        + [fmt(a["overhead"].get("nbgrader_per_notebook")) for a in assignments],
    ]
    out += table(["stage"] + [a["assignment"] for a in assignments], rows)
    out += [f"Notes: {'; '.join(g['notes'])}." if g.get("notes") else "", ""]
    out += stage_spread(assignments, stage_rows)
    return out


def first_class_section(first: dict | None) -> list[str]:
    """A new instructor's first class: the autograder from nothing against plain nbgrader, the proof's steps."""
    if not first:
        return []
    out = ["### A first class", ""]
    if "error" in first:
        return out + [f"Not measured: {first['error']}", ""]
    ours, theirs = first["autograder"], first["nbgrader"]
    kinds = ", ".join(f"{n} {k}" for k, n in first["kinds"].items() if n)
    out += [
        f"{first['submissions']} submissions of {first['assignment']} ({kinds}), graded by the autograder "
        f"({ours['workers']} workers) from nothing: an empty cache (no reference, canary record or compile cache) and "
        "no warm parent, so its time holds the whole proof; then by plain sequential `nbgrader autograde`, given "
        "the reference the autograder built. The canary runs first on the students' workers; no result is "
        "recorded before it passed.",
        "",
    ]
    steps = ours.get("proof_steps") or []
    rows = [[name, f"{at:.1f} s"] for name, at in steps]
    rows += [["first result recorded", seconds(ours.get("first_result_seconds"))],
             ["last result recorded (the batch's wall time)", f"{ours['seconds']:.1f} s"]]  # fmt: skip
    out += ["When each step began, seconds from the start of `grade`:", ""]
    out += table(["step", "began at"], rows)
    out += table(
        ["nbgrader", "autograder", "autograder / nbgrader", "students' own cell seconds", "wall / (cells / cores)",
         "median overhead on the critical path"],
        [[f"{theirs['seconds']:.1f} s", f"{ours['seconds']:.1f} s", fmt(first["autograder_vs_nbgrader"]),
          f"{ours.get('cell_seconds', 0):.1f}", fmt(ours.get("wall_vs_cells_per_core")),
          fmt(first["overhead"]["median_overhead_on_critical_path"])]],
    )  # fmt: skip
    s = first["scores"]
    out += [f"Scores: {s['equal']} of {s['honest_compared']} honest submissions scored the same by both.", ""]
    return out


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; None for none."""
    values = sorted(values)
    if not values:
        return None
    at = q * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def worker_memory(assignment: dict) -> dict | None:
    """Each worker's peak memory while the class was graded: from the main run where it was sampled there (runs
    before 2026-11-27T05), else from the later run of the whole class on the main run's workers (the scaling
    run of the most submissions, or the memory run where there was no scaling)."""
    if assignment["autograder"].get("memory_mb"):
        return assignment["autograder"]["memory_mb"]
    workers = assignment["autograder"].get("workers")
    later = [*assignment.get("scaling", []), assignment.get("memory_run") or {}]
    sized = [e for e in later if e.get("workers") == workers and e.get("memory_mb")]
    return max(sized, key=lambda e: e["submissions"])["memory_mb"] if sized else None


def critical_path(timings: dict, seconds: float) -> float:
    """A submission's overhead on the critical path, as ``benchmarks.grading.overhead`` counts it."""
    wait = timings["sandbox_run"] - timings.get("child_notebook", 0.0)
    rest = max(
        0.0,
        seconds
        - timings["repair"]
        - timings["sandbox_run"]
        - timings.get("verify", 0.0)
        - timings.get("measure", 0.0),
    )
    return timings["repair"] + wait + timings.get("verify", 0.0) + timings.get("record", 0.0) + rest


def stage_spread(assignments: list[dict], stage_rows: list[tuple[str, str]]) -> list[str]:
    """p50 and p90 of each stage over the submissions that ran, from each recorded submission's timings."""
    rows = []
    for label, key in [*stage_rows, ("**overhead on the critical path**", None)]:
        row = [label]
        for a in assignments:
            ran = [s for s in a.get("submissions", []) if "sandbox_run" in s.get("timings", {})]
            values = [
                critical_path(s["timings"], s.get("seconds", 0.0)) if key is None else s["timings"][key]
                for s in ran
                if key is None or key in s["timings"]
            ]
            row.append(
                f"{fmt(percentile(values, 0.5))} / {fmt(percentile(values, 0.9))}" if values else "n/a"
            )
        rows.append(row)
    return [
        "p50 / p90 of each stage over the submissions that ran (seconds), from the same run's timings:",
        "",
        *table(["stage"] + [a["assignment"] for a in assignments], rows),
    ]


AT_LEAST = {"autograder_vs_nbgrader", "first_class_vs_nbgrader", "regrade_anew_vs_regrade"}


def shortfall(key: str, measured, target) -> str:
    if measured is None:
        return "not measured"
    if key in AT_LEAST:
        return "" if measured >= target else f"{(1 - measured / target) * 100:.0f}% below"
    return "" if measured <= target else f"{(measured / target - 1) * 100:.0f}% above"


def course_section(name: str, run: dict) -> list[str]:
    c = run["sections"]["course"]
    out = [f"## Course run time (run `{name}`)", "", machine_line(run) + ".", "",
           "Each notebook top to bottom in a fresh kernel (`autograder.intake.notebooks.execute_notebook`), kernel start "
           "included, against its limit on a 2-core CPU.", ""]  # fmt: skip
    rows = [[f"`{e['notebook']}`", f"{e['seconds']:.1f}", f"{e['limit_seconds']:.0f}", fmt(e["within_limit"]),
             e["error"] or "", e.get("load_average_after")] for e in c["notebooks"]]  # fmt: skip
    out += table(["notebook", "seconds", "limit (s)", "within", "error", "load after"], rows)
    out += [f"Total {c['total_seconds']:.0f} s; all within their limits: {fmt(c['all_within_limits'])}."]
    if c.get("notes"):
        out += [f"Notes: {'; '.join(c['notes'])}."]
    return out + [""]


def claims_section(name: str, run: dict) -> list[str]:
    out = [f"## The lectures' speed claims (run `{name}`)", "", machine_line(run) + ".", "",
           "Measured outside the notebooks with `dlcourse.measure.time_it` (warm-up calls, then repeats; median and "
           "best repeat), except the tf.function rows, timed as the lecture times them (total of n calls, the first "
           "one tracing).", ""]  # fmt: skip
    for c in run["sections"]["claims"]["claims"]:
        out += [f"### {c['title']}", ""]
        if c.get("error"):
            out += [f"Failed: `{c['error']}`", ""]
            continue
        if c.get("skipped"):
            out += [f"Skipped: {c['skipped']}.", ""]
            continue
        rows = []
        for r in c["rows"]:
            if "median_s" in r:
                rows.append([r["label"], seconds(r["median_s"]), seconds(r["best_s"]), ""])
            elif "total_s" in r:
                published = f"{r['published_s']} s" if r.get("published_s") else ""
                rows.append([r["label"], seconds(r["total_s"]), "", published])
            elif "flops" in r:
                share = f"{r['fraction_of_peak']:.1%} of peak" if r.get("fraction_of_peak") else ""
                best = f"{r['flops_best'] / 1e9:.3g} GFLOP/s" if r.get("flops_best") else ""
                rows.append([r["label"], f"{r['flops'] / 1e9:.3g} GFLOP/s", best, share])
            elif "bytes_per_s" in r:
                rows.append([r["label"], f"{r['bytes_per_s'] / 1e9:.3g} GB/s", "", ""])
            else:
                rows.append([r["label"], r.get("skipped", ""), "", ""])
        out += table(["", "median (or total)", "best", "published / peak"], rows)
        extras = [f"{k}: {v:.3g}x" for k, v in c["ratios"].items()]
        extras += [f"{k}: {v:.1f} s" for k, v in c.get("first_call_seconds", {}).items()]
        if c.get("peak_flops"):
            extras.append(f"estimated peak {c['peak_flops'] / 1e9:.0f} GFLOP/s ({c['peak_formula']})")
        for key in ("published", "note"):
            if c.get(key):
                extras.append(f"{key}: {c[key]}")
        if "torch_threads" in c:
            extras.append(f"torch threads: {c['torch_threads']}")
        out += [f"- {e}" for e in extras] + [""]
    return out


def latest_mutants(results: Path) -> dict[str, tuple[str, dict]]:
    """Assignment -> (file, its entry) from the latest mutation run that measured it without an error, with
    the equivalence judgements of ``benchmarks.mutants`` (made by reading the survivors) applied."""
    from benchmarks.judged import rescore

    out: dict[str, tuple[str, dict]] = {}
    for path in sorted(results.glob(MUTANTS_PREFIX + "*.json")):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for entry in run.get("assignments", []):
            if "error" not in entry:
                out[entry["assignment"]] = (path.name, rescore(entry))
    return dict(sorted(out.items()))


def percent(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def mutants_section(results: Path) -> list[str]:
    chosen = latest_mutants(results)
    if not chosen:
        return []
    out = ["## Mutation score of the graded tests", "",
           "`python -m benchmarks.mutants` (in `make bench`): each mutant is the perfect submission with one answer "
           "cell's solution changed by one small slip (an operator, comparison, constant, dropped statement, "
           "reduction, transpose, argument order or axis), graded as a student by the real grader (sandboxed, one "
           "batch per assignment, with a control: the perfect submission through the same `ast` round trip, which "
           "must get full marks). Killed: less than full marks. Target: at least 90% killed per assignment, "
           "leaving out survivors shown equivalent (by a rule or a written argument, never by assumption) and those "
           "in an open-ended answer that still meet its specification (`JUDGED_EQUIVALENT` in "
           "`benchmarks/judged.py` says why for each).", ""]  # fmt: skip
    rows = []
    for aid, (name, a) in chosen.items():
        control = a["control"]
        rows.append([aid, f"`{name}`", f"{a['mutants']} of {sum(a['candidates'].values())}", a["killed"], a["survived"],
                     a["equivalent"], a["errors"], percent(a["score_raw"]), percent(a["score_excluding_equivalent"]),
                     fmt(a["target_met"]), f"{control['score']:g}/{control['max_score']:g}"])  # fmt: skip
    out += table(["assignment", "run", "mutants (drawn of)", "killed", "survived", "shown equivalent or allowed", "grader errors",
                  "score (raw)", "score (without those)", ">= 90%", "control"], rows)  # fmt: skip
    survivors = [(aid, r) for aid, (_, a) in chosen.items() for r in a["rows"] if r["outcome"] == "survived"]
    out += ["### Surviving mutants", ""]
    if not survivors:
        out += ["None.", ""]
    for aid, r in survivors:
        differing = r.get("differing_cases")
        if r.get("outputs_identical"):
            notes = ["captured values bit-identical to the control's on every graded case"]
        elif differing is None:
            notes = ["captured values differ from the control's, within the tests' tolerances"]
        else:
            shown = ", ".join(f"`{c}`" for c in differing[:8]) + (", ..." if len(differing) > 8 else "")
            notes = [
                f"captured values differ from the control's (within tolerance) on {len(differing)} case(s): {shown}"
            ]
        if r.get("equivalent"):
            reason = r["equivalent"]
            notes.insert(0, reason if reason.startswith("allowed") else f"equivalent: {reason}")
        out += [f"- {aid} `{r['id']}` ({r['cell']}, {r['operator']}) {r['description']}; {'; '.join(notes)}",
                "", "  ```diff", *[f"  {line}" for line in r.get("diff", "").splitlines()], "  ```", ""]  # fmt: skip
    return out


def parts_section(results: Path) -> list[str]:
    """The latest ``python -m benchmarks.parts`` run of each assignment: seconds per part of its source."""
    chosen: dict[str, tuple[str, dict, dict]] = {}
    for path in sorted(results.glob(PARTS_PREFIX + "*.json")):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for entry in run.get("assignments", []):
            chosen[entry["assignment"]] = (path.name, run, entry)
    if not chosen:
        return []
    out = ["## Seconds per part of a source solution", "",
           "`python -m benchmarks.parts <AID>`: the source top to bottom in a fresh kernel, as the reference run runs it "
           "(checks captured), each part's code cells timed by nbclient from start to reply; a part is a `## ` "
           "heading and the cells up to the next.", ""]  # fmt: skip
    for aid, (name, run, entry) in sorted(chosen.items()):
        out += [f"### {aid} (run `{name}`)", "", machine_line(run) + ".", ""]
        out += table(
            ["part", "code cells", "seconds"],
            [[p["part"], p["code_cells"], f"{p['seconds']:.2f}"] for p in entry["parts"]],
        )
        out += [f"Cells {entry['cells_seconds']:.1f} s; the whole run, kernel start included, {entry['total_seconds']:.1f} s "
                f"(load after: {entry.get('load_average_after')}).", ""]  # fmt: skip
    return out


def gigabytes(value) -> str:
    return "n/a" if value is None else f"{value / 1e9:.1f} GB"


def colab_section(results: Path, shown_lines: int = 6) -> list[str]:
    """The latest ``make colab-check``: each notebook on Colab's versions beside this repository's."""
    recorded = sorted(results.glob(COLAB_PREFIX + "*.json"))
    if not recorded:
        return []
    name, run = recorded[-1].name, json.loads(recorded[-1].read_text(encoding="utf-8"))
    colab, ours, cost = run["colab"]["versions"], run["reference"]["versions"], run["cost"]

    def stack(v: dict) -> str:
        framework = v.get("tensorflow-cpu") or v.get("tensorflow")
        return (f"Python {v.get('python')}, torch {v.get('torch')}, TensorFlow {framework}, Keras {v.get('keras')}, "
                f"numpy {v.get('numpy')}, ipykernel {v.get('ipykernel')}, nbclient {v.get('nbclient')}")  # fmt: skip

    m = run["machine"]
    if cost.get("reused"):
        b = cost.get("build")
        built = "environment reused from the cache" + (
            f" (building it, {b['built']}: downloaded {gigabytes(b['downloaded_bytes'])} of wheels in "
            f"{b['download_seconds']} s, installed in {b['install_seconds']} s{b.get('note', '')})"
            if b
            else ""
        )
    else:
        built = (f"downloaded {gigabytes(cost.get('downloaded_bytes'))} of wheels in {cost.get('download_seconds')} s, "
                 f"installed in {cost.get('install_seconds')} s")  # fmt: skip
    out = [f"## Colab's versions (run `{name}`)", "",
           f"`make colab-check` (`python -m benchmarks.colab_check`): every lecture top to bottom and every assignment's "
           f"source (solutions and public checks, hidden checks capturing) in a second environment with Colab's "
           f"versions, {stack(colab)} (Python found by: {run['colab']['python_found_by']}; {run['colab']['dlcourse_from']}), "
           f"then in this repository's, {stack(ours)}. {m['cores']} cores ({m['cpu_model']}); load average "
           f"{m['load_average_start']} at the start, {m['load_average_end']} at the end.", "",
           f"Cost: {built}; {gigabytes(cost.get('wheels_bytes'))} of wheels and {gigabytes(cost.get('venv_bytes'))} of "
           f"environment kept in the cache; the notebooks took {cost.get('colab_run_seconds')} s on Colab's versions "
           f"and {cost.get('reference_run_seconds')} s on ours"
           f"{' (side by side)' if cost.get('side_by_side') else ' (one after the other)'}"
           f"{', OMP_NUM_THREADS=' + cost['omp_num_threads'] if cost.get('omp_num_threads') else ''}.", "",
           "Stderr lines are compared per cell after removing what differs between any two runs (log prefixes, "
           "install paths, line numbers in library files); leaked: a warning that the lecture test's "
           "no-leaked-warnings rule would reject.", ""]  # fmt: skip

    def state(r: dict) -> str:
        if r["ran"]:
            return "ran"
        error = r["first_error"]
        return f"**failed** (cell {error['cell']}: `{error['error'][:120]}`)"

    rows = [[f"`{n['notebook']}`", state(n["colab"]), state(n["reference"]),
             f"{n['colab']['seconds']} / {n['reference']['seconds']}", len(n["stderr_only_colab"]),
             len(n["stderr_only_reference"]), f"{len(n['leaked_colab'])} / {len(n['leaked_reference'])}"]
            for n in run["notebooks"]]  # fmt: skip
    out += table(["notebook", "Colab's versions", "ours", "seconds (Colab's / ours)", "stderr lines only on Colab's",
                  "only on ours", "leaked warnings (Colab's / ours)"], rows)  # fmt: skip
    differing = [n for n in run["notebooks"] if n["stderr_only_colab"] or n["leaked_colab"]]
    if differing:
        out += ["### Printed only on Colab's versions", ""]
    for n in differing:
        lines = [f"cell {cell}: `{text[:200]}`" for cell, text in n["stderr_only_colab"]]
        more = f"; and {len(lines) - shown_lines} more" if len(lines) > shown_lines else ""
        leaked = ", ".join(f"cell {cell}: `{text[:160]}`" for cell, text in n["leaked_colab"])
        out.append(f"- `{n['notebook']}`: " + "; ".join(lines[:shown_lines]) + more
                   + (f". Leaked: {leaked}" if leaked else ""))  # fmt: skip
    return out + [""]


def plot(results: Path, chosen: dict[str, tuple[str, dict] | None]) -> Path | None:
    """One figure: throughput of the three ways, autograder scaling, and course run time against limits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [s for s in SECTIONS[:2] if chosen.get(s)]
    if not panels:
        return None
    fig, axes = plt.subplots(
        1, len(panels) + (1 if chosen.get("grading") else 0), figsize=(15, 4.8), squeeze=False
    )
    axes = list(axes[0])
    if chosen.get("grading"):
        name, run = chosen["grading"]
        g = run["sections"]["grading"]
        groups = [a["assignment"] for a in g["assignments"]] + ["all"]
        values = {
            key: [a[key]["per_minute"] for a in g["assignments"]] + [g["total"][key]["per_minute"]]
            for key, _ in WAYS
        }
        ax = axes.pop(0)
        width = 0.27
        for i, (key, label) in enumerate(WAYS):
            ax.bar([x + (i - 1) * width for x in range(len(groups))], values[key], width, label=label)
        ax.set(xticks=range(len(groups)), xticklabels=groups, ylabel="submissions per minute",
               title=f"grading throughput ({g['cores']} cores)")  # fmt: skip
        ax.legend()
        ax = axes.pop(0)
        for a in g["assignments"]:
            for workers in sorted({e["workers"] for e in a.get("scaling", [])}):
                points = sorted(
                    (e["submissions"], e["seconds_per_submission"])
                    for e in a["scaling"]
                    if e["workers"] == workers
                )
                ax.plot(*zip(*points), "o-", label=f"{a['assignment']}, {workers} worker(s)")
        ax.set(
            xlabel="submissions in the batch",
            ylabel="seconds per submission",
            title="autograder scaling",
            ylim=(0, None),
        )
        if ax.lines:
            ax.legend()
    if chosen.get("course"):
        name, run = chosen["course"]
        entries = run["sections"]["course"]["notebooks"]
        ax = axes.pop(0)
        labels = [Path(e["notebook"]).stem for e in entries]
        ax.barh(
            labels,
            [e["seconds"] for e in entries],
            color=["C0" if e["within_limit"] else "C3" for e in entries],
        )
        ax.scatter([e["limit_seconds"] for e in entries], labels, marker="|", s=200, color="k", label="limit")
        ax.invert_yaxis()
        ax.set(xlabel="seconds in a fresh kernel", title="course run time")
        ax.legend()
    fig.tight_layout()
    path = results / PLOT_NAME
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def service_section(name: str, run: dict) -> list[str]:
    """``python -m benchmarks --only service`` (benchmarks/service.py)."""
    s = run["sections"]["service"]
    out = [f"## The grading service (run `{name}`)", "", machine_line(run) + f"; {s['workers']} workers.", "",
           "`autograder serve` on the loopback interface, driven over HTTP as `dlcourse.submit` drives it. Idle: one "
           "perfect sample at a time, from the request until a client polling every 20 ms sees it graded, beside the "
           "notebook's own cell time in the sandbox; the difference is what the service and the grader's stages add "
           "(target: 0.3 s beyond the cell time; the measured cells' own runs are part of the difference).", ""]  # fmt: skip
    rows = []
    for aid, entry in s["idle"].items():
        seen = [r["seconds"] for r in entry["submissions"]]
        added = [r["added"] for r in entry["submissions"] if r["added"] is not None]
        cells = [r["cell_seconds"] for r in entry["submissions"] if r["cell_seconds"] is not None]
        rows.append([aid, len(seen), fmt(entry["proof_seconds"]), seconds(percentile(seen, 0.5)),
                     seconds(percentile(cells, 0.5)), seconds(percentile(added, 0.5)), seconds(max(added) if added else None)])  # fmt: skip
    out += table(["assignment", "submissions", "proof at start (s)", "submit to graded, median", "cell time, median",
                  "added, median", "added, most"], rows)  # fmt: skip
    k = s["spike"]
    ratio = lambda v: (
        f"{v / k['lower_bound_seconds']:.2f}x" if v is not None and k["lower_bound_seconds"] else "n/a"
    )
    out += [f"A deadline: {k['submissions']} submissions of A1 from {k['students']} students within "
            f"{k['window_seconds']:g} s; {k['acknowledged']} acknowledged, {k['graded']} graded. Wait from "
            f"acknowledgement to graded: median {seconds(k['wait_p50'])}, p95 {seconds(k['wait_p95'])}, longest "
            f"{seconds(k['wait_max'])}; the spike's lower bound (cell time summed over the workers) "
            f"{seconds(k['lower_bound_seconds'])}, so p95 is {ratio(k['wait_p95'])} of it (target: 1.5x). "
            + status_line(k), ""]  # fmt: skip
    if s.get("note"):
        out += [f"Note: {s['note']}.", ""]
    return out


def status_line(k: dict) -> str:
    """The status requests' latency during the spike; runs from before 2026-11-29T01:30 timed the instructor's
    list of every submission instead of a student's request for one."""
    asked = "a student's request for one waiting submission" if k.get("status_asked") else (
        "the instructor's list of every submission, asked every 0.25 s")  # fmt: skip
    return f"Meanwhile {asked}: median {k['status_p50_ms']} ms, p95 {k['status_p95_ms']} ms (target: 100 ms)."


def write_report(out: Path) -> Path:
    """Rebuild ``out/RESULTS.md`` and ``out/results/summary.png`` from ``out/results/*.json``."""
    results = out / "results"
    runs = load_runs(results)
    chosen = {section: latest_with(runs, section) for section in SECTIONS}
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m benchmarks`) from the recorded runs in `results/`; do not edit by hand. "
        "Each section names the run its figures come from. The machines are shared: absolute times move with "
        "other people's load (recorded with each run), so read the ratios, measured side by side in one run.",
        "",
        "## Runs recorded",
        "",
    ]
    lines += runs_table(runs)
    png = plot(results, chosen)
    if png:
        lines += [f"![grading throughput, scaling and course run time](results/{png.name})", "",
                  "(Plot: " + ", ".join(f"{s} from `{chosen[s][0]}`" for s in SECTIONS[:2] if chosen.get(s)) + ".)", ""]  # fmt: skip
    for section, render in (
        ("grading", grading_section),
        ("course", course_section),
        ("claims", claims_section),
        ("service", service_section),
    ):
        if chosen.get(section):
            lines += render(*chosen[section])
    lines += mutants_section(results)
    lines += parts_section(results)
    lines += colab_section(results)
    lines += suite_section(results)
    target = out / "RESULTS.md"
    target.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return target
