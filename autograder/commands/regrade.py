"""``python -m autograder regrade AID``: after the instructor edits the source, decide every stored
submission again, running student code only where the edit requires it.

Points are decided outside the students' kernels from what each run captured (kept by the pipeline's
``keep`` stage in ``Course.kept_run``). An edit that leaves the lines a run executes as they were (a
hidden case's tolerance, a cell's points, the solution, and so the expected values, comments) leaves
those captures valid: the reference is brought up to date (re-decided without running where only hidden
tolerances or points changed, :mod:`autograder.grading.decisions`; else rebuilt) and proven by the canary, and each
submission goes through the ``verify`` and ``status`` stages again on its kept capture, without running
student code. A submission is run again, through the whole pipeline, when the code the grader runs from
the source changed in any other way: a test's inputs, a check added or removed, the set-up cell, or a
public check's expected value or tolerance (a public check raises in the kernel, so it decides which later
lines ran; :func:`autograder.grading.reference.source_inputs` draws that line), when the student handed in again,
or when no capture was kept.

The run itself did not change, so what it showed about tampering (the flags) is kept as it was, and so is
what reading the hand-in's code flagged (``code_flags``). Each new result is recorded in the gradebook; the
old one is kept in ``results/<AID>/history/``. Manual scores of written answers (given in formgrader) stay as
they were: recording never overwrites them. Feedback pages are written again for the students whose score
moved.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from autograder.course import Course
from autograder.files import write_json_atomic
from autograder.grading.batch import grade
from autograder.grading.pipeline import (
    Batch,
    Grading,
    Job,
    kept_outcome,
    make_batch,
    merge_parts,
    run_stages,
    stages,
)
from autograder.grading.record import Recorder, load_results, save_result
from autograder.intake.handin import submission_digest
from autograder.result import Result
from autograder.runner.isolation import resolved
from autograder.settings import Settings

REDECIDE = ("verify", "status")  # the stages that decide points from a kept capture


@dataclass
class Change:
    student_id: str
    old: Result
    new: Result
    how: str  # "decided again" or "run again: <why>"

    @property
    def moved(self) -> bool:
        return self.old.is_error or self.new.is_error or abs(self.new.score - self.old.score) > 1e-9

    def cells(self) -> list[str]:
        """``grade_id: old -> new`` for each test cell whose points changed."""
        before = {c.grade_id: c.points for c in self.old.cells}
        lines = []
        for cell in self.new.cells:
            was = before.get(cell.grade_id)
            if was is None or abs(was - cell.points) > 1e-9:
                lines.append(f"{cell.grade_id}: {'-' if was is None else f'{was:g}'} -> {cell.points:g}")
        return lines

    def line(self) -> str:
        old = self.old.score_text().strip()
        new = self.new.score_text().strip()
        cells = "; ".join(self.cells())
        return f"{self.student_id:<20} {old:>11} -> {new:<11} {self.how}" + (f" [{cells}]" if cells else "")


@dataclass
class Regrade:
    aid: str
    changes: list[Change] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # student -> why not regraded
    seconds: float = 0.0
    reference_seconds: float = 0.0  # bringing the reference up to date and proving it (the canary)
    proof: str = ""  # how: the reference and the canary decided again from kept runs, or rebuilt and run

    @property
    def decided_again(self) -> list[Change]:
        return [c for c in self.changes if c.how == "decided again"]

    @property
    def run_again(self) -> list[Change]:
        return [c for c in self.changes if c.how != "decided again"]


def why_run_again(course: Course, aid: str, old: Result, inputs: dict[str, str]) -> tuple[str, dict]:
    """``("", kept)`` when the kept capture of ``old`` still answers the edited source's questions (``kept``:
    each handed-in notebook's name -> its kept run, read once here; None for a notebook the grader could not
    read, which nothing ran), else ``(why not, {})``."""
    folder = course.submission_folder(aid, old.student_id)
    if old.is_error:
        return "it was never graded (a grader error)", {}
    if submission_digest(folder, course.notebooks(aid)) != old.submission_sha256:
        return "handed in again", {}
    kept = {}
    for nb in course.notebooks(aid):
        path = course.submission(aid, old.student_id, nb)
        if not path.exists() and not path.is_symlink():
            continue  # not handed in: decided again as such
        kept[nb] = kept_outcome(course.kept_run(aid, old.student_id, nb), old.submission_sha256)
        if kept[nb] is None and old.status != "unreadable":
            return "no capture kept from its run (or kept by an earlier grader, or from other bytes)", {}
    changed = sorted(k for k in {*inputs, *old.inputs} if inputs.get(k) != old.inputs.get(k))
    if changed:
        return "the source changed what " + ", ".join(changed[:4]) + " runs", {}
    return "", kept


def decide_again(batch: Batch, old: Result, kept: dict) -> Result | None:
    """The verify and status stages on the kept capture of ``old`` (``kept``, from :func:`why_run_again`): no
    student code runs. A notebook the grader could not read (no run kept) goes through the repair stage
    again, which reads it without running it; None if that notebook now reads (the edited release made it
    readable): it has to run."""
    course, aid, sid, reference = batch.course, batch.aid, old.student_id, batch.reference
    started = time.monotonic()
    result = Result(sid, aid, reference.max_score, isolation=old.isolation, reference=reference.digest)
    result.notes, result.submission_sha256, result.inputs = old.notes, old.submission_sha256, batch.inputs
    result.seconds_in_sandbox, result.peak_memory_mb = old.seconds_in_sandbox, old.peak_memory_mb
    parts = []
    for nb in reference.notebooks:
        part = Result(sid, aid, reference.part(nb).max_score, reference=reference.digest)
        g = Grading(Job(sid), reference.part(nb), course.submission(aid, sid, nb), part, nb=nb)
        outcome = kept.get(course.notebook(aid, nb or None))
        if outcome is None:  # not handed in, or unreadable: 0, as before, unless it now reads
            run_stages(batch, g, stages("repair", "keep"))  # (keep: its earlier kept run, if any, goes)
            if g.repaired.fatal is None:
                return None
        else:
            g.outcome = outcome
            # the hand-in is the same: so is what reading its code flagged (the status stage counts it)
            part.code_flags = [f for f in old.code_flags if f.notebook in ("", nb)]
            run_stages(batch, g, stages(*REDECIDE))
        parts.append((nb, part))
    result = merge_parts(result, parts, [])
    result.notes = old.notes
    result.flags = old.flags  # the run is the same: so is what it showed about tampering
    # and so are the written answers; their manual scores stay in the gradebook, never overwritten
    answered = {w.grade_id: w.answered for w in old.written}
    for w in result.written:
        if not answered.get(w.grade_id, True):
            w.answered, w.points = False, 0.0
    result.timings = {"decide_again": time.monotonic() - started}
    result.seconds = round(time.monotonic() - started, 3)
    return result


def keep_history(course: Course, old: Result) -> None:
    folder = course.results_dir(old.assignment) / "history"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    write_json_atomic(folder / f"{old.student_id}.{stamp}.{os.getpid()}.json", old.to_dict())


def regrade(course: Course, aid: str, settings: Settings | None = None, on_change=None, say=None) -> Regrade:
    """Rebuild the reference and prove it (the canary), then decide every stored result of ``aid`` again, as
    ``settings`` say (the default where None). ``on_change`` gets each :class:`Change` as it is recorded,
    ``say`` the proof's progress."""
    from autograder.grading.canary import prove
    from autograder.outputs.feedback import write_feedback

    started = time.monotonic()
    report = Regrade(aid)
    olds = {r.student_id: r for r in load_results(course, aid)}
    if not olds:
        raise RuntimeError(f"nothing to regrade: no graded submissions of {aid} (run `grade {aid}` first)")
    # nothing runs where every submission is decided again: the probe only where something runs
    settings = resolved(settings or Settings())
    reference, record = prove(course, aid, settings, say, probe="if anything runs")
    report.reference_seconds = time.monotonic() - started
    report.proof = f"reference {reference.how}, canary {record.get('how', 'found passed in the cache')}"
    batch = make_batch(course, aid, reference, settings)
    inputs = batch.inputs
    present = course.handed_in(aid)
    again: dict[str, str] = {}
    with Recorder(course.db_url) as recorder:
        for sid, old in olds.items():
            if sid not in present:
                report.skipped[sid] = "the submission is no longer in submitted/"
                continue
            why, kept = why_run_again(course, aid, old, inputs)
            new = None if why else decide_again(batch, old, kept)
            if new is None:
                again[sid] = why or "no capture kept from its run (the grader could not read it before)"
                continue
            keep_history(course, old)
            recorder.record(aid, new)
            save_result(course, new)
            change = Change(sid, old, new, "decided again")
            report.changes.append(change)
            if on_change:
                on_change(change)
    if again:
        for old in (olds[sid] for sid in again):
            keep_history(course, old)
        for new in grade(course, aid, settings, students=sorted(again), force=True):
            change = Change(new.student_id, olds[new.student_id], new, f"run again: {again[new.student_id]}")
            report.changes.append(change)
            if on_change:
                on_change(change)
    moved = [c.student_id for c in report.changes if c.moved]
    if moved:
        write_feedback(course, aid, students=moved)
    report.seconds = time.monotonic() - started
    return report
