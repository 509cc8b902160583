"""Similarity: submissions unusually alike each other, the published solutions or earlier terms' work, for
a person to look at.

What is compared is what each student wrote: the answer cells (found by ``grade_id``, or by content where the
metadata was lost, as :func:`autograder.intake.repair.repair` finds them) and every other code cell the student
added or changed against the release, so a solution moved out of its answer cell is still seen. Code is
compared with copydetect's winnowing (the fingerprinting of MOSS). Why copydetect: it tokenises code first
(names, strings, comments and whitespace are normalised, so renaming does not hide a copy), removes the
release's own starter code as boilerplate, and marks the overlapping regions; a hand-rolled ``difflib`` ratio
does none of that, and JPlag (a Java program) and MOSS (an online service that would receive students' code)
cannot run inside this pipeline. Written answers (prose) are compared as lower-cased words, not tokenised as
Python (which would turn every sentence into the same run of names).

A pair's similarity is the share of both students' own code (everything but the starter code) that the two
have in common, over everything they wrote or in a single answer cell, whichever is higher: a copy of one
hard cell among honest ones counts. Pairs at or above the threshold are flagged; a flag is a reason to read
both notebooks, never a verdict.

The solutions are public (``source/`` is in the course's repository), so every submission is also compared
with reference documents that are never compared with each other (copydetect's notion of reference files):
the published solution of each answer cell, and optionally an archive of earlier terms' submissions
(``--archive DIR``, every notebook under it). A match with the published solution is scored by how much of
the solution's own code (starter code excluded) appears in what the student wrote, and flagged by name
("matches the published solution of A1.knn, 0.93").

Every input is bounded: a notebook is read as :func:`autograder.intake.repair.parse_notebook` reads it (no links,
at most its byte cap), a student's code is compared up to :data:`MAX_COMPARED_CHARS` per cell, and the page
shows at most :data:`SHOWN_CHARS` of a cell and the :data:`MAX_DETAILED` most alike pairs in full. A
notebook that cannot be read is left out with a note; it never stops the report for the others.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import numpy as np
from copydetect import defaults
from copydetect.detector import CodeFingerprint, compare_files
from copydetect.utils import filter_code, hashed_kgrams, highlight_overlap

from autograder.course import Course, is_solution, nbgrader_meta
from autograder.intake.repair import repair
from autograder.intake.sanitize import PAGE_CSP_META
from autograder.outputs.export import write_csv

NOISE = defaults.NOISE_THRESHOLD  # shortest run of normalised characters that counts as shared (k)
WINDOW = defaults.GUARANTEE_THRESHOLD - NOISE + 1  # runs this long are always found
# A pair is flagged when at least half of the two students' own code (in all, or in one answer cell) is
# shared, and that share is more than a few lines: honest solutions of a small exercise share idioms (a
# loop over range, a matrix product), which stays well below half once the starter code is gone; a copy
# with renamed variables stays near 1, because names are normalised away before comparing.
THRESHOLD = 0.5
MIN_SHARED = 4 * NOISE  # normalised characters in common, below which nothing is flagged
# A match with a published solution: this share of the solution's own code found in what a student wrote.
# Higher than between students: a short solution leaves few ways to write it, and an honest answer may
# share half of its idioms; a paste, renamed and reordered, keeps nearly all of it.
REFERENCE_THRESHOLD = 0.8
SHOWN = 20  # pairs with their code on the page (the CSV lists every pair)
MAX_DETAILED = 40  # at most this many pairs (flagged first) with their code on the page
MAX_COMPARED_CHARS = 100_000  # of one cell; the rest is not compared (and a note says so)
SHOWN_CHARS = 6_000  # of one cell on the page
MAX_ARCHIVE = 2_000  # archived notebooks read at most
OTHER = "other cells"  # the code cells a student added or changed outside the answer cells
PROSE = "prose"  # the language of written answers


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
    second: str  # a student, or a reference document's name
    overall: float  # shared share of both sides' code over all they wrote
    shared: int  # normalised characters in common, both sides together
    cells: list[CellMatch] = field(default_factory=list)
    flagged: bool = False
    kind: str = "students"  # or "published" (second is a published solution) or "archive"
    threshold: float = THRESHOLD

    @property
    def score(self) -> float:
        """The overall share, or the share in the most alike answer cell if that is higher."""
        return max([self.overall, *(c.score for c in self.cells)])

    def reaches(self, threshold: float | None = None) -> str:
        """Why the pair is flagged at ``threshold`` ("" if it is not): enough code shared, in all or in a cell."""
        threshold = self.threshold if threshold is None else threshold
        if self.kind == "published":
            if self.overall >= threshold and self.shared >= MIN_SHARED:
                return f"matches {self.second}, {self.overall:.2f}"
            return ""
        if self.overall >= threshold and self.shared >= MIN_SHARED:
            alike = f"{self.overall:.2f} of their answers alike"
            return alike if self.kind == "students" else f"matches {self.second}: {alike}"
        cells = [c for c in self.cells if c.score >= threshold and c.shared >= MIN_SHARED]
        found = "; ".join(f"answer {c.grade_id}: {c.score:.2f} alike" for c in cells)
        return found if self.kind == "students" or not found else f"matches {self.second}: {found}"


@dataclass
class Similarity:
    aid: str
    threshold: float
    pairs: list[Pair]  # every pair of students with answers, highest score first
    students: list[str]  # those compared
    notes: dict[str, str] = field(default_factory=dict)  # student -> why left out, or how answers were found
    references: list[Pair] = field(default_factory=list)  # student vs published solution or archive

    @property
    def flagged(self) -> list[Pair]:
        return [p for p in self.pairs if p.flagged]

    @property
    def flagged_references(self) -> list[Pair]:
        return [p for p in self.references if p.flagged]


@dataclass
class Written:
    """What one notebook's author wrote: key (a ``grade_id`` or :data:`OTHER`) -> (text, language)."""

    cells: dict[str, tuple[str, str]]
    note: str = ""

    def code(self) -> str:
        """All the code, answers and other cells together, in the notebook's order."""
        return "\n\n".join(text for text, language in self.cells.values() if language == "python")


def _bounded(text: str, notes: list[str], key: str) -> str:
    if len(text) <= MAX_COMPARED_CHARS:
        return text
    notes.append(f"{key}: only the first {MAX_COMPARED_CHARS:,} of {len(text):,} characters compared")
    return text[:MAX_COMPARED_CHARS]


def written(course: Course, aid: str, path: Path, release_code: set[str], nb: str | None = None) -> Written:
    """What the author of the notebook at ``path`` wrote: the answer cells that differ from the release, and
    the other code cells that are not the release's own. Nothing here runs student code, and nothing here
    raises for what a notebook holds: a notebook that cannot be read comes back empty, with the reason."""
    try:
        repaired = repair(course, aid, path, nb)
    except Exception as err:  # a notebook repair cannot handle: this report goes on for the others
        return Written({}, f"not compared: could not be read ({type(err).__name__})")
    if repaired.fatal:
        return Written({}, f"not compared: {repaired.fatal}")
    notes = [n for n in repaired.notes if "found by its content" in n]
    cells: dict[str, tuple[str, str]] = {}
    others = []
    for cell in repaired.notebook.cells:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if is_solution(cell):
            if repaired.answered.get(gid):
                language = PROSE if cell.cell_type == "markdown" else "python"
                cells[gid] = (_bounded(cell.source, notes, gid), language)
        elif not meta and cell.cell_type == "code" and cell.source.strip() not in release_code:
            if cell.source.strip():
                others.append(cell.source)
    if others:
        cells[OTHER] = (_bounded("\n\n".join(others), notes, OTHER), "python")
    return Written(cells, "; ".join(notes))


def answers(course: Course, aid: str, path: Path, nb: str | None = None) -> tuple[dict[str, str], str]:
    """The student's answer cells and other added or changed code cells (key -> text), and a note."""
    found = written(course, aid, path, release_code_cells(course, aid, nb), nb)
    return {key: text for key, (text, _) in found.cells.items()}, found.note


def release_code_cells(course: Course, aid: str, nb: str | None = None) -> set[str]:
    release = nbformat.read(str(course.release_notebook(aid, nb)), as_version=4)
    return {cell.source.strip() for cell in release.cells if cell.cell_type == "code"}


def _prose(text: str) -> str:
    """A written answer as it is compared: lower-cased words separated by single spaces."""
    return " ".join(text.lower().split())


def starter_hashes(course: Course, aid: str, nb: str | None = None) -> np.ndarray:
    """Fingerprints of every cell of the release (signatures, docstrings, stubs, given code, prompts). All
    k-grams, not only the winnowed ones: a student's own winnowing may pick any of them."""
    release = nbformat.read(str(course.release_notebook(aid, nb)), as_version=4)
    hashes = [
        hashed_kgrams(filter_code(cell.source, "starter.py", "python")[0], NOISE)
        if cell.cell_type == "code"
        else hashed_kgrams(_prose(cell.source), NOISE)
        for cell in release.cells
    ]
    hashes = [h for h in hashes if len(h)]
    return np.unique(np.concatenate(hashes)) if hashes else np.array([], dtype=np.int64)


def fingerprint(
    sid: str, grade_id: str, code: str, boilerplate: np.ndarray, language: str = "python"
) -> CodeFingerprint:
    if language == PROSE:
        return CodeFingerprint(
            f"{sid}/{grade_id}.txt", NOISE, WINDOW, boilerplate, filter=False, fp=io.StringIO(_prose(code))
        )
    return CodeFingerprint(
        f"{sid}/{grade_id}.py", NOISE, WINDOW, boilerplate, language="python", fp=io.StringIO(code)
    )


def _marked(code: str, slices) -> str:
    """The code as HTML, shared regions in <mark>, cut at :data:`SHOWN_CHARS`."""
    shown = code[:SHOWN_CHARS]
    more = f"\n… ({len(code) - SHOWN_CHARS:,} more characters not shown)" if len(code) > SHOWN_CHARS else ""
    slices = np.asarray(slices, dtype=int) if np.size(slices) else np.zeros((2, 0), dtype=int)
    if slices.size:
        keep = slices[0] < len(shown)
        slices = np.minimum(slices[:, keep], len(shown))
    if not slices.size:
        return html.escape(shown) + html.escape(more)
    return highlight_overlap(shown, slices, "<mark>", "</mark>", escape_html=True)[0] + html.escape(more)


def compare_pair(
    first: str,
    second: str,
    prints: dict[str, dict[str, CodeFingerprint]],
    wholes: dict[str, CodeFingerprint] | None = None,
) -> Pair:
    """Every answer cell of two students; cells only one of them answered count as unshared code. With
    ``wholes`` (each one's code, all its cells together), the code's part of the overall share is that of
    the wholes, which finds a copy wherever in the notebook it was moved; written answers count cell by cell."""
    shared = {"python": 0.0, PROSE: 0.0}
    own = {"python": 0.0, PROSE: 0.0}
    cells = []
    for grade_id in sorted(set(prints[first]) | set(prints[second])):
        a, b = prints[first].get(grade_id), prints[second].get(grade_id)
        language = PROSE if _is_prose(a or b) else "python"
        own[language] += (a.token_coverage if a else 0) + (b.token_coverage if b else 0)
        if not (a and b) or not a.token_coverage or not b.token_coverage:
            continue
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(a, b)
        common = share_a * a.token_coverage + share_b * b.token_coverage
        shared[language] += common
        cells.append(
            CellMatch(
                grade_id,
                float(common / (a.token_coverage + b.token_coverage)),
                round(common),
                _marked(a.raw_code, slices_a),
                _marked(b.raw_code, slices_b),
            )
        )
    whole_a, whole_b = (wholes or {}).get(first), (wholes or {}).get(second)
    if whole_a and whole_b:
        own["python"] = whole_a.token_coverage + whole_b.token_coverage
        shared["python"] = 0.0
        if whole_a.token_coverage and whole_b.token_coverage:
            _, (share_a, share_b), _ = compare_files(whole_a, whole_b)
            shared["python"] = share_a * whole_a.token_coverage + share_b * whole_b.token_coverage
    total_shared, total_own = sum(shared.values()), sum(own.values())
    return Pair(
        first, second, float(total_shared / total_own) if total_own else 0.0, round(total_shared), cells
    )


def _is_prose(fp: CodeFingerprint) -> bool:
    return fp.filename.endswith(".txt")


def published_solutions(course: Course, aid: str, nb: str | None = None) -> dict[str, tuple[str, str]]:
    """Each answer cell's published solution (grade_id -> (text, language)): the source's solution code,
    and for a written answer its model answer."""
    found = {}
    for cell in course.read_source(aid, nb).cells:
        if not is_solution(cell):
            continue
        text = "\n".join(
            line
            for line in cell.source.splitlines()
            if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
        )
        if cell.cell_type == "markdown":
            model = re.split(r"\*\*Model answer:?\*\*:?", text, maxsplit=1)
            found[nbgrader_meta(cell)["grade_id"]] = (model[-1], PROSE)
        else:
            found[nbgrader_meta(cell)["grade_id"]] = (text, "python")
    return found


def compare_published(sid: str, aid: str, gid: str, solution: CodeFingerprint, mine: CodeFingerprint) -> Pair:
    """How much of a published solution's own code is in what a student wrote (``mine``: all their code,
    or their written answer to the same question)."""
    name = f"the published solution of {aid}.{gid}"
    if not solution.token_coverage or not mine.token_coverage:
        return Pair(sid, name, 0.0, 0, kind="published", threshold=REFERENCE_THRESHOLD)
    _, (share_mine, share_solution), (slices_mine, slices_solution) = compare_files(mine, solution)
    covered = share_solution * solution.token_coverage
    cell = CellMatch(
        gid,
        float(share_solution),
        round(covered),
        _marked(mine.raw_code, slices_mine),
        _marked(solution.raw_code, slices_solution),
    )
    return Pair(
        sid, name, float(share_solution), round(covered), [cell] if covered else [], kind="published",
        threshold=REFERENCE_THRESHOLD,
    )  # fmt: skip


def archived_notebooks(archive: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name, path) of every notebook under ``archive`` (regular files only: links are not followed), at
    most :data:`MAX_ARCHIVE`, and notes about what was left out."""
    found, notes = [], []
    for folder, dirs, files in os.walk(archive, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if not name.endswith(".ipynb") or ".ipynb_checkpoints" in path.parts or path.is_symlink():
                continue
            if len(found) == MAX_ARCHIVE:
                notes.append(
                    f"the archive holds more than {MAX_ARCHIVE} notebooks; the rest were not compared"
                )
                return found, notes
            found.append((path.relative_to(archive).with_suffix("").as_posix(), path))
    return found, notes


def find_similar(
    course: Course,
    aid: str,
    threshold: float = THRESHOLD,
    students: list[str] | None = None,
    archive: Path | None = None,
    nb: str | None = None,
) -> Similarity:
    """Compare every pair of submissions of ``aid`` (of its notebook ``nb``, for an assignment of several)
    and rank them, most alike first; compare each one with the published solutions and the notebooks of
    ``archive``, if given."""
    boilerplate = starter_hashes(course, aid, nb)
    release_code = release_code_cells(course, aid, nb)
    notes: dict[str, str] = {}
    prints: dict[str, dict[str, CodeFingerprint]] = {}
    wholes: dict[str, CodeFingerprint] = {}

    def read(name: str, path: Path) -> bool:
        found = written(course, aid, path, release_code, nb)
        if found.note:
            notes[name] = found.note
        if not found.cells:
            notes.setdefault(name, "not compared: no answer differs from the release")
            return False
        prints[name] = {
            key: fingerprint(name, key, text, boilerplate, language)
            for key, (text, language) in found.cells.items()
        }
        code = found.code()
        if code:
            wholes[name] = fingerprint(name, "all", code, boilerplate)
        return True

    compared = sorted(
        sid
        for sid, path in course.submitted(aid, nb).items()
        if (not students or sid in students) and read(sid, path)
    )
    pairs = [compare_pair(a, b, prints, wholes) for a, b in itertools.combinations(compared, 2)]
    pairs.sort(key=lambda p: (-p.score, -p.overall, p.first, p.second))
    for pair in pairs:
        pair.flagged = bool(pair.reaches(threshold))

    fingerprints = Compared(compared, prints, wholes)
    references = _against_published(course, aid, nb, boilerplate, fingerprints)
    if archive is not None:
        references += _against_archive(Path(archive), threshold, read, fingerprints, notes)
    for pair in references:
        pair.flagged = bool(pair.reaches())
    references.sort(key=lambda p: (-p.flagged, -p.score, p.first, p.second))
    return Similarity(aid, threshold, pairs, compared, notes, references)


@dataclass(frozen=True)
class Compared:
    """The submissions compared (``students``) and the fingerprints read so far: ``prints``, each one's
    answers by cell; ``wholes``, each one's code as one program. Reading an archived notebook adds to both."""

    students: list[str]
    prints: dict[str, dict[str, CodeFingerprint]]
    wholes: dict[str, CodeFingerprint]


def _against_published(course, aid, nb, boilerplate, compared: Compared) -> list[Pair]:
    """Each compared submission against each published solution (a whole program against the code of a
    Python answer, the answer's cell otherwise)."""
    references = []
    for gid, (text, language) in published_solutions(course, aid, nb).items():
        solution = fingerprint("published", gid, text, boilerplate, language)
        for sid in compared.students:
            mine = compared.wholes.get(sid) if language == "python" else compared.prints[sid].get(gid)
            if mine is not None:
                references.append(compare_published(sid, aid, gid, solution, mine))
    return references


def _against_archive(archive: Path, threshold: float, read, compared: Compared, notes) -> list[Pair]:
    """Each compared submission against each readable notebook of an earlier term's ``archive``."""
    references = []
    archived, archive_notes = archived_notebooks(archive)
    for note in archive_notes:
        notes[f"archive {archive}"] = note
    for name, path in archived:
        label = f"archive: {name}"
        if not read(label, path):
            continue
        for sid in compared.students:
            pair = compare_pair(sid, label, compared.prints, compared.wholes)
            references.append(replace_kind(pair, "archive", threshold))
    return references


def replace_kind(pair: Pair, kind: str, threshold: float) -> Pair:
    pair.kind, pair.threshold = kind, threshold
    return pair


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


def _details(anchor: str, rank: int, p: Pair, first: str, second: str) -> str:
    e = html.escape
    cells = "".join(
        f"<h4>{e(c.grade_id)}: {c.score:.2f}</h4><div class=side>"
        f"<div><b>{e(first)}</b><pre>{c.left}</pre></div>"
        f"<div><b>{e(second)}</b><pre>{c.right}</pre></div></div>"
        for c in p.cells
    )
    return (
        f'<section id="{anchor}-{rank}"><h3>{rank}. {e(p.first)} &amp; {e(p.second)}: {p.score:.2f}'
        f"{' <span class=flag>flagged</span>' if p.flagged else ''}</h3>{cells or '<p>no answer cell in common</p>'}</section>"
    )


def render(result: Similarity) -> str:
    e = html.escape
    shown = result.pairs[: min(max(SHOWN, len(result.flagged)), MAX_DETAILED)]
    rows = "".join(
        f'<tr><td>{rank}</td><td><a href="#pair-{rank}">{e(p.first)} &amp; {e(p.second)}</a></td>'
        f"<td>{p.score:.2f}</td><td>{p.shared}</td>"
        f"<td>{f'<span class=flag>flagged</span>: {e(p.reaches(result.threshold))}' if p.flagged else ''}</td></tr>"
        for rank, p in enumerate(shown, 1)
    )
    details = [_details("pair", rank, p, p.first, p.second) for rank, p in enumerate(shown, 1)]
    matches = result.flagged_references[:MAX_DETAILED]
    match_rows = "".join(
        f'<tr><td><a href="#match-{rank}">{e(p.first)}</a></td><td class=flag>{e(p.reaches())}</td></tr>'
        for rank, p in enumerate(matches, 1)
    )
    match_details = [_details("match", rank, p, p.first, p.second) for rank, p in enumerate(matches, 1)]
    left_out = len(result.flagged_references) - len(matches)
    notes = "".join(f"<li>{e(sid)}: {e(note)}</li>" for sid, note in sorted(result.notes.items()))
    png = histogram_png([p.score for p in result.pairs], result.threshold) if result.pairs else ""
    more = len(result.flagged) - len(shown) if len(result.flagged) > len(shown) else 0
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">
{PAGE_CSP_META}
<title>{e(result.aid)}: similar submissions</title>
<style>{STYLE}</style></head><body>
<h1>{e(result.aid)}: similar submissions</h1>
<p>{len(result.students)} submissions compared, {len(result.pairs)} pairs; {len(result.flagged)} flagged at a
similarity of {result.threshold:g} or more: the share of both students' own code (starter code excluded) that they have
in common, over everything they wrote (answer cells and any other cell they added or changed) or in one answer cell,
whichever is higher. Names, comments and spacing do not count, and a few shared lines ({MIN_SHARED} normalised characters)
never flag a pair. A flag is a reason to read both notebooks, not a verdict.</p>
{f'<img alt="distribution of pair similarities" src="data:image/png;base64,{png}">' if png else ""}
<h2>Matches with the published solutions{" and the archive" if any(p.kind == "archive" for p in result.references) else ""}</h2>
<p>The solutions of this course are public. A submission is flagged when {REFERENCE_THRESHOLD:g} or more of a published
solution's own code (starter code excluded) appears in what it wrote, or when it shares {result.threshold:g} of its code
with a notebook of the archive of earlier terms.</p>
{f"<table><tr><th>student</th><th>match</th></tr>{match_rows}</table>" if matches else "<p>No submission matches them.</p>"}
{f"<p>{left_out} more matches are in the CSV file.</p>" if left_out else ""}
<h2>Most similar pairs</h2><table><tr><th>rank</th><th>pair</th><th>similarity</th><th>shared characters</th><th></th></tr>{rows}</table>
{f"<p>{more} more flagged pairs are in the CSV file.</p>" if more else ""}
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
<h2>Shared code</h2>{"".join(details)}
{f"<h2>Code that matches a published solution or the archive</h2>{''.join(match_details)}" if match_details else ""}
</body></html>"""


def write_similarity(
    course: Course,
    aid: str,
    threshold: float = THRESHOLD,
    out_dir: Path | None = None,
    archive: Path | None = None,
    nb: str | None = None,
) -> tuple[Similarity, Path, Path]:
    """Write ``similarity.html`` and ``similarity.csv`` (every pair, and every comparison with a published
    solution or an archived notebook) into ``out_dir`` (default ``reports/<aid>/`` of the course); for the
    notebook ``nb`` of an assignment of several, ``similarity-<nb>.html`` and ``.csv``."""
    result = find_similar(course, aid, threshold, archive=archive, nb=nb)
    out_dir = Path(out_dir) if out_dir else course.root / "reports" / aid
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = (
        f"-{nb}"
        if nb is not None and course.notebooks(aid) != [aid] and len(course.notebooks(aid)) > 1
        else ""
    )
    page = out_dir / f"similarity{suffix}.html"
    page.write_text(render(result), encoding="utf-8")
    header = [
        "rank",
        "student_a",
        "student_b",
        "similarity",
        "overall",
        "shared",
        "flagged",
        "cells",
        "kind",
        "reason",
    ]
    rows = [
        [rank, p.first, p.second, f"{p.score:.3f}", f"{p.overall:.3f}", p.shared, int(p.flagged),
         "; ".join(f"{c.grade_id}={c.score:.3f}" for c in p.cells), p.kind, p.reaches() if p.flagged else ""]
        for rank, p in enumerate(result.pairs + result.references, 1)
    ]  # fmt: skip
    table = write_csv(out_dir / f"similarity{suffix}.csv", header, rows)
    return result, page, table
