"""Similarity: pairs of submissions whose answers are unusually alike, for a person to look at.

Each student's answer cells (found by ``grade_id``, or by content where the metadata was lost, as
:func:`autograder.repair.repair` finds them) are compared cell by cell with every other student's, with
copydetect's winnowing (the fingerprinting of MOSS). Why copydetect: it tokenises code first (names,
strings, comments and whitespace are normalised, so renaming does not hide a copy), removes the release's
own starter code as boilerplate, and marks the overlapping regions; a hand-rolled ``difflib`` ratio does
none of that, and JPlag (a Java program) and MOSS (an online service that would receive students' code)
cannot run inside this pipeline.

A pair's similarity is the share of both students' own code (everything but the starter code) that the two
have in common, over all answer cells or in a single one, whichever is higher: a copy of one hard cell among
honest ones counts. Pairs at or above the threshold are flagged; a flag is a reason to read both notebooks,
never a verdict.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import numpy as np
from copydetect import defaults
from copydetect.detector import CodeFingerprint, compare_files
from copydetect.utils import filter_code, hashed_kgrams, highlight_overlap

from autograder.course import Course, is_solution, nbgrader_meta
from autograder.export import write_csv
from autograder.repair import repair

NOISE = defaults.NOISE_THRESHOLD  # shortest run of normalised characters that counts as shared (k)
WINDOW = defaults.GUARANTEE_THRESHOLD - NOISE + 1  # runs this long are always found
# A pair is flagged when at least half of the two students' own code (in all, or in one answer cell) is
# shared, and that share is more than a few lines: honest solutions of a small exercise share idioms (a
# loop over range, a matrix product), which stays well below half once the starter code is gone; a copy
# with renamed variables stays near 1, because names are normalised away before comparing.
THRESHOLD = 0.5
MIN_SHARED = 4 * NOISE  # normalised characters in common, below which nothing is flagged
SHOWN = 20  # pairs with their code on the page (the CSV lists every pair)


@dataclass
class CellMatch:
    grade_id: str
    score: float  # shared share of both sides' code in this cell
    shared: int  # normalised characters in common, both sides together
    left: str  # HTML of the first student's code, shared regions in <mark>
    right: str


@dataclass
class Pair:
    first: str
    second: str
    overall: float  # shared share of both sides' code over all answer cells
    shared: int  # normalised characters in common, both sides together
    cells: list[CellMatch] = field(default_factory=list)
    flagged: bool = False

    @property
    def score(self) -> float:
        """The overall share, or the share in the most alike answer cell if that is higher."""
        return max([self.overall, *(c.score for c in self.cells)])

    def reaches(self, threshold: float) -> str:
        """Why the pair is flagged at ``threshold`` ("" if it is not): enough code shared, in all or in a cell."""
        if self.overall >= threshold and self.shared >= MIN_SHARED:
            return f"{self.overall:.2f} of their answers alike"
        cells = [c for c in self.cells if c.score >= threshold and c.shared >= MIN_SHARED]
        return "; ".join(f"answer {c.grade_id}: {c.score:.2f} alike" for c in cells)


@dataclass
class Similarity:
    aid: str
    threshold: float
    pairs: list[Pair]  # every pair of students with answers, highest score first
    students: list[str]  # those compared
    notes: dict[str, str] = field(default_factory=dict)  # student -> why left out, or how answers were found

    @property
    def flagged(self) -> list[Pair]:
        return [p for p in self.pairs if p.flagged]


def answers(course: Course, aid: str, path: Path) -> tuple[dict[str, str], str]:
    """The student's answer cells (grade_id -> code) that differ from the release, and a note ("" if
    nothing to say). Nothing here runs student code."""
    repaired = repair(course, aid, path)
    if repaired.fatal:
        return {}, f"not compared: {repaired.fatal}"
    found = {
        nbgrader_meta(cell)["grade_id"]: cell.source
        for cell in repaired.notebook.cells
        if is_solution(cell) and repaired.answered.get(nbgrader_meta(cell)["grade_id"])
    }
    by_content = [n for n in repaired.notes if "found by its content" in n]
    return found, "; ".join(by_content)


def starter_hashes(course: Course, aid: str) -> np.ndarray:
    """Fingerprints of every code cell of the release (signatures, docstrings, stubs, given code). All
    k-grams, not only the winnowed ones: a student's own winnowing may pick any of them."""
    release = nbformat.read(str(course.release_notebook(aid)), as_version=4)
    hashes = [
        hashed_kgrams(filter_code(cell.source, "starter.py", "python")[0], NOISE)
        for cell in release.cells
        if cell.cell_type == "code"
    ]
    return np.unique(np.concatenate(hashes)) if hashes else np.array([], dtype=np.int64)


def fingerprint(sid: str, grade_id: str, code: str, boilerplate: np.ndarray) -> CodeFingerprint:
    return CodeFingerprint(
        f"{sid}/{grade_id}.py", NOISE, WINDOW, boilerplate, language="python", fp=io.StringIO(code)
    )


def _marked(code: str, slices) -> str:
    if len(slices) == 0 or np.size(slices) == 0:
        return html.escape(code)
    return highlight_overlap(code, np.asarray(slices, dtype=int), "<mark>", "</mark>", escape_html=True)[0]


def compare_pair(first: str, second: str, prints: dict[str, dict[str, CodeFingerprint]]) -> Pair:
    """Every answer cell of two students; cells only one of them answered count as unshared code."""
    shared = own = 0.0
    cells = []
    for grade_id in sorted(set(prints[first]) | set(prints[second])):
        a, b = prints[first].get(grade_id), prints[second].get(grade_id)
        own += (a.token_coverage if a else 0) + (b.token_coverage if b else 0)
        if not (a and b) or not a.token_coverage or not b.token_coverage:
            continue
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(a, b)
        common = share_a * a.token_coverage + share_b * b.token_coverage
        shared += common
        cells.append(
            CellMatch(
                grade_id,
                float(common / (a.token_coverage + b.token_coverage)),
                round(common),
                _marked(a.raw_code, slices_a),
                _marked(b.raw_code, slices_b),
            )
        )
    return Pair(first, second, float(shared / own) if own else 0.0, round(shared), cells)


def find_similar(
    course: Course, aid: str, threshold: float = THRESHOLD, students: list[str] | None = None
) -> Similarity:
    """Compare every pair of submissions of ``aid`` and rank them, most alike first."""
    boilerplate = starter_hashes(course, aid)
    submitted = course.submitted(aid)
    notes: dict[str, str] = {}
    prints: dict[str, dict[str, CodeFingerprint]] = {}
    for sid, path in submitted.items():
        if students and sid not in students:
            continue
        found, note = answers(course, aid, path)
        if note:
            notes[sid] = note
        if found:
            prints[sid] = {gid: fingerprint(sid, gid, code, boilerplate) for gid, code in found.items()}
        elif not note:
            notes[sid] = "not compared: no answer differs from the release"
    pairs = [compare_pair(a, b, prints) for a, b in itertools.combinations(sorted(prints), 2)]
    pairs.sort(key=lambda p: (-p.score, -p.overall, p.first, p.second))
    for pair in pairs:
        pair.flagged = bool(pair.reaches(threshold))
    return Similarity(aid, threshold, pairs, sorted(prints), notes)


# ---------------------------------------------------------------------------------------------- output

STYLE = """
body{font-family:system-ui,sans-serif;max-width:90rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left;vertical-align:top}
.flag{color:#b00020;font-weight:bold}.side{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap;font-size:.85rem;line-height:1.45}
mark{background:#ffd54f}
"""


def histogram_png(scores: list[float], threshold: float) -> str:
    """The distribution of pair scores with the threshold marked, as base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(scores, bins=20, range=(0, 1), color="#4a78b5", edgecolor="white")
    ax.axvline(threshold, color="#b00020", linestyle="--", label=f"threshold {threshold:g}")
    ax.set_xlabel("similarity of a pair (share of their own code in common)")
    ax.set_ylabel("pairs")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def render(result: Similarity) -> str:
    e = html.escape
    shown = result.pairs[: max(SHOWN, len(result.flagged))]
    rows = "".join(
        f'<tr><td>{rank}</td><td><a href="#pair-{rank}">{e(p.first)} &amp; {e(p.second)}</a></td>'
        f"<td>{p.score:.2f}</td><td>{p.shared}</td>"
        f"<td>{f'<span class=flag>flagged</span>: {e(p.reaches(result.threshold))}' if p.flagged else ''}</td></tr>"
        for rank, p in enumerate(shown, 1)
    )
    details = []
    for rank, p in enumerate(shown, 1):
        cells = "".join(
            f"<h4>{e(c.grade_id)}: {c.score:.2f}</h4><div class=side>"
            f"<div><b>{e(p.first)}</b><pre>{c.left}</pre></div>"
            f"<div><b>{e(p.second)}</b><pre>{c.right}</pre></div></div>"
            for c in p.cells
        )
        details.append(
            f'<section id="pair-{rank}"><h3>{rank}. {e(p.first)} &amp; {e(p.second)}: {p.score:.2f}'
            f"{' <span class=flag>flagged</span>' if p.flagged else ''}</h3>{cells or '<p>no answer cell in common</p>'}</section>"
        )
    notes = "".join(f"<li>{e(sid)}: {e(note)}</li>" for sid, note in sorted(result.notes.items()))
    png = histogram_png([p.score for p in result.pairs], result.threshold) if result.pairs else ""
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{e(result.aid)}: similar submissions</title>
<style>{STYLE}</style></head><body>
<h1>{e(result.aid)}: similar submissions</h1>
<p>{len(result.students)} submissions compared, {len(result.pairs)} pairs; {len(result.flagged)} flagged at a
similarity of {result.threshold:g} or more: the share of both students' own code (starter code excluded) that they have
in common, over all answers or in one answer cell, whichever is higher. Names, comments and spacing do not count, and a
few shared lines ({MIN_SHARED} normalised characters) never flag a pair. A flag is a reason to read both notebooks, not a
verdict.</p>
{f'<img alt="distribution of pair similarities" src="data:image/png;base64,{png}">' if png else ""}
<h2>Most similar pairs</h2><table><tr><th>rank</th><th>pair</th><th>similarity</th><th>shared characters</th><th></th></tr>{rows}</table>
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
<h2>Shared code</h2>{"".join(details)}
</body></html>"""


def write_similarity(
    course: Course, aid: str, threshold: float = THRESHOLD, out_dir: Path | None = None
) -> tuple[Similarity, Path, Path]:
    """Write ``similarity.html`` and ``similarity.csv`` (every pair) into ``out_dir`` (default
    ``reports/<aid>/`` of the course)."""
    result = find_similar(course, aid, threshold)
    out_dir = Path(out_dir) if out_dir else course.root / "reports" / aid
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "similarity.html"
    page.write_text(render(result), encoding="utf-8")
    header = ["rank", "student_a", "student_b", "similarity", "overall", "shared", "flagged", "cells"]
    rows = [
        [rank, p.first, p.second, f"{p.score:.3f}", f"{p.overall:.3f}", p.shared, int(p.flagged),
         "; ".join(f"{c.grade_id}={c.score:.3f}" for c in p.cells)]
        for rank, p in enumerate(result.pairs, 1)
    ]  # fmt: skip
    table = write_csv(out_dir / "similarity.csv", header, rows)
    return result, page, table
