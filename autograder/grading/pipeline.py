"""One submission's way through the grader: the declared :data:`STAGES` (repair -> tamper -> sandbox_run ->
measure -> verify -> status -> keep), each notebook of a hand-in in a kernel of its own, on the :class:`Batch`
that every submission of a grading run shares (built once: the course, the reference, the parsed source and
release, the frameworks to warm, what makes each run's sandbox). Every stage but the last decides, and leaves
its decision on the notebook's :class:`Grading` (the status is :func:`run_status` of plain values; the parts
are merged into a new result by :func:`merge_parts`); only the last, ``keep``, writes to disk.

Workers (:func:`run_jobs`) grade submissions in parallel, each waiting on its own sandboxed child, so the
grader's process never runs student code; each worker starts its next child while the current one runs.
A run that failed for the grader's reasons (its kernel never started, the sandbox could not be set up, the
disk filled) gets status ``error``, is tried once more, and is never recorded as a score. The batch
around this (the proof, recording, Dask) is :mod:`autograder.grading.batch`.
"""

from __future__ import annotations

import functools
import json
import queue
import shutil
import tempfile
import threading
import time
import traceback
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.files import read_bytes_bounded, write_json_atomic
from autograder.grading.heldout import course_seed, heldout_text
from autograder.grading.measure import (
    ALLOWED,
    caps_for,
    describe,
    measure_seed,
    measured_entry,
    measurement_notebook,
    merge_capture,
    unchanged_by_the_seed,
    without_demonstrations,
)
from autograder.grading.reference import Reference, source_inputs
from autograder.grading.tamper import given_code, scan
from autograder.grading.verify import Verdict, squeezed, verify, withheld_texts, written_results
from autograder.intake.handin import assignment_files, frameworks_used, submission_digest
from autograder.intake.repair import MAX_NOTEBOOK_BYTES, Repaired, Template, rebuild
from autograder.result import STATUS, CellResult, Result
from autograder.runner.caps import over_cpu
from autograder.runner.interface import SandboxFactory, SandboxRun
from autograder.runner.isolation import Isolation
from autograder.runner.protocol import CAPTURE_NAME
from autograder.runner.sandbox import Outcome, Sandbox
from autograder.settings import Limits, Settings

__all__ = ["STAGES", "Batch", "Job", "grade_one", "make_batch", "run_jobs", "stages"]


@dataclass(frozen=True)
class Batch:
    """What every submission of one grading run shares, made once by :func:`make_batch`: frozen values, so
    it travels to a Dask worker whole (sent once per worker)."""

    course: Course  # its workspace, gradebook and cache root
    aid: str
    reference: Reference  # its digest a plain field
    limits: Limits
    isolation: Isolation
    warm: tuple[str, ...]  # modules a child imports before the student's code arrives
    private: tuple[str, ...]  # folders no kernel may see
    templates: dict[str, Template]  # notebook -> its source and release, parsed
    hidden: dict[str, frozenset[str]]  # notebook -> the hidden tests' lines no output may spell
    inputs: dict[str, str]  # what the source's graded lines are (:func:`assignment_inputs`)
    sandboxes: SandboxFactory = Sandbox  # makes each run's sandbox (the real one, or a test's prepared runs)

    @property
    def notebooks(self) -> list[str]:
        return list(self.reference.notebooks)

    def sandbox(self, slot: int = 0) -> SandboxRun:
        """A sandbox for one run (not started), on the worker ``slot``'s warm parent."""
        return self.sandboxes(self.limits, slot, self.warm, self.isolation, self.private)


def make_batch(course: Course, aid: str, reference: Reference, settings: Settings) -> Batch:
    """The shared part of grading ``aid`` as ``settings`` say (their isolation resolved): every notebook's
    source and release read and parsed here, once."""
    names = list(reference.notebooks)
    templates = {nb: Template.read(course, aid, nb or None) for nb in names}
    reference = replace(reference, heldout_seed=course_seed(course), heldout_text=heldout_text(course))
    return Batch(
        course, aid, reference, settings.limits, settings.isolation,
        warm=frameworks_used(course, aid),
        private=tuple(course.private_folders()),
        templates=templates,
        hidden={nb: hidden_test_lines(course, aid, nb or None) for nb in names},
        inputs=assignment_inputs(course, aid),
        sandboxes=settings.sandbox or Sandbox,
    )  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One submission to grade: the student, and the hand-in's folder when it is not in ``submitted/`` (the
    canary's)."""

    sid: str
    path: str = ""
    keep: str = ""  # where to keep the run instead (the canary's: decided again after an edit of decisions)


# ----------------------------------------------------------------------------- one submission's stages


@dataclass
class Grading:
    """One notebook of a submission on its way through :data:`STAGES`: what each stage needs and what it
    left (``reference`` is that notebook's part)."""

    job: Job
    reference: Reference
    path: Path
    result: Result
    sandbox: SandboxRun | None = None  # a pre-started child, or None to start one at the run stage
    repaired: Repaired | None = None
    outcome: Outcome | None = None
    verdict: Verdict | None = None
    nb: str = ""  # the notebook's name ("" for the assignment's one notebook)
    files: Path | None = None  # the folder of files the run gets beside the notebook
    raw: tuple[bytes | None, str | None] | None = None  # the notebook's bytes, read once (or why not)


def repair_stage(b: Batch, g: Grading) -> bool:
    """Read the notebook, put back what Colab or an editor damaged; stop with a reason if it is unreadable."""
    if not g.path.exists() and not g.path.is_symlink():
        g.repaired = Repaired(None, f"{g.path.name} was not handed in")
    else:
        raw = g.raw or read_bytes_bounded(g.path, MAX_NOTEBOOK_BYTES)
        g.repaired = rebuild(b.templates[g.nb], raw)
    g.result.notes = g.repaired.notes
    if g.repaired.fatal:  # (its earlier kept run is removed by the keep stage, last)
        g.result.status, g.result.reason = "unreadable", g.repaired.fatal
        g.result.cells = [
            CellResult(
                gid, 0.0, cell["points"], False, g.repaired.fatal, decided=cell.get("decided", "outside")
            )
            for gid, cell in g.reference.cells.items()
        ]
        g.result.written = written_results(g.reference, None, unanswered=True)
        return False
    return True


def tamper_stage(b: Batch, g: Grading) -> bool:
    """Read the answer cells of the notebook that will run for what changes what the student did not define
    (:mod:`autograder.grading.tamper`: the course package, the grader's recording, ``sys.modules``, the shell, frames):
    nothing runs; the flags are for review, and decide no point."""
    g.result.code_flags = scan(g.repaired.notebook, given=given_code(b.templates[g.nb].source))
    return True


def run_stage(b: Batch, g: Grading) -> bool:
    """Run the repaired notebook in a sandboxed child (the seam where another runner plugs in)."""
    if g.sandbox is None:
        g.sandbox = b.sandbox().start()
    g.outcome = g.sandbox.run(without_demonstrations(g.repaired.notebook), files=g.files)
    if g.outcome.status == "error":  # nothing of the student's ran: no verdict, no score
        g.result.status, g.result.reason = run_status(g.outcome, [], b.limits)
        g.result.detail = g.outcome.detail[-2000:]
        return False
    # as the child measured them (untrusted, for the record only): kernel start and imports happen
    # before the notebook arrives, overlapped with the previous submission
    g.result.timings.update({f"child_{k}": v for k, v in g.outcome.summary.get("timings", {}).items()})
    g.result.seconds_in_sandbox = round(g.outcome.seconds, 2)
    g.result.peak_memory_mb = g.outcome.peak_memory_mb
    return True


def measure_stage(b: Batch, g: Grading) -> bool:
    """Each measured test cell again, in a fresh sandboxed kernel, after the submission's own code, under the
    caps the grader sets from outside it (:mod:`autograder.grading.measure`): the cell's recordings and its account come
    from that run (a new :class:`Outcome`: the run's own is left as it came)."""
    for grade_id, cell in g.reference.cells.items():
        spec = cell.get("measure")
        if not spec:
            continue
        measured = measure_cell(b, g, grade_id, spec)
        if isinstance(measured, Outcome):  # nothing of the student's ran in it: the grader's failure
            g.result.status, g.result.reason = run_status(measured, [], b.limits)
            g.result.detail = measured.detail[-2000:]
            return False
        entry, capture = measured
        cells = [e for e in g.outcome.summary.get("cells", []) if e.get("grade_id") != grade_id] + [entry]
        unchanged = unchanged_by_the_seed(g.reference.cases, g.outcome.capture, capture, grade_id)
        g.outcome = replace(
            g.outcome,
            capture=merge_capture(g.outcome.capture, capture, grade_id),
            summary={
                **g.outcome.summary,
                "cells": cells,
                "problems": [*g.outcome.summary.get("problems", []), *unchanged],
            },
        )
    return True


def ended_early(status: str, caps: dict) -> str:
    """Why a measured cell recorded nothing when its run ended before it: under a CPU cap, the likely cause, which
    the student can act on (the cap counts every cell before the test, their own experiments included)."""
    why = f"the measured run ended before this test ({status})"
    if "cpu_seconds" in caps:
        why += (
            f": its CPU cap of {caps['cpu_seconds']:g} s counts from the notebook's first cell, your own added "
            "cells included, and a cell before the test may have used it up (keep experiment cells light, or "
            "delete them before you hand in)"
        )
    return why


def measure_cell(b: Batch, g: Grading, grade_id: str, spec: dict) -> tuple[dict, dict] | Outcome:
    """The measured cell ``grade_id`` run under its caps (``spec``: its reference's measurement), tried once
    more where a CPU cap binds and the first run went past its caps, died or ran out of time (a load can outlast
    one run): ``(its entry for the run's summary, the capture its cases are taken from)``, or the
    :class:`Outcome` of a run the grader failed."""
    solution = spec.get("solution") or {}
    caps = caps_for(
        {k: spec[k] for k in ALLOWED if k in spec}, spec.get("baseline_mb"), solution.get("cpu_seconds")
    )
    seed = measure_seed(g.reference.heldout_seed, grade_id)
    tries = 2 if "cpu_seconds" in caps else 1  # a CPU cap is tried twice: a load can outlast one run
    for attempt in range(1, tries + 1):
        sandbox = b.sandbox().start()
        try:
            notebook = measurement_notebook(g.repaired.notebook, grade_id, caps, seed)
            outcome = sandbox.run(notebook, files=g.files)
        finally:
            sandbox.cleanup()
        g.result.timings["measure"] = round(g.result.timings.get("measure", 0.0) + outcome.seconds, 3)
        if outcome.status == "error":
            return outcome
        entry = measured_entry(outcome.summary, grade_id) or {
            "grade_id": grade_id, "status": "died", "error": ended_early(outcome.status, caps),
        }  # fmt: skip
        over = over_cpu(entry.get("measure") or {}, caps.get("cpu_seconds"))
        # each process within its own limit, but not all of them together: nothing it recorded counts
        if over:
            entry = {**entry, "status": "error", "ename": "over its CPU cap", "evalue": over}
        if not (over or entry.get("status") in ("died", "timeout")):
            break  # passed, or failed on its own (an exception): another try would tell nothing new
        if attempt < tries:
            entry_note = f"the first measured run went past its caps ({over or entry.get('error', '')}); tried again"  # fmt: skip
    if attempt > 1:
        entry = {**entry, "tries": attempt, "first_try": entry_note}
    return {**entry, "caps": describe(caps)}, ({} if over else outcome.capture)


def verify_stage(b: Batch, g: Grading) -> bool:
    """Decide every point outside the kernel, from the data the run captured; a cell without checks (plain
    ``assert``s) as nbgrader decides it, from how it ran in the kernel (marked "decided in the kernel")."""
    if g.outcome.kernel_outputs is None:
        found = kernel_outputs(g.reference, g.repaired.notebook, g.outcome)
        g.outcome = replace(g.outcome, kernel_outputs=found)
    g.verdict = verify(
        g.reference, g.outcome.capture, g.outcome.summary, g.outcome.kernel_outputs, b.hidden[g.nb]
    )
    g.result.cells = g.verdict.cells
    g.result.score = g.verdict.score
    g.result.written = written_results(g.reference, g.repaired)  # graded by hand: apart from the score
    problems = [*g.verdict.problems, *g.outcome.summary.get("problems", [])]
    g.result.flags = g.verdict.disagreements + [f"recorded data: {p}" for p in problems]
    return True


def kernel_outputs(reference: Reference, notebook, outcome: Outcome) -> dict[str, list]:
    """grade_id -> the outputs of each graded test cell decided in the kernel, as the cell left them; a cell
    that never ran is absent."""
    ran = {e.get("index") for e in outcome.summary.get("cells", []) if e.get("status") in ("ok", "error")}
    wanted = {g for g, c in reference.cells.items() if c.get("decided") == "kernel"}
    found = {}
    for index, cell in enumerate(notebook.cells if notebook is not None else []):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in wanted and index in ran:
            found[gid] = outcome.outputs.get(index, [])
    return found


def writes(b: Batch, g: Grading) -> list[tuple[str, Path]]:
    """What the keep stage writes for ``g``, decided from what the stages before it left, as ``(what, where)``:
    ``"forget"`` (remove the run kept there: a notebook the grader could not read, whose earlier hand-in's kept
    run must not decide it on a regrade), ``"run"`` (keep what the run captured, so that a regrade decides again
    without running the student's code) and ``"executed"`` (the run notebook, where nbgrader's formgrader looks
    for manual review). A run that ended before a verdict (the grader's failure) writes nothing; the canary's
    notebooks are nobody's (only what its run captured is kept, under ``job.keep``); a hand-in graded from a
    folder of its own (``job.path``) keeps nothing."""
    if g.repaired is not None and g.repaired.fatal:
        return [] if g.job.path else [("forget", b.course.kept_run(b.aid, g.job.sid, g.nb or None))]
    if g.verdict is None or g.outcome is None:
        return []
    if g.job.keep:
        return [("run", Path(g.job.keep) / (g.nb or b.aid))]
    if g.job.path:
        return []
    return [
        ("executed", b.course.executed(b.aid, g.job.sid, g.nb or None)),
        ("run", b.course.kept_run(b.aid, g.job.sid, g.nb or None)),
    ]


def keep_stage(b: Batch, g: Grading) -> bool:
    """The pipeline's one stage that writes to disk, last, after every decision: :func:`writes` of ``g``."""
    for what, target in writes(b, g):
        if what == "forget":
            shutil.rmtree(target, ignore_errors=True)
        elif what == "executed":
            save_executed(target, executed_notebook(g.repaired.notebook, g.outcome.outputs, b.hidden[g.nb]))
        else:
            keep_run(target, g.outcome, g.result.submission_sha256)
    return True


KEPT_BYTES = 64 * 2**20  # a capture larger than this is not kept (its submission is rerun on a regrade)
KEPT_LAYOUT = 4  # kept runs of another layout (or none) are never read: their submissions are graded again
KEPT_CAPTURE = "capture.zip"  # the captured files, one uncompressed zip (one file to write, not hundreds)


def keep_run(target: Path, outcome: Outcome, submission_sha256: str) -> None:
    """Keep the run's capture (as the report carried it, from the grader's memory) and the kernel's summary
    in ``target``, replacing what was there; tied to the exact bytes of the submission it was made from."""
    shutil.rmtree(target, ignore_errors=True)
    if sum(len(data) for data in outcome.capture.values()) > KEPT_BYTES:
        return
    target.mkdir(parents=True)
    with zipfile.ZipFile(target / KEPT_CAPTURE, "w", zipfile.ZIP_STORED) as kept:
        for name, data in outcome.capture.items():
            kept.writestr(name, data)
    run = {
        "layout": KEPT_LAYOUT,
        "submission_sha256": submission_sha256,
        "status": outcome.status,
        "seconds": outcome.seconds,
        "summary": outcome.summary,
        "detail": outcome.detail,
        "kernel_outputs": outcome.kernel_outputs or {},
    }
    write_json_atomic(target / "run.json", run, durable=False)  # (a run torn by a crash is run again)


def kept_outcome(folder: Path, submission_sha256: str | None = None) -> Outcome | None:
    """The run kept by :func:`keep_run` as an :class:`Outcome` (its capture under ``folder``), or None: none
    kept, kept by an earlier layout of the grader, or made from other bytes than ``submission_sha256``."""
    try:
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        if run.get("layout") != KEPT_LAYOUT:
            return None
        if submission_sha256 is not None and run.get("submission_sha256") != submission_sha256:
            return None
        kernel = run.get("kernel_outputs") or {}
        capture = kept_capture(folder / KEPT_CAPTURE)
        return Outcome(
            run["status"], run["seconds"], capture, run["summary"], run["detail"], kernel_outputs=kernel
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile):
        return None


def kept_capture(path: Path) -> dict[str, bytes]:
    """The files :func:`keep_run` kept, as the report carried them: only names a check writes, within
    :data:`KEPT_BYTES` (the grader wrote them; still read as bounded as what it trusts least)."""
    held, total = {}, 0
    with zipfile.ZipFile(path) as kept:
        for info in kept.infolist():
            total += info.file_size
            if total > KEPT_BYTES:
                raise ValueError("the kept capture is larger than any run keeps")
            if CAPTURE_NAME.fullmatch(info.filename) and info.filename not in held:
                held[info.filename] = kept.read(info)
    return held


def grader_error(outcome: Outcome) -> str:
    """The reason of a run the grader failed (status ``error``: no student code ran): its detail's first line."""
    first = outcome.detail.splitlines()[0] if outcome.detail.strip() else "the run ended without a word"
    return f"grader error: {first}"


def run_status(
    outcome: Outcome, cells: Sequence[CellResult], limits: Limits, flagged: bool = False
) -> tuple[str, str]:
    """``(status, reason)`` of a notebook whose run ended as ``outcome`` and whose verdict gave ``cells``
    (``flagged``: the verdict or the reading of its code flagged it for review):

    - ``error``, where the grader failed (nothing of the student's ran): no score is recorded;
    - what stopped the run (``timeout``, ``memory``, ``processes``, ``crashed``), in words with the limit it
      hit: graded on what ran before;
    - ``timeout`` where the run finished but a cell ran past the per-cell limit;
    - else ``flagged`` or ``graded``, with how many tests failed and the first failure's message."""
    if outcome.status == "error":
        return "error", grader_error(outcome)
    if outcome.status != "finished":
        return outcome.status, f"the notebook {limits.stopped(outcome.status)}; graded on what ran before"
    if any(entry.get("status") == "timeout" for entry in outcome.summary.get("cells", [])):
        return "timeout", "a cell ran past the per-cell time limit; graded on what ran before"
    failed = [c for c in cells if not c.passed]
    reason = (
        f"{len(failed)} of {len(cells)} tests failed; first: {failed[0].message}"
        if failed
        else "all tests passed"
    )
    return ("flagged" if flagged else "graded"), reason


def status_stage(b: Batch, g: Grading) -> bool:
    """The status and the one-line reason (:func:`run_status`), from how the run ended and what the verdict
    found."""
    result, outcome = g.result, g.outcome
    flagged = bool(result.flags or result.code_flags)
    result.status, result.reason = run_status(outcome, result.cells, b.limits, flagged)
    if outcome.status != "finished":
        result.detail = outcome.detail[-2000:]
    return True


# The stages of one submission, in order; each takes (batch, grading) and returns False to stop there (the
# result says why), except the last, which writes (:data:`WRITES`): it runs all the same, and writes what the
# stages before it decided. The batch around them: prove -> [these, on the workers] -> record (in this
# process) -> feedback, export (see :mod:`autograder.grading.batch` and :mod:`autograder.commands.workflows`).
STAGES = (
    ("repair", repair_stage),
    ("tamper", tamper_stage),
    ("sandbox_run", run_stage),
    ("measure", measure_stage),
    ("verify", verify_stage),
    ("status", status_stage),
    ("keep", keep_stage),
)
WRITES = ("keep",)  # the stages that write to disk: last, after every decision, even after a stop


def stages(*names: str) -> tuple[tuple[str, Callable[[Batch, Grading], bool]], ...]:
    """The stages called ``names``, in the order of :data:`STAGES` (a regrade decides again with some)."""
    unknown = set(names) - {name for name, _ in STAGES}
    if unknown:
        raise KeyError(f"no stage {sorted(unknown)}")
    return tuple((name, stage) for name, stage in STAGES if name in names)


def grade_one(b: Batch, job: Job, sandbox: SandboxRun | None = None) -> Result:
    """Grade one submission, each of its notebooks through :data:`STAGES` in a kernel of its own (as
    nbgrader runs them), never raising: every outcome is a result with a reason."""
    reference = b.reference
    result = Result(
        job.sid, b.aid, reference.max_score, isolation=b.isolation.describe(), reference=reference.digest
    )
    folder = Path(job.path) if job.path else b.course.submission_folder(b.aid, job.sid)
    started = time.monotonic()
    files = None
    try:
        raws, result.submission_sha256 = read_submission(folder, b.notebooks)
        staging = b.course.work / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        files = Path(tempfile.mkdtemp(prefix=f"{b.aid}-", dir=staging))
        notes = assignment_files(b.course, b.aid, folder, files)
        parts = []
        for nb in b.notebooks:
            part = Result(job.sid, b.aid, reference.part(nb).max_score, reference=reference.digest)
            part.submission_sha256 = result.submission_sha256
            path = folder / f"{nb or b.aid}.ipynb"
            g = Grading(job, reference.part(nb), path, part, nb=nb, files=files, raw=raws.get(nb))
            g.sandbox, sandbox = sandbox, None  # a pre-started child runs the first notebook
            try:
                run_stages(b, g, STAGES)
            finally:
                if g.sandbox is not None:
                    g.sandbox.cleanup()
            parts.append((nb, part))
            if part.is_error:
                break
        result = merge_parts(result, parts, notes)
    except Exception as err:  # a grader bug must not stop the batch, and must be visible
        result.status, result.reason = "error", f"grader error: {type(err).__name__}: {err}"
        result.traceback = traceback.format_exc()[-4000:]
    finally:
        if sandbox is not None:
            sandbox.cleanup()
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)
        result.seconds = round(time.monotonic() - started, 2)
    return result


def run_stages(b: Batch, g: Grading, chosen) -> None:
    """``chosen`` stages in turn on ``g``, each timed, until one says stop; then those of :data:`WRITES` among
    them all the same (what they write follows from where the others stopped)."""
    stopped = False
    for name, stage in chosen:
        if stopped and name not in WRITES:
            continue
        t0 = time.perf_counter()
        go_on = stage(b, g)
        g.result.timings[name] = time.perf_counter() - t0
        stopped = stopped or not go_on


def decide_kept(b: Batch, job: Job) -> Result | None:
    """The result of ``job`` decided again from the runs kept under ``job.keep`` (one per notebook), by the
    verify and status stages: nothing runs. None where a notebook's run was not kept."""
    parts = []
    for nb in b.notebooks:
        outcome = kept_outcome(Path(job.keep) / (nb or b.aid))
        if outcome is None:
            return None
        part = Result(job.sid, b.aid, b.reference.part(nb).max_score, reference=b.reference.digest)
        g = Grading(job, b.reference.part(nb), Path(job.keep), part, nb=nb, outcome=outcome)
        run_stages(b, g, stages("verify", "status"))
        parts.append((nb, part))
    result = Result(
        job.sid, b.aid, b.reference.max_score, isolation=b.isolation.describe(), reference=b.reference.digest
    )
    return merge_parts(result, parts, [])


def read_submission(folder: Path, names: list[str]) -> tuple[dict, str]:
    """Each notebook of the hand-in in ``folder`` read once (its bytes, or why they cannot be graded), and
    the digest the result is tied to: for a hand-in of one notebook and nothing else, the sha256 of those
    very bytes."""
    import hashlib

    raws = {}
    for nb in names:
        path = folder / f"{nb}.ipynb"
        if path.exists() or path.is_symlink():
            raws[nb] = read_bytes_bounded(path, MAX_NOTEBOOK_BYTES)
    only = len(names) == 1 and raws.get(names[0], (None, ""))[0] is not None
    if only and [p.name for p in folder.iterdir() if p.name != "timestamp.txt"] == [f"{names[0]}.ipynb"]:
        return raws, hashlib.sha256(raws[names[0]][0]).hexdigest()
    return raws, submission_digest(folder, names)


def merge_parts(base: Result, parts: list[tuple[str, Result]], notes: list[str]) -> Result:
    """One submission's result from its notebooks' (one, for this course's assignments): a new result made
    from ``base`` (its student, maximum, isolation, reference, digest and what it already holds), with cells and
    written answers in the assignment's order, each named by its notebook, the worst status with its reason,
    ``notes`` and the parts' notes and flags, named by notebook where there are several. ``base`` and
    ``parts`` are left as they were."""
    several = len(parts) > 1

    def named(nb: str, text: str) -> str:
        return f"{nb}.ipynb: {text}" if several else text

    cells, written = [*base.cells], [*base.written]
    merged_notes, flags, code_flags = [*notes], [*base.flags], [*base.code_flags]
    timings, in_sandbox, peak = dict(base.timings), base.seconds_in_sandbox, base.peak_memory_mb
    for nb, part in parts:
        cells += [replace(cell, notebook=nb) for cell in part.cells]
        written += [replace(w, notebook=nb) for w in part.written]
        merged_notes += [named(nb, n) for n in part.notes]
        flags += [named(nb, f) for f in part.flags]
        code_flags += [replace(f, notebook=nb) for f in part.code_flags]
        timings.update({(f"{nb}:{k}" if several else k): v for k, v in part.timings.items()})
        if part.seconds_in_sandbox is not None:
            in_sandbox = round((in_sandbox or 0) + part.seconds_in_sandbox, 2)
        if part.peak_memory_mb is not None:
            peak = max(peak or 0, part.peak_memory_mb)
    # a notebook not handed in (or unreadable) beside others that ran: the submission's status is theirs
    readable = [p for p in parts if p[1].status != "unreadable"] or parts
    worst_nb, worst = min(readable, key=lambda p: list(STATUS).index(p[1].status))
    merged = replace(
        base, cells=cells, written=written, notes=merged_notes, flags=flags, code_flags=code_flags,
        timings=timings, seconds_in_sandbox=in_sandbox, peak_memory_mb=peak, inputs=dict(base.inputs),
        status=worst.status, score=round(sum(c.points for c in cells), 2), detail=worst.detail,
    )  # fmt: skip
    if merged.is_error:
        return replace(merged, reason=named(worst_nb, worst.reason), traceback=worst.traceback)
    if not several:
        return replace(merged, reason=worst.reason)
    return replace(merged, reason=parts_reason(cells, parts))


def parts_reason(cells: list[CellResult], parts: list[tuple[str, Result]]) -> str:
    """The reason of a submission of several notebooks that ran: its failed tests (the first named by its
    notebook), then what its other notebooks said where they were not graded."""
    failed = [c for c in cells if not c.passed]
    others = "; ".join(p.reason if p.status == "unreadable" else f"{nb}.ipynb: {p.reason}"
                       for nb, p in parts if p.status not in ("graded", "flagged"))  # fmt: skip
    return (
        f"{len(failed)} of {len(cells)} tests failed; first: {failed[0].notebook}.ipynb: {failed[0].message}"
        if failed
        else "all tests passed"
    ) + (f" ({others})" if others else "")


def error_result(b: Batch, job: Job, err: Exception) -> Result:
    return Result(
        job.sid, b.aid, b.reference.max_score, status="error",
        reason=f"grader error: {type(err).__name__}: {err}",
    )  # fmt: skip


WITHHELD = "[output withheld: it contains the text of a hidden test]\n"
WITHHELD_ALL = "[outputs withheld: together, this run's outputs spell out the text of a hidden test]\n"


def hidden_test_lines(course: Course, aid: str, nb: str | None = None) -> frozenset[str]:
    """The lines of the source's hidden tests that say something (12 letters and digits or more, as
    :func:`squeezed` reads them) and that the release does not show anyway: an output that spells one out,
    whole or in pieces, is shown to no one."""
    source, release = course.source_notebook(aid, nb), course.release_notebook(aid, nb)
    stamps = tuple(p.stat().st_mtime_ns if p.exists() else 0 for p in (source, release))
    begin, end = delimiters(course)["hidden"]
    return _hidden_lines(str(source), str(release), stamps, begin, end)


def delimiters(course: Course) -> dict[str, tuple[str, str]]:
    """The solution and hidden-test delimiters, as the course's nbgrader configuration sets them."""
    config = course.config
    return {
        "solution": (
            config.ClearSolutions.get("begin_solution_delimeter", "BEGIN SOLUTION"),
            config.ClearSolutions.get("end_solution_delimeter", "END SOLUTION"),
        ),
        "hidden": (
            config.ClearHiddenTests.get("begin_test_delimeter", "BEGIN HIDDEN TESTS"),
            config.ClearHiddenTests.get("end_test_delimeter", "END HIDDEN TESTS"),
        ),
    }


@functools.lru_cache(maxsize=16)
def _hidden_lines(source: str, release: str, _stamps: tuple, begin: str, end: str) -> frozenset[str]:
    lines: set[str] = set()
    for cell in nbformat.read(source, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if line.strip().startswith("#") and begin in line:
                inside = True
            elif line.strip().startswith("#") and end in line:
                inside = False
            elif inside and len(squeezed(line)) >= 12:
                lines.add(squeezed(line))
    public = set()
    if Path(release).exists():
        public = {
            squeezed(line)
            for c in nbformat.read(release, as_version=4).cells
            for line in c.source.splitlines()
        }
    return frozenset(lines - public)


def _texts(value) -> list[str]:
    """Every string inside an output (its text, its data of every type, its traceback), found recursively."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def executed_notebook(notebook: nbformat.NotebookNode, outputs: dict, hidden: frozenset[str]):
    """The notebook as the grader ran it: the cells the grader sent (never text from the run), each code
    cell with the outputs it had when it finished, less any output that shows hidden test text, and
    a cell whose outputs are not valid nbformat shown without them."""
    # each cell a copy of its own, sharing its source and metadata with ``notebook`` (this changes neither:
    # :func:`save_executed` copies all of it before it makes the page safe)
    nb = nbformat.NotebookNode(
        {**notebook, "cells": [nbformat.NotebookNode(cell) for cell in notebook.cells]}
    )
    code = [(index, cell) for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    for index, cell in code:
        cell.outputs = [nbformat.from_dict(output) for output in outputs.get(index, [])]
        cell.execution_count = None
    # every output's text as a page shows it (not its type or stream's name), in order: pieces spread over
    # outputs and cells are read together
    shown = [
        (cell, at, "".join(_texts([out.get(k) for k in ("text", "data", "ename", "evalue", "traceback")])))
        for _, cell in code
        for at, out in enumerate(cell.outputs)
    ]
    alone, together = withheld_texts([text for _, _, text in shown], hidden)
    for (cell, at, _), withheld in zip(shown, alone):
        if withheld:
            cell.outputs[at] = nbformat.v4.new_output("stream", name="stdout", text=WITHHELD)
    code = [cell for _, cell in code]
    if not _valid_cells(code):  # all at once; only where that fails, each cell on its own
        for cell in code:
            if not _valid_cells([cell]):
                note = "[outputs not shown: they are not valid notebook outputs]\n"
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=note)]
    if together:  # in pieces: no output of this run is shown
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = (
                    [nbformat.v4.new_output("stream", name="stdout", text=WITHHELD_ALL)]
                    if cell.outputs
                    else []
                )
    return nb


def _valid_cells(cells: list) -> bool:
    """Whether each of ``cells`` is valid alone in a notebook of nbformat 4's current version (checked on a
    copy, all at once: an id that two of them share is not held against them)."""
    nb = nbformat.from_dict(
        {"nbformat": 4, "nbformat_minor": nbformat.v4.nbformat_minor, "metadata": {}, "cells": cells}
    )
    seen = set()
    for index, cell in enumerate(nb.cells):
        if isinstance(cell, dict) and cell.get("id") in seen:
            cell["id"] = f"repeated-{index}"
        seen.add(cell.get("id") if isinstance(cell, dict) else None)
    try:
        nbformat.validate(nb)
    except Exception:
        return False
    return True


def save_executed(target: Path, executed: nbformat.NotebookNode) -> None:
    """Keep the run notebook where nbgrader's formgrader looks (``autograded/``) for manual review, sanitised:
    formgrader shows what the student wrote and ran, and runs and loads none of it."""
    from autograder.intake.sanitize import sanitize_notebook

    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(sanitize_notebook(executed), str(target))


def assignment_inputs(course: Course, aid: str) -> dict[str, str]:
    """:func:`autograder.grading.reference.source_inputs` of every notebook of ``aid`` (named by notebook where
    there are several)."""
    names = course.notebooks(aid)
    found = {}
    for nb in names:
        for key, value in source_inputs(course.read_source(aid, nb)).items():
            found[f"{nb}.ipynb: {key}" if len(names) > 1 else key] = value
    return found


def grade_with_retry(b: Batch, job: Job, sandbox: SandboxRun | None = None) -> Result:
    """Grade once; a grader error (the student's code never ran, or the run was lost) gets one more try
    in a fresh sandbox."""
    result = grade_one(b, job, sandbox)
    if result.is_error:
        first = result.reason
        result = grade_one(b, job)
        result.notes = [*result.notes, f"graded a second time after a grader error: {first}"]
    return result


def run_jobs(
    b: Batch, jobs: list[Job], workers: int, finish: Callable[[Result], None], stop: threading.Event | None = None
) -> None:  # fmt: skip
    """Grade ``jobs`` in order on ``workers`` local worker threads; ``finish`` gets each result in this
    thread. Once ``stop`` is set, no job starts (those running finish)."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    done: queue.Queue[Result | None] = queue.Queue()

    def worker(slot: int) -> None:
        ready: SandboxRun | None = None
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                break
            if stop is not None and stop.is_set():
                done.put(None)  # not graded
                continue
            current = None
            try:
                current = ready or b.sandbox(slot).start()
                # Start the next child now: its kernel boots and imports while this one runs.
                ready = b.sandbox(slot).start() if not pending.empty() else None
                done.put(grade_with_retry(b, job, current))
            except Exception as err:  # the sandbox itself failed to start: a result all the same
                done.put(error_result(b, job, err))
            finally:
                if current is not None:
                    current.cleanup()
        if ready is not None:
            ready.cleanup()

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(max(1, workers))]
    for thread in threads:
        thread.start()
    for _ in jobs:
        result = done.get()
        if result is not None:
            finish(result)
    for thread in threads:
        thread.join()
