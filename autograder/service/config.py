"""How the service runs a course: one declared, frozen value read from ``service.toml`` in the course's folder
(every field has its default and its help here), and the grading :class:`~autograder.settings.Settings` made at
the command line beside it."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

FILE = "service.toml"
FEEDBACK = ("parts", "score", "all")
COUNTS = ("latest", "best")


@dataclass(frozen=True)
class ServiceConfig:
    open: tuple[str, ...] | None = field(default=None, metadata={
        "help": "the assignments that take submissions, each once the grader proved itself on it (default: every "
        "assignment in source/)"
    })  # fmt: skip
    per_hour: int = field(default=6, metadata={
        "help": "submissions per student per assignment per hour: hidden cases answer a few questions, not an "
        "oracle's stream (SECURITY.md)"
    })  # fmt: skip
    before_deadline: str = field(default="parts", metadata={
        "help": "what a student sees before the deadline: parts (each part's score and which hidden cases failed, "
        "without messages), score (the total only) or all (the feedback page); after it, always the page"
    })  # fmt: skip
    max_notebook_mb: float = field(default=8.0, metadata={
        "help": "the largest notebook taken, in MB: refused before its body is read"
    })  # fmt: skip
    database: str = field(default="", metadata={
        "help": "a PostgreSQL database for the service's tokens, submissions and pages "
        "(postgresql://user@host:port/name); empty: a SQLite file in .grading/service/"
    })  # fmt: skip
    gpu: tuple[str, ...] = field(default=(), metadata={
        "help": "assignments graded only on Dask workers that declare a GPU (dask worker --resources GPU=1); "
        "needs serve --scheduler"
    })  # fmt: skip
    counts: str = field(default="latest", metadata={
        "help": "the submission the gradebook holds: latest (the latest graded, a late one with the late "
        "policy's penalty, as nbgrader) or best (the highest score after the late penalty); every submission is "
        "kept in the history either way"
    })  # fmt: skip

    def __post_init__(self) -> None:
        if self.before_deadline not in FEEDBACK:
            raise ValueError(f"before_deadline must be one of {FEEDBACK}, not {self.before_deadline!r}")
        if self.database and not self.database.startswith(("postgresql://", "postgresql+psycopg2://")):
            raise ValueError(
                f"database must be a postgresql:// address (or empty for SQLite), not {self.database!r}"
            )
        if self.counts not in COUNTS:
            raise ValueError(f"counts must be one of {COUNTS}, not {self.counts!r}")
        if not isinstance(self.per_hour, int) or self.per_hour < 1:
            raise ValueError(f"per_hour must be a whole number of at least 1, not {self.per_hour!r}")
        if not 0 < self.max_notebook_mb <= 64:
            raise ValueError("max_notebook_mb must be over 0 and at most 64")

    @property
    def max_bytes(self) -> int:
        return int(self.max_notebook_mb * 2**20)


def load(course_root: Path, path: Path | None = None) -> ServiceConfig:
    """``path`` (default: ``service.toml`` in the course's folder; none there: the defaults), checked: an unknown
    key is refused, not ignored."""
    path = path or Path(course_root) / FILE
    if not path.exists():
        return ServiceConfig()
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    known = {f.name for f in fields(ServiceConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
    for name in ("open", "gpu"):
        if name in data:
            if not isinstance(data[name], list) or not all(isinstance(a, str) for a in data[name]):
                raise ValueError(f"{path}: {name} must be a list of assignment names")
            data[name] = tuple(data[name])
    return ServiceConfig(**data)


def describe() -> str:
    """Every setting with its default and help, as ``autograder serve --help`` shows them."""
    lines = []
    for f in fields(ServiceConfig):
        lines.append(f"  {f.name} (default {f.default!r}): {f.metadata['help']}")
    return "\n".join(lines)
