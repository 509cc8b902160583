"""Late work: the due date and each student's extension come from nbgrader's gradebook, the hand-in time from
nbgrader's ``submitted/<student>/<AID>/timestamp.txt``, and the penalty rule from the course's nbgrader config
(:class:`LateWork`, an nbgrader ``LateSubmissionPlugin``, which nbgrader's own autograde uses too).

``collect`` writes a ``timestamp.txt`` only for a time the LMS or the instructor gave (:mod:`autograder.intake.collect`);
a hand-in without one has no known time and is on time, as nbgrader treats a submission without a timestamp.

The penalty is computed when grades leave the grader (export, feedback), never stored in a result: a new
rule, due date or extension needs no regrading.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from textwrap import dedent

from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.utils import parse_utc
from traitlets import Enum, Float, Int
from traitlets.config import Config

from autograder.course import Course
from autograder.gradebook import course_config, gradebook, open_gradebook
from autograder.result import Result

DAY = 86400.0
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, always written in UTC
# How late ``collect`` records a file the LMS marked late when the exact time is unknown.
UNKNOWN_LATENESS = timedelta(seconds=1)


class LateWork(LateSubmissionPlugin):
    """nbgrader's late-submission plugin with one more rule, ``per_day``. Set in ``nbgrader_config.py``:
    ``c.LateWork.penalty_method = "per_day"``, ``c.LateWork.penalty_per_day = 0.1`` and so on. Penalties are
    fractions of the score the submission earned, as nbgrader's plugins compute them."""

    penalty_method = Enum(
        ("none", "zero", "per_day"),
        default_value="none",
        help=dedent(
            """
            'none': no penalty; 'zero': a late submission scores zero;
            'per_day': penalty_per_day of the score for each started day late, at most max_penalty,
            and zero when more than zero_after_days late (0: never)."""
        ),
    ).tag(config=True)
    penalty_per_day = Float(
        0.1, min=0.0, max=1.0, help="per_day: the fraction of the score taken per started day late"
    ).tag(config=True)
    max_penalty = Float(
        0.5, min=0.0, max=1.0, help="per_day: the most that is taken, as a fraction of the score"
    ).tag(config=True)
    zero_after_days = Int(
        0, min=0, help="per_day: a submission more days late than this scores zero (0: never)"
    ).tag(config=True)
    grace_minutes = Float(
        0.0, min=0.0, help="minutes after the due date that still count as on time (every method)"
    ).tag(config=True)

    def fraction(self, seconds_late: float) -> float:
        """The fraction of the score taken from a submission ``seconds_late`` after its due date."""
        if seconds_late <= self.grace_minutes * 60:
            return 0.0
        if self.penalty_method == "zero":
            return 1.0
        if self.penalty_method == "none":
            return 0.0
        days = math.ceil(seconds_late / DAY)  # a started day counts as a day
        if self.zero_after_days and seconds_late > self.zero_after_days * DAY:
            return 1.0
        return round(min(self.max_penalty, self.penalty_per_day * days), 9)  # 3 * 0.1 is 0.30000000000000004

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float | None:
        """nbgrader's plugin interface: the points taken, or None for no penalty."""
        taken = self.fraction(total_seconds_late) * score
        return taken or None

    def describe(self) -> str:
        """The rule in words, for the student's feedback page."""
        if self.penalty_method == "none":
            return "no penalty for late work"
        if self.penalty_method == "zero":
            return "late work scores zero"
        words = (
            f"{self.penalty_per_day:.0%} of the score per started day late, at most {self.max_penalty:.0%}"
        )
        if self.zero_after_days:
            words += f"; zero when more than {self.zero_after_days} day(s) late"
        return words + (f" (with {self.grace_minutes:g} minutes' grace)" if self.grace_minutes else "")


def late_rule(course: Course, config: Config | None = None) -> LateSubmissionPlugin:
    """The plugin nbgrader's autograde would use for this course (``c.AssignLatePenalties.plugin_class``,
    :class:`LateWork` by default), configured from the course's config."""
    from traitlets.utils.importstring import import_item

    config = course_config(course) if config is None else config
    plugin = config.AssignLatePenalties.get("plugin_class", LateWork)
    plugin = import_item(plugin) if isinstance(plugin, str) else plugin
    return plugin(config=config)


# ------------------------------------------------------------------------------------------ the gradebook


@dataclass(frozen=True)
class Deadlines:
    """One assignment's due date (naive UTC, as nbgrader keeps it) and the extensions granted on it."""

    due: datetime | None = None
    extensions: dict[str, timedelta] | None = None

    def due_for(self, sid: str) -> datetime | None:
        extension = (self.extensions or {}).get(sid)
        return self.due + extension if self.due and extension else self.due


def deadlines(course: Course, aid: str, config: Config | None = None) -> Deadlines:
    """The due date and extensions of ``aid`` in the gradebook (none where it knows no due date)."""
    from nbgrader.api import MissingEntry

    book = open_gradebook(course, config)
    if book is None:
        return Deadlines()
    with book as gb:
        try:
            assignment = gb.find_assignment(aid)
        except MissingEntry:
            return Deadlines()
        extensions = {s.student.id: s.extension for s in assignment.submissions if s.extension}
        return Deadlines(assignment.duedate, extensions)


def parse_time(text: str) -> datetime:
    """A time as nbgrader reads one (naive UTC), refusing a zone name nbgrader would silently read as UTC."""
    from dateutil.tz import gettz

    zone = text.split(" ")[2] if text.count(" ") == 2 else ""
    if zone and not zone.lstrip("+-").isdigit() and gettz(zone) is None:
        raise ValueError(f"unknown time zone {zone!r} in {text!r} (try UTC or Europe/Berlin)")
    return parse_utc(text)


def set_due_date(course: Course, aid: str, due: str) -> datetime:
    """Write ``aid``'s due date to the gradebook (created if needed); ``due`` as nbgrader reads it
    ("2026-12-01 23:59 UTC", ISO 8601; no zone means UTC). Returns it in UTC."""
    with gradebook(course) as gb:
        return gb.update_or_create_assignment(aid, duedate=parse_time(due)).duedate


def grant_extension(
    course: Course, aid: str, sid: str, *, hours: float = 0, until: str | None = None
) -> timedelta | None:
    """Give ``sid`` ``hours`` more on ``aid``, or until ``until`` (a time): nbgrader's
    ``SubmittedAssignment.extension``, which replaces an earlier one (0 hours removes it). Returns the
    extension now in force (None: none)."""
    from nbgrader.api import MissingEntry

    with gradebook(course) as gb:
        try:
            assignment = gb.find_assignment(aid)
        except MissingEntry:
            raise ValueError(f"the gradebook has no assignment {aid}: release it first") from None
        if not assignment.notebooks:  # a submission row made now would never get its grade rows
            raise ValueError(f"{aid} has no notebooks in the gradebook: release it first")
        minutes = hours * 60
        if until is not None:
            if assignment.duedate is None:
                raise ValueError(f"{aid} has no due date: set one with `deadline {aid} --due ...` first")
            minutes = (parse_time(until) - assignment.duedate).total_seconds() / 60
            if minutes <= 0:
                raise ValueError(
                    f"{until} is not after {aid}'s due date ({assignment.duedate:%Y-%m-%d %H:%M} UTC)"
                )
        if minutes < 0:
            raise ValueError("an extension cannot be negative")
        gb.update_or_create_student(sid)
        try:
            gb.find_submission(aid, sid)
        except MissingEntry:
            with warnings.catch_warnings():  # as in Recorder.record: SQLAlchemy 2 warns, the rows are written
                warnings.filterwarnings("ignore", message=r"Object of type <\w+> not in session")
                gb.add_submission(aid, sid)  # nbgrader keeps extensions on the submission row
        gb.grant_extension(aid, sid, minutes=minutes)
        return gb.find_submission(aid, sid).extension


# ------------------------------------------------------------------------------------------ the penalty


def read_timestamp(path: Path) -> datetime | None:
    """A ``timestamp.txt`` as nbgrader reads it (naive UTC), or None where there is none or it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8").strip()
        return parse_utc(text) if text else None
    except (OSError, ValueError, OverflowError):
        return None


def write_timestamp(folder: Path, moment: datetime) -> Path:
    """``folder/timestamp.txt`` in nbgrader's format (as its exchange writes it), ``moment`` being naive UTC."""
    path = Path(folder) / "timestamp.txt"
    path.write_text(moment.replace(tzinfo=UTC).strftime(TIMESTAMP_FORMAT), encoding="utf-8")
    return path


def format_utc(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC" if moment else ""


@dataclass(frozen=True)
class Late:
    """What lateness does to one result. ``final`` is None for a grader error (no score at all)."""

    seconds_late: float
    penalty: float
    final: float | None
    rule: str
    submitted: datetime | None = None
    due: datetime | None = None  # with the student's extension
    extended: bool = False

    def explain(self) -> str:
        """For the student: when it came in, against which due date, and what that cost."""
        if self.due is None or self.submitted is None:
            return ""
        due = f"the due date{' with your extension' if self.extended else ''}, {format_utc(self.due)}"
        if self.seconds_late <= 0:
            return f"Handed in {format_utc(self.submitted)}, by {due}."
        if self.seconds_late == UNKNOWN_LATENESS.total_seconds():
            text = f"Marked late by the course's LMS (the exact time is not known), after {due}."
        else:
            late = timedelta(seconds=round(self.seconds_late))
            text = f"Handed in {format_utc(self.submitted)}, {late} after {due}."
        if self.penalty:
            return f"{text} Late penalty ({self.rule}): {self.penalty:g} point(s)."
        return f"{text} No points taken ({self.rule})."


def rule_text(rule: LateSubmissionPlugin) -> str:
    """A rule in words; a plugin of the instructor's own is named by its class."""
    if isinstance(rule, LateWork):
        return rule.describe()
    return f"{type(rule).__name__} ({getattr(rule, 'penalty_method', 'its own rule')})"


def assess(
    result: Result,
    submitted: datetime | None,
    due: datetime | None,
    rule: LateSubmissionPlugin,
    extended: bool = False,
) -> Late:
    """The one place a late penalty is decided: the rule applied to the seconds between due and hand-in,
    bounded by the score, as nbgrader's ``AssignLatePenalties`` bounds it."""
    words = rule_text(rule)
    if result.is_error:
        return Late(0.0, 0.0, None, words, submitted, due, extended)
    seconds = max(0.0, (submitted - due).total_seconds()) if submitted and due else 0.0
    penalty = (
        (rule.late_submission_penalty(result.student_id, result.score, seconds) or 0.0) if seconds else 0.0
    )
    penalty = round(min(max(penalty, 0.0), result.score), 6)
    return Late(seconds, penalty, round(result.score - penalty, 6), words, submitted, due, extended)


def late_penalties(course: Course, aid: str, results: list[Result]) -> dict[str, Late]:
    """Student id -> :class:`Late` for each result of ``aid``: one read of the config and the gradebook."""
    config = course_config(course)
    rule, known = late_rule(course, config), deadlines(course, aid, config)
    return {
        r.student_id: assess(
            r,
            read_timestamp(course.submission_folder(aid, r.student_id) / "timestamp.txt"),
            known.due_for(r.student_id),
            rule,
            r.student_id in (known.extensions or {}),
        )
        for r in results
    }


def late_penalty(course: Course, aid: str, result: Result) -> Late:
    """:func:`late_penalties` for one result."""
    return late_penalties(course, aid, [result])[result.student_id]
