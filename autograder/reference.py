"""The reference: what the source's own solutions produce on every case of every graded test cell.

Built once per assignment (and again whenever the source changes) by running the source notebook
with ``DLCOURSE_CAPTURE`` set and each graded test cell marked with ``begin_cell``. Trusted code
only: the source is the instructor's. The result lives in the grader's workspace, which students'
code can never read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course import Course, is_graded_test, nbgrader_meta
from autograder.notebooks import execute_notebook
from dlcourse.grading import CAPTURE_ENV, Case, load_cases

CELLS_FILE = "cells.json"
STAMP_FILE = "SOURCE_SHA256"


@dataclass(frozen=True)
class Reference:
    directory: Path
    cells: dict[str, dict]  # grade_id -> {"points": float, "cases": [names]}
    cases: dict[str, Case]
    values: dict

    @property
    def max_score(self) -> float:
        return sum(cell["points"] for cell in self.cells.values())


def source_digest(course: Course, aid: str) -> str:
    """A hash over everything the reference depends on: the source folder and the grading code."""
    digest = hashlib.sha256()
    for path in sorted(course.source_notebook(aid).parent.rglob("*")):
        if path.is_file() and ".ipynb_checkpoints" not in path.parts:
            digest.update(path.name.encode() + path.read_bytes())
    digest.update(Path(__file__).with_name("course.py").read_bytes())
    import dlcourse.grading

    digest.update(Path(dlcourse.grading.__file__).read_bytes())
    return digest.hexdigest()


def mark_test_cells(nb: nbformat.NotebookNode) -> dict[str, dict]:
    """Prefix every graded test cell with a ``begin_cell`` marker; return their ids and points."""
    cells = {}
    for cell in nb.cells:
        if is_graded_test(cell):
            meta = nbgrader_meta(cell)
            grade_id = meta["grade_id"]
            if grade_id in cells:
                raise ValueError(f"two graded cells share the grade_id {grade_id!r}")
            cells[grade_id] = {"points": float(meta.get("points", 0)), "cases": []}
            cell.source = f"import dlcourse.grading as _dlg; _dlg.begin_cell({grade_id!r})\n" + cell.source
    return cells


def build_reference(course: Course, aid: str, force: bool = False, timeout: float = 300) -> Reference:
    """Return the reference of ``aid``, running the source only if it changed since the last build.

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
        return _build(course, aid, target, digest, timeout)


def _build(course: Course, aid: str, target: Path, digest: str, timeout: float) -> Reference:
    nb = course.read_source(aid)
    cells = mark_test_cells(nb)
    if not cells:
        raise ValueError(f"{aid}: the source has no graded test cells")
    scratch = Path(tempfile.mkdtemp(prefix=f"reference-{aid}-"))
    try:
        workdir = scratch / "work"
        shutil.copytree(course.source_notebook(aid).parent, workdir)
        marked = workdir / f"{aid}.ipynb"
        nbformat.write(nb, str(marked))
        capture = scratch / "capture"
        execute_notebook(marked, timeout=timeout, workdir=workdir, env={CAPTURE_ENV: str(capture)})
        cases, _, problems = load_cases(capture)
        if problems:
            raise ValueError(f"{aid}: reference run recorded bad data: {problems}")
        for case in cases.values():
            if case.cell not in cells:
                raise ValueError(f"{aid}: case {case.name!r} is recorded outside a graded test cell")
            cells[case.cell]["cases"].append(case.name)
        empty = [grade_id for grade_id, cell in cells.items() if not cell["cases"]]
        if empty:
            raise ValueError(
                f"{aid}: graded test cells without any check(...) case cannot be graded: {empty}"
            )
        (capture / CELLS_FILE).write_text(json.dumps(cells, indent=1))
        (capture / STAMP_FILE).write_text(digest)
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(capture), str(target))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return load_reference(target)


def load_reference(directory: Path) -> Reference:
    cases, values, problems = load_cases(directory)
    if problems:
        raise ValueError(f"reference in {directory} is damaged: {problems}")
    cells = json.loads((directory / CELLS_FILE).read_text())
    return Reference(directory, cells, cases, values)
