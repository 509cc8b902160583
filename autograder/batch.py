"""Grading a class: the grader proves itself (:mod:`autograder.canary`: the isolation probed, the reference
built in the sandbox, the source's solutions and the untouched release graded through the students' very
path), builds the :class:`~autograder.pipeline.Batch` once, grades every submission that has no current
result through :data:`~autograder.pipeline.STAGES` on worker threads or a Dask cluster, and records each
result in this process alone, one at a time, as it arrives. A grader error is tried once more and never
recorded as a score.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from autograder.canary import prove
from autograder.course import Course
from autograder.handin import submission_digest, submissions
from autograder.pipeline import Batch, Job, error_result, grade_one, make_batch, run_jobs
from autograder.record import Recorder, load_result, save_result
from autograder.result import Result
from autograder.runner.isolation import Isolation, resolve
from autograder.runner.sandbox import Limits

__all__ = ["grade"]


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
    batch = make_batch(course, aid, reference, limits, isolation)
    jobs = [Job(sid) for sid, folder in found.items() if force or not _is_current(batch, sid, folder)]
    results: list[Result] = []
    with Recorder(course.db_url) as recorder:

        def finish(result: Result) -> None:
            result.inputs = batch.inputs
            t0 = time.perf_counter()
            if not result.is_error:  # the grader's failure is never a student's score
                recorder.record(aid, result)  # gradebook first, then the result file that marks it done
            result.timings["record"] = time.perf_counter() - t0
            save_result(course, result)
            results.append(result)
            if on_result:
                on_result(result)

        if scheduler:
            _grade_on_dask(scheduler, batch, jobs, finish)
        else:
            run_jobs(batch, jobs, workers, finish)
    return results


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
