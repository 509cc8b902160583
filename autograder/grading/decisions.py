"""What in a source changes only the grader's decisions, and what changes the values a run records.

A hidden check's tolerance (``check("a1.x.hidden", got, rtol=1e-4)``) is never used in the kernel: only the
grader compares the student's value with the reference's. A cell's points (and ``case_points``) live in its
metadata. Neither changes what any run, the source's or a student's, records. So after an edit of only
those, the reference's recorded values still hold: :func:`run_key` is the same, and the reference is
re-decided (:func:`redecide_reference`: new tolerances and points, the calibration checked against the new
tolerances) without running anything; the canary's kept runs are decided again the same way. Where a
tolerance cannot be read without running (a check named by an expression, a tolerance that is not a
number written in the call), the key covers it, and such an edit rebuilds as any other.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import numpy as np

from autograder.course import Course
from dlcourse.closeness import ATOL, RTOL

HIDDEN_CHECKS = {"check", "check_equal"}
TOLERANCES = ("rtol", "atol")
RUN_KEY_FILE = "RUN_KEY"


def _call_name(node: ast.Call) -> str:
    """The name a call is made by, for a plain name only: ``something.check(...)`` may be another library's."""
    return node.func.id if isinstance(node.func, ast.Name) else ""


def _is_hidden(node: ast.Call) -> bool:
    """A check without an expected value: compared with the reference by the grader, never in the kernel."""
    return (
        _call_name(node) in HIDDEN_CHECKS
        and len(node.args) <= 2
        and not any(k.arg == "expected" for k in node.keywords)
    )


def _static_tolerance(node: ast.Call) -> tuple[str, dict[str, float]] | None:
    """(case name, its rtol and atol) of a hidden ``check`` whose name and tolerances are written as literals."""
    if _call_name(node) != "check" or not node.args:
        return None
    name = node.args[0]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        return None  # check("x", got, **tolerances): what the splat holds is known only when it runs
    given = {k.arg: k.value for k in node.keywords if k.arg in TOLERANCES}
    found = {"rtol": RTOL, "atol": ATOL}
    for key, value in given.items():
        if not (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))) or isinstance(
            value.value, bool
        ):
            return None
        found[key] = float(value.value)
    return name.value, found


def _code_trees(nb: nbformat.NotebookNode):
    """Each code cell's syntax tree (a cell that is not Python, a magic, is skipped)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            try:
                yield ast.parse(cell.source)
            except SyntaxError:
                continue


def uses_course_checks(nb: nbformat.NotebookNode) -> bool:
    """Whether the notebook's ``check`` is this course's (``from dlcourse.grading import check``, and nowhere
    bound to anything else): a course's own ``check`` may use its tolerance in the kernel."""
    ours = other = False
    for tree in _code_trees(nb):
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if (alias.asname or alias.name) == "check" or alias.name == "*":
                        course = isinstance(node, ast.ImportFrom) and node.module == "dlcourse.grading"
                        ours, other = ours or course, other or not course
            elif (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name == "check"
            ):
                other = True
            elif isinstance(node, ast.Name) and node.id == "check" and isinstance(node.ctx, ast.Store):
                other = True
    return ours and not other


class _DecisionsRemoved(ast.NodeTransformer):
    """The tolerances of hidden checks whose tolerance can be read statically, taken out of the code."""

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if _is_hidden(node) and _static_tolerance(node) is not None:
            node.keywords = [k for k in node.keywords if k.arg not in TOLERANCES]
        return node


def run_text(nb: nbformat.NotebookNode) -> str:
    """The notebook as far as what its runs record goes: every code cell's code (parsed, so comments and
    layout do not count; a cell that does not parse as Python, as written) less the statically readable
    tolerances of hidden checks, and every cell's metadata less its points."""
    parts = []
    ours = uses_course_checks(nb)
    for cell in nb.cells:
        meta = copy.deepcopy(dict(cell.get("metadata", {})))
        meta.get("nbgrader", {}).pop("points", None)
        meta.get("dlcourse", {}).pop("case_points", None)
        if cell.cell_type == "code":
            try:
                tree = ast.parse(cell.source)
                text = ast.dump(_DecisionsRemoved().visit(tree) if ours else tree)
            except SyntaxError:
                text = cell.source
        else:
            text = cell.source
        parts.append(json.dumps([cell.cell_type, text, meta], sort_keys=True, default=str))
    return "\n".join(parts)


def run_key(course: Course, aid: str, grading_code: bytes, environment: str) -> str:
    """A hash over everything a run of the source records depends on: each notebook's :func:`run_text`, the
    source's other files, the grading code and the environment (as :func:`autograder.grading.reference.source_digest`
    covers them, less the decisions)."""
    digest = hashlib.sha256(grading_code + environment.encode())
    folder = course.source / aid
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or {".ipynb_checkpoints", "samples"} & set(rel.parts):
            continue
        if path.suffix == ".ipynb" and len(rel.parts) == 1:
            body = run_text(nbformat.read(str(path), as_version=4)).encode()
        else:
            body = path.read_bytes()
        digest.update(str(rel).encode() + b"\0" + body)
    return digest.hexdigest()


def static_tolerances(notebooks) -> dict[str, dict[str, float]]:
    """Case name -> rtol and atol, for every hidden check whose tolerance can be read without running."""
    found = {}
    for nb in notebooks:
        for tree in _code_trees(nb) if uses_course_checks(nb) else []:
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and _is_hidden(node):
                    static = _static_tolerance(node)
                    if static is not None:
                        found[static[0]] = static[1]
    return found


def recheck_calibration(calibration: dict, values: dict, cases: dict, margin: float) -> list[str]:
    """Each close case's recorded spread across thread counts against its (new) tolerance, taken where the
    reference value is smallest (so never looser than the build's own check)."""
    problems = []
    for name, entry in calibration.get("cases", {}).items():
        case = cases.get(name)
        if case is None or entry.get("kind") != "close" or name not in values:
            continue
        ref = np.abs(np.asarray(values[name], dtype=np.float64))
        allowed = case.params.get("atol", ATOL) + case.params.get("rtol", RTOL) * (
            ref.min() if ref.size else 0.0
        )
        share = entry.get("spread", 0.0) / allowed if allowed > 0 else float("inf")
        entry["share_of_tolerance"] = share
        if share * margin > 1:
            problems.append(f"{name}: its spread between thread counts uses {share:.0%} of the new tolerance")
    return problems


def rewrite_params(index: Path, tolerances: dict[str, dict[str, float]]) -> None:
    """The reference's case index with each hidden close case's tolerance as the source now writes it."""
    lines = []
    for line in index.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry.get("kind") == "close" and entry.get("name") in tolerances:
                entry["params"] = {**(entry.get("params") or {}), **tolerances[entry["name"]]}
            line = json.dumps(entry)
        lines.append(line)
    index.write_text("".join(line + "\n" for line in lines if line.strip()), encoding="utf-8")


def staged_copy(target: Path) -> Path:
    staged = Path(tempfile.mkdtemp(prefix=f"{target.name}-redecided-", dir=target.parent))
    shutil.rmtree(staged)
    shutil.copytree(target, staged)
    return staged
