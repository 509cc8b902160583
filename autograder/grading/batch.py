"""Grading a class: the grader proves itself (:mod:`autograder.grading.canary`: the isolation probed, the reference
built in the sandbox, the source's solutions and the untouched release graded through the students' very
path), builds the :class:`~autograder.grading.pipeline.Batch` once, grades every submission that has no current
result through :data:`~autograder.grading.pipeline.STAGES` on worker threads or a Dask cluster, and records each
result in this process alone, one at a time, as it arrives. A grader error is tried once more and never
recorded as a score.

The workers' warm parents start at once, beside the probe and the reference; the canary's two runs go first
in the workers' queue, so no core waits for them; a student's result that comes before the canary passed is
held and recorded after it, and if the canary fails no further submission starts and nothing is recorded.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from autograder.course import Course
from autograder.grading.canary import (
    CanaryBeside,
    CanaryFailed,
    Proof,
    begin_proof,
    conclude,
    discard_runs,
    run_canary,
)
from autograder.grading.pipeline import Batch, Job, error_result, grade_one, make_batch, run_jobs
from autograder.grading.record import Recorder, load_result, save_result
from autograder.intake.handin import frameworks_used, submission_digest, submissions
from autograder.progress import Heartbeat
from autograder.result import Result
from autograder.runner.isolation import resolved
from autograder.runner.launchers import prestart
from autograder.settings import Settings

__all__ = ["Listeners", "grade"]


@dataclass(frozen=True)
class Listeners:
    """Who hears of a batch as it goes: ``on_result`` gets each result as it is recorded, ``on_notice`` each
    of the proof's warnings (else they go to stderr), ``on_progress`` a line as each step starts and a
    heartbeat between."""

    on_result: Callable[[Result], None] | None = None
    on_notice: Callable[[str], None] | None = None
    on_progress: Callable[[str], None] | None = None


def grade(
    course: Course,
    aid: str,
    settings: Settings | None = None,
    students: list[str] | None = None,
    force: bool = False,
    listeners: Listeners | None = None,
) -> list[Result]:
    """Grade every submission of ``aid`` that has no current result, as ``settings`` say (the default
    :class:`~autograder.settings.Settings` where None); return all results of this run.

    Raises (and records nothing) when the grader cannot prove itself first: the isolation does not work,
    the reference cannot be built, or the canary (:mod:`autograder.grading.canary`) fails. The canary runs first on
    the students' own workers; a student's result that comes before it passed is held, and recorded after.
    """
    settings = resolved(settings or Settings())
    listeners = listeners or Listeners()
    found = submissions(course, aid, students)
    with Recorder(course.db_url) as recorder:
        if not recorder.knows(aid):
            raise RuntimeError(
                f"the gradebook does not know {aid}: run `python -m autograder release {aid}` first"
            )
    # every hand-in already graded against the reference on disk: the proof probes the sandbox only if
    # something (the reference, the canary) has to run, and no warm parent starts
    nothing_to_run = not force and _all_current(course, aid, found)
    if settings.isolation.runner == "fork" and not nothing_to_run:  # warm parents start now, beside the probe
        prestart(frameworks_used(course, aid), settings.workers)
    probe = "if anything runs" if nothing_to_run else "always"
    proof = begin_proof(course, aid, settings, say=listeners.on_progress, probe=probe)
    batch = make_batch(course, aid, proof.reference, settings)
    jobs = [Job(sid) for sid, folder in found.items() if force or not _is_current(batch, sid, folder)]
    canary = None
    if (
        proof.record is None and settings.scheduler
    ):  # the canary is graded here, before the cluster gets a job
        started = time.monotonic()
        try:
            results = run_canary(course, aid, proof.reference, settings, proof.staging, listeners.on_progress)
            conclude(proof, results, "ran", time.monotonic() - started)
        finally:
            discard_runs(proof)  # (what conclude did not publish)
    elif proof.record is None:
        canary = CanaryBeside(proof, listeners.on_progress)
        jobs = [*canary.jobs, *jobs]
    if proof.record is not None:
        _proved(proof, listeners)
    results: list[Result] = []
    try:
        _grade_jobs(batch, jobs, settings, canary, results, listeners)
    finally:
        if canary is not None:
            canary.cleanup()
    return results


def _proved(proof: Proof, listeners: Listeners) -> None:
    for line in proof.record.get("warnings", []):
        (listeners.on_notice or (lambda text: print(f"note: {proof.aid}: {text}", file=sys.stderr)))(line)
    if listeners.on_progress:
        listeners.on_progress(
            f"{proof.aid}: the grader proved itself in {proof.seconds:.1f} s; grading the students"
        )


def _grade_jobs(batch: Batch, jobs: list[Job], settings: Settings, canary, results, listeners) -> None:
    """Grade ``jobs`` (the canary's first, when it runs beside them) on ``settings``' workers or scheduler and
    record each student's result in this thread as it arrives (``listeners``: :class:`Listeners`), once the
    proof has passed; when the canary fails, no job starts any more, nothing of the batch is kept, and
    :class:`~autograder.grading.canary.CanaryFailed` is raised."""
    # a line every HEARTBEAT_SECONDS from the proof on (a notebook can take half a minute); a result restarts it
    beat = Heartbeat(listeners.on_progress, f"{batch.aid}: grading the students")
    if canary is None or canary.proof.record is not None:
        beat.start()
    held: list[Result] = []
    stop = threading.Event()
    failed: list[CanaryFailed] = []
    with Recorder(batch.course.db_url) as recorder:

        def record(result: Result) -> None:
            result.inputs = batch.inputs
            t0 = time.perf_counter()
            if not result.is_error:  # the grader's failure is never a student's score
                recorder.record(batch.aid, result)  # gradebook first, then the result file that marks it done
            result.timings["record"] = time.perf_counter() - t0
            save_result(batch.course, result)
            results.append(result)
            beat.touch()
            if listeners.on_result:
                listeners.on_result(result)

        def finish(result: Result) -> None:
            if canary is not None and canary.owns(result):
                try:
                    canary.arrive(result)
                except CanaryFailed as err:
                    failed.append(err)
                    stop.set()
                    return
                if canary.proof.record is not None:
                    _proved(canary.proof, listeners)
                    beat.start()
                    for waiting in held:
                        record(waiting)
                    held.clear()
            elif canary is not None and canary.proof.record is None:
                held.append(result)  # graded before the proof passed: recorded only once it has
            else:
                record(result)

        try:
            if settings.scheduler:
                _grade_on_dask(settings.scheduler, batch, jobs, finish)
            else:
                run_jobs(batch, jobs, settings.workers, finish, stop)
        finally:
            beat.stop()
    if failed:
        for result in held:  # what this batch left of students graded meanwhile goes too
            for nb in batch.notebooks:
                batch.course.executed(batch.aid, result.student_id, nb or None).unlink(missing_ok=True)
                shutil.rmtree(
                    batch.course.kept_run(batch.aid, result.student_id, nb or None), ignore_errors=True
                )
        raise failed[0]


def _all_current(course: Course, aid: str, found: dict) -> bool:
    """Whether every hand-in in ``found`` has a result of this very hand-in decided by the reference on disk,
    which the source has not outdated (read without building anything)."""
    from autograder.grading.reference import STAMP_FILE, load_reference, source_digest

    stamp = course.reference_dir / aid / STAMP_FILE
    if not found or not stamp.is_file() or stamp.read_text() != source_digest(course, aid):
        return False
    try:
        names = list(load_reference(stamp.parent).notebooks)
    except (OSError, ValueError):
        return False
    for sid, folder in found.items():
        result = load_result(course, aid, sid)
        if result is None or not result.is_current(submission_digest(folder, names), stamp.read_text()):
            return False
    return True


def _is_current(batch: Batch, sid: str, folder) -> bool:
    """A result of this very hand-in (its digest) decided by this reference is kept, not graded again."""
    result = load_result(batch.course, batch.aid, sid)
    return result is not None and result.is_current(
        submission_digest(folder, batch.notebooks), batch.reference.digest
    )


def _dask_grade(batch: Batch, job: Job) -> Result:
    return grade_one(batch, job)


def _grade_on_dask(scheduler: str, batch: Batch, jobs: list[Job], finish: Callable[[Result], None]) -> None:
    """Each job on a Dask worker (the batch sent to each worker once); a lost worker or a grader error is tried once more, then
    an ``error``."""
    from distributed import Client, as_completed

    with Client(scheduler) as client:
        shared = client.scatter(batch, broadcast=True)
        futures = {client.submit(_dask_grade, shared, job, pure=False): (job, 0) for job in jobs}
        pool = as_completed(list(futures))
        for future in pool:
            job, tries = futures.pop(future)
            try:
                result = future.result()
            except Exception as err:  # the worker died or the task could not run
                result = error_result(batch, job, err)
            if result.is_error and tries == 0:
                again = client.submit(_dask_grade, shared, job, pure=False)
                futures[again] = (job, 1)
                pool.add(again)
                continue
            finish(result)
