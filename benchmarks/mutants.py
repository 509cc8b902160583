"""Mutation testing of the assignments' graded tests: do they still catch subtly wrong code?

A *mutant* is the perfect submission (:func:`autograder.intake.samples.filled`) with ONE answer cell's solution
changed by one small, plausible slip: an arithmetic operator swapped, a comparison flipped, a constant
nudged, a statement dropped, a reduction or an axis changed, a transpose removed, two arguments swapped
(see :data:`OPERATORS`); an answer cell that no test grades (``metadata.dlcourse.optional``) has none. Only code
that came from between the cell's ``### BEGIN SOLUTION`` and ``### END SOLUTION`` lines is mutated; the mutated cell is written back with ``ast.unparse``. Mutants
that do not compile, or that unparse to the original (or to another mutant), are skipped. A fixed number
per assignment (``--max``, default 25) is drawn by seed, spread round-robin over the answer cells.

Every mutant of an assignment is a student of one batch, graded by the real grader
(:func:`autograder.api.grade`, sandboxed, in a throwaway course that shares the course's cache of
references) together with a *control*: the perfect submission with every answer cell passed through
the same ``ast.parse``/``ast.unparse`` round trip, which must get full marks or the batch proves nothing.
A mutant is **killed** when it gets less than full marks; a grader error (no score) counts neither way.

Equivalent mutants (no change of behaviour, so no test can kill them) are the known limit of the
method. Survivors are listed with their diff; one is counted *equivalent* only where that is shown: by
a rule that proves it (the arguments of a symmetric elementwise function swapped) or by an argument
written down in :data:`JUDGED_EQUIVALENT`, keyed by the mutated cell's exact code (so a claim lapses
when the solution changes). The same table names survivors in an open-ended answer (a model or a
training recipe of the student's choice) that still meet its specification: no fault, so no test
should kill them. Both are left out of the second score, never of the raw one. For each survivor the run also lists the cases whose captured values were not
bit-identical to the control's: evidence for a human, not a proof (a boundary that no hidden case
tests looks the same; a measured time differs between any two runs).

    .venv/bin/python -m benchmarks.mutants A1 [A2 ...] [--max 25] [--seed 0]

writes ``benchmarks/results/mutants-<UTC timestamp>.json`` and rebuilds ``benchmarks/RESULTS.md``;
``make bench`` (a full run, not ``--quick``) runs it for every assignment.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import hashlib
import json
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.api import Course, is_solution, nbgrader_meta
from benchmarks.judged import JUDGED_EQUIVALENT, TARGET, score

HERE = Path(__file__).resolve().parent
DEFAULT_MAX = 25
DEFAULT_SEED = 0
CONTROL = "control"  # the student id of the round-tripped perfect submission in every batch

OPERATORS = {
    "arith": "arithmetic operator swapped (+ -, * /, // /, ** *, @ *), an augmented one, or a negation dropped",
    "compare": "comparison flipped (< <=, > >=)",
    "constant": "constant nudged (int 0<->1 or n+1, float x*1.01), or off by one in a slice or range()",
    "drop": "statement dropped (a call, an augmented assignment), `return x` -> `return None`, a `with` unwrapped",
    "reduction": "reduction swapped (mean <-> sum, reduce_mean <-> reduce_sum, max <-> min, median -> mean)",
    "transpose": "transpose removed (.T, .mT, .t(), .transpose(...), np.transpose(x))",
    "swap_args": "the two positional arguments of a call swapped, or the operands of @",
    "axis": "axis/dim changed (0<->1, -1<->-2), keepdim(s) flipped",
}

_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Pow: ast.Mult, ast.MatMult: ast.Mult}  # fmt: skip
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_REDUCTION = {"mean": "sum", "sum": "mean", "reduce_mean": "reduce_sum", "reduce_sum": "reduce_mean",
              "nanmean": "nansum", "nansum": "nanmean", "amax": "amin", "amin": "amax", "max": "min",
              "min": "max", "median": "mean"}  # fmt: skip
_TRANSPOSE_ATTRS = {"T", "mT"}
_TRANSPOSE_METHODS = {"t", "transpose", "permute"}
_DIM_KEYWORDS = {"axis", "dim"}
_KEEPDIM_KEYWORDS = {"keepdim", "keepdims"}
# methods whose first positional argument is a dimension (x.sum(1), x.unsqueeze(-1), x.gather(1, i))
_DIM_METHODS = {"sum", "mean", "amax", "amin", "argmax", "argmin", "softmax", "log_softmax", "squeeze",
                "unsqueeze", "gather", "cumsum", "prod", "logsumexp", "flatten", "std", "var"}  # fmt: skip
# calls whose swapped arguments only raise a TypeError: not a slip anyone makes
_NOT_SWAPPED = {"isinstance", "issubclass", "hasattr", "getattr", "setattr"}
# elementwise functions whose two arguments commute exactly (NaNs included): swapping them is equivalent
_SYMMETRIC = {"maximum", "minimum", "add", "multiply", "fmax", "fmin", "hypot", "logaddexp"}


# ----------------------------------------------------------------------------- the answer cells


def solution_lines(source_text: str) -> set[int]:
    """Line numbers (1-based) of the *filled* cell text that lie between BEGIN and END SOLUTION markers.

    The filled text is the source cell with its marker lines removed (:func:`autograder.intake.samples._answers`).
    """
    inside, out, number = False, set(), 0
    for line in source_text.splitlines():
        stripped = line.strip()
        if stripped == "### BEGIN SOLUTION":
            inside = True
            continue
        if stripped == "### END SOLUTION":
            inside = False
            continue
        number += 1
        if inside:
            out.add(number)
    return out


@dataclass
class AnswerCell:
    grade_id: str
    text: str  # as a student who solved it leaves it (the filled notebook's cell)
    lines: set[int]  # which of its lines are solution code


def answer_cells(course: Course, aid: str) -> list[AnswerCell]:
    from autograder.api import SOLUTION_BLOCK

    cells = []
    for cell in course.read_source(aid).cells:
        if cell.metadata.get("dlcourse", {}).get("optional"):
            continue  # an answer no test grades (A8's Triton kernel, run on a GPU in the student's own notebook)
        if is_solution(cell) and cell.cell_type == "code":
            text = SOLUTION_BLOCK.sub(lambda m: m.group(1), cell.source)
            cells.append(AnswerCell(nbgrader_meta(cell)["grade_id"], text, solution_lines(cell.source)))
    return cells


# ----------------------------------------------------------------------------- operators


@dataclass(frozen=True)
class Site:
    """One place to mutate: the index of a node in ``ast.walk`` order, the operator and its variant."""

    index: int
    operator: str
    variant: str = ""


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _within(node: ast.AST, lines: set[int]) -> bool:
    start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    return start is not None and all(n in lines for n in range(start, (end or start) + 1))


def _int_value(node: ast.AST) -> int | None:
    """The int a node spells (``3`` or ``-1``), else None (bools are not ints here)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int):  # fmt: skip
        return -node.operand.value
    return None


def _int_node(value: int) -> ast.AST:
    return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)


def _other_dim(value: int) -> int:
    return {0: 1, 1: 0, -1: -2, -2: -1}.get(value, value - 1 if value > 0 else value + 1)


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _in_slice_or_range(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(node))
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Slice):
            return True
        if isinstance(parent, ast.Call) and _call_name(parent) == "range":
            return True
        parent = parents.get(id(parent))
    return False


def sites(tree: ast.AST, lines: set[int]) -> list[Site]:
    """Every mutation site of ``tree`` within the solution ``lines``, in a fixed order."""
    parents = _parents(tree)
    out: list[Site] = []
    for index, node in enumerate(ast.walk(tree)):
        if not _within(node, lines):
            continue
        parent = parents.get(id(node))
        add = lambda op, variant="", at=index: out.append(Site(at, op, variant))  # noqa: E731
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            add("arith")
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and not isinstance(node.operand, ast.Constant)
        ):
            add("arith", "negation")
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    add("compare", str(k))
        inner = isinstance(parent, ast.UnaryOp) and _int_value(parent) is not None  # the 1 of -1
        if isinstance(node, (ast.Constant, ast.UnaryOp)) and not inner:
            value = _int_value(node)
            if value is not None:
                add("constant", "int")
                if value not in (0, 1) and _in_slice_or_range(node, parents):
                    add("constant", "minus_one")
            elif isinstance(node, ast.Constant) and type(node.value) is float:
                add("constant", "float")
        if (
            isinstance(parent, ast.Slice)
            and _int_value(node) is None
            and any(node is getattr(parent, f) for f in ("lower", "upper"))
        ):
            add("constant", "plus_one")
            add("constant", "minus_one_expr")
        if (isinstance(parent, ast.Call) and _call_name(parent) == "range" and any(a is node for a in parent.args)
                and _int_value(node) is None):  # fmt: skip
            add("constant", "plus_one")
            add("constant", "minus_one_expr")
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and _call_name(node.value) != "print"
        ):
            add("drop")
        if isinstance(node, ast.AugAssign):
            add("drop")
        if (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            add("drop", "return")
        if isinstance(node, ast.With):
            add("drop", "with")
        if isinstance(node, ast.Call) and _call_name(node) in _REDUCTION:
            if not (isinstance(node.func, ast.Name) and _call_name(node) not in ("max", "min")):
                add("reduction")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _TRANSPOSE_ATTRS
            and isinstance(node.ctx, ast.Load)
        ):
            add("transpose")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _TRANSPOSE_METHODS and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy", "torch", "tf")
            ):
                add("transpose", "method")
            elif node.func.attr == "transpose" and len(node.args) == 1:
                add("transpose", "function")
        if (isinstance(node, ast.Call) and len(node.args) == 2 and _call_name(node) not in _NOT_SWAPPED
                and not any(isinstance(a, ast.Starred) for a in node.args)):  # fmt: skip
            if ast.unparse(node.args[0]) != ast.unparse(node.args[1]):
                add("swap_args")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            add("swap_args", "matmul")
        if isinstance(node, ast.keyword) and node.arg in _DIM_KEYWORDS and _int_value(node.value) is not None:
            add("axis", "keyword")
        if isinstance(node, ast.keyword) and node.arg in _KEEPDIM_KEYWORDS and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, bool):  # fmt: skip
            add("axis", "keepdim")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DIM_METHODS \
                and node.args and _int_value(node.args[0]) is not None:  # fmt: skip
            add("axis", "positional")
    return out


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST | list[ast.AST] | None) -> None:
    """Put ``new`` where ``old`` is among ``parent``'s fields (a list of statements for a body)."""
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list) and any(v is old for v in value):
            at = next(i for i, v in enumerate(value) if v is old)
            replacement = new if isinstance(new, list) else [] if new is None else [new]
            value[at : at + 1] = replacement
            if not value and name in ("body", "finalbody"):
                value.append(ast.Pass())
            return
    raise ValueError("node not found in its parent")


def _plus(node: ast.AST, op: ast.operator) -> ast.AST:
    return ast.BinOp(copy.deepcopy(node), op, ast.Constant(1))


def apply(tree: ast.AST, site: Site) -> tuple[ast.AST, str]:
    """A mutated copy of ``tree`` and a one-line description (``line N: before -> after``)."""
    tree = copy.deepcopy(tree)
    nodes = list(ast.walk(tree))
    parents = _parents(tree)
    node, parent = nodes[site.index], parents.get(id(nodes[site.index]))
    line = getattr(node, "lineno", 0)
    before = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.keyword) else ast.unparse(node)
    op, variant = site.operator, site.variant
    shown: ast.AST | None = node  # what to show as "after"
    if op == "arith" and variant == "negation":
        _replace(parent, node, node.operand)
        shown = node.operand
    elif op == "arith":
        node.op = _ARITH[type(node.op)]()
    elif op == "compare":
        k = int(variant)
        node.ops[k] = _COMPARE[type(node.ops[k])]()
    elif op == "constant":
        if variant == "int":
            value = _int_value(node)
            new = _int_node({0: 1, 1: 0}.get(value, value + 1))
            _replace(parent, node, new)
            shown = new
        elif variant == "minus_one":
            new = _int_node(_int_value(node) - 1)
            _replace(parent, node, new)
            shown = new
        elif variant == "float":
            node.value = float(f"{node.value * 1.01:.12g}") if node.value != 0 else 0.01
        else:
            new = _plus(node, ast.Add() if variant == "plus_one" else ast.Sub())
            _replace(parent, node, new)
            shown = new
    elif op == "drop":
        if variant == "return":
            node.value = ast.Constant(None)
        elif variant == "with":
            _replace(parent, node, node.body)
            shown = None
            before = before.rstrip(":")
        else:
            _replace(parent, node, None)
            shown = None
    elif op == "reduction":
        if isinstance(node.func, ast.Attribute):
            node.func.attr = _REDUCTION[node.func.attr]
        else:
            node.func.id = _REDUCTION[node.func.id]
    elif op == "transpose":
        if variant == "function":
            new = node.args[0]
        else:
            new = node.value if isinstance(node, ast.Attribute) else node.func.value
        _replace(parent, node, new)
        shown = new
    elif op == "swap_args":
        if variant == "matmul":
            node.left, node.right = node.right, node.left
        else:
            node.args = [node.args[1], node.args[0]]
    elif op == "axis":
        if variant == "keyword":
            node.value = _int_node(_other_dim(_int_value(node.value)))
        elif variant == "keepdim":
            node.value = ast.Constant(not node.value.value)
        else:
            node.args[0] = _int_node(_other_dim(_int_value(node.args[0])))
    else:
        raise ValueError(f"unknown operator {op}")
    ast.fix_missing_locations(tree)
    if shown is None:
        after = "(dropped)" if variant != "with" else "(its body, unwrapped)"
    else:
        after = ast.unparse(shown).splitlines()[0]
    return tree, f"line {line}: {before} -> {after}"


# ----------------------------------------------------------------------------- mutants


@dataclass
class Mutant:
    aid: str
    cell: str  # the answer cell's grade_id
    operator: str
    description: str
    code: str  # the mutated cell, as unparsed
    diff: str  # unified diff against the unmutated cell, as unparsed
    id: str = ""  # the student id it is graded under (m01, m02, ...)
    equivalent: str = ""  # why it is equivalent, where that is shown

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.aid}\0{self.cell}\0{self.code}".encode()).hexdigest()[:16]


def cell_mutants(aid: str, cell: AnswerCell) -> list[Mutant]:
    """Every distinct, compilable mutant of one answer cell (none when the cell is not plain Python)."""
    try:
        tree = ast.parse(cell.text)
    except SyntaxError:
        return []
    original = ast.unparse(tree)
    seen = {original}
    out = []
    for site in sites(tree, cell.lines):
        try:
            mutated, description = apply(tree, site)
            code = ast.unparse(mutated)
            compile(code, f"<{aid}:{cell.grade_id}>", "exec")
        except (SyntaxError, ValueError, TypeError, AttributeError, RecursionError):
            continue
        if code in seen:
            continue
        seen.add(code)
        diff = "".join(
            difflib.unified_diff(
                original.splitlines(keepends=True), code.splitlines(keepends=True), "solution", "mutant", n=1
            )
        )
        mutant = Mutant(aid, cell.grade_id, site.operator, description, code, diff)
        mutant.equivalent = shown_equivalent(mutant, tree, site)
        out.append(mutant)
    return out


def shown_equivalent(mutant: Mutant, tree: ast.AST, site: Site) -> str:
    """Why ``mutant`` cannot change behaviour, where a rule or a recorded argument shows it; else ""."""
    node = list(ast.walk(tree))[site.index]
    if site.operator == "swap_args" and site.variant == "" and _call_name(node) in _SYMMETRIC:
        return f"{_call_name(node)}(a, b) == {_call_name(node)}(b, a) elementwise, NaNs included"
    if _in_accepted(tree, node):
        return (
            f"`{ACCEPTED_NAME}` is the grader's, not an answer: check_one_of reads the accepted answers from the "
            "reference's run of the source, never from the submission's, so a change to them changes no grade"
        )
    return JUDGED_EQUIVALENT.get(mutant.fingerprint, "")


ACCEPTED_NAME = "ACCEPTED"  # a solution cell's accepted answers for check_one_of (A2's bug report)


def _in_accepted(tree: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` lies in a top-level ``ACCEPTED = ...`` of the cell."""
    line = getattr(node, "lineno", None)
    for statement in getattr(tree, "body", []):
        targets = [t.id for t in getattr(statement, "targets", []) if isinstance(t, ast.Name)]
        if ACCEPTED_NAME in targets and line is not None and statement.lineno <= line <= statement.end_lineno:
            return True
    return False


def all_mutants(course: Course, aid: str) -> dict[str, list[Mutant]]:
    """Answer cell -> its mutants, cells in notebook order."""
    return {cell.grade_id: cell_mutants(aid, cell) for cell in answer_cells(course, aid)}


def sample(by_cell: dict[str, list[Mutant]], cap: int, seed: int, aid: str) -> list[Mutant]:
    """At most ``cap`` mutants, round-robin over the cells (each cell's order shuffled by ``seed``), then
    numbered m01, m02, ... in notebook order."""
    rng = random.Random(f"{seed}:{aid}")
    queues = {gid: rng.sample(ms, len(ms)) for gid, ms in by_cell.items()}
    chosen: list[Mutant] = []
    while len(chosen) < cap and any(queues.values()):
        for gid in by_cell:
            if queues[gid] and len(chosen) < cap:
                chosen.append(queues[gid].pop(0))
    order = {gid: i for i, gid in enumerate(by_cell)}
    chosen.sort(
        key=lambda m: (order[m.cell], int(re.match(r"line (\d+)", m.description).group(1)), m.description)
    )
    for n, m in enumerate(chosen, 1):
        m.id = f"m{n:02d}"
    return chosen


def mutant_notebook(course: Course, aid: str, mutant: Mutant) -> nbformat.NotebookNode:
    """The perfect submission with ``mutant``'s cell replaced: every other cell as the student's."""
    from autograder.api import filled

    nb = filled(course, aid)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == mutant.cell:
            cell.source = mutant.code
    return nb


def control_notebook(course: Course, aid: str) -> nbformat.NotebookNode:
    """The perfect submission with every answer cell through the ast round trip the mutants get."""
    from autograder.api import filled

    nb = filled(course, aid)
    for cell in nb.cells:
        if is_solution(cell) and cell.cell_type == "code":
            try:
                cell.source = ast.unparse(ast.parse(cell.source))
            except SyntaxError:
                pass
    return nb


# ----------------------------------------------------------------------------- grading


def mutant_settings(workers: int):
    """The command line's default limits, one BLAS thread per kernel (grades do not depend on it). The
    per-cell limit stays the default: A4's torch.compile cell needs more than 90 s on a busy 2-core
    machine, so a mutant that loops forever costs that much. The isolation is what ``auto`` gives, as for a
    class: a grade does not depend on it, and forked kernels make the few hundred notebooks of a mutation
    run cheap."""
    from autograder.api import Limits, Settings, resolve

    return Settings(limits=Limits(threads=1), isolation=resolve("auto"), workers=workers)


def _captured(course: Course, aid: str, sid: str) -> dict:
    from autograder.api import kept_values

    return kept_values(course, aid, sid)


def _differing(mutant: dict, control: dict) -> list[str]:
    """The cases whose captured values are not bit-identical between the mutant's run and the control's
    (a case only one of them recorded counts). Timings and other measured values differ between any two runs."""
    import numpy as np

    out = []
    for name in sorted(set(mutant) | set(control)):
        a, b = mutant.get(name), control.get(name)
        same = (
            a is not None
            and b is not None
            and a.shape == b.shape
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
        if not same:
            out.append(name)
    return out


def _failed(result) -> list[str]:
    """The test cells (and their failing groups: public checks or hidden cases) that cost points."""
    out = []
    for cell in result.cells:
        if cell.points < cell.max_points - 1e-9:
            groups = [g.name for g in cell.groups if not g.passed]
            out.append(cell.grade_id + (f" [{', '.join(groups)}]" if groups else ""))
    return out


def grade_mutants(
    course: Course, aid: str, mutants: list[Mutant], workers: int = 1, log=print
) -> tuple[dict, list[dict]]:
    """Grade the control and ``mutants`` as one batch in a throwaway copy of ``course``:
    ``(control's row, one row per mutant)``."""
    from autograder.api import Listeners, grade, throwaway_course
    from benchmarks.grading import private_uid_range

    private_uid_range()  # never share sandbox uids with another grader running on this machine
    work = throwaway_course(course, [aid])
    try:
        notebooks = {CONTROL: control_notebook(work, aid)}
        notebooks.update({m.id: mutant_notebook(work, aid, m) for m in mutants})
        for sid, nb in notebooks.items():
            path = work.submission(aid, sid)
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(path))
        started = time.monotonic()

        def show(result) -> None:
            log(f"  {result.student_id:<8} {result.score:g}/{result.max_score:g} {result.status:<9} "
                f"{result.reason[:100]}")  # fmt: skip

        results = {
            r.student_id: r
            for r in grade(
                work, aid, mutant_settings(workers), force=True, listeners=Listeners(on_result=show)
            )
        }
        seconds = time.monotonic() - started
        control = results[CONTROL]
        control_values = _captured(work, aid, CONTROL)
        control_row = {
            "score": control.score,
            "max_score": control.max_score,
            "status": control.status,
            "full_marks": not control.is_error and control.score >= control.max_score - 1e-9,
            "reason": control.reason[:300],
            "seconds": round(seconds, 1),
        }
        rows = []
        for m in mutants:
            r = results[m.id]
            error = r.is_error
            killed = not error and r.score < r.max_score - 1e-9
            row = {
                "id": m.id,
                "cell": m.cell,
                "operator": m.operator,
                "description": m.description,
                "fingerprint": m.fingerprint,
                "status": r.status,
                "score": r.score,
                "max_score": r.max_score,
                "outcome": "error" if error else "killed" if killed else "survived",
                "failed": _failed(r) if killed else [],
                "reason": r.reason[:300],
                "seconds": r.seconds,
            }
            if not killed and not error:
                row["equivalent"] = m.equivalent
                differing = _differing(_captured(work, aid, m.id), control_values)
                row["outputs_identical"] = not differing and bool(control_values)
                row["differing_cases"] = differing
                row["diff"] = m.diff
            rows.append(row)
        return control_row, rows
    finally:
        shutil.rmtree(work.root, ignore_errors=True)


def run_assignment(
    aid: str, cap: int = DEFAULT_MAX, seed: int = DEFAULT_SEED, workers: int = 1, course: Course | None = None,
    log=print,
) -> dict:  # fmt: skip
    course = course or Course()
    by_cell = all_mutants(course, aid)
    chosen = sample(by_cell, cap, seed, aid)
    log(f"{aid}: {sum(map(len, by_cell.values()))} candidate mutants in {len(by_cell)} answer cells; "
        f"grading {len(chosen)} and the control (workers={workers})")  # fmt: skip
    started = time.monotonic()
    control, rows = grade_mutants(course, aid, chosen, workers=workers, log=log)
    out = {
        "assignment": aid,
        "seed": seed,
        "cap": cap,
        "candidates": {gid: len(ms) for gid, ms in by_cell.items()},
        "sampled_per_cell": {gid: sum(m.cell == gid for m in chosen) for gid in by_cell},
        "operators": {op: sum(m.operator == op for m in chosen) for op in OPERATORS},
        "control": control,
        **score(rows),
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    if not control["full_marks"]:
        out["target_met"] = False
        out["note"] = (
            "the control (the perfect submission, round-tripped) did not get full marks: scores are void"
        )
    log(f"{aid}: killed {out['killed']} of {out['killed'] + out['survived']} "
        f"({_pct(out['score_raw'])} raw, {_pct(out['score_excluding_equivalent'])} without {out['equivalent']} "
        f"shown equivalent), {out['errors']} grader errors; control {control['score']:g}/{control['max_score']:g}")  # fmt: skip
    return out


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def run_mutants(
    aids: list[str] | None = None, cap: int = DEFAULT_MAX, seed: int = DEFAULT_SEED, workers: int = 1
) -> dict:
    """A mutation run over ``aids`` (default: every assignment); one failing assignment does not stop it."""
    import traceback

    from benchmarks.machine import describe_machine, load_average

    started = time.time()
    run = {
        "schema": 1,
        "kind": "mutants",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(["python -m benchmarks.mutants", *sys.argv[1:]]),
        "machine": describe_machine(),
        "operators": OPERATORS,
        "target": TARGET,
        "assignments": [],
    }
    for aid in aids or Course().assignments():
        try:
            run["assignments"].append(run_assignment(aid, cap, seed, workers))
        except Exception as err:  # record it and go on with the next assignment
            print(f"{aid}: mutation run failed: {type(err).__name__}: {err}", file=sys.stderr)
            run["assignments"].append({"assignment": aid, "error": f"{type(err).__name__}: {err}",
                                       "traceback": traceback.format_exc()[-3000:]})  # fmt: skip
    run["seconds"] = round(time.time() - started, 1)
    run["load_average_end"] = load_average()
    return run


def record(run: dict, results: Path) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    path = results / ("mutants-" + run["started_utc"].replace(":", "") + ".json")
    path.write_text(json.dumps(run, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def run_and_record(out: Path = HERE, aids: list[str] | None = None, cap: int = DEFAULT_MAX,
                   seed: int = DEFAULT_SEED, workers: int = 1) -> Path:  # fmt: skip
    run = run_mutants(aids, cap, seed, workers)
    path = record(run, out / "results")
    print(f"recorded {path} ({run['seconds']:.0f} s)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mutants", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("aids", nargs="*", help="assignments (default: all in source/)")
    parser.add_argument("--max", type=int, default=DEFAULT_MAX, help="mutants per assignment (default 25)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="which mutants are drawn (default 0)")
    parser.add_argument("--workers", type=int, default=1, help="grading workers (default 1)")
    parser.add_argument("--out", type=Path, default=HERE, help="where results/ and RESULTS.md go")
    parser.add_argument("--list", action="store_true", help="only list the drawn mutants; grade nothing")
    args = parser.parse_args(argv)
    from dlcourse._lazy import quiet

    quiet()
    if args.list:
        course = Course()
        for aid in args.aids or course.assignments():
            by_cell = all_mutants(course, aid)
            print(
                f"{aid}: {sum(map(len, by_cell.values()))} candidates "
                + str({g: len(m) for g, m in by_cell.items()})
            )
            for m in sample(by_cell, args.max, args.seed, aid):
                print(
                    f"  {m.id} {m.cell:<20} {m.operator:<10} {m.description}"
                    + (" [equivalent]" if m.equivalent else "")
                )
        return 0
    path = run_and_record(args.out, args.aids or None, args.max, args.seed, args.workers)
    from benchmarks.report import write_report

    print(f"wrote {write_report(args.out)}")
    run = json.loads(path.read_text(encoding="utf-8"))
    return 1 if any("error" in a for a in run["assignments"]) else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["OPERATORS", "Mutant", "Site", "all_mutants", "apply", "cell_mutants", "main", "run_assignment",
           "run_mutants", "sample", "sites"]  # fmt: skip
