"""A class report: pass rate per test and a histogram of scores (PNG), from the recorded results."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Course
from autograder.export import results


def pass_rates(rows: list[dict]) -> dict[str, tuple[int, int]]:
    rates: dict[str, list[int]] = {}
    for r in rows:
        for cell in r.get("cells", []):
            counts = rates.setdefault(cell["grade_id"], [0, 0])
            counts[0] += bool(cell["passed"])
            counts[1] += 1
    return {k: (v[0], v[1]) for k, v in rates.items()}


def write_report(course: Course, aid: str, out_dir: Path) -> tuple[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = results(course, aid)
    rows = [r for r in everything if r["status"] != "error"]  # a grader error is no score at all
    if not rows:
        raise RuntimeError(f"no graded results for {aid} yet: run `python -m autograder grade {aid}`")
    rates = pass_rates(rows)
    width = max(len(k) for k in rates)
    lines = [f"{aid}: {len(rows)} submissions", f"{'test':<{width}}  passed"]
    lines += [f"{k:<{width}}  {p:>3}/{n:<3} {p / n:6.0%}" for k, (p, n) in rates.items()]
    scores = [r["score"] for r in rows]
    lines.append(f"mean score {sum(scores) / len(scores):.1f} / {rows[0]['max_score']:g}")
    if len(everything) > len(rows):
        lines.append(f"{len(everything) - len(rows)} submission(s) not graded (grader error): grade again")
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(scores, bins=10, range=(0, rows[0]["max_score"]), color="#4a78b5", edgecolor="white")
    ax.set_xlabel("score")
    ax.set_ylabel("submissions")
    ax.set_title(f"{aid}: scores of {len(rows)} submissions")
    fig.tight_layout()
    png = out_dir / f"{aid}-scores.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    text = "\n".join(lines)
    (out_dir / f"{aid}-report.txt").write_text(text + "\n")
    return text, png
