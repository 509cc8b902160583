"""Read a submitted notebook defensively and rebuild the notebook that will run.

Nothing here executes student code. The result keeps the student's own code cells in the student's
order, and takes everything else from the source: the graded test cells (with their hidden tests) and
the read-only cells (set-up, imports) are inserted from the source, each after the last of the
student's answers that precedes it in the source. Answers are found by their nbgrader ``grade_id``, or,
where Colab, copy-paste or another editor lost the metadata, by their content (the function signatures
and docstrings that the release shows). A written answer (a markdown answer cell, graded by hand) stays
markdown, never runs, and follows its read-only prompt, as formgrader shows it. Every repair is
reported; a notebook that cannot be read at all gets a clear reason instead of a silent zero. The steps that decide
which cell is which are declared, in order, in :data:`REPAIR_STEPS`; :func:`build_notebook` then assembles.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook

from autograder.course import Course, is_solution, nbgrader_meta
from autograder.files import read_bytes_bounded

MAX_NOTEBOOK_BYTES = 32 * 2**20
MATCH_THRESHOLD = 0.6


@dataclass
class Repaired:
    notebook: nbformat.NotebookNode | None
    fatal: str | None = None
    notes: list[str] = field(default_factory=list)
    answered: dict[str, bool] = field(default_factory=dict)  # solution grade_id -> changed from the stub


def _text(source) -> str:
    """A cell's source as nbformat allows it (a string, or a list of strings); anything else is empty."""
    if isinstance(source, list):
        source = "".join(s for s in source if isinstance(s, str))
    if not isinstance(source, str):
        return ""
    # JSON may carry lone surrogates, which no UTF-8 file can hold: the notebook must stay writable
    return source.encode("utf-8", errors="replace").decode("utf-8")


def _brief(value, limit: int = 40) -> str:
    """A value from the student's file, short enough for a reason line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_notebook(read: tuple[bytes | None, str | None]) -> tuple[dict | None, str | None, list[str]]:
    """Parse a submission's bytes (``(data, None)``, or ``(None, why they could not be read)``) as JSON into
    a version-4 notebook dict: ``(notebook, fatal_reason, notes)``. Whatever the file holds (any nesting, any
    types), the answer is a notebook or a reason, never an exception: a malformed notebook is the student's
    ``unreadable``, not a failure of the grader."""
    notes: list[str] = []
    raw, fatal = read
    if fatal:
        return None, fatal, notes
    if not raw.strip():
        return None, "the file is empty", notes
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as err:
        return None, f"not a notebook: invalid JSON ({err.msg}, line {err.lineno} column {err.colno})", notes
    except RecursionError:
        return None, "not a notebook: its JSON is nested too deeply to read", notes
    except ValueError as err:  # e.g. an integer longer than Python converts
        return None, f"not a notebook: {_brief(str(err), 80)}", notes
    if not isinstance(data, dict):
        return None, "not a notebook: the JSON is not an object", notes
    major = data.get("nbformat")
    if major == 3 or "worksheets" in data:
        try:
            data = nbformat.convert(nbformat.from_dict(data), 4)
            notes.append("upgraded from notebook format 3")
        except Exception as err:  # a malformed v3 file: nbformat raises many kinds (RecursionError too)
            return None, f"notebook format 3 that cannot be upgraded ({type(err).__name__})", notes
    elif major != 4 or isinstance(major, bool):
        return None, f"unsupported notebook format {_brief(major)} (expected 4)", notes
    if not isinstance(data.get("cells"), list):
        return None, "not a notebook: it has no list of cells", notes
    return data, None, notes


# The nbgrader metadata fields repair reads, with the type each must have; a field of another type
# (``"grade_id": []``, ``"points": "ten"``) is treated as missing, and said so.
NBGRADER_FIELDS = {
    "grade_id": str,
    "solution": bool,
    "grade": bool,
    "locked": bool,
    "task": bool,
    "points": (int, float),
    "schema_version": int,
}


def _nbgrader_fields(metadata, number: int, notes: list[str]) -> dict:
    """The student's nbgrader metadata of one cell, each field of the type nbgrader gives it."""
    nbg = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    if not isinstance(nbg, dict):
        return {}
    kept, wrong = {}, []
    for key, kind in NBGRADER_FIELDS.items():
        if key not in nbg:
            continue
        value = nbg[key]
        if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
            kept[key] = value
        else:
            wrong.append(key)
    if wrong:
        notes.append(f"cell {number}: nbgrader metadata of the wrong type ({', '.join(wrong)}) was ignored")
    return kept


def _student_cells(data: dict, notes: list[str]) -> list[dict]:
    cells = []
    for number, cell in enumerate(data["cells"], 1):
        kind = cell.get("cell_type") if isinstance(cell, dict) else None
        if kind not in ("code", "markdown", "raw") or not isinstance(kind, str):
            notes.append(f"cell {number} is not a valid cell and was skipped")
            continue
        cells.append(
            {
                "type": kind,
                "source": _text(cell.get("source")),
                "nbgrader": _nbgrader_fields(cell.get("metadata"), number, notes),
                "number": number,
            }
        )
    return cells


def _signature_lines(release_source: str) -> set[str]:
    """The lines a student leaves alone in an answer cell: signatures, docstrings, given code."""
    skip = {"# YOUR CODE HERE", "raise NotImplementedError()", "raise NotImplementedError"}
    return {line.strip() for line in release_source.splitlines() if line.strip() and line.strip() not in skip}


def _similarity(signature: set[str], text: str) -> float:
    if not signature:
        return 0.0
    lines = {line.strip() for line in text.splitlines()}
    return len(signature & lines) / len(signature)


def _prompt_of(source: nbformat.NotebookNode, index: int):
    """The read-only markdown prompt just before a written answer (a markdown answer cell), or None."""
    if source.cells[index].cell_type != "markdown" or index == 0:
        return None
    before = source.cells[index - 1]
    return before if before.cell_type == "markdown" and not is_solution(before) else None


@dataclass(frozen=True)
class Template:
    """What a hand-in of one notebook is rebuilt from: its source and release, parsed once per batch, and the
    cells' ids read from them."""

    source: nbformat.NotebookNode
    release: nbformat.NotebookNode

    @classmethod
    def read(cls, course: Course, aid: str, nb: str | None = None) -> Template:
        return cls(
            course.read_source(aid, nb), nbformat.read(str(course.release_notebook(aid, nb)), as_version=4)
        )

    @functools.cached_property
    def source_ids(self) -> list:
        return [nbgrader_meta(c).get("grade_id") for c in self.source.cells]

    @functools.cached_property
    def solution_ids(self) -> list[str]:
        return [gid for c, gid in zip(self.source.cells, self.source_ids) if is_solution(c)]

    @functools.cached_property
    def fixed_ids(self) -> set[str]:
        return {gid for c, gid in zip(self.source.cells, self.source_ids) if gid and not is_solution(c)}

    @functools.cached_property
    def release_by_id(self) -> dict:
        return {
            nbgrader_meta(c).get("grade_id"): c
            for c in self.release.cells
            if nbgrader_meta(c).get("grade_id")
        }

    def signature(self, gid: str) -> set[str]:
        """The lines the release gave the cell ``gid`` (none for a cell the release lacks)."""
        return _signature_lines(_text(self.release_by_id[gid].source)) if gid in self.release_by_id else set()

    def original(self, gid: str):
        return self.source.cells[self.source_ids.index(gid)]


@dataclass
class Matching:
    """The student's cells on their way through :data:`REPAIR_STEPS`: which answer each is, which are dropped."""

    template: Template
    student: list[dict]
    notes: list[str]
    matched: dict[str, int] = field(default_factory=dict)  # solution grade_id -> index of the student's cell
    dropped: set[int] = field(default_factory=set)  # copies of fixed cells: the source's versions are used

    def free(self, index: int) -> bool:
        return index not in self.matched.values() and index not in self.dropped


def match_by_id(m: Matching) -> None:
    """Answers by grade_id (intact metadata). Several cells with one id: the last one counts, as it would when
    the notebook runs top to bottom; the others stay as ordinary code."""
    for index, cell in enumerate(m.student):
        gid = cell["nbgrader"].get("grade_id")
        if gid in m.template.solution_ids:
            if gid in m.matched:
                m.notes.append(f"the answer cell {gid} appears more than once; the last copy is graded")
            m.matched[gid] = index


def drop_fixed_copies(m: Matching) -> None:
    """Cells that carry a test or read-only cell's id are dropped (the source's versions are used)."""
    for index, cell in enumerate(m.student):
        if cell["nbgrader"].get("grade_id") in m.template.fixed_ids and m.free(index):
            m.dropped.add(index)


def _by_prompt(m: Matching, gid: str) -> int | None:
    """A written answer (markdown) whose metadata was lost: the cell after the read-only prompt that precedes
    it in the source, which the student's copy shows unchanged."""
    prompt = _prompt_of(m.template.source, m.template.source_ids.index(gid))
    if prompt is None:
        return None
    found = next(
        (i + 1 for i, cell in enumerate(m.student[:-1])
         if cell["type"] == "markdown" and cell["source"].strip() == _text(prompt.source).strip()),
        None,
    )  # fmt: skip
    if (
        found is not None
        and m.free(found)
        and m.student[found]["type"] == "markdown"
        and m.student[found]["nbgrader"].get("grade_id") not in m.template.solution_ids
    ):
        return found
    return None


def _by_signature(m: Matching, gid: str) -> int | None:
    """The free cell that keeps most of the lines the release gave the answer ``gid``, if enough of them."""
    signature = m.template.signature(gid)
    best, best_score = None, 0.0
    for index, cell in enumerate(m.student):
        if not m.free(index) or cell["nbgrader"].get("grade_id") in m.template.solution_ids:
            continue
        score = _similarity(signature, cell["source"])
        if score > best_score:
            best, best_score = index, score
    return best if best is not None and best_score >= MATCH_THRESHOLD else None


def match_by_content(m: Matching) -> None:
    """Answers whose metadata was lost: a written answer by its prompt, any answer by the lines the release
    gave it; an answer found neither way is missing, and said so."""
    for gid in m.template.solution_ids:
        if gid in m.matched:
            continue
        found = _by_prompt(m, gid)
        found = found if found is not None else _by_signature(m, gid)
        if found is not None:
            m.matched[gid] = found
            m.notes.append(
                f"the answer cell {gid} had lost its nbgrader metadata and was found by its content"
            )
        else:
            m.notes.append(
                f"the answer cell {gid} is missing (deleted, or changed beyond recognition): graded as not done"
            )


def drop_unlabelled_copies(m: Matching) -> None:
    """A code cell that is (nine tenths of) a copy of a read-only or test cell is dropped: the original runs."""
    fixed = {
        gid: m.template.signature(gid) for gid in m.template.fixed_ids if gid in m.template.release_by_id
    }
    for index, cell in enumerate(m.student):
        if not m.free(index) or cell["type"] != "code":
            continue
        for gid, signature in fixed.items():
            if signature and _similarity(signature, cell["source"]) >= 0.9:
                m.dropped.add(index)
                if not cell["nbgrader"]:
                    m.notes.append(
                        f"a copy of the read-only cell {gid} without metadata was replaced by the original"
                    )
                break


def report_tampered(m: Matching) -> None:
    """Tampered metadata of a dropped fixed cell is reported; points and tests always come from the source."""
    for index, cell in enumerate(m.student):
        nbg = cell["nbgrader"]
        gid = nbg.get("grade_id")
        if gid in m.template.fixed_ids and index in m.dropped and nbg:
            original = nbgrader_meta(m.template.original(gid))
            keys = ("grade", "solution", "locked", "points", "schema_version")
            changed = sorted(k for k in keys if nbg.get(k) != original.get(k))
            if changed:
                m.notes.append(
                    f"nbgrader metadata of {gid} was changed ({', '.join(changed)}); the source's was used"
                )


# The steps that decide which of the student's cells is which, in order; then :func:`build_notebook`.
REPAIR_STEPS = (
    ("answers by grade_id", match_by_id),
    ("copies of fixed cells dropped", drop_fixed_copies),
    ("answers by content", match_by_content),
    ("unlabelled copies dropped", drop_unlabelled_copies),
    ("tampered metadata reported", report_tampered),
)


def _answer_cell(m: Matching, gid: str, cell: dict) -> list:
    """The cells that stand for the student's answer ``gid``: the answer with the source's metadata (a
    written answer stays markdown, after its prompt, and never runs)."""
    original = m.template.original(gid)
    if original.cell_type == "markdown":
        prompt = _prompt_of(m.template.source, m.template.source_ids.index(gid))
        before = [copy.deepcopy(prompt)] if prompt is not None else []
        return [*before, new_cell("markdown", cell["source"], copy.deepcopy(original.metadata))]
    if cell["type"] != "code":
        m.notes.append(f"the answer cell {gid} had been turned into {cell['type']}; it was run as code")
    return [new_cell("code", cell["source"], copy.deepcopy(original.metadata))]


def new_cell(cell_type: str, source: str, metadata=None) -> nbformat.NotebookNode:
    """A cell as ``nbformat.v4.new_*_cell`` makes it, but with no id yet and not validated alone: whoever makes
    one validates the notebook, whole (jsonschema's check of each cell alone was most of a repair's time)."""
    node = nbformat.NotebookNode(
        cell_type=cell_type, metadata=metadata or nbformat.NotebookNode(), source=source
    )
    if cell_type == "code":
        node.execution_count, node.outputs = None, []
    return node


def build_notebook(m: Matching) -> tuple[nbformat.NotebookNode, dict[str, bool]]:
    """The notebook to run: the student's cells in their order, the source's fixed cells inserted, each after
    the last of the student's answers that precedes it in the source; and which answers changed the stub."""
    insert_after: dict[int, list] = {}
    last_anchor = -1
    for cell, gid in zip(m.template.source.cells, m.template.source_ids):
        if is_solution(cell):
            last_anchor = max(last_anchor, m.matched.get(gid, -1))
        elif cell.cell_type == "code":
            insert_after.setdefault(last_anchor, []).append(copy.deepcopy(cell))
    answer_at = {index: gid for gid, index in m.matched.items()}
    cells = list(insert_after.get(-1, []))
    answered = {gid: False for gid in m.template.solution_ids}
    for index, cell in enumerate(m.student):
        if index in answer_at:
            gid = answer_at[index]
            cells += _answer_cell(m, gid, cell)
            stub = _text(m.template.release_by_id.get(gid, {}).get("source", ""))
            answered[gid] = cell["source"].strip() != stub.strip()
        elif index not in m.dropped and cell["type"] == "code":
            cells.append(new_cell("code", cell["source"]))
        cells.extend(insert_after.get(index, []))
    taken = {c.get("id") for c in cells}
    # ids for the student's cells, and a source's of nbformat 4.4 or older (4.5 needs them)
    for index, cell in enumerate(cells):
        if not cell.get("id"):
            cell["id"] = next(
                f"cell-{index}-{n}" for n in range(len(cells) + 1) if f"cell-{index}-{n}" not in taken
            )
    return new_notebook(cells=cells, metadata=copy.deepcopy(m.template.source.metadata)), answered


def rebuild(template: Template, raw: tuple[bytes | None, str | None]) -> Repaired:
    """The notebook to run for a hand-in whose bytes are ``raw`` (as :func:`read_bytes_bounded` read them)."""
    data, fatal, notes = parse_notebook(raw)
    if fatal:
        return Repaired(None, fatal, notes)
    m = Matching(template, _student_cells(data, notes), notes)
    for _name, step in REPAIR_STEPS:
        step(m)
    nb, answered = build_notebook(m)
    return Repaired(nb, None, notes, answered)


def repair(course: Course, aid: str, submission: Path, nb: str | None = None) -> Repaired:
    """The notebook ``nb`` of ``aid`` (its only one by default) to run for the hand-in at ``submission``."""
    return rebuild(Template.read(course, aid, nb), read_bytes_bounded(submission, MAX_NOTEBOOK_BYTES))
