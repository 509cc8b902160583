"""The reference: what the source's own solutions produce on every case of every graded test cell.

Built under the conditions of the students' runs: the source notebook, with each graded test cell
marked by ``begin_cell``, runs in the same sandbox, limits and isolation as a submission. It runs three
times at once, with 1, 2 and 4 BLAS threads (:data:`CALIBRATION_THREADS`): the 1-thread run gives the
values, and every case must agree across the three within a tenth of its own tolerance
(:data:`SAFETY_MARGIN`). A case that does not is refused with its measured spread and the tolerance it
would need, so a tolerance that only holds on some machines never reaches a student's grade. The
spread of every case is kept in ``calibration.json``.

A reference is cached in the course, keyed by the source, the grading code and the machine's software
(Python, numpy, torch, TensorFlow, ...) and device (CUDA present or not, CPU model): an upgrade or a GPU
host builds its own. Trusted code only: the source is the instructor's, and the cache lives in the
grader's workspace, which students' code never sees.
"""

from __future__ import annotations

import ast
import fcntl
import fnmatch
import hashlib
import itertools
import json
import platform
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat
import numpy as np

from autograder.course import Course, demonstration_problems, is_graded_test, is_written, nbgrader_meta
from autograder.grading.decisions import (
    RUN_KEY_FILE,
    recheck_calibration,
    rewrite_params,
    run_key,
    staged_copy,
    static_tolerances,
)
from autograder.grading.evaluate import EVALUATED
from autograder.grading.heldout import course_seed
from autograder.grading.measure import (
    measure_seed,
    measured_entry,
    measurement_notebook,
    merge_capture,
    spec_of,
    without_demonstrations,
)
from autograder.intake.handin import assignment_files, frameworks_used
from autograder.settings import Settings
from dlcourse.closeness import ATOL, RTOL
from dlcourse.grading import CASES_FILE as CASES_INDEX
from dlcourse.grading import Case, compare, load_cases

CELLS_FILE = "cells.json"
NOTEBOOKS_FILE = "notebooks.json"
STAMP_FILE = "SOURCE_SHA256"
CALIBRATION_FILE = "calibration.json"
WRITTEN_FILE = "written.json"
SOURCE_ERRORS_FILE = "source_errors.json"  # ungraded cells of the source that raised: told, not refused
CALIBRATION_THREADS = (1, 2, 4)  # and the batch's own thread count, when it is another
SAFETY_MARGIN = 10.0  # a case's tolerance must be this many times its spread across thread counts
FINGERPRINT_PACKAGES = (
    "numpy",
    "torch",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "scikit-learn",
    "ipykernel",
)


class ReferenceError(RuntimeError):
    """The source's own solutions cannot give a reference that grades the same on every machine."""


@dataclass(frozen=True)
class Reference:
    directory: Path
    cells: dict[str, dict]  # grade_id -> {"points": float, "cases": [names]}
    cases: dict[str, Case]
    values: dict
    written: dict[str, float] = field(default_factory=dict)  # written answer's grade_id -> its points
    # notebook name -> {"cells": [grade_id, ...], "written": [grade_id, ...]}, in the assignment's order
    notebooks: dict[str, dict] = field(default_factory=dict)
    digest: str = ""  # what it was built from (:func:`source_digest`), read once when it is loaded
    run_key: str = ""  # what its recorded values depend on (:func:`autograder.grading.decisions.run_key`)
    how: str = "found up to date"  # how this process got it: found, built, or decided again
    heldout_seed: int | None = (
        None  # the course's seed for held-out data (autograder.grading.heldout), given to grade
    )
    heldout_text: Path | None = None  # the course's held-out text (autograder.grading.heldout)

    def notebook_of(self, grade_id: str) -> str:
        return next(
            (nb for nb, part in self.notebooks.items() if grade_id in part["cells"] + part["written"]), ""
        )

    def part(self, nb: str) -> Reference:
        """The reference of one notebook: its graded cells and written answers only."""
        part = self.notebooks.get(nb, {"cells": [], "written": []})
        return replace(
            self,
            cells={g: c for g, c in self.cells.items() if g in part["cells"]},
            written={g: p for g, p in self.written.items() if g in part["written"]},
            notebooks={nb: part},
        )

    @property
    def max_score(self) -> float:
        """The autograded points: written answers are graded by hand, and never count here."""
        return sum(cell["points"] for cell in self.cells.values())


def environment() -> dict[str, str]:
    """What a reference's values may depend on besides the source: software versions and the device."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version(), "machine": platform.machine()}
    for name in FINGERPRINT_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    found["device"] = "cuda" if any(Path("/dev").glob("nvidia[0-9]*")) else "cpu"
    try:
        models = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
        found["cpu"] = models[0] if models else platform.processor()
    except OSError:
        found["cpu"] = platform.processor()
    return found


def grading_code() -> bytes:
    """The grader's code a reference's values and decisions depend on (a recorded model's format among them)."""
    import dlcourse.grading
    import dlcourse.lmdata
    import dlcourse.modeldata

    here = Path(__file__).parents[1]  # the package
    names = (
        "course.py",
        "grading/reference.py",
        "grading/decisions.py",
        "grading/measure.py",  # what a measured cell's run holds, the solutions' and a student's
        "runner/child.py",
        "runner/protocol.py",
    )
    recording = (dlcourse.grading, dlcourse.modeldata, dlcourse.lmdata)
    return b"".join((here / name).read_bytes() for name in names) + b"".join(
        Path(module.__file__).read_bytes() for module in recording
    )


def code_digest(*packages: Path) -> str:
    """A hash over every Python file of ``packages`` (default: the autograder's and the course package's): what
    a passed canary vouches for. :func:`grading_code` holds only what recorded values depend on, so that a regrade
    after an upgrade re-decides kept runs; the canary proves the whole path again after any change to it."""
    import dlcourse

    digest = hashlib.sha256()
    for package in packages or (Path(__file__).parents[1], Path(dlcourse.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(
                f"{package.name}/{path.relative_to(package)}\0".encode() + path.read_bytes() + b"\0"
            )
    return digest.hexdigest()


def source_digest(course: Course, aid: str) -> str:
    """A hash over everything the reference depends on: the source folder, the grading code, and the
    machine's software and device (:func:`environment`)."""
    digest = hashlib.sha256()
    course.source_notebook(aid, (course.notebooks(aid) or [None])[0])  # a clear error for an unknown id
    folder = course.source / aid
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not {".ipynb_checkpoints", "samples"} & set(path.relative_to(folder).parts):
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    digest.update(grading_code())
    digest.update(json.dumps(environment(), sort_keys=True).encode())
    digest.update(
        f"seed {course_seed(course)}".encode()
    )  # measured cells' inputs and held-out data follow it
    return digest.hexdigest()


def reference_run_key(course: Course, aid: str) -> str:
    """:func:`autograder.grading.decisions.run_key` of ``aid`` with this grader's code and this machine's environment."""
    return run_key(course, aid, grading_code(), json.dumps(environment(), sort_keys=True))


# What a regrade may change without running anything again: the tolerance of a hidden check. A hidden
# check only records the student's value in the kernel (the verdict is decided outside, against the
# rebuilt reference); a public check (one given ``expected``, and every range or accuracy check) also
# records the kernel's verdict on its own arguments, which the tamper flags read, so they stay in the digest.
HIDDEN_CHECKS = {"check", "check_equal"}
TOLERANCES = {"rtol", "atol"}


class _HiddenTolerancesRemoved(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        public = len(node.args) > 2 or any(k.arg == "expected" for k in node.keywords)
        if name in HIDDEN_CHECKS and not public:
            node.keywords = [k for k in node.keywords if k.arg not in TOLERANCES]
        return node


def source_inputs(nb: nbformat.NotebookNode) -> dict[str, str]:
    """A digest per code cell that the grader runs from the source (tests, set-up, given code): its code
    with comments, layout and the hidden checks' tolerances left out (points live in the metadata, not
    here). Equal digests mean that a kept run executed the same lines and captured the same values, so its
    points can be decided again against a rebuilt reference. A cell that does not parse as Python (a
    magic) is taken as it is written."""
    found = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or nbgrader_meta(cell).get("solution"):
            continue
        key = nbgrader_meta(cell).get("grade_id") or f"cell {index + 1}"
        try:
            text = ast.dump(_HiddenTolerancesRemoved().visit(ast.parse(cell.source)))
        except SyntaxError:
            text = cell.source
        found[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return found


SMALL_BOOLEAN = 8  # a boolean result of at most this many entries can be guessed: it is a condition


def answer_in_kernel(case: Case, value=None) -> bool:
    """Whether the kernel holds the answer to ``case`` (as the reference recorded it, with its ``value``), so
    that a notebook could record the passing value without doing the work: a public check or any check given
    its expected value in the test's code (the value is in the cell), a range or an accuracy check (the
    bound, or the labels, are in the cell), a trained model's accuracy on inputs and labels the test handed
    over, or a language model's perplexity on tokens it handed over (a notebook can fit them), rather than on
    held-out ones (:mod:`autograder.grading.heldout`), or a small boolean (``True`` is a guess that passes). Such a
    case is a *condition*: it can take points away, never earn them (:func:`case_groups`)."""
    if case.kind in EVALUATED:  # a model evaluated outside: on held-out data, or on what the test handed over
        return not case.params.get("heldout")
    if case.public or case.expected_file is not None or case.kind in ("range", "accuracy"):
        return True
    return small_boolean(value)


def small_boolean(value) -> bool:
    """A boolean result of at most :data:`SMALL_BOOLEAN` entries: a guess records it."""
    if value is None:
        return False
    value = np.asarray(value)
    return value.dtype.kind == "b" and value.size <= SMALL_BOOLEAN


def _attach_conditions(grade_id: str, names: list[str], conditions: set[str]) -> dict[str, list[str]]:
    """Each case whose answer the kernel holds joins the group of the nearest case before it whose answer it
    does not (else the first after it); every other case is a group of its own."""
    evidence = [n for n in names if n not in conditions]
    if not evidence:
        raise ValueError(
            f"{grade_id}: no case of this cell can earn points: the kernel holds the answer of each (a public "
            "check, an expected value written in the test, a range or accuracy bound, or a small boolean a "
            f"notebook could guess). Add a hidden check of a value on other inputs. Its cases: {names}"
        )
    groups: dict[str, list[str]] = {n: [] for n in evidence}
    owner = None
    waiting: list[str] = []
    for name in names:
        if name in conditions:
            (groups[owner] if owner else waiting).append(name)
        else:
            owner = name
            groups[name] += waiting + [name] if waiting else [name]
            waiting = []
    return groups


def _merge_held_groups(
    grade_id: str,
    names: list[str],
    groups: dict[str, list[str]],
    shares: dict[str, float],
    conditions: set[str],
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """``case_points`` groups whose every case is a condition join, with their points, the group of the
    nearest case before them (else after them) whose answer the kernel does not hold: the points the source
    gave a public check now need the hidden check beside it too."""
    evidence = [n for n in names if n not in conditions]
    if not evidence:
        _attach_conditions(grade_id, names, conditions)  # raises, saying why
    group_of = {n: k for k, members in groups.items() for n in members}
    for key in [k for k, members in groups.items() if set(members) <= conditions]:
        first = names.index(groups[key][0])
        before = [n for n in evidence[::-1] if names.index(n) < first]
        target = group_of[(before or evidence)[0]]
        groups[target] += groups.pop(key)
        shares[target] += shares.pop(key)
        for n in groups[target]:
            group_of[n] = target
    return groups, shares


def case_groups(
    grade_id: str,
    cases: list[Case],
    points: float,
    case_points: dict[str, float] | None = None,
    conditions: set[str] | frozenset[str] | None = None,
) -> list[dict]:
    """How a graded test cell's points are shared among its cases: ``[{"name", "cases", "points"}]``; a
    group earns its points when every case in it passes.

    Only evidence the kernel could not forge earns points. ``conditions`` (:func:`answer_in_kernel`: public
    checks, expected values in the test, bounds, small booleans; by default as each case says of itself)
    earn nothing by themselves: by default each
    joins the group of the nearest hidden case before it (else after it), so a failed condition still costs
    that group, and each other case is a group of its own, all worth the same share. A source may instead
    give points per case or per group in the cell's metadata,
    ``{"dlcourse": {"case_points": {"a4.export.*": 10, ...}}}`` (keys are case names or ``fnmatch`` patterns;
    the most specific matching key wins: an exact name, else the longest pattern); cases no key matches share
    what is left; a key whose cases are all conditions joins, with its points, the nearest key that has
    evidence (:func:`_merge_held_groups`). Shares are in hundredths of a point and
    always add up to the cell's points exactly.
    """
    names = [c.name for c in cases]
    if conditions is None:  # as the case says of itself (a small boolean needs its value: see _decide_cells)
        conditions = {c.name for c in cases if answer_in_kernel(c)}
    groups: dict[str, list[str]] = {}
    if case_points:
        # the most specific key first: exact names, then longer patterns (a notebook's JSON keeps keys sorted,
        # so the order they were written in is lost)
        ordered = sorted(case_points, key=lambda k: (any(ch in k for ch in "*?["), -len(k), k))
        for name in names:
            key = next((k for k in ordered if fnmatch.fnmatchcase(name, k)), "the other cases")
            groups.setdefault(key, []).append(name)
        unused = [k for k in case_points if k not in groups]
        if unused:
            raise ValueError(
                f"{grade_id}: case_points names no case of this cell: {unused} (its cases: {names})"
            )
        given = sum(case_points.values())
        if given > points + 1e-9 or (given < points - 1e-9 and "the other cases" not in groups):
            raise ValueError(
                f"{grade_id}: case_points give {given:g} points, the cell is worth {points:g}"
                + ("" if given > points else " and no case is left to take the rest")
            )
        shares = {k: float(case_points[k]) if k in case_points else points - given for k in groups}
        groups, shares = _merge_held_groups(grade_id, names, groups, shares, set(conditions))
    else:
        groups = _attach_conditions(grade_id, names, set(conditions))
        cents, count = round(points * 100), len(groups)
        shares = {k: (cents // count + (i < cents % count)) / 100 for i, k in enumerate(groups)}
    return [{"name": k, "cases": v, "points": shares[k]} for k, v in groups.items()]


def written_cells(nb: nbformat.NotebookNode) -> dict[str, float]:
    """grade_id -> points of each written answer of a source, in the notebook's order."""
    return {
        nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c).get("points", 0))
        for c in nb.cells
        if is_written(c)
    }


def mark_test_cells(nb: nbformat.NotebookNode) -> dict[str, dict]:
    """Prefix every graded test cell with a ``begin_cell`` marker; return their ids, points and any
    points per case the source gives (``metadata.dlcourse.case_points``). A cell that starts with a cell
    magic keeps it first (``%%time``, ``%%capture``: the marker goes after it; other magics, which run
    another language, are not marked)."""
    cells = {}
    for cell in nb.cells:
        if is_graded_test(cell):
            meta = nbgrader_meta(cell)
            grade_id = meta["grade_id"]
            if grade_id in cells:
                raise ValueError(f"two graded cells share the grade_id {grade_id!r}")
            cells[grade_id] = {"points": float(meta.get("points", 0)), "cases": []}
            case_points = cell.metadata.get("dlcourse", {}).get("case_points")
            if case_points:
                cells[grade_id]["case_points"] = case_points
            in_kernel = cell.metadata.get("dlcourse", {}).get("decided_in_kernel")
            if in_kernel:  # the source says why no outside evidence exists; every page labels it
                cells[grade_id]["in_kernel"] = str(in_kernel)
            measured = cell.metadata.get("dlcourse", {}).get("measured_in_kernel")
            if measured:  # {case name or pattern: why}: cases measured by helpers the kernel holds
                cells[grade_id]["measured"] = dict(measured)
            spec = spec_of(cell)
            if spec:  # decided from a run under caps the grader sets (autograder.grading.measure)
                cells[grade_id]["measure"] = spec
            held = cell.metadata.get("dlcourse", {}).get("conditions")
            if held:  # case names or patterns the kernel measures with helpers it could replace
                cells[grade_id]["conditions"] = [str(k) for k in held]
            marker = f"import dlcourse.grading as _dlg; _dlg.begin_cell({grade_id!r})\n"
            first, _, rest = cell.source.partition("\n")
            if not first.startswith("%%"):
                cell.source = marker + cell.source
            elif first.split()[0] in ("%%time", "%%capture"):
                cell.source = first + "\n" + marker + rest
    return cells


def build_reference(
    course: Course, aid: str, settings: Settings | None = None, force: bool = False, say=None
) -> Reference:
    """Return the reference of ``aid``, running the source only if it (or the machine) changed, in the
    sandbox ``settings`` say (their limits and isolation; the default where None); ``say`` gets a line as each
    of its runs ends (:func:`_build`).

    Several graders (or test workers) may ask at once: a lock file makes one of them build it and the
    others wait and reuse it.
    """
    target = course.reference_dir / aid
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{aid}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = source_digest(course, aid)
        stamp = target / STAMP_FILE
        if not force and stamp.is_file() and stamp.read_text() == digest:
            return load_reference(target)
        key = reference_run_key(course, aid)
        if not force and stamp.is_file():
            redecided = redecide(course, aid, target, digest, key)
            if redecided is not None:
                return replace(redecided, how="decided again from its kept runs")
        return replace(_build(course, aid, digest, key, settings, say), how="built")


def _run_source(course: Course, aid: str, settings: Settings, nb, threads: int, files: Path):
    """One sandboxed run of a marked source notebook with ``threads`` BLAS threads (``settings`` resolved):
    the sandbox and the child's Outcome."""
    from autograder.runner.sandbox import Sandbox

    sandbox = (settings.sandbox or Sandbox)(
        replace(settings.limits, threads=threads),
        warm=frameworks_used(course, aid),
        isolation=settings.isolation,
        private=course.private_folders(),
    )
    sandbox.start()
    return sandbox, sandbox.run(without_demonstrations(nb), files=files)


def _build(course: Course, aid: str, digest: str, key: str, settings: Settings | None, say=None) -> Reference:
    """Run every notebook of the source at every thread count of :data:`CALIBRATION_THREADS` at once, and
    keep what the solutions recorded in the course's reference folder (``digest`` and ``key`` its stamps). A
    graded test cell with checks is decided outside the kernel from its cases; one without (plain ``assert``s,
    as nbgrader courses write them) is decided as nbgrader decides it, from how the cell ran in the kernel,
    and is marked so."""
    import tempfile

    from autograder.runner.isolation import resolved

    settings = resolved(settings or Settings())
    limits, target = settings.limits, course.reference_dir / aid
    sources = {name: course.read_source(aid, name) for name in course.notebooks(aid)}
    cells, notebooks, written = _graded_cells(aid, sources)
    runs: dict[tuple[str, int], tuple] = {}
    extra: list = []  # the measurement runs' sandboxes
    counts = sorted({*CALIBRATION_THREADS, limits.threads})
    files = Path(tempfile.mkdtemp(prefix=f"{aid}-files-", dir=course.work if course.work.is_dir() else None))
    try:
        assignment_files(course, aid, None, files)
        wanted = [(name, n) for name in sources if notebooks[name]["cells"] for n in counts]
        _run_all(
            wanted,
            runs,
            lambda name, n: _run_source(course, aid, settings, sources[name], n, files),
            say and (lambda line: say(f"{aid}: reference: {line}")),
        )
        captured, source_errors = _captured(aid, runs, notebooks, limits, counts, sources)
        hidden = hidden_case_names(sources.values())
        for found, _ in captured.values():  # a check given an expected value inside hidden tests stays hidden
            found.update({n: replace(c, public=False) for n, c in found.items() if n in hidden and c.public})
        cases, values = captured[1]
        measuring = Measuring(
            lambda nb: _run_source(course, aid, settings, nb, 1, files),
            extra,
            course_seed(course),
            limits.timeout,
        )
        measured = measure_cells(aid, cells, sources, measuring, say)
        _decide_cells(cells, cases, values)
        calibration = _calibrated(aid, cases, captured, counts)
        staged = Path(tempfile.mkdtemp(prefix=f"{aid}-reference-", dir=target.parent))
        captures = [o.capture for (_, n), (_, o) in sorted(runs.items()) if n == 1]
        _write_reference(staged, captures, hidden, {
            CELLS_FILE: cells, NOTEBOOKS_FILE: notebooks, CALIBRATION_FILE: calibration, WRITTEN_FILE: written,
            SOURCE_ERRORS_FILE: list(dict.fromkeys(source_errors)),
        })  # fmt: skip
        write_measured(staged, measured)
        (staged / STAMP_FILE).write_text(digest)
        (staged / RUN_KEY_FILE).write_text(key)
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    finally:
        shutil.rmtree(files, ignore_errors=True)
        for sandbox in [s for s, _ in runs.values()] + extra:
            sandbox.cleanup()
    return load_reference(target)


def _calibrated(aid: str, cases: dict, captured: dict, counts: list[int]) -> dict:
    """The cases' calibration across thread counts (:func:`calibrate`); a reference whose grade would depend on the
    machine is refused, with the cases to widen."""
    calibration, problems = calibrate(cases, {t: v for t, (_, v) in captured.items()})
    if problems:
        raise ReferenceError(
            f"{aid}: the source's own results differ between {', '.join(map(str, counts))} "
            f"BLAS threads by more than a tenth of their tolerance, so the grade would depend on the "
            f"machine. Widen these cases' rtol/atol in the source notebook:\n  " + "\n  ".join(problems)
        )
    return calibration


@dataclass(frozen=True)
class Measuring:
    """How :func:`measure_cells` runs the measured cells: ``run_one(notebook)`` starts a sandbox and runs the
    notebook in it (``(sandbox, outcome)``); each sandbox joins ``sandboxes``, to be cleaned up with the others;
    ``seed`` is the course's, for the cells' inputs; ``seconds`` the notebook's time limit, the CPU cap of a
    cell whose cap is a factor of the solutions' time (which is measured, not capped)."""

    run_one: Callable
    sandboxes: list
    seed: int
    seconds: float


def measure_cells(
    aid: str, cells: dict, sources: dict, measuring: Measuring, say=None
) -> dict[str, dict[str, bytes]]:
    """Run each measured cell of the (marked) sources as a submission's is run (:mod:`autograder.grading.measure`): with
    the course's seed for its inputs, under its memory cap, its CPU time counted from the first cell. The solutions
    must fit; what they used is kept (``baseline_mb``: what their kernel held when the cell started, the ceiling
    a submission's kernel is held to; ``solution``: their CPU seconds). Returns each cell's captured values, which
    are the reference's for its cases (their inputs come from the seed). ``say`` gets a line as each starts."""
    found = {}
    measured = [grade_id for grade_id, cell in cells.items() if cell.get("measure")]
    for grade_id, cell in cells.items():
        spec = cell.get("measure")
        if not spec:
            continue
        if say:
            say(f"{aid}: measuring {grade_id} ({measured.index(grade_id) + 1} of {len(measured)})")
        caps = {k: v for k, v in spec.items() if k == "memory_mb"}
        if "cpu_seconds" in spec:
            caps["cpu_seconds"] = spec["cpu_seconds"]
        elif "cpu_factor" in spec:  # (the solutions' time is measured, on the test cell alone, not capped)
            caps.update(cpu_seconds=measuring.seconds, cpu_scope="cell")
        notebook = measurement_notebook(
            sources[cell["notebook"]], grade_id, caps, measure_seed(measuring.seed, grade_id)
        )
        sandbox, outcome = measuring.run_one(notebook)
        measuring.sandboxes.append(sandbox)
        entry = measured_entry(outcome.summary, grade_id) if outcome.status == "finished" else None
        used = (entry or {}).get("measure") or {}
        if entry is None or entry.get("status") != "ok" or "memory_start_mb" not in used:
            why = (entry or {}).get("ename") or (entry or {}).get("error") or outcome.status
            raise ReferenceError(
                f"{aid}: the source's solutions do not pass the measured test cell {grade_id} under its caps "
                f"({spec}): {why}: {str((entry or {}).get('evalue', ''))[:300]}. Raise dlcourse.measure in "
                "its metadata, or make the solution fit"
            )
        cell["measure"] = {**spec, "baseline_mb": used["memory_start_mb"], "solution": used}
        found[grade_id] = outcome.capture
    return found


def _graded_cells(aid: str, sources: dict) -> tuple[dict, dict, dict]:
    """Every notebook's graded test cells (marked to run), their notebooks, and the written answers; ids
    must be unique across the assignment."""
    cells: dict[str, dict] = {}
    notebooks: dict[str, dict] = {}
    written: dict[str, float] = {}
    for name, nb in sources.items():
        left_out = demonstration_problems(nb)
        if left_out:
            raise ValueError(f"{aid}: {left_out[0]}")
        marked = mark_test_cells(nb)
        shared = set(marked) & set(cells) or set(written_cells(nb)) & (set(written) | set(cells))
        if shared:
            raise ReferenceError(
                f"{aid}: the grade_id {sorted(shared)[0]!r} is used in more than one of its notebooks; this grader "
                "needs grade ids unique within an assignment (rename one in its source notebook)"
            )
        for cell in marked.values():
            cell["notebook"] = name
        cells.update(marked)
        written.update(written_cells(nb))
        notebooks[name] = {"cells": list(marked), "written": list(written_cells(nb))}
    if not cells:
        raise ValueError(f"{aid}: the source has no graded test cells")
    return cells, notebooks, written


def _run_all(wanted: list[tuple[str, int]], runs: dict, run_one, say=None) -> None:
    """``run_one(notebook, threads)`` for each of ``wanted`` at once, each in a thread, into ``runs``; the
    first that raised raises here (the grader's failure, said as it is). ``say`` gets a line as each ends
    ("run 2 of 3 done (2 threads, 31 s)")."""
    failed: list[BaseException] = []
    finished = itertools.count(1)  # its next() is one step, so two runs ending at once get two numbers
    begun = time.monotonic()
    several = len({name for name, _ in wanted}) > 1

    def run(name: str, threads: int) -> None:
        try:
            runs[name, threads] = run_one(name, threads)
            if say:
                where = f"{name}, " if several else ""
                say(f"run {next(finished)} of {len(wanted)} done ({where}{threads} thread{'s' * (threads != 1)}, "
                    f"{time.monotonic() - begun:.0f} s)")  # fmt: skip
        except BaseException as err:  # noqa: BLE001 (raised again below, in the caller's thread)
            failed.append(err)

    workers = [threading.Thread(target=run, args=key) for key in wanted]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failed:
        raise failed[0]


def _captured(
    aid: str, runs: dict, notebooks: dict, limits, counts: list[int], sources=None
) -> tuple[dict[int, tuple[dict, dict]], list[str]]:
    """threads -> (cases, values) the runs at that thread count recorded, every notebook's together; and what
    :func:`_check_run` says of ungraded cells that raised."""
    captured = {n: ({}, {}) for n in counts}
    errors: list[str] = []
    for (name, threads), (_, outcome) in sorted(runs.items()):
        where = f"{aid}/{name}" if len(notebooks) > 1 else aid
        told = _check_run(where, threads, outcome, limits, (sources or {}).get(name))
        errors.extend(told)
        cases, values, problems = load_cases(outcome.capture)
        problems = [p for p in problems if p != "no results were recorded"]
        if problems:
            raise ReferenceError(f"{aid}: the reference run recorded bad data: {problems}")
        for case in cases.values():
            if case.cell not in notebooks[name]["cells"]:
                raise ValueError(f"{aid}: case {case.name!r} is recorded outside a graded test cell")
            if case.name in captured[threads][0]:
                raise ReferenceError(f"{aid}: the case name {case.name!r} is used in more than one notebook")
        captured[threads][0].update(cases)
        captured[threads][1].update(values)
    return captured, errors


def _decide_cells(cells: dict, cases: dict, values: dict) -> None:
    """Each cell's cases, how it is decided, and its groups of cases with their points (``values``: the
    reference's, which tell a small boolean)."""
    for case in cases.values():
        cells[case.cell]["cases"].append(case.name)
    conditions = {n for n, c in cases.items() if answer_in_kernel(c, values.get(n))}
    refused = []
    for grade_id, cell in cells.items():
        # no check(...) case: the cell's points are decided in the kernel, as nbgrader decides them
        cell["decided"] = "outside" if cell["cases"] else "kernel"
        points = cell.pop("case_points", None)
        measured = cell.pop("measured", {})
        in_kernel = {n for n in cell["cases"] if any(fnmatch.fnmatchcase(n, k) for k in measured)}
        declared = cell.pop("conditions", [])
        declared = {n for n in cell["cases"] if any(fnmatch.fnmatchcase(n, k) for k in declared)}
        # a declared kernel decision: its checks of numbers the code measured earn, and every page labels them;
        # an expected value written in the test, or a small boolean, never does (any notebook records those)
        guessed = {
            n for n in cell["cases"] if small_boolean(values.get(n)) or cases[n].expected_file is not None
        }
        held = guessed if cell.get("in_kernel") else (conditions | declared) - (in_kernel - guessed)
        try:
            cell["groups"] = (
                case_groups(grade_id, [cases[n] for n in cell["cases"]], cell["points"], points, held)
                if cell["cases"]
                else []
            )
        except ValueError as err:
            refused.append(str(err))
            continue
        for group in cell["groups"]:
            if in_kernel & set(group["cases"]):
                group["in_kernel"] = next(w for k, w in measured.items() for n in group["cases"]
                                          if n in in_kernel and fnmatch.fnmatchcase(n, k))  # fmt: skip
    if refused:
        raise ReferenceError("\n".join(refused))


def _write_reference(
    staged: Path, captures: list[dict[str, bytes]], hidden: set[str], tables: dict[str, object]
) -> None:
    """The reference's files: the one-thread runs' captured values, their index with hidden names marked,
    and ``tables`` (file name -> data) as JSON."""
    index = []
    for capture in captures:
        for name, data in capture.items():
            if name == CASES_INDEX:
                index += [_hidden_line(line, hidden) for line in data.decode("utf-8").splitlines()]
            else:
                (staged / name).write_bytes(data)
    (staged / CASES_INDEX).write_text("".join(line + "\n" for line in index if line.strip()))
    for name, data in tables.items():
        (staged / name).write_text(json.dumps(data, indent=1))


def redecide(course: Course, aid: str, target: Path, digest: str, key: str) -> Reference | None:
    """The reference at ``target`` re-decided for a source whose edit changed only decisions (hidden checks'
    tolerances, points: :mod:`autograder.grading.decisions`), without running anything; None when the edit changed
    more, a tolerance cannot be read without running, or the recorded spread across thread counts does not
    fit a new tolerance (then the reference is built again, which says why)."""
    kept = target / RUN_KEY_FILE
    if not kept.is_file() or kept.read_text() != key:
        return None
    old = load_reference(target)
    sources = [course.read_source(aid, name) for name in course.notebooks(aid)]
    tolerances = static_tolerances(sources)
    # a hidden close case whose tolerance is not written out keeps its old one: the key covers it
    hidden = {n for n, c in old.cases.items() if not c.public and c.kind == "close" and n in tolerances}
    cases = {
        n: replace(c, params={**c.params, **tolerances[n]}) if n in hidden else c
        for n, c in old.cases.items()
    }
    cells, _, written = _graded_cells(aid, dict(zip(course.notebooks(aid), sources)))
    if set(cells) != set(old.cells):
        return None
    for grade_id, cell in cells.items():  # a measured cell keeps what its solutions' run measured
        before = old.cells[grade_id].get("measure") or {}
        if (cell.get("measure") or {}) != {
            k: v for k, v in before.items() if k not in ("baseline_mb", "solution")
        }:
            return None  # its caps changed: the solutions run under them again
        if before:
            cell["measure"] = before
    _decide_cells(cells, cases, old.values)
    calibration = json.loads((target / CALIBRATION_FILE).read_text())
    changed = {n: cases[n] for n in hidden if cases[n].params != old.cases[n].params}
    if recheck_calibration(calibration, old.values, changed, SAFETY_MARGIN):
        return None
    staged = staged_copy(target)
    rewrite_params(staged / CASES_INDEX, {n: tolerances[n] for n in hidden})
    for name, data in ((CELLS_FILE, cells), (CALIBRATION_FILE, calibration), (WRITTEN_FILE, written)):
        (staged / name).write_text(json.dumps(data, indent=1))
    (staged / STAMP_FILE).write_text(digest)
    shutil.rmtree(target)
    staged.rename(target)
    return load_reference(target)


def hidden_case_names(notebooks) -> set[str]:
    """The names of the checks written inside hidden tests with an expected value: the kernel records them
    as public (it compares with the value given), but the student never sees them, so the reference keeps
    them hidden: each its own share, failures told without the value."""
    from autograder.intake.conventions import hidden_checks_with_expected

    return {
        name
        for nb in notebooks
        for cell in nb.cells
        if is_graded_test(cell)
        for name in hidden_checks_with_expected(cell.source)
        if isinstance(name, str)
    }


def _hidden_line(line: str, hidden: set[str]) -> str:
    """A line of the reference's case index, with the case made hidden when its name is in ``hidden``."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if isinstance(entry, dict) and entry.get("name") in hidden and entry.get("public"):
        entry["public"] = False
        return json.dumps(entry)
    return line


def _check_run(aid: str, threads: int, outcome, limits, source=None) -> list[str]:
    """Refuse a reference from a run that did not go through cleanly: it would grade every student wrong.
    A cell of ``source`` that is neither a graded test nor an answer and raised is no reason to refuse (nbgrader
    runs on past it; the canary still needs the solutions' full marks): what it raised, and the fix, is
    returned for the instructor."""
    where = f"{aid}: the source's own solutions, run in the sandbox with {threads} BLAS thread(s),"
    if outcome.status != "finished":
        hint = f"{limits.stopped(outcome.status)}: {limits.fix(outcome.status)}"
        raise ReferenceError(f"{where} {hint}.\n{outcome.detail[-1500:]}")
    failed = [c for c in outcome.summary.get("cells", []) if c.get("status") != "ok"]
    told = []
    if source is not None and not outcome.summary.get("stopped"):
        ungraded = [c for c in failed if c.get("status") == "error" and _ungraded(source, c.get("index"))]
        told = [ungraded_error(aid, source, c) for c in ungraded]
        failed = [c for c in failed if c not in ungraded]
    if failed or outcome.summary.get("stopped"):
        first = failed[0] if failed else {}
        raise ReferenceError(
            f"{where} failed in cell {first.get('index')} ({first.get('grade_id') or 'no grade id'}): "
            f"{first.get('ename') or first.get('error') or outcome.summary.get('stopped')}: "
            f"{str(first.get('evalue', ''))[:500]}"
        )
    return told


def _ungraded(source, index) -> bool:
    """Whether the cell at ``index`` of ``source`` is neither a graded cell nor an answer."""
    if not isinstance(index, int) or not 0 <= index < len(source.cells):
        return False
    meta = nbgrader_meta(source.cells[index])
    return not meta.get("grade") and not meta.get("solution")


def ungraded_error(aid: str, source, entry: dict) -> str:
    """What the instructor is told of an ungraded cell of the source that raised: the cell, the error, the fix."""
    index = entry["index"]
    first = next((line for line in source.cells[index].source.splitlines() if line.strip()), "")
    number = sum(c.cell_type == "code" for c in source.cells[: index + 1])
    return (
        f"{aid}: code cell {number} of the source (not graded; it starts `{first.strip()[:80]}`) raised "
        f"{entry.get('ename')}: {str(entry.get('evalue', ''))[:300]}. Grading goes on past it, as nbgrader's "
        "does; the students' runs of it raise too. Fix the cell in the source notebook so that it runs with "
        "the installed packages, then release again"
    )


def source_errors(reference: Reference) -> list[str]:
    """What the source's ungraded cells raised when its solutions ran (:func:`ungraded_error`)."""
    path = reference.directory / SOURCE_ERRORS_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def calibrate(cases: dict[str, Case], runs: dict[int, dict]) -> tuple[dict, list[str]]:
    """Each case's spread across the runs (thread count -> values), and the cases whose tolerance does not
    cover it ``SAFETY_MARGIN`` times over."""
    base_threads = min(runs)
    base = runs[base_threads]
    report, problems = {}, []
    for name, case in cases.items():
        spread_abs = spread_rel = 0.0
        problem = None
        for threads, values in runs.items():
            if name not in values:
                problem = f"{name}: not recorded in the run with {threads} threads"
                break
            ref, got = base[name], values[name]
            if case.kind in ("range", "accuracy"):  # no reference value: each run must pass on its own
                problem = compare(case, ref, got) and f"{compare(case, ref, got)} (with {threads} threads)"
            elif case.kind == "close" and ref.shape == got.shape and ref.dtype.kind in "fc":
                diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
                spread_abs = max(spread_abs, float(np.max(diff, initial=0.0)))
                allowed = case.params.get("atol", ATOL) + case.params.get("rtol", RTOL) * np.abs(ref)
                # a zero tolerance (an exact float check) allows no spread: 0 of 0 is none, anything else too much
                share = np.divide(diff, allowed, out=np.where(diff > 0, np.inf, 0.0), where=allowed > 0)
                spread_rel = max(spread_rel, float(np.max(share, initial=0.0)))
                if spread_rel * SAFETY_MARGIN > 1:
                    problem = (
                        f"{name}: differs by up to {spread_abs:.3g} between 1 and {threads} threads, which uses "
                        f"{spread_rel:.0%} of its tolerance (rtol={case.params.get('rtol')}, "
                        f"atol={case.params.get('atol')}); it may use at most {1 / SAFETY_MARGIN:.0%}"
                    )
            elif not (ref.shape == got.shape and np.array_equal(ref, got)):
                problem = f"{name}: compared exactly, but its value differs between 1 and {threads} threads"
            if problem:
                break
        report[name] = {"kind": case.kind, "spread": spread_abs, "share_of_tolerance": spread_rel}
        if problem:
            problems.append(problem)
    return {"threads": sorted(runs), "safety_margin": SAFETY_MARGIN, "cases": report}, problems


MEASURED_DIR = "measured"  # the measured cells' values, from their measured runs (the course's seed)


def write_measured(staged: Path, measured: dict[str, dict[str, bytes]]) -> None:
    """The measured cells' recordings, from their measured runs, apart: the grader decides those cases against
    them (their inputs come from the course's secret seed), while nbgrader's own autograde, which runs the
    notebook without that seed, compares with the notebook's run, in the reference's main index."""
    if not measured:
        return
    merged: dict[str, bytes] = {}
    for grade_id, capture in measured.items():
        merged = merge_capture(merged, capture, grade_id)
    (staged / MEASURED_DIR).mkdir()
    for name, data in merged.items():
        (staged / MEASURED_DIR / name).write_bytes(data)


def load_reference(directory: Path) -> Reference:
    cases, values, problems = load_cases(directory)
    problems = [p for p in problems if p != "no results were recorded"]  # a course whose tests are all plain
    if problems:
        raise ValueError(f"reference in {directory} is damaged: {problems}")
    measured_dir = directory / MEASURED_DIR
    if measured_dir.is_dir():  # tolerances stay the main index's (a regrade edits those)
        found, measured, problems = load_cases(measured_dir)
        if problems:
            raise ValueError(f"reference in {directory} is damaged: {problems}")
        for name in set(measured) & set(cases):
            kept = {k: v for k, v in cases[name].params.items() if k in TOLERANCES}
            cases[name] = replace(cases[name], params={**found[name].params, **kept})
            values[name] = measured[name]
    cells = json.loads((directory / CELLS_FILE).read_text())
    written = directory / WRITTEN_FILE
    written = json.loads(written.read_text()) if written.is_file() else {}
    parts = directory / NOTEBOOKS_FILE
    notebooks = (
        json.loads(parts.read_text())
        if parts.is_file()
        else {"": {"cells": list(cells), "written": list(written)}}
    )
    stamp = directory / STAMP_FILE
    digest = stamp.read_text() if stamp.is_file() else ""
    key = directory / RUN_KEY_FILE
    return Reference(
        directory, cells, cases, values, written, notebooks, digest, key.read_text() if key.is_file() else ""
    )
