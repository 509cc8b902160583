"""The service's grader: a thread that proves the grader on each open assignment (the canary, as every batch does
first), then grades the queue in batches on the course's own pipeline, so that each result lands in the same
gradebook, results and kept runs as the command line's (``feedback``, ``export``, ``report``, ``similarity`` and
``regrade`` work on it unchanged).

A batch takes the oldest queued submission of each student (a student's next one waits for the one before it: the
course holds one hand-in per student and assignment, as nbgrader does), puts its bytes where ``collect`` would (with
the received time as nbgrader's ``timestamp.txt``, so the late rule sees the server's clock), and grades them
together on the workers. Each result's feedback page is kept with the submission. A grader error sends the
submission back to the queue, and after three an error is shown, never a score; a proof that fails closes the
assignment, with its reason, and its submissions wait.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from dataclasses import dataclass

from autograder.course import Course
from autograder.grading.batch import Listeners, grade
from autograder.grading.canary import prove
from autograder.intake.late import late_penalty, write_timestamp
from autograder.outputs.feedback import render
from autograder.result import Result
from autograder.service.config import ServiceConfig
from autograder.service.store import Store, Submission, parse_stamp
from autograder.settings import Settings

IDLE_SECONDS = 1.0  # how long the thread waits for a submission before it looks again


@dataclass
class Door:
    """An assignment's state: ``proving`` (submissions are taken and wait), ``open`` or ``closed`` (refused)."""

    state: str
    reason: str = ""


class Worker(threading.Thread):
    def __init__(self, course: Course, store: Store, config: ServiceConfig, settings: Settings, log=None):
        super().__init__(name="autograder-service-grader", daemon=True)
        self.course, self.store, self.config, self.settings = course, store, config, settings
        self.doors: dict[str, Door] = {}
        known = set(course.assignments())
        for aid in course.assignments() if config.open is None else config.open:
            self.doors[aid] = Door("proving") if aid in known else Door("closed", f"{aid} is not in source/")
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.graded = 0

    # the door -------------------------------------------------------------------------------------------------

    def door(self, aid: str) -> Door | None:
        return self.doors.get(aid)

    def prove_all(self) -> None:
        for aid, door in self.doors.items():
            if door.state != "proving":
                continue
            try:
                prove(self.course, aid, self.settings, say=lambda line: self.log(f"service: {line}"))
            except Exception as err:  # the grader cannot vouch for its grades here: closed, with the reason
                self.doors[aid] = Door("closed", f"the grader could not prove itself on {aid}: {err}")
                self.log(f"service: {aid} stays closed: {err}")
            else:
                self.doors[aid] = Door("open")
                self.log(f"service: {aid} is open")

    # the loop -------------------------------------------------------------------------------------------------

    def run(self) -> None:
        resumed = self.store.resume()
        if resumed:
            self.log(f"service: {resumed} submission(s) the last run was grading are queued again")
        self.prove_all()
        while not self.stopping.is_set():
            open_aids = {aid for aid, door in self.doors.items() if door.state == "open"}
            batch = self.store.claim(open_aids, self.config.grade_batch or 2 * max(1, self.settings.workers))
            if not batch:
                self.wake.wait(IDLE_SECONDS)
                self.wake.clear()
                continue
            for aid in sorted({s.aid for s in batch}):
                self.grade_batch(aid, [s for s in batch if s.aid == aid])

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def grade_batch(self, aid: str, batch: list[Submission]) -> None:
        by_student = {s.student_id: s for s in batch}
        for submission in batch:
            self.place(submission)
        done: set[str] = set()

        def on_result(result: Result) -> None:
            submission = by_student.get(result.student_id)
            if submission is not None:
                self.record(submission, result)
                done.add(submission.id)

        try:
            grade(
                self.course, aid, self.settings, students=sorted(by_student), force=True,
                listeners=Listeners(on_result=on_result, on_progress=lambda line: self.log(f"service: {line}")),
            )  # fmt: skip
        except Exception as err:
            self.log(f"service: grading {aid} failed: {err}\n{traceback.format_exc()}")
            self.doors[aid] = Door("closed", f"the grader stopped on {aid}: {err}")
            for submission in batch:
                if submission.id not in done:
                    self.store.requeue(submission.id, f"waiting: {aid} is closed ({err})")
            return
        for submission in batch:  # a hand-in the batch did not return (it cannot happen; if it does, say so)
            if submission.id not in done:
                self.store.failed(submission.id, "the grader returned no result for it")

    def failed_cases(self, aid: str, cell) -> list[str]:
        """The names of a part's hidden cases (its groups: a hidden case and the public checks it joins) that
        failed. The result lists a cell's groups only where it has several; one group is the cell's own."""
        if cell.passed:
            return []
        if cell.groups:
            return [g.name for g in cell.groups if not g.passed]
        from autograder.grading.reference import load_reference

        try:
            groups = load_reference(self.course.reference_dir / aid).cells[cell.grade_id].get("groups") or []
        except (OSError, KeyError, ValueError):
            groups = []
        return [g["name"] for g in groups] or [cell.grade_id]

    def place(self, submission: Submission) -> None:
        """The submission's bytes where ``collect`` puts a hand-in, with the server's received time."""
        folder = self.course.submission_folder(submission.aid, submission.student_id)
        folder.mkdir(parents=True, exist_ok=True)
        target = self.course.submission(submission.aid, submission.student_id)
        part = target.with_name(target.name + ".part")
        part.write_bytes(self.store.body(submission))
        os.replace(part, target)
        write_timestamp(folder, parse_stamp(submission.received_utc).replace(tzinfo=None))

    def record(self, submission: Submission, result: Result) -> None:
        if result.is_error:  # the grader's failure: never a score; tried again, then shown as an error
            state = self.store.failed(submission.id, result.reason or "grader error")
            self.log(f"service: {submission.id} ({submission.student_id}): grader error, now {state}")
            return
        page = render(self.course, submission.aid, result, late_penalty(self.course, submission.aid, result))
        target = self.store.feedback / f"{submission.id}.html"
        target.write_text(page, encoding="utf-8")
        cells = [
            {
                "grade_id": c.grade_id, "points": c.points, "max_points": c.max_points, "passed": c.passed,
                "failed_cases": self.failed_cases(submission.aid, c), "message": c.message,
            }
            for c in result.cells
        ]  # fmt: skip
        self.store.finish(submission.id, result.score, result.max_score, result.status, result.reason, cells)
        self.graded += 1
