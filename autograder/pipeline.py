"""The grading pipeline for a whole class: collect, then for each submission the declared :data:`STAGES`
(repair -> sandbox_run -> verify -> keep -> status), then record.

Submissions are graded in parallel by worker threads (each waits on its own sandboxed child, so the
grader's process never runs student code), or by the workers of a Dask cluster. Each worker starts
its next child while the current one runs, so kernel start and framework imports overlap with work.
Results are recorded by this process alone, one submission at a time, as they arrive.

Before a batch the grader proves itself (:mod:`autograder.canary`): the isolation is probed, the
reference is built in the sandbox, and the source's own solutions and the untouched release are graded
through this very path. A run that failed for the grader's reasons (its kernel never started, the
sandbox could not be set up, the disk filled, a worker was lost) gets status ``error``, is tried once
more, and is never recorded as a score.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.isolation import Isolation, resolve
from autograder.record import Recorder, load_result, save_result, sha256_regular, write_json_atomic
from autograder.reference import Reference, source_inputs
from autograder.repair import Repaired, repair
from autograder.result import CellResult, Result
from autograder.sandbox import Limits, Outcome, Sandbox
from autograder.verify import Verdict, verify, written_results

__all__ = ["STAGES", "Job", "grade", "grade_one", "run_jobs"]


@dataclass(frozen=True)
class Job:
    """Everything one submission's grading needs; frozen values, so it can travel to a Dask worker whole
    (the course with its workspace, gradebook and cache root: a worker finds the same reference)."""

    course: Course
    aid: str
    sid: str
    limits: Limits
    warm: tuple[str, ...]
    isolation: Isolation
    private: tuple[str, ...] = ()  # folders the kernel must not see
    path: str = ""  # the hand-in's folder, when it is not in submitted/ (the canary's)

    def sandbox(self, slot: int = 0) -> Sandbox:
        return Sandbox(self.limits, slot, self.warm, self.isolation, self.private)


def frameworks_used(course: Course, aid: str) -> tuple[str, ...]:
    """Modules a child imports before the student's code arrives: the heavy ones the source uses.

    The set-up cell's ``dlcourse.banner()`` imports torch, and ``dlcourse.data`` imports scikit-learn. A
    source that compiles or exports also gets torch's compiler stack (3 s of imports a kernel otherwise
    pays on its first ``torch.compile``); none of these starts a thread when imported.
    """
    text = "".join(
        course.source_notebook(aid, nb).read_text(encoding="utf-8") for nb in course.notebooks(aid)
    )
    compiles = any(word in text for word in ("torch.compile", "torch._dynamo", "torch.export"))
    uses = {
        "numpy": "numpy" in text,
        "dlcourse": "dlcourse" in text,
        "torch": "torch" in text or "dlcourse.banner()" in text,
        "sklearn": "sklearn" in text or "dlcourse.data" in text,
        "tensorflow": "tensorflow" in text,
        "torch._dynamo": compiles,
        "torch._inductor.compile_fx": compiles,
        "torch.export": compiles,
    }
    return tuple(module for module, used in uses.items() if used and _findable(module))


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a submodule of a package that is not installed
        return False


def submissions(course: Course, aid: str, students: list[str] | None = None) -> dict[str, Path]:
    """Student id -> hand-in folder."""
    found = course.handed_in(aid)
    if students:
        missing = [s for s in students if s not in found]
        if missing:
            raise KeyError(f"no submission of {aid} from {', '.join(missing)}")
        found = {s: found[s] for s in students}
    return found


# ----------------------------------------------------------------------------- one submission's stages


# What of a hand-in besides its notebooks goes to the run (data, helpers the student changed), at most:
MAX_FILES, MAX_FILES_BYTES, MAX_DEPTH = 1000, 64 * 2**20, 16
NBGRADER_IGNORE = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]  # nbgrader's default


def _ignored(course: Course) -> list[str]:
    configured = course.config.CourseDirectory.get("ignore")
    return [*(configured if isinstance(configured, list) else NBGRADER_IGNORE), "samples"]


def _copy_regular(path: Path, target: Path, limit: int) -> int | None:
    """Copy the regular file ``path`` (never through a link, never blocking on a FIFO) to ``target``; its
    size, or None when it is not a regular file or is larger than ``limit``."""
    import errno
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EACCES, errno.ENOENT, errno.EISDIR):
            return None
        raise
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        data = src.read(limit + 1)
        if len(data) > limit:
            return None
        target.write_bytes(data)
        return len(data)


def assignment_files(course: Course, aid: str, handed_in: Path | None, target: Path) -> list[str]:
    """Fill the grader's folder ``target`` with the files a run of ``aid`` gets beside its notebook, as
    nbgrader's autograde gives them: what the student handed in besides the assignment's notebooks (regular
    files only, at most :data:`MAX_FILES` and :data:`MAX_FILES_BYTES`), then the source's own files (data,
    images, helper modules; not notebooks, nor what ``CourseDirectory.ignore`` names) over them, except
    those the course lets students change (``Autograde.exclude_overwriting``). Returns notes for the
    student about what was left out."""
    import fnmatch
    import os

    ignore = _ignored(course)
    notebooks = {f"{nb}.ipynb" for nb in course.notebooks(aid)}
    kept = course.config.Autograde.get("exclude_overwriting", {})
    kept = set(kept.get(aid, [])) if isinstance(kept, dict) else set()
    notes: list[str] = []

    def skipped(rel: Path) -> bool:
        return any(fnmatch.fnmatch(part, pattern) for part in rel.parts for pattern in ignore)

    if handed_in is not None and handed_in.is_dir():
        count = total = 0
        for folder, dirs, files in os.walk(handed_in, followlinks=False):
            depth = len(Path(folder).relative_to(handed_in).parts)
            if depth >= MAX_DEPTH and dirs:
                notes.append(f"folders nested deeper than {MAX_DEPTH} levels were not given to the run")
            dirs[:] = (
                sorted(d for d in dirs if not (Path(folder) / d).is_symlink()) if depth < MAX_DEPTH else []
            )
            for name in sorted(files):
                path = Path(folder) / name
                rel = path.relative_to(handed_in)
                if (len(rel.parts) == 1 and name in notebooks) or name == "timestamp.txt" or skipped(rel):
                    continue
                if count >= MAX_FILES or total >= MAX_FILES_BYTES:
                    notes.append(f"more than {MAX_FILES} files or {MAX_FILES_BYTES // 2**20} MB handed in besides "
                                 "the notebooks: the rest was not given to the run")  # fmt: skip
                    return notes
                size = _copy_regular(path, target / rel, MAX_FILES_BYTES - total)
                if size is None:
                    notes.append(f"{rel}: not a regular file, or too large; not given to the run")
                    continue
                count, total = count + 1, total + size
    source = course.source / aid
    for folder, dirs, files in os.walk(source, followlinks=False):
        dirs[:] = [d for d in dirs if not skipped((Path(folder) / d).relative_to(source))]
        for name in files:
            rel = (Path(folder) / name).relative_to(source)
            if name.endswith(".ipynb") or skipped(rel) or (str(rel) in kept and (target / rel).exists()):
                continue
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).unlink(missing_ok=True)
            shutil.copyfile(Path(folder) / name, target / rel)
    return notes


def submission_digest(folder: Path, notebooks: list[str]) -> str:
    """What a result is tied to: the sha256 of the notebook for a hand-in of one notebook and nothing else
    (this course's), else of every notebook's and other file's name and sha256. Read without following links
    or blocking; what cannot be read counts as its name alone."""
    import os

    entries = []
    if folder.is_dir():
        for root, dirs, files in os.walk(folder, followlinks=False):
            dirs[:] = sorted(dirs) if len(Path(root).relative_to(folder).parts) < MAX_DEPTH else []
            if len(entries) > MAX_FILES:
                break
            for name in sorted(files):
                path = Path(root) / name
                if name == "timestamp.txt" and path.parent == folder:
                    continue
                entries.append((str(path.relative_to(folder)), path))
    if len(notebooks) == 1 and [rel for rel, _ in entries] == [f"{notebooks[0]}.ipynb"]:
        return sha256_regular(entries[0][1])
    digest = hashlib.sha256()
    for rel, path in entries[:MAX_FILES]:
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(sha256_regular(path).encode())
    return digest.hexdigest()


@dataclass
class Grading:
    """One notebook of a submission on its way through :data:`STAGES`: what each stage needs and what it
    left (``reference`` is that notebook's part)."""

    job: Job
    reference: Reference
    course: Course
    path: Path
    result: Result
    sandbox: Sandbox | None = None  # a pre-started child, or None to start one at the run stage
    repaired: Repaired | None = None
    outcome: Outcome | None = None
    verdict: Verdict | None = None
    nb: str = ""  # the notebook's name ("" for the assignment's one notebook)
    files: Path | None = None  # the folder of files the run gets beside the notebook


def repair_stage(g: Grading) -> bool:
    """Read the notebook, put back what Colab or an editor damaged; stop with a reason if it is unreadable."""
    if not g.path.exists() and not g.path.is_symlink():
        g.repaired = Repaired(None, f"{g.path.name} was not handed in")
    else:
        g.repaired = repair(g.course, g.job.aid, g.path, g.nb or None)
    g.result.notes = g.repaired.notes
    if g.repaired.fatal:
        if not g.job.path:  # an earlier hand-in's kept run must not decide this one on a regrade
            shutil.rmtree(g.course.kept_run(g.job.aid, g.job.sid, g.nb or None), ignore_errors=True)
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


def run_stage(g: Grading) -> bool:
    """Run the repaired notebook in a sandboxed child (the seam where another runner plugs in)."""
    if g.sandbox is None:
        g.sandbox = g.job.sandbox().start()
    g.outcome = g.sandbox.run(g.repaired.notebook, files=g.files)
    if g.outcome.status == "error":  # nothing of the student's ran: no verdict, no score
        g.result.reason = f"grader error: {g.outcome.detail.splitlines()[0]}"
        g.result.detail = g.outcome.detail[-2000:]
        return False
    # as the child measured them (untrusted, for the record only): kernel start and imports happen
    # before the notebook arrives, overlapped with the previous submission
    g.result.timings.update({f"child_{k}": v for k, v in g.outcome.summary.get("timings", {}).items()})
    g.result.seconds_in_sandbox = round(g.outcome.seconds, 2)
    g.result.peak_memory_mb = g.outcome.peak_memory_mb
    return True


def verify_stage(g: Grading) -> bool:
    """Decide every point outside the kernel, from the data the run captured; a cell without checks (plain
    ``assert``s) as nbgrader decides it, from how it ran in the kernel (marked "decided in the kernel")."""
    if g.outcome.kernel_outputs is None:
        g.outcome.kernel_outputs = kernel_outputs(g.reference, g.repaired.notebook, g.outcome)
    g.verdict = verify(g.reference, g.outcome.folder / "capture", g.outcome.summary, g.outcome.kernel_outputs)
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


def keep_stage(g: Grading) -> bool:
    """Keep the run notebook where nbgrader's formgrader looks (``autograded/``) for manual review, and
    what the run captured, so that a regrade decides again without running the student's code."""
    if not g.job.path:  # the canary's notebooks are nobody's
        hidden = hidden_test_lines(g.course, g.job.aid, g.nb or None)
        save_executed(g.course, g.job, g.repaired.notebook, g.outcome.outputs, hidden, g.nb or None)
        keep_run(g.course.kept_run(g.job.aid, g.job.sid, g.nb or None), g.outcome, g.result.submission_sha256)
    return True


KEPT_BYTES = 64 * 2**20  # a capture larger than this is not kept (its submission is rerun on a regrade)
KEPT_LAYOUT = 3  # kept runs of another layout (or none) are never read: their submissions are graded again


def keep_run(target: Path, outcome: Outcome, submission_sha256: str) -> None:
    """Copy the run's capture (from the grader's own folder, where the report put it) and the kernel's
    summary to ``target``, replacing what was there; tied to the exact bytes of the submission it was made
    from."""
    shutil.rmtree(target, ignore_errors=True)
    capture = outcome.folder / "capture"
    files = [p for p in capture.iterdir() if p.is_file()] if capture.is_dir() else []
    if sum(p.stat().st_size for p in files) > KEPT_BYTES:
        return
    (target / "capture").mkdir(parents=True)
    for path in files:
        shutil.copyfile(path, target / "capture" / path.name)
    run = {
        "layout": KEPT_LAYOUT,
        "submission_sha256": submission_sha256,
        "status": outcome.status,
        "seconds": outcome.seconds,
        "summary": outcome.summary,
        "detail": outcome.detail,
        "kernel_outputs": outcome.kernel_outputs or {},
    }
    write_json_atomic(target / "run.json", run)


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
        return Outcome(
            run["status"], run["seconds"], folder, run["summary"], run["detail"], kernel_outputs=kernel
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def status_stage(g: Grading) -> bool:
    """The status and the one-line reason, from how the run ended and what the verdict found."""
    result, limits, outcome = g.result, g.job.limits, g.outcome
    if outcome.status != "finished":
        stopped = f"the notebook {limits.stopped(outcome.status)}"
        result.status, result.reason = outcome.status, f"{stopped}; graded on what ran before"
        result.detail = outcome.detail[-2000:]
        return True
    failed = [c for c in result.cells if not c.passed]
    if any(c.get("status") == "timeout" for c in outcome.summary.get("cells", [])):
        result.status = "timeout"
        result.reason = "a cell ran past the per-cell time limit; graded on what ran before"
    else:
        result.status = "flagged" if result.flags else "graded"
        result.reason = (
            f"{len(failed)} of {len(result.cells)} tests failed; first: {failed[0].message}"
            if failed
            else "all tests passed"
        )
    return True


# The stages of one submission, in order; each returns False to stop there (the result says why). The
# batch around them: collect -> [these, on the workers] -> record (in this process) -> feedback, export
# (see :mod:`autograder.workflows`).
STAGES = (
    ("repair", repair_stage),
    ("sandbox_run", run_stage),
    ("verify", verify_stage),
    ("keep", keep_stage),
    ("status", status_stage),
)


def grade_one(job: Job, reference: Reference, sandbox: Sandbox | None = None) -> Result:
    """Grade one submission, each of its notebooks through :data:`STAGES` in a kernel of its own (as
    nbgrader runs them), never raising: every outcome is a result with a reason."""
    course = job.course
    result = Result(
        job.sid, job.aid, reference.max_score, isolation=job.isolation.describe(), reference=reference.digest
    )
    folder = Path(job.path) if job.path else course.submission_folder(job.aid, job.sid)
    names = list(reference.notebooks)
    started = time.monotonic()
    files = None
    try:
        result.submission_sha256 = submission_digest(folder, names)
        staging = course.work / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        files = Path(tempfile.mkdtemp(prefix=f"{job.aid}-", dir=staging))
        notes = assignment_files(course, job.aid, folder, files)
        parts = []
        for nb in names:
            part = Result(job.sid, job.aid, reference.part(nb).max_score, reference=reference.digest)
            part.submission_sha256 = result.submission_sha256
            g = Grading(
                job, reference.part(nb), course, folder / f"{nb or job.aid}.ipynb", part, nb=nb, files=files
            )
            g.sandbox, sandbox = sandbox, None  # a pre-started child runs the first notebook
            try:
                for name, stage in STAGES:
                    t0 = time.perf_counter()
                    go_on = stage(g)
                    part.timings[name] = time.perf_counter() - t0
                    if not go_on:
                        break
            finally:
                if g.sandbox is not None:
                    g.sandbox.cleanup()
            parts.append((nb, part))
            if part.is_error:
                break
        merge_parts(result, parts, notes)
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


# The order in which one notebook's status stands for a submission of several: the first found.
STATUS_ORDER = ("error", "crashed", "memory", "processes", "timeout", "unreadable", "flagged", "graded")


def merge_parts(result: Result, parts: list[tuple[str, Result]], notes: list[str]) -> None:
    """One submission's result from its notebooks' (one, for this course's assignments): cells and written
    answers in the assignment's order, the worst status with its reason, notes and flags named by notebook
    where there are several."""
    several = len(parts) > 1

    def named(nb: str, text: str) -> str:
        return f"{nb}.ipynb: {text}" if several else text

    result.notes = [*notes]
    for nb, part in parts:
        for cell in part.cells:
            cell.notebook = nb
        for w in part.written:
            w.notebook = nb
        result.cells += part.cells
        result.written += part.written
        result.notes += [named(nb, n) for n in part.notes]
        result.flags += [named(nb, f) for f in part.flags]
        result.timings.update({(f"{nb}:{k}" if several else k): v for k, v in part.timings.items()})
        if part.seconds_in_sandbox is not None:
            result.seconds_in_sandbox = round((result.seconds_in_sandbox or 0) + part.seconds_in_sandbox, 2)
        if part.peak_memory_mb is not None:
            result.peak_memory_mb = max(result.peak_memory_mb or 0, part.peak_memory_mb)
    # a notebook not handed in (or unreadable) beside others that ran: the submission's status is theirs
    readable = [p for p in parts if p[1].status != "unreadable"] or parts
    worst = min(readable, key=lambda p: STATUS_ORDER.index(p[1].status))
    result.status = worst[1].status
    result.score = round(sum(c.points for c in result.cells), 2)
    if result.is_error:
        result.reason, result.detail, result.traceback = (
            named(worst[0], worst[1].reason),
            worst[1].detail,
            worst[1].traceback,
        )
        return
    if not several:
        result.reason, result.detail = worst[1].reason, worst[1].detail
        return
    failed = [c for c in result.cells if not c.passed]
    others = "; ".join(p.reason if p.status == "unreadable" else named(nb, p.reason)
                       for nb, p in parts if p.status not in ("graded", "flagged"))  # fmt: skip
    result.reason = (
        f"{len(failed)} of {len(result.cells)} tests failed; first: {failed[0].notebook}.ipynb: {failed[0].message}"
        if failed
        else "all tests passed"
    ) + (f" ({others})" if others else "")
    result.detail = worst[1].detail


def error_result(job: Job, reference: Reference | None, err: Exception) -> Result:
    return Result(
        job.sid, job.aid, reference.max_score if reference else 0.0, status="error",
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


def squeezed(text: str) -> str:
    """``text`` as the withholding compares it: compatibility-normalised, lower case, letters and digits only
    (so spaces, punctuation, zero-width and other invisible characters hide nothing)."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isascii() and ch.isalnum())


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


def _spells_hidden(text: str, hidden: frozenset[str]) -> bool:
    return any(line in text for line in hidden)


def executed_notebook(notebook: nbformat.NotebookNode, outputs: dict, hidden: frozenset[str]):
    """The notebook as the grader ran it: the cells the grader sent (never text from the run), each code
    cell with the outputs it had when it finished, less any output that shows hidden test text, and
    a cell whose outputs are not valid nbformat shown without them."""
    import copy

    nb = copy.deepcopy(notebook)
    spelled = []  # every output's text, in order: pieces spread over outputs and cells are read together
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        kept = []
        for output in outputs.get(index, []):
            output = nbformat.from_dict(output)
            shown = [output.get(k) for k in ("text", "data", "ename", "evalue", "traceback")]
            text = squeezed("".join(_texts(shown)))  # what a page shows of it (not its type or stream's name)
            if _spells_hidden(text, hidden):
                output = nbformat.v4.new_output("stream", name="stdout", text=WITHHELD)
            else:
                spelled.append(text)
            kept.append(output)
        cell.outputs = kept
        cell.execution_count = None
        try:
            nbformat.validate(nbformat.v4.new_notebook(cells=[cell]))
        except Exception:
            note = "[outputs not shown: they are not valid notebook outputs]\n"
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=note)]
    if _spells_hidden("".join(spelled), hidden):  # in pieces: no output of this run is shown
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = (
                    [nbformat.v4.new_output("stream", name="stdout", text=WITHHELD_ALL)]
                    if cell.outputs
                    else []
                )
    return nb


def save_executed(
    course: Course, job: Job, notebook: nbformat.NotebookNode, outputs: dict, hidden: frozenset[str], nb=None
) -> None:
    """Keep the run notebook where nbgrader's formgrader looks (``autograded/``) for manual review, sanitised:
    formgrader shows what the student wrote and ran, and runs and loads none of it."""
    from autograder.sanitize import sanitize_notebook

    target = course.executed(job.aid, job.sid, nb)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(sanitize_notebook(executed_notebook(notebook, outputs, hidden)), str(target))


def _dask_grade(job: Job) -> Result:
    from autograder.reference import load_reference

    return grade_one(job, load_reference(job.course.reference_dir / job.aid))


def grade(
    course: Course,
    aid: str,
    workers: int = 2,
    limits: Limits | None = None,
    students: list[str] | None = None,
    force: bool = False,
    scheduler: str | None = None,
    isolation: str | Isolation = "auto",
    on_result: Callable[[Result], None] | None = None,
    strict: bool = False,
    on_notice: Callable[[str], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Grade every submission of ``aid`` that has no current result; return all results of this run.

    Raises (and records nothing) when the grader cannot prove itself first: the isolation does not work,
    the reference cannot be built, or the canary (:func:`autograder.canary.prove`) fails.
    """
    from autograder.canary import prove

    limits = limits or Limits()
    isolation = resolve(isolation) if isinstance(isolation, str) else isolation
    found = submissions(course, aid, students)
    with Recorder(course.db_url) as recorder:
        if not recorder.knows(aid):
            raise RuntimeError(
                f"the gradebook does not know {aid}: run `python -m autograder release {aid}` first"
            )
    reference, proof = prove(course, aid, limits, isolation, workers, strict, say=on_progress)
    for line in proof.get("warnings", []):
        (on_notice or (lambda text: print(f"note: {aid}: {text}", file=sys.stderr)))(line)
    if on_progress:
        on_progress(
            f"{aid}: the grader proved itself in {proof.get('proof_seconds', 0):.1f} s; grading the students"
        )
    digest = reference.digest
    names = list(reference.notebooks)
    todo = [
        sid
        for sid, folder in found.items()
        if force or not _is_current(load_result(course, aid, sid), submission_digest(folder, names), digest)
    ]
    warm = frameworks_used(course, aid)
    inputs = assignment_inputs(course, aid)
    private = course.private_folders()
    jobs = [Job(course, aid, sid, limits, warm, isolation, private) for sid in todo]
    results: list[Result] = []
    with Recorder(course.db_url) as recorder:

        def finish(result: Result) -> None:
            result.inputs = inputs
            t0 = time.perf_counter()
            if not result.is_error:  # the grader's failure is never a student's score
                recorder.record(aid, result)  # gradebook first, then the result file that marks it done
            result.timings["record"] = time.perf_counter() - t0
            save_result(course, result)
            results.append(result)
            if on_result:
                on_result(result)

        if scheduler:
            _grade_on_dask(scheduler, jobs, reference, finish)
        else:
            run_jobs(jobs, reference, workers, finish)
    return results


def assignment_inputs(course: Course, aid: str) -> dict[str, str]:
    """:func:`autograder.reference.source_inputs` of every notebook of ``aid`` (named by notebook where
    there are several)."""
    names = course.notebooks(aid)
    found = {}
    for nb in names:
        for key, value in source_inputs(course.read_source(aid, nb)).items():
            found[f"{nb}.ipynb: {key}" if len(names) > 1 else key] = value
    return found


def _is_current(result: Result | None, submission_sha: str, digest: str) -> bool:
    return result is not None and result.is_current(submission_sha, digest)


def grade_with_retry(job: Job, reference: Reference, sandbox: Sandbox | None) -> Result:
    """Grade once; a grader error (the student's code never ran, or the run was lost) gets one more try
    in a fresh sandbox."""
    result = grade_one(job, reference, sandbox)
    if result.is_error:
        first = result.reason
        result = grade_one(job, reference)
        result.notes = [*result.notes, f"graded a second time after a grader error: {first}"]
    return result


def run_jobs(jobs: list[Job], reference: Reference, workers: int, finish: Callable[[Result], None]) -> None:
    """Grade ``jobs`` on ``workers`` local worker threads; ``finish`` gets each result in this thread."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    done: queue.Queue[Result] = queue.Queue()

    def worker(slot: int) -> None:
        ready: Sandbox | None = None
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                break
            current = None
            try:
                current = ready or job.sandbox(slot).start()
                # Start the next child now: its kernel boots and imports while this one runs.
                ready = job.sandbox(slot).start() if not pending.empty() else None
                done.put(grade_with_retry(job, reference, current))
            except Exception as err:  # the sandbox itself failed to start: a result all the same
                done.put(error_result(job, reference, err))
            finally:
                if current is not None:
                    current.cleanup()
        if ready is not None:
            ready.cleanup()

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(max(1, workers))]
    for thread in threads:
        thread.start()
    for _ in jobs:
        finish(done.get())
    for thread in threads:
        thread.join()


def _grade_on_dask(
    scheduler: str, jobs: list[Job], reference: Reference, finish: Callable[[Result], None]
) -> None:
    """Each job on a Dask worker; a lost worker or a grader error is tried once more, then an ``error``."""
    from distributed import Client, as_completed

    with Client(scheduler) as client:
        futures = {client.submit(_dask_grade, job, pure=False): (job, 0) for job in jobs}
        pool = as_completed(list(futures))
        for future in pool:
            job, tries = futures.pop(future)
            try:
                result = future.result()
            except Exception as err:  # the worker died or the task could not run
                result = error_result(job, reference, err)
            if result.is_error and tries == 0:
                again = client.submit(_dask_grade, job, pure=False)
                futures[again] = (job, 1)
                pool.add(again)
                continue
            finish(result)
