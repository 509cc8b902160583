"""The service's grader: a thread that proves the grader on each open assignment (the canary, as every batch does
first), then grades the queue in batches on the course's own pipeline, so that each result lands in the same
gradebook, results and kept runs as the command line's (``feedback``, ``export``, ``report``, ``similarity`` and
``regrade`` work on it unchanged).

Each of the ``workers`` slots takes the oldest queued submission it may (a student's next one waits for the one
before it: the course holds one hand-in per student and assignment, as nbgrader does) as soon as it is free, so a
notebook that runs to its time limit holds its own slot and no other. It puts the bytes where ``collect`` would
(with the received time as nbgrader's ``timestamp.txt``, so the late rule sees the server's clock), grades them
through the pipeline's stages (:func:`~autograder.grading.pipeline.grade_with_retry`, on the slot's sandbox, as a
batch's worker does) against the proved reference, and records the result in the gradebook and the results as a
batch does. Each result's feedback page is kept with the submission. A grader error sends the submission back to
the queue, and after three an error is shown, never a score; a proof that fails closes the assignment, with its
reason, and its submissions wait. A source changed while the service runs is proved again before its next
submission is graded.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from autograder.course import Course
from autograder.grading.canary import prove
from autograder.grading.pipeline import Batch, Job, error_result, grade_one, grade_with_retry, make_batch
from autograder.grading.record import Recorder, save_result
from autograder.grading.reference import source_digest
from autograder.intake.handin import frameworks_used
from autograder.intake.late import late_penalty, write_timestamp
from autograder.outputs.feedback import page_of
from autograder.result import Result
from autograder.runner.launchers import prestart
from autograder.service.config import ServiceConfig
from autograder.service.store import Store, Submission, parse_stamp, unavailable_errors
from autograder.settings import Settings

IDLE_SECONDS = 0.25  # how long a free slot waits to be woken before it looks at the queue again
SWEEP_SECONDS = 5.0  # how often an idle slot looks for rows marked running that no slot holds
NICENESS = 5  # the grading threads' and their kernels' priority below the service's requests


def lower_priority() -> None:
    """This thread, and every process it starts from now on (sandboxes, warm parents, their kernels), at
    :data:`NICENESS` below the rest of the service: a deadline's grading never starves the requests that ask how
    it goes. (Linux keeps a priority per thread; elsewhere nothing changes.)"""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
    except (AttributeError, OSError):
        pass


class Patient:
    """The store as the grader uses it: a call that finds the database busy or away (PostgreSQL restarted, SQLite
    locked) waits and is made again, until it goes through or the service stops, so that a database's restart
    costs the queue time and nothing else. (Each of the grader's writes is safe to make twice.)"""

    def __init__(self, store: Store, stopping: threading.Event, log):
        self._store, self._stopping, self._log = store, stopping, log

    def __getattr__(self, name: str):
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def patiently(*args, **kwargs):
            wait = 0.5
            while True:
                try:
                    return found(*args, **kwargs)
                except unavailable_errors() as err:
                    if self._stopping.is_set():
                        raise
                    self._log(f"service: the store is away ({str(err).strip()[:200]}); again in {wait:g} s")
                    self._stopping.wait(wait)
                    wait = min(wait * 2, 10.0)

        return patiently


class Cluster:
    """A Dask cluster's workers grade the submissions (as ``grade --scheduler`` does: they see the course's folder
    at the same path); an assignment named in ``gpu`` goes only to a worker that declares a ``GPU`` resource.
    Each assignment's batch is sent to every worker once per reference."""

    def __init__(self, scheduler: str, gpu: tuple[str, ...]):
        self.scheduler, self.gpu = scheduler, set(gpu)
        self.lock = threading.Lock()
        self.client = None
        self.shared: dict[str, tuple[Batch, object]] = {}  # aid -> (its batch, that batch on the workers)

    def grade(self, batch: Batch, job: Job) -> Result:
        try:
            shared = self.on_workers(batch)
            resources = {"GPU": 1} if batch.aid in self.gpu else None
            future = self.client.submit(grade_one, shared, job, pure=False, resources=resources)
            return future.result()
        except Exception as err:  # the worker died, or the cluster is away: a grader error, tried again
            with self.lock:  # the batch may have gone with the worker that held it: sent again next time
                self.shared.pop(batch.aid, None)
            return error_result(batch, job, err)

    def on_workers(self, batch: Batch):
        from distributed import Client

        with self.lock:
            if self.client is None:
                self.client = Client(self.scheduler, timeout=30)
            known = self.shared.get(batch.aid)
            if known is None or known[0] is not batch:  # a new reference: sent again
                self.shared[batch.aid] = (batch, self.client.scatter(batch, broadcast=True))
            return self.shared[batch.aid][1]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


@dataclass
class Door:
    """An assignment's state: ``proving`` (submissions are taken and wait), ``open`` or ``closed`` (refused)."""

    state: str
    reason: str = ""


class Counting:
    """Which of a student's submissions the gradebook holds (``service.toml``'s ``counts``), and each one's page and
    grade in the store: the part of :class:`Worker` that records."""

    def best_earlier(self, submission: Submission, late) -> Submission | None:
        """Under ``counts = "best"``: the student's earlier graded submission that scored more after its late
        penalty than this one (None: this one counts)."""
        if self.config.counts != "best":
            return None
        earlier = self.store.best(submission.student_id, submission.aid, besides=submission.id)
        if earlier is None or earlier.final is None or earlier.final <= (late.final or 0.0):
            return None
        return earlier

    def restore(self, batch: Batch, earlier: Submission, slot: int) -> None:
        """Grading the worse one put its files in the course's folders: the best one is placed and graded again
        (the same grade: grading is deterministic), so that the gradebook, the results and the kept run that
        ``feedback`` and ``regrade`` read are all the best one's."""
        again = self.run_one(batch, earlier, slot)
        if again.is_error:
            self.log(
                f"service: {earlier.student_id}'s best {earlier.aid} ({earlier.id}) could not be graded again: "
                f"the gradebook keeps its score, the course's folder holds their latest ({again.reason})"
            )
            return
        if again.score != earlier.score:
            self.log(
                f"service: {earlier.id} graded again got {again.score}, first {earlier.score}: recorded as now"
            )
        self.enter(again)
        self.store.count(earlier.id)

    def keep(self, submission: Submission, result: Result, late, page: str, counted: bool) -> None:
        """The submission's feedback ``page`` and its grade in the store (``counted``: the gradebook holds it)."""
        self.store.put_page(submission.id, page)
        cells = [
            {
                "grade_id": c.grade_id, "points": c.points, "max_points": c.max_points, "passed": c.passed,
                "failed_cases": failed_cases(self.course, submission.aid, c), "message": c.message,
            }
            for c in result.cells
        ]  # fmt: skip
        graded = {
            "score": result.score, "max_score": result.max_score, "status": result.status,
            "reason": result.reason, "final": late.final,
        }  # fmt: skip
        self.store.finish(submission.id, graded, cells, counted)


class Worker(Counting, threading.Thread):
    def __init__(self, course: Course, store: Store, config: ServiceConfig, settings: Settings, log=None):
        super().__init__(name="autograder-service-grader", daemon=True)
        self.course, self.config, self.settings = course, config, settings
        self.doors: dict[str, Door] = {}
        known = set(course.assignments())
        for aid in course.assignments() if config.open is None else config.open:
            self.doors[aid] = Door("proving") if aid in known else Door("closed", f"{aid} is not in source/")
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.store = Patient(store, self.stopping, self.log)
        self.claiming = threading.Lock()
        self.holding: set[str] = set()  # the submissions this service's slots are grading now
        self.next_sweep = 0.0
        self.proving = threading.Lock()  # one proof at a time (each slot may find a source changed)
        self.recording = threading.Lock()
        self.batches: dict[str, Batch] = {}
        self.ready: dict[int, tuple] = {}  # slot -> (its batch, a sandbox started for its next submission)
        self.cluster = Cluster(settings.scheduler, config.gpu) if settings.scheduler else None

    # the door -------------------------------------------------------------------------------------------------

    def door(self, aid: str) -> Door | None:
        return self.doors.get(aid)

    def prove_all(self) -> None:
        for aid, door in self.doors.items():
            if door.state != "proving":
                continue
            with Recorder(self.course.db_url) as recorder:
                released = recorder.knows(aid)
            if not released:  # as a batch refuses: the gradebook has nowhere to record a grade
                self.doors[aid] = Door(
                    "closed",
                    f"the gradebook does not know {aid}: run `python -m autograder release {aid}` first",
                )
                self.log(f"service: {aid} stays closed: it was not released")
                continue
            try:
                with self.proving:  # one proof at a time, a slot's included
                    reference, _ = prove(
                        self.course, aid, self.settings, say=lambda line: self.log(f"service: {line}")
                    )
                    self.batches[aid] = make_batch(self.course, aid, reference, self.settings)
            except Exception as err:  # the grader cannot vouch for its grades here: closed, with the reason
                self.doors[aid] = Door("closed", f"the grader could not prove itself on {aid}: {err}")
                self.log(f"service: {aid} stays closed: {err}")
                continue
            if self.settings.isolation.runner == "fork":  # its warm parents start now, not with a student
                prestart(frameworks_used(self.course, aid), self.settings.workers)
            self.doors[aid] = Door("open")
            self.log(f"service: {aid} is open")

    # the loop -------------------------------------------------------------------------------------------------

    def run(self) -> None:
        lower_priority()
        resumed = self.store.resume()
        if resumed:
            self.log(f"service: {resumed} submission(s) the last run was grading are queued again")
        slots = [
            threading.Thread(target=self.slot, args=(n,), daemon=True)
            for n in range(max(1, self.settings.workers))
        ]
        for thread in slots:  # an assignment is graded as soon as it opens, while the next is proved
            thread.start()
        self.prove_all()
        for thread in slots:
            thread.join()
        for _, sandbox in self.ready.values():
            sandbox.cleanup()
        if self.cluster is not None:
            self.cluster.close()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def slot(self, number: int) -> None:
        """One worker: a submission at a time, as soon as it is free."""
        lower_priority()
        while not self.stopping.is_set():
            try:
                self.take_one(number)
            except Exception:  # (the store's own failure, say): the slot goes on after a breath
                self.log(f"service: slot {number} failed and goes on:\n{traceback.format_exc()}")
                self.stopping.wait(1.0)

    def take_one(self, number: int) -> None:
        """The next submission this slot may grade, graded; or a short wait for one (and, now and then, the
        rows marked running that no slot holds put back in the queue)."""
        open_aids = {aid for aid, door in self.doors.items() if door.state == "open"}
        with self.claiming:  # what is claimed is held at once: the sweep never takes a row being graded
            claimed = self.store.claim(open_aids, 1)
            self.holding.update(s.id for s in claimed)
            if not claimed and time.monotonic() > self.next_sweep:
                self.next_sweep = time.monotonic() + SWEEP_SECONDS
                lost = self.store.requeue_orphans(set(self.holding))
                if lost:
                    self.log(
                        f"service: {lost} submission(s) marked running that no slot held are queued again"
                    )
        if not claimed:
            self.wake.wait(IDLE_SECONDS)
            if not self.stopping.is_set():
                self.wake.clear()
            return
        self.wake.set()  # another slot may find the next one at once
        try:
            self.grade_one(claimed[0], number)
        except Exception as err:  # the grader's own failure: retried, then an error; the slot goes on
            state = self.store.failed(claimed[0].id, f"the grader failed: {err}"[:500])
            self.log(
                f"service: {claimed[0].id} ({claimed[0].student_id}): the grader failed, now {state}:\n"
                + traceback.format_exc()
            )
        finally:
            with self.claiming:
                self.holding.discard(claimed[0].id)

    def batch_for(self, aid: str) -> Batch:
        """The assignment's batch against its proved reference; proved again first where the source changed."""
        with self.proving:
            batch = self.batches.get(aid)
            if batch is None or batch.reference.digest != source_digest(self.course, aid):
                reference, _ = prove(
                    self.course, aid, self.settings, say=lambda line: self.log(f"service: {line}")
                )
                batch = self.batches[aid] = make_batch(self.course, aid, reference, self.settings)
            return batch

    def grade_one(self, submission: Submission, slot: int) -> None:
        try:
            batch = self.batch_for(submission.aid)
        except Exception as err:  # the grader cannot vouch for its grades any more: closed, with the reason
            self.doors[submission.aid] = Door(
                "closed", f"the grader could not prove itself on {submission.aid}: {err}"
            )
            self.store.requeue(submission.id, f"waiting: {submission.aid} is closed ({err})")
            self.log(f"service: {submission.aid} closed: {err}")
            return
        result = self.run_one(batch, submission, slot)
        if result.is_error:  # the grader's failure: never a score; tried again, then shown as an error
            state = self.store.failed(submission.id, result.reason or "grader error")
            self.log(
                f"service: {submission.id} ({submission.student_id}): grader error, now {state}: "
                f"{(result.reason or '')[:300]}"
            )
        else:
            late = late_penalty(self.course, submission.aid, result)  # (from the timestamp placed with it)
            page = page_of(self.course, submission.aid, result, late)  # (its run, before another is placed)
            earlier = self.best_earlier(submission, late)
            # the gradebook first, the store's row last: a service killed in between grades it again
            if earlier is None:
                self.enter(result)
            else:  # counts = "best", and an earlier one is better: graded again in its place, and counted
                self.restore(batch, earlier, slot)
            self.keep(submission, result, late, page, counted=earlier is None)
        if self.cluster is not None:  # the cluster's workers start their own
            return
        try:  # the slot's next kernel boots and imports now, as a batch's worker starts its next one
            self.ready[slot] = (batch, batch.sandbox(slot).start())
        except Exception:  # started when it is needed, then
            pass

    def run_one(self, batch: Batch, submission: Submission, slot: int) -> Result:
        """``submission`` placed where ``collect`` puts a hand-in and graded on the slot's sandbox (with a
        scheduler: on a worker of the cluster)."""
        place(self.course, submission, self.store.body(submission))
        job = Job(submission.student_id)
        if self.cluster is not None:
            return self.cluster.grade(batch, job)
        ready_batch, sandbox = self.ready.pop(slot, (None, None))
        if sandbox is not None and ready_batch is not batch:  # started for another assignment or reference
            sandbox.cleanup()
            sandbox = None
        try:
            sandbox = sandbox or batch.sandbox(slot).start()
            result = grade_with_retry(batch, job, sandbox)
        except Exception as err:  # the sandbox itself failed to start: a grader error, as a batch records it
            result = error_result(batch, job, err)
        finally:
            if sandbox is not None:
                sandbox.cleanup()
        result.inputs = batch.inputs
        return result

    def enter(self, result: Result) -> None:
        """``result`` into the gradebook, then its result file, as a batch records them."""
        with self.recording:  # one writer of the gradebook at a time, as a batch records in one thread
            with Recorder(self.course.db_url) as recorder:
                recorder.record(result.assignment, result)
            save_result(self.course, result)


def failed_cases(course: Course, aid: str, cell) -> list[str]:
    """The names of a part's hidden cases (its groups: a hidden case and the public checks it joins) that failed.
    The result lists a cell's groups only where it has several; one group is the cell's own."""
    if cell.passed:
        return []
    if cell.groups:
        return [g.name for g in cell.groups if not g.passed]
    from autograder.grading.reference import load_reference

    try:
        groups = load_reference(course.reference_dir / aid).cells[cell.grade_id].get("groups") or []
    except (OSError, KeyError, ValueError):
        groups = []
    return [g["name"] for g in groups] or [cell.grade_id]


def place(course: Course, submission: Submission, body: bytes) -> None:
    """A submission's bytes where ``collect`` puts a hand-in, with the server's received time."""
    folder = course.submission_folder(submission.aid, submission.student_id)
    folder.mkdir(parents=True, exist_ok=True)
    target = course.submission(submission.aid, submission.student_id)
    part = target.with_name(target.name + ".part")
    part.write_bytes(body)
    os.replace(part, target)
    write_timestamp(folder, parse_stamp(submission.received_utc).replace(tzinfo=None))
