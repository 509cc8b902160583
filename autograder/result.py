"""One submission's result: the typed record that every stage after the run shares (record, feedback,
export, report, Gradescope, the canary), and the one table of statuses.

A result is plain data: it is written as JSON beside the gradebook (``Course.result``) and read back as
the same object, so nothing downstream builds or re-parses dictionaries of its own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import NamedTuple


class Status(NamedTuple):
    """A status a result can have: the symbol of the progress line, the words of the feedback page, and for a
    run that a limit or a failure stopped, what stopped it and what an instructor can do (templates filled
    with the :class:`~autograder.runner.sandbox.Limits` in force)."""

    mark: str
    words: str
    stopped: str = ""
    fix: str = ""


# The one table of statuses, worst first: a submission of several notebooks takes the first of its
# notebooks' statuses found here (an unreadable notebook beside others that ran takes theirs).
STATUS = {
    "error": Status(
        "E", "grader error: not graded (the grader's failure, not the student's; no score recorded)",
        "could not start a kernel (the grader's failure: no student code ran)", "run `python -m autograder doctor`",
    ),
    "crashed": Status(
        "\u2717", "the kernel died; graded on what ran",
        "ran until the kernel died (or its kernel could not start)", "see the detail below",
    ),
    "memory": Status(
        "M", "stopped at the memory limit; graded on what ran",
        "used more than {memory_mb} MB", "raise --memory (now {memory_mb} MB)",
    ),
    "processes": Status(
        "P", "stopped for starting too many processes; graded on what ran",
        "started more than {processes} processes (a fork bomb?)",
        "the solutions start more processes than the sandbox allows: start fewer",
    ),
    "timeout": Status(
        "\u231b", "stopped at the time limit; graded on what ran",
        "ran past the {timeout:.0f} s limit", "raise --timeout (now {timeout:g} s) or --cell-timeout (now {cell_timeout:g} s)",
    ),
    "unreadable": Status("\u2717", "could not be read"),
    "flagged": Status("!", "graded, flagged for review"),
    "graded": Status("\u2713", "graded"),
}  # fmt: skip
STOPPED = tuple(
    name for name, status in STATUS.items() if status.stopped
)  # how a run can end, short of finishing


@dataclass(frozen=True)
class Flag:
    """A line of an answer cell that changes what the student did not define: the cell (its grade_id, or its
    number in the notebook read and the grade_id before it), the line (1-based within the cell) and its text
    (shortened), and why, in plain words. ``notebook``: which of an assignment's notebooks (set by the
    grader)."""

    cell: str
    line: int
    text: str
    why: str
    notebook: str = ""

    def describe(self, notebook: bool = False) -> str:
        """One line for a report: where, the code, why."""
        where = [f"{self.notebook}.ipynb"] if notebook and self.notebook else []
        where += [self.cell] if self.cell else []
        return ", ".join([*where, f"line {self.line}"]) + f" ({self.text}): {self.why}"


@dataclass
class GroupResult:
    """A group of a test cell's cases (the public checks, a hidden case, or a group the source named):
    its share of the cell's points, earned when every case in it passes."""

    name: str
    points: float
    max_points: float
    passed: bool
    message: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> GroupResult:
        return cls(**_known(cls, data))


KERNEL_NOTES = {
    "kernel": "decided in the kernel: this test has no checks, so, as in nbgrader, it passes when it runs in your "
    "notebook without an error",
    "kernel-checks": "decided in the kernel: the course has no evidence for this test outside your notebook yet "
    "(its rules table says so), so its checks count as your notebook reported them",
}


@dataclass
class CellResult:
    """One graded test cell: the points it earned, and why. ``passed`` only when every case passed; the
    points are the sum of its groups' (partial credit), shown per group when there are several."""

    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str = ""  # the first failing case's, in plain words
    kernel_verdict: str = "not run"  # "passed", "failed", "not run": the kernel's own (untrusted) view
    groups: list[GroupResult] = field(default_factory=list)
    notebook: str = ""  # the notebook it is in (an assignment may have several)
    # "outside": from the data the run captured, against the reference; "kernel": a test cell without checks
    # (plain asserts), decided as nbgrader decides it, from how the cell ran in the student's kernel;
    # "kernel-checks": a cell whose checks the source declares decided in the kernel (no outside evidence)
    decided: str = "outside"

    @property
    def kernel_note(self) -> str:
        """What a page says of a test decided in the student's kernel ("" for one decided outside it)."""
        return KERNEL_NOTES.get(self.decided, "")

    @classmethod
    def from_dict(cls, data: dict) -> CellResult:
        known = _known(cls, data)
        known["groups"] = [GroupResult.from_dict(g) for g in data.get("groups", [])]
        return cls(**known)


@dataclass
class WrittenResult:
    """A written answer, graded by hand in formgrader (never by the autograder). ``points`` is the manual
    score an instructor gave, as the gradebook held it when the result was recorded or read; None while it
    awaits manual grading. An answer left as the release's stub gets 0 without waiting, as nbgrader does."""

    grade_id: str
    max_points: float
    points: float | None = None
    answered: bool = True  # changed from the release's stub
    comment: str = ""  # the grader's comment in formgrader, if any
    notebook: str = ""

    @property
    def awaiting(self) -> bool:
        return self.points is None

    def text(self) -> str:
        if self.awaiting:
            return f"awaiting manual grading ({self.max_points:g} points)"
        if not self.answered and self.points == 0:
            return f"0 / {self.max_points:g}: not answered"
        return f"{self.points:g} / {self.max_points:g}, graded by hand"

    @classmethod
    def from_dict(cls, data: dict) -> WrittenResult:
        return cls(**_known(cls, data))


@dataclass
class Result:
    """What grading one submission came to. ``status`` is a key of :data:`STATUS`; ``error`` is the
    grader's own failure: no student code ran, so there is no score (exported empty, never recorded).

    ``score`` and ``max_score`` count the autograded test cells only; the written answers (``written``) are
    graded by hand and reported apart: ``total_score`` adds the manual points given so far."""

    student_id: str
    assignment: str
    max_score: float = 0.0
    score: float = 0.0
    status: str = "error"
    reason: str = ""
    notes: list[str] = field(default_factory=list)  # about the notebook (repairs), shown to the student
    cells: list[CellResult] = field(default_factory=list)
    written: list[WrittenResult] = field(default_factory=list)  # graded by hand, not in score/max_score
    flags: list[str] = field(default_factory=list)  # for the instructor's review
    isolation: str = ""
    reference: str = ""  # digest of the reference it was decided against
    submission_sha256: str = ""
    inputs: dict[str, str] = field(default_factory=dict)  # code cell -> digest of what it feeds the answers
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    seconds_in_sandbox: float | None = None
    peak_memory_mb: float | None = None  # the sandbox at its largest (tree sampled; the kernel's own mark)
    detail: str = ""  # the child's last lines, for the instructor
    traceback: str = ""  # a grader bug's traceback
    # lines of the answer cells that change what the student did not define, read from the submitted code
    # (:mod:`autograder.grading.tamper`, nothing run): for the instructor's review and the student's page, never points
    code_flags: list[Flag] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUS:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def is_error(self) -> bool:
        return self.status == "error"

    @property
    def symbol(self) -> str:
        """The progress line's mark: the status's, where "graded" (\u2713) means every test passed; a graded
        submission with a failed test gets "\u00b7" (\u2713 read as "passed" beside a score of 0)."""
        if self.status == "graded" and any(not c.passed for c in self.cells):
            return "\u00b7"
        return STATUS[self.status][0]

    @property
    def status_words(self) -> str:
        return STATUS[self.status][1]

    @property
    def written_max(self) -> float:
        return sum(w.max_points for w in self.written)

    @property
    def written_score(self) -> float:
        """The manual points given so far (an answer awaiting grading counts 0 here)."""
        return sum(w.points or 0.0 for w in self.written)

    @property
    def awaiting(self) -> list[WrittenResult]:
        """The written answers that still await manual grading."""
        return [w for w in self.written if w.awaiting]

    @property
    def total_score(self) -> float:
        return self.score + self.written_score

    @property
    def total_max(self) -> float:
        return self.max_score + self.written_max

    def manual_grading(self) -> str:
        """The written answers in a few words: "" when there are none, else what awaits manual grading or
        "graded"."""
        if not self.written or self.is_error:
            return ""
        if self.awaiting:
            names = ", ".join(w.grade_id for w in self.awaiting)
            points = sum(w.max_points for w in self.awaiting)
            return f"awaiting manual grading: {names} ({points:g} points)"
        return f"written answers graded: {self.written_score:g} / {self.written_max:g}"

    def score_text(self) -> str:
        return "not graded" if self.is_error else f"{self.score:>6g}/{self.max_score:<4g}"

    def exported_score(self) -> str:
        """The score as exported: empty for a grader error, which is never a student's score."""
        return "" if self.is_error else f"{self.score:g}"

    def is_current(self, submission_sha: str, reference_digest: str) -> bool:
        """Whether this result still holds: the same submission against the same reference (a grader
        error never does: it is graded again on the next run)."""
        return (
            not self.is_error
            and self.submission_sha256 == submission_sha
            and self.reference == reference_digest
        )

    def to_dict(self) -> dict:
        """As ``dataclasses.asdict`` makes it (a test holds them equal), built field by field: asdict copies
        every value through a generic deep copy, a tenth of a second in a regrade of 40."""
        data = {name: getattr(self, name) for name in _FIELDS[Result]}
        data.update(notes=list(self.notes), flags=list(self.flags), inputs=dict(self.inputs))
        data["timings"] = copy.deepcopy(self.timings)  # the child's numbers, whatever they hold
        data["cells"] = [
            {**{n: getattr(c, n) for n in _FIELDS[CellResult]}, "groups": [_plain(g) for g in c.groups]}
            for c in self.cells
        ]
        data["written"] = [_plain(w) for w in self.written]
        data["code_flags"] = [_plain(f) for f in self.code_flags]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Result:
        known = _known(cls, data)
        known["cells"] = [CellResult.from_dict(c) for c in data.get("cells", [])]
        known["written"] = [WrittenResult.from_dict(w) for w in data.get("written", [])]
        known["code_flags"] = [Flag(**_known(Flag, f)) for f in data.get("code_flags", [])]
        return cls(**known)


_FIELDS = {
    cls: tuple(f.name for f in fields(cls)) for cls in (GroupResult, CellResult, WrittenResult, Result, Flag)
}


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at the end of a word (in the middle of one only where a
    single word fills more than half the width), with an ellipsis where it was cut."""
    text = " ".join(str(text).split()) if len(str(text)) > width else str(text)
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:") + "\u2026"


def _plain(item) -> dict:
    """A result's part whose fields are plain values (strings, numbers, booleans, None)."""
    return {name: getattr(item, name) for name in _FIELDS[type(item)]}


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
