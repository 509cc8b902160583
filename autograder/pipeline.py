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
import importlib.util
import json
import queue
import shutil
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
from autograder.record import Recorder, load_result, save_result, sha256_file, write_json_atomic
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
    path: str = ""  # the notebook, when it is not in submitted/ (the canary's)

    def sandbox(self, slot: int = 0) -> Sandbox:
        return Sandbox(self.limits, slot, self.warm, self.isolation, self.private)


def frameworks_used(course: Course, aid: str) -> tuple[str, ...]:
    """Modules a child imports before the student's code arrives: the heavy ones the source uses.

    The set-up cell's ``dlcourse.banner()`` imports torch, and ``dlcourse.data`` imports scikit-learn. A
    source that compiles or exports also gets torch's compiler stack (3 s of imports a kernel otherwise
    pays on its first ``torch.compile``); none of these starts a thread when imported.
    """
    text = course.source_notebook(aid).read_text(encoding="utf-8")
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
    found = course.submitted(aid)
    if students:
        missing = [s for s in students if s not in found]
        if missing:
            raise KeyError(f"no submission of {aid} from {', '.join(missing)}")
        found = {s: found[s] for s in students}
    return found


# ----------------------------------------------------------------------------- one submission's stages


@dataclass
class Grading:
    """One submission on its way through :data:`STAGES`: what each stage needs and what it left."""

    job: Job
    reference: Reference
    course: Course
    path: Path
    result: Result
    sandbox: Sandbox | None = None  # a pre-started child, or None to start one at the run stage
    repaired: Repaired | None = None
    outcome: Outcome | None = None
    verdict: Verdict | None = None


def repair_stage(g: Grading) -> bool:
    """Read the notebook, put back what Colab or an editor damaged; stop with a reason if it is unreadable."""
    g.result.submission_sha256 = sha256_file(g.path)
    g.repaired = repair(g.course, g.job.aid, g.path)
    g.result.notes = g.repaired.notes
    if g.repaired.fatal:
        if not g.job.path:  # an earlier hand-in's kept run must not decide this one on a regrade
            shutil.rmtree(g.course.kept_run(g.job.aid, g.job.sid), ignore_errors=True)
        g.result.status, g.result.reason = "unreadable", g.repaired.fatal
        g.result.cells = [
            CellResult(gid, 0.0, cell["points"], False, g.repaired.fatal)
            for gid, cell in g.reference.cells.items()
        ]
        return False
    return True


def run_stage(g: Grading) -> bool:
    """Run the repaired notebook in a sandboxed child (the seam where another runner plugs in)."""
    if g.sandbox is None:
        g.sandbox = g.job.sandbox().start()
    g.outcome = g.sandbox.run(g.repaired.notebook)
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
    """Decide every point outside the kernel, from the data the run captured."""
    g.verdict = verify(g.reference, g.outcome.folder / "capture", g.outcome.summary)
    g.result.cells = g.verdict.cells
    g.result.score = g.verdict.score
    g.result.written = written_results(g.reference, g.repaired)  # graded by hand: apart from the score
    problems = [*g.verdict.problems, *g.outcome.summary.get("problems", [])]
    g.result.flags = g.verdict.disagreements + [f"recorded data: {p}" for p in problems]
    return True


def keep_stage(g: Grading) -> bool:
    """Keep the run notebook where nbgrader's formgrader looks (``autograded/``) for manual review, and
    what the run captured, so that a regrade decides again without running the student's code."""
    if not g.job.path:  # the canary's notebooks are nobody's
        hidden = hidden_test_lines(g.course, g.job.aid)
        save_executed(g.course, g.job, g.repaired.notebook, g.outcome.outputs, hidden)
        keep_run(g.course.kept_run(g.job.aid, g.job.sid), g.outcome, g.result.submission_sha256)
    return True


KEPT_BYTES = 64 * 2**20  # a capture larger than this is not kept (its submission is rerun on a regrade)
KEPT_LAYOUT = 2  # kept runs of another layout (or none) are never read: their submissions are graded again


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
        return Outcome(run["status"], run["seconds"], folder, run["summary"], run["detail"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def status_stage(g: Grading) -> bool:
    """The status and the one-line reason, from how the run ended and what the verdict found."""
    result, limits, outcome = g.result, g.job.limits, g.outcome
    if outcome.status != "finished":
        stopped = {"timeout": f"the notebook ran past the {limits.timeout:.0f} s limit",
                   "memory": f"the notebook used more than {limits.memory_mb} MB",
                   "processes": f"the notebook started more than {limits.processes} processes (a fork bomb?)",
                   "crashed": "the kernel died or could not start"}[outcome.status]  # fmt: skip
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
    """Grade one submission through :data:`STAGES`, never raising: every outcome is a result with a reason."""
    course = job.course
    result = Result(
        job.sid, job.aid, reference.max_score, isolation=job.isolation.describe(), reference=reference.digest
    )
    g = Grading(
        job, reference, course, Path(job.path) if job.path else course.submission(job.aid, job.sid), result
    )
    g.sandbox = sandbox
    started = time.monotonic()
    try:
        for name, stage in STAGES:
            t0 = time.perf_counter()
            go_on = stage(g)
            result.timings[name] = time.perf_counter() - t0
            if not go_on:
                break
    except Exception as err:  # a grader bug must not stop the batch, and must be visible
        result.status, result.reason = "error", f"grader error: {type(err).__name__}: {err}"
        result.traceback = traceback.format_exc()[-4000:]
    finally:
        if sandbox is None and g.sandbox is not None:
            g.sandbox.cleanup()
        result.seconds = round(time.monotonic() - started, 2)
    return result


def error_result(job: Job, reference: Reference | None, err: Exception) -> Result:
    return Result(
        job.sid, job.aid, reference.max_score if reference else 0.0, status="error",
        reason=f"grader error: {type(err).__name__}: {err}",
    )  # fmt: skip


WITHHELD = "[output withheld: it contains the text of a hidden test]\n"
WITHHELD_ALL = "[outputs withheld: together, this run's outputs spell out the text of a hidden test]\n"


def hidden_test_lines(course: Course, aid: str) -> frozenset[str]:
    """The lines of the source's hidden tests that say something (12 letters and digits or more, as
    :func:`squeezed` reads them) and that the release does not show anyway: an output that spells one out,
    whole or in pieces, is shown to no one."""
    source, release = course.source_notebook(aid), course.release_notebook(aid)
    stamps = tuple(p.stat().st_mtime_ns if p.exists() else 0 for p in (source, release))
    return _hidden_lines(str(source), str(release), stamps)


def squeezed(text: str) -> str:
    """``text`` as the withholding compares it: compatibility-normalised, lower case, letters and digits only
    (so spaces, punctuation, zero-width and other invisible characters hide nothing)."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isascii() and ch.isalnum())


@functools.lru_cache(maxsize=16)
def _hidden_lines(source: str, release: str, _stamps: tuple) -> frozenset[str]:
    lines: set[str] = set()
    for cell in nbformat.read(source, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if "### BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "### END HIDDEN TESTS" in line:
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
    course: Course, job: Job, notebook: nbformat.NotebookNode, outputs: dict, hidden: frozenset[str]
) -> None:
    """Keep the run notebook where nbgrader's formgrader looks (``autograded/``) for manual review, sanitised:
    formgrader shows what the student wrote and ran, and runs and loads none of it."""
    from autograder.sanitize import sanitize_notebook

    target = course.executed(job.aid, job.sid)
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
    reference, _ = prove(course, aid, limits, isolation, workers)
    digest = reference.digest
    todo = [
        sid
        for sid, path in found.items()
        if force or not _is_current(load_result(course, aid, sid), sha256_file(path), digest)
    ]
    warm = frameworks_used(course, aid)
    inputs = source_inputs(course.read_source(aid))
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
