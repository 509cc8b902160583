"""Decide every point outside the student's kernel, from plain data.

A graded test cell earns its points when every case that the reference recorded in it was also
recorded by the student's run and agrees with the reference (kind and tolerance from the reference).
The kernel's own verdict is kept as a second opinion, never as a source of points. A public check
records, with both sides of its comparison, what the kernel said of it, so the grader can redo that very
comparison on the same data: a public check the kernel called passed that fails when redone outside, a
cell that ran clean while one of its public checks was never recorded, and a cell the kernel saw fail
whose every case passes outside are each flagged, as the notebook may tamper with the tests. Differences
from the reference are never evidence of tampering (a consistently wrong answer, or floating-point noise,
passes its own public check). The trusted verdict always stands.

Written answers (markdown answer cells with points) are no cases: the score and its maximum count the
autograded test cells only, and :func:`written_results` lists the written answers apart, as awaiting
manual grading (or 0 without waiting, where the answer is still the release's stub, as nbgrader does).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autograder.grading.evaluate import EVALUATED, evaluate_model
from autograder.grading.heldout import heldout_case
from autograder.grading.reference import Reference
from autograder.result import CellResult, GroupResult, WrittenResult
from dlcourse.closeness import ATOL, RTOL
from dlcourse.grading import Case, compare, load_cases, load_expected


@dataclass
class Verdict:
    cells: list[CellResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # about the captured data
    disagreements: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.cells)


def kernel_verdicts(summary: dict) -> dict[str, dict]:
    """The kernel's view per graded cell: what the (untrusted) run summary says happened."""
    return {entry["grade_id"]: entry for entry in summary.get("cells", []) if entry.get("grade_id")}


def squeezed(text: str) -> str:
    """``text`` as the withholding compares it: compatibility-normalised, lower case, letters and digits only
    (so spaces, punctuation, zero-width and other invisible characters hide nothing)."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isascii() and ch.isalnum())


def spells_out(text: str, hidden: frozenset[str]) -> bool:
    """Whether ``text``, as :func:`squeezed` reads it, spells out one of ``hidden`` (the hidden tests' lines,
    squeezed: :func:`autograder.grading.pipeline.hidden_test_lines`)."""
    shown = squeezed(text)
    return any(line in shown for line in hidden)


def withheld_texts(texts: list[str], hidden: frozenset[str]) -> tuple[list[bool], bool]:
    """For texts a student reads in this order (a run's outputs, a page's): which spell out a line of a hidden
    test alone, and whether the others spell one out together (in pieces spread over them)."""
    alone = [spells_out(text, hidden) for text in texts]
    return alone, spells_out("".join(t for t, out in zip(texts, alone) if not out), hidden)


NAME_WITHHELD = "an error whose name is withheld: it spells out a hidden test"
MESSAGE_WITHHELD = "its message is withheld: it spells out a hidden test"


def kernel_error(ename, evalue, hidden: frozenset[str] = frozenset()) -> str:
    """An error the student's code raised, as a message may quote it: its name and the start of its message;
    where those spell out a line of a hidden test (``hidden``, squeezed: the code that called the student's
    function can read the running cell's source from IPython's ``In``), its name alone, or not even that where
    the name spells one out."""
    name = str(ename)[:100]
    text = f"{name}: {str(evalue)[:300]}" if evalue else name
    if not spells_out(text, hidden):
        return text
    if not evalue or spells_out(name, hidden):
        return NAME_WITHHELD
    return f"{name} ({MESSAGE_WITHHELD})"


def _why_missing(entry: dict | None, hidden: frozenset[str] = frozenset()) -> str:
    """Why a case has no result, from the kernel's (untrusted) account: the error's name and message
    as the student's code raised it (:func:`kernel_error`), never the test's code."""
    if entry is None:
        return "not checked: the test cell did not run"
    caps = f" (this test runs again in a fresh kernel, within {entry['caps']})" if entry.get("caps") else ""
    if entry.get("ename"):
        error = kernel_error(entry["ename"], entry.get("evalue"), hidden)
        if entry["ename"] == "NotImplementedError":
            error += " (this part is not answered yet)"
        return f"not checked: the test cell stopped with {error}{caps}"
    if entry.get("status") in ("timeout", "died"):
        return f"not checked: {entry.get('error', 'the test cell did not finish')}{caps}"
    return "not checked: the test cell did not record it"


def tampered_public_check(
    reference: Reference, capture: Path, cases: dict[str, Case], values: dict, name: str
) -> bool:
    """True when a public case's own in-kernel comparison, redone on the recorded data with the reference's
    kind and tolerance, fails, or when the case was not recorded at all: the kernel cannot have seen it pass."""
    if name not in values:
        return True
    trusted = reference.cases[name]
    if trusted.kind in ("range", "accuracy"):  # bounds or labels, not a value
        return safe_compare(trusted, None, values[name]) is not None
    if trusted.kind in EVALUATED:  # a model: the fixed architecture is the reference's, always checked; on
        # what the test handed the kernel, as the kernel compared it (held-out data is the trusted verdict's)
        return safe_compare(trusted, reference.values[name], values[name]) is not None
    expected = load_expected(capture, cases[name])
    shape = np.shape(reference.values[name])  # both sides were the kernel's: no larger than the reference's
    if expected is None or np.shape(expected) != shape or np.shape(values[name]) != shape:
        return True
    return safe_compare(trusted, expected, values[name]) is not None


def held_out(case: Case, reference: Reference) -> Case:
    """``case``, evaluated on the grader's held-out data where it asks for it (:mod:`autograder.grading.heldout`):
    drawn with the course's seed, or a window of the course's held-out text."""
    return heldout_case(case, reference.heldout_seed, reference.heldout_text)


def safe_compare(case: Case, reference, got) -> str | None:
    """:func:`compare` on a value the student's run recorded: whatever that value makes numpy do, the case
    fails with a reason; it never becomes the grader's error."""
    if case.kind in EVALUATED:  # the model runs in a child of its own, within limits
        return evaluate_model(case, reference, got)
    try:
        return compare(case, reference, got)
    except Exception as err:  # noqa: BLE001  (the data is the student's; any failure is theirs)
        return f"{case.name}: the recorded value cannot be compared ({type(err).__name__})"


def misplaced(reference: Reference, cases: dict[str, Case]) -> dict[str, str]:
    """Case name -> why its recording earns nothing: recorded more than once, or not by the test cell that
    owns it in the reference. The cell of a recording is the driver's tag (:class:`autograder.runner.protocol.
    Harvest`), never the kernel's claim: a value recorded by another cell, a hook or a thread while an
    answer ran is not the test's evidence, however right it is."""
    found = {}
    for name, case in cases.items():
        owner = reference.cases[name].cell if name in reference.cases else None
        if case.times > 1:
            found[name] = (
                f"{name}: recorded {case.times} times in this run; a case counts only when its test cell "
                "records it once"
            )
        elif owner is not None and case.cell != owner:
            where = f"in test cell {case.cell}" if case.cell else "outside any test cell"
            found[name] = f"{name}: recorded {where}, not by its own test cell {owner}; it earns nothing"
    return found


def case_problem(
    reference: Reference,
    values: dict,
    name: str,
    entry: dict | None,
    forged: dict[str, str] | None = None,
    hidden: frozenset[str] = frozenset(),
) -> str:
    """Why the case ``name`` fails ("" when it passes), in plain words. A hidden case's message never shows
    the reference's value: only that (and roughly how) it differs. ``forged``: the cases whose recording
    earns nothing (:func:`misplaced`), with why; ``hidden``: the hidden tests' lines no message may spell."""
    if forged and name in forged:
        return forged[name]
    if name not in values:
        return f"{name}: {_why_missing(entry, hidden)}"
    case = held_out(reference.cases[name], reference)
    problem = safe_compare(case, reference.values[name], values[name]) or ""
    if problem and not case.public and case.kind in ("close", "equal"):
        return hidden_message(case, reference.values[name], values[name])
    return problem


def hidden_message(case: Case, expected, got) -> str:
    """What a student may read of a failed hidden case: its name and the shape of what went wrong, never the
    expected values (they are the reference solution's answers)."""
    import numpy as np

    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return f"{case.name}: a result of shape {got.shape} where the reference solution's has another shape"
    if case.kind == "close" and got.dtype.kind in "biufc" and expected.dtype.kind in "biufc" and got.size:
        try:
            wrong = int(np.sum(~np.isclose(got, expected, rtol=case.params.get("rtol", RTOL),
                                           atol=case.params.get("atol", ATOL))))  # fmt: skip
            return f"{case.name}: {wrong} of {got.size} entries differ from the reference solution's on hidden inputs"
        except (TypeError, ValueError):
            pass
    return f"{case.name}: differs from the reference solution's result on hidden inputs (values not shown)"


def kernel_cell(
    grade_id: str, points: float, outputs: list | None, hidden: frozenset[str] = frozenset()
) -> CellResult:
    """A graded test cell without checks, decided as nbgrader's ``determine_grade`` decides it, from the
    outputs the cell left in the student's kernel: an error or anything written to stderr earns 0, a number
    as the cell's value earns that many points (at most the cell's), anything else full points. A cell that
    never ran earns 0. The verdict is the kernel's (the student's code ran in it): marked as such."""
    import nbformat
    from nbgrader.utils import determine_grade

    if outputs is None:
        return CellResult(grade_id, 0.0, points, False, f"{grade_id}: the test cell did not run", "not run",
                          decided="kernel")  # fmt: skip
    cell = nbformat.v4.new_code_cell(
        metadata={"nbgrader": {"grade": True, "solution": False, "points": points}}
    )
    try:
        cell.outputs = [nbformat.from_dict(o) for o in outputs if isinstance(o, dict)]
        earned, _ = determine_grade(cell)
        earned = min(max(float(earned or 0.0), 0.0), points)
    except Exception:  # noqa: BLE001  (outputs the student's code made that nbgrader cannot read)
        earned = 0.0
    error = next((o for o in cell.outputs if o.get("output_type") == "error"), None)
    if earned >= points:
        return CellResult(grade_id, points, points, True, "", "passed", decided="kernel")
    if error is not None:
        why = kernel_error(error.get("ename"), error.get("evalue"), hidden)
        message = f"{grade_id}: the test cell raised {why}"
    elif any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.outputs):
        message = f"{grade_id}: the test cell wrote to stderr (nbgrader gives such a cell 0)"
    else:
        message = f"{grade_id}: the test cell's value gives {earned:g} of {points:g} points"
    return CellResult(grade_id, round(earned, 2), points, False, message,
                      "failed" if earned == 0 else "passed", decided="kernel")  # fmt: skip


def run_disagreements(forged: dict[str, str], summary: dict) -> list[str]:
    """What the whole run did that a notebook which tampers with the tests does: recordings that earn nothing
    (:func:`misplaced`), and errors the kernel was stopped from showing."""
    found = []
    if forged:
        found.append(
            f"{len(forged)} case(s) were recorded outside their own test cell or more than once, and earn "
            f"nothing (the notebook may forge the tests' recordings): {', '.join(sorted(forged)[:8])}"
        )
    hid = [
        str(e.get("index")) for e in summary.get("cells", []) if isinstance(e, dict) and e.get("hidden_error")
    ]
    if hid:
        found.append(
            f"the notebook stopped the kernel from showing the errors of code cell(s) {', '.join(hid[:10])} (it "
            "may tamper with the tests); each error was taken from the kernel's reply, as nbgrader does"
        )
    return found


def _group_results(grade_id: str, cell: dict, problem) -> list[GroupResult]:
    """Each group of the cell's cases with what it earned: its points where none of its cases has a problem
    (``problem(name)``: "" when the case passes, else why not, the first of which is its message), else none. A
    reference from before points per case has the whole cell as one group."""
    groups = cell.get("groups") or [{"name": grade_id, "cases": cell["cases"], "points": cell["points"]}]
    results = []
    for group in groups:
        message = next((m for m in map(problem, group["cases"]) if m), "")
        earned = 0.0 if message else group["points"]
        name = group["name"] + (" (measured in the kernel)" if group.get("in_kernel") else "")
        results.append(GroupResult(name, earned, group["points"], not message, message))
    return results


def verify(
    reference: Reference,
    capture: Path,
    summary: dict,
    kernel_outputs: dict | None = None,
    hidden: frozenset[str] = frozenset(),
) -> Verdict:
    """The trusted verdict of one run (its captured data, the kernel's summary and, for the cells decided in the
    kernel, their outputs); ``hidden``: the hidden tests' lines that no message quoting the kernel may spell."""
    cases, values, problems = load_cases(capture)
    kernel = kernel_verdicts(summary)
    verdict = Verdict(problems=[p for p in problems if p != "no results were recorded"])
    forged = misplaced(reference, cases)
    verdict.disagreements += run_disagreements(forged, summary)
    for grade_id, cell in reference.cells.items():
        if cell.get("decided") == "kernel":
            outputs = (kernel_outputs or {}).get(grade_id)
            verdict.cells.append(kernel_cell(grade_id, cell["points"], outputs, hidden))
            continue
        entry = kernel.get(grade_id)
        results = _group_results(
            grade_id, cell, lambda n, entry=entry: case_problem(reference, values, n, entry, forged, hidden)
        )
        failed = [g for g in results if not g.passed]
        message = failed[0].message if failed else ""
        if entry is None:
            seen = "not run"
        else:
            seen = "passed" if entry.get("status") == "ok" else "failed"
        public = [name for name in cell["cases"] if reference.cases[name].public]
        said_passed = [
            n
            for n in public
            if (cases[n].verdict == "passed" if n in cases and cases[n].verdict else seen == "passed")
        ]
        unrecorded = seen == "passed" and any(n not in values for n in public)
        if unrecorded or any(
            tampered_public_check(reference, capture, cases, values, n) for n in said_passed
        ):
            # a public check the kernel called passed fails when redone outside, or a cell ran clean past
            # a public check that never recorded: the notebook changed how checks behave
            verdict.disagreements.append(
                f"{grade_id}: the kernel reported a public check of this test cell as passing, but it fails "
                "when its own comparison is redone outside the kernel, or was never recorded (the notebook "
                "may tamper with the tests)"
            )
        if seen == "failed" and not failed:
            verdict.disagreements.append(
                f"{grade_id}: the kernel reported this test cell as failing ({entry.get('ename') or 'stopped'}), but every "
                "case in it passes outside the kernel (the notebook may tamper with the tests or the grader)"
            )
        points = round(sum(g.points for g in results), 2)
        groups_shown = results if len(results) > 1 else []
        decided = "kernel-checks" if cell.get("in_kernel") else "outside"
        verdict.cells.append(
            CellResult(
                grade_id, points, cell["points"], not failed, message, seen, groups_shown, decided=decided
            )
        )
    return verdict


def written_results(reference: Reference, repaired=None, unanswered: bool = False) -> list[WrittenResult]:
    """The written answers of the reference's source, each awaiting manual grading, or given 0 where the
    submission left it as the release's stub (``repaired.answered``; no repair at hand: awaiting, or 0 with
    ``unanswered``, for a notebook that was not handed in or cannot be read). The gradebook's manual scores
    are added when the result is recorded (:mod:`autograder.grading.record`)."""
    answered = repaired.answered if repaired is not None else {}
    found = []
    for grade_id, points in reference.written.items():
        done = answered.get(grade_id, not unanswered)
        found.append(WrittenResult(grade_id, float(points), None if done else 0.0, done))
    return found
