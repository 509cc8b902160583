"""The measurement run: a test cell that grades how code runs is run again, in a fresh sandboxed kernel, under caps
the grader sets from outside (:mod:`autograder.runner.caps`), and its cases are decided from that run.

A source marks such a cell with ``metadata.dlcourse.measure``: ``memory_mb`` (what the cell's code may allocate
beyond what the kernel holds when the cell starts), ``cpu_seconds`` (CPU time, not the wall clock), or
``cpu_factor`` (CPU time as a multiple of what the solutions took on this machine, so the cap is the same on a
faster or a slower grader). For each measured cell the grader builds a notebook of the submission's own code
(every code cell of the repaired notebook above the measured cell that is not a graded test: set-up, given code,
the student's answers and added cells, as the notebook's own run has run them when it reaches the cell, and
nothing below it; not a read-only cell the source marks ``metadata.dlcourse.not_measured``, a demonstration above
the measured cell that the feedback shows but whose work would count against its cap, nor one the grader never runs,
:func:`demonstration`) followed by the measured cell, once, under its caps (no warm-up run of it: a value computed
there could be kept and handed back; what first calls load counts against the allowance, for the solutions too).
CPU time is capped from the first cell on, memory from the measured cell on. Just before the measured cell the
grader sets ``MEASURE_SEED``, a number made from the course's secret seed, which the cell takes its inputs from:
an answer cell cannot compute their answers beforehand, outside the caps, to hand them back fast. The values the capped run records replace the cell's
recordings from the notebook's own run; a cell whose code needed more than its caps records nothing and its cases
fail, with a message that says which cap. The reference runs the same notebook with the source's solutions
(:func:`autograder.grading.reference.measure_cells`): they must pass, and what they used is kept: the CPU seconds, and
what the kernel held when the cell started, so a notebook that grows its kernel beforehand (to reuse freed memory
unseen) meets a ceiling: the solutions' baseline, the cell's allowance and :data:`SLACK_MB`.

Nothing of the kernel's is trusted here: the limits are set and read by the driver, and the values are decided
outside as every case is.
"""

from __future__ import annotations

import copy
import json

import nbformat

from autograder.course import (
    NOT_MEASURED,
    demonstration,
    is_graded_test,
    nbgrader_meta,
    read_only_marked,
)
from autograder.runner.caps import MEASURE_KEY
from autograder.runner.protocol import CASES_FILE

LEFT_OUT = (
    "# The grader does not run this cell: a demonstration that earns no points "
    "(your own run shows what it printed)."
)
SEED_NAME = "MEASURE_SEED"  # what a measured cell reads its inputs' seed from (its own default where unset)
CAPS_KEY = "caps"  # metadata.dlcourse.caps: set by the grader on the capped copy only; the driver enforces it
SLACK_MB = (
    192  # what a submission's kernel may hold beyond the solutions' before a measured cell (its imports)
)
ALLOWED = ("memory_mb", "cpu_seconds", "cpu_factor")
MIN_CPU_SECONDS = 2.0  # a CPU cap is counted in whole seconds: never less than this


def spec_of(cell) -> dict | None:
    """A test cell's declared measurement, checked: ``{"memory_mb": float, "cpu_seconds": float}`` (either)."""
    spec = cell.metadata.get("dlcourse", {}).get(MEASURE_KEY)
    if not spec:
        return None
    if not isinstance(spec, dict) or not set(spec) <= set(ALLOWED) or not spec:
        raise ValueError(
            f"{nbgrader_meta(cell).get('grade_id')}: dlcourse.measure takes {ALLOWED}, not {spec!r}"
        )
    for key, value in spec.items():
        if not isinstance(value, int | float) or value <= 0:
            raise ValueError(
                f"{nbgrader_meta(cell).get('grade_id')}: dlcourse.measure.{key} must be a positive number"
            )
    return dict(spec)


def measurement_notebook(
    notebook, grade_id: str, caps: dict, seed: int | None = None
) -> nbformat.NotebookNode:
    """The submission's own code above the test cell ``grade_id`` (nothing below it), then the cell, under
    ``caps``: CPU seconds from the first cell on (work done by an answer cell before the test, to be handed back by
    it, counts too), memory from the test cell on (an answer cell may import what it likes). ``seed``: set as
    ``MEASURE_SEED`` just before the test cell, so that its inputs cannot be known, and their answers computed,
    before the caps bind."""
    cells, measured = [], None
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if is_graded_test(cell):
            if nbgrader_meta(cell).get("grade_id") == grade_id:
                measured = cell
                break  # what the notebook's own run holds when it reaches the cell: nothing below it
            continue
        if demonstration(cell) or read_only_marked(cell, NOT_MEASURED):
            continue
        cells.append(copy.deepcopy(cell))
    if measured is None or not cells:
        raise ValueError(f"the notebook has no test cell {grade_id!r}, or no code before it")
    if "cpu_seconds" in caps:
        cells[0].metadata.setdefault("dlcourse", {})[CAPS_KEY] = {"cpu_seconds": caps["cpu_seconds"]}
    if seed is not None:
        cells.append(nbformat.v4.new_code_cell(f"{SEED_NAME} = {int(seed)}"))
    capped = copy.deepcopy(measured)
    capped.metadata.setdefault("dlcourse", {})[CAPS_KEY] = {
        k: v for k, v in caps.items() if k != "cpu_seconds"
    }
    capped.metadata["dlcourse"].pop(MEASURE_KEY, None)
    cells.append(capped)
    for index, cell in enumerate(cells):
        cell["id"] = f"measure-{index}"
        cell.outputs, cell.execution_count = [], None
    return nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(notebook.metadata))


def without_demonstrations(notebook) -> nbformat.NotebookNode:
    """``notebook`` as the grader runs it: each :func:`demonstration` cell in place (the cells keep their
    indices), its code replaced by a comment that says why; ``notebook`` itself unchanged."""
    if not any(demonstration(cell) for cell in notebook.cells):
        return notebook
    sent = copy.deepcopy(notebook)
    for cell in sent.cells:
        if demonstration(cell):
            cell.source, cell.outputs = LEFT_OUT, []
    return sent


def measure_seed(course_seed: int, grade_id: str) -> int:
    """The inputs' seed of a measured cell: the course's secret seed (:func:`autograder.grading.heldout.course_seed`)
    and the cell, as a number a generator takes."""
    import hashlib

    return int(hashlib.sha256(f"{course_seed}:{grade_id}".encode()).hexdigest()[:8], 16)


def merge_capture(main: dict[str, bytes], measured: dict[str, bytes], grade_id: str) -> dict[str, bytes]:
    """``main``'s captured files with the cell ``grade_id``'s recordings replaced by those of the capped run."""
    kept = [e for e in _entries(main) if e.get("cell") != grade_id]
    files = {name: data for name, data in main.items() if name != CASES_FILE}
    taken = [e for e in _entries(measured) if e.get("cell") == grade_id]
    number = len(files)
    for entry in taken:
        for key, suffix in (("file", ""), ("expected", "e")):
            name = entry.get(key)
            if name is None:
                continue
            if name not in measured:
                entry = None
                break
            number += 1
            new = f"{number:06d}{suffix}.npy"
            while new in files:
                number += 1
                new = f"{number:06d}{suffix}.npy"
            files[new] = measured[name]
            entry[key] = new
        if entry is not None:
            kept.append(entry)
    if kept:
        files[CASES_FILE] = "".join(json.dumps(e) + "\n" for e in kept).encode()
    return files


def unchanged_by_the_seed(
    cases: dict, main: dict[str, bytes], measured: dict[str, bytes], grade_id: str
) -> list[str]:
    """Why the hand-in is flagged for review: the cases of the cell ``grade_id`` that the source marks ``seeded`` (a
    model the cell trains from ``MEASURE_SEED``: :func:`dlcourse.grading.check_lm_loss`) whose value the measured run
    recorded byte for byte as the notebook's own run did with the cell's own seed. Trained, the weights follow the
    seed; the same weights were brought in, or made before the seed was known. ``cases``: the reference's, which
    alone say which cases are seeded."""
    before = {e.get("name"): e.get("file") for e in _entries(main) if e.get("cell") == grade_id}
    found = []
    for entry in _entries(measured):
        name = entry.get("name")
        case = cases.get(name) if isinstance(name, str) else None
        if entry.get("cell") != grade_id or case is None or not case.params.get("seeded"):
            continue
        old, new = main.get(before.get(name) or ""), measured.get(entry.get("file") or "")
        if old is not None and old == new:
            found.append(
                f"{name}: the model is the same, byte for byte, when the cell trains it with the grader's seed as "
                "with its own: the cell did not train these weights (brought in, made before the seed was known, or "
                "trained with a seed of its own instead of the one the test passes)"
            )
    return found


def _entries(capture: dict[str, bytes]) -> list[dict]:
    """The index lines of a capture the driver wrote (its own JSON: a line that does not parse is skipped)."""
    found = []
    for line in capture.get(CASES_FILE, b"").decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found


def measured_entry(summary: dict, grade_id: str) -> dict | None:
    """The capped run's account of the cell ``grade_id``."""
    entries = [e for e in summary.get("cells", []) if isinstance(e, dict) and e.get("grade_id") == grade_id]
    return entries[-1] if entries else None


def caps_for(spec: dict, baseline_mb: float | None, solution_cpu: float | None = None) -> dict:
    """The caps of a submission's measured cell: the cell's allowance, a ceiling over the solutions' memory,
    and CPU seconds (``cpu_factor`` times what the solutions took on this machine, counted as a submission's
    are: the same cap on a faster or a slower machine)."""
    caps = {k: v for k, v in spec.items() if k != "cpu_factor"}
    if baseline_mb is not None and "memory_mb" in spec:
        caps["ceiling_mb"] = baseline_mb + spec["memory_mb"] + SLACK_MB
    if "cpu_factor" in spec and solution_cpu is not None:
        relative = max(MIN_CPU_SECONDS, spec["cpu_factor"] * solution_cpu)
        caps["cpu_seconds"] = min(caps.get("cpu_seconds", relative), relative)
    return caps


def describe(spec: dict) -> str:
    """The caps in words, for a student's message."""
    parts = []
    if "memory_mb" in spec:
        parts.append(f"{spec['memory_mb']:g} MB of memory")
    if "cpu_seconds" in spec:
        parts.append(f"{spec['cpu_seconds']:.1f} s of CPU")
    return " and ".join(parts) + " beyond what the kernel held, no new process or thread"
