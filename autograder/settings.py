"""How to grade, as one value: :class:`Settings` (the limits of each run, the isolation, the runner, the
workers, the canary's strictness, the Dask scheduler) and the :class:`Limits` of one run.

Each field's default and its help text are written here once (in the field's ``metadata``); the command
line's options take both from here (:func:`option`), and :meth:`Settings.from_args` makes the value the
workflows pass down from what was parsed. A module of any wing may import this one; it imports no wing.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import TYPE_CHECKING

from autograder.result import STATUS

if TYPE_CHECKING:  # never imported at run time: the vocabulary imports no wing
    from autograder.course import Course
    from autograder.runner.interface import SandboxFactory
    from autograder.runner.isolation import Isolation


def _cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Limits:
    """What one run of a notebook may take; the sandbox (:mod:`autograder.runner.sandbox`) enforces it."""

    timeout: float = field(
        default=600.0, metadata={"help": "seconds for a whole notebook (default {default:g})"}
    )
    cell_timeout: float = field(default=180.0, metadata={
        "help": "seconds for one cell (default: the course's Execute.timeout in nbgrader_config.py, else "
        "{default:g})",
        "command_line": lambda: None,  # None: the course's, found by cell_timeout()
    })  # fmt: skip
    memory_mb: int = field(default=4096, metadata={"help": "MB of memory per submission (default {default})"})
    nproc: int = field(default=512, metadata={
        "help": "threads and processes (RLIMIT_NPROC, when the child has its own uid; default {default})"
    })  # fmt: skip
    processes: int = field(default=48, metadata={
        "help": "processes in the sandbox's tree before it is stopped as a fork bomb (default {default})"
    })  # fmt: skip
    threads: int = field(default=1, metadata={
        "help": "BLAS/OpenMP threads per kernel, so parallel workers do not oversubscribe (default {default}; "
        "the command line: the cores shared out over the workers)"
    })  # fmt: skip
    disk_mb: int = field(default=512, metadata={
        "help": "MB of disk for each of the submission's folders (a size-limited tmpfs where namespaces are "
        "made; default {default})"
    })  # fmt: skip

    def stopped(self, status: str) -> str:
        """What stopped a run that ended with ``status`` (a key of :data:`autograder.result.STATUS`), in words,
        with the limit it hit: the one wording of the feedback, the reference's refusal and the canary's."""
        found = STATUS.get(status)
        return found.stopped.format(**asdict(self)) if found and found.stopped else status

    def fix(self, status: str) -> str:
        """What an instructor can do when the source's own solutions end with ``status``."""
        found = STATUS.get(status)
        return found.fix.format(**asdict(self)) if found and found.fix else "see the detail below"


@dataclass(frozen=True)
class Settings:
    """How a batch is graded: everything :func:`autograder.grading.batch.grade`, the proof
    (:mod:`autograder.grading.canary`), the reference and ``regrade`` need to know besides the course and the
    assignment. ``isolation`` is a mode or an :class:`~autograder.runner.isolation.Isolation` already resolved
    (:func:`autograder.runner.isolation.resolved` resolves it once, with ``runner``)."""

    limits: Limits = field(default_factory=Limits, metadata={"help": "the limits of each run (Limits)"})
    isolation: str | Isolation = field(default="auto", metadata={
        "help": "bubblewrap (refused where missing), basic (never bubblewrap; namespaces where the kernel allows), "
        "auto (basic with namespaces where they can be made, else bubblewrap, else basic; default)"
    })  # fmt: skip
    runner: str = field(default="auto", metadata={
        "help": "fork: kernels forked from a warm parent per worker (fast; the default except with bubblewrap); "
        "spawn: a fresh interpreter per submission"
    })  # fmt: skip
    workers: int = field(default=2, metadata={
        "help": "parallel submissions (default: the machine's cores; {default} where a program makes its own Settings)",
        "command_line": _cores,
    })  # fmt: skip
    strict: bool = field(default=False, metadata={
        "help": "refuse to grade when the untouched release earns any point (always so where every test is "
        "checked outside the kernel, as in this course; else such tests are listed and grading goes on)"
    })  # fmt: skip
    scheduler: str | None = field(default=None, metadata={
        "help": "address of a Dask scheduler to run the jobs on (default: this machine)"
    })  # fmt: skip
    sandbox: SandboxFactory | None = field(default=None, compare=False, metadata={
        "help": "what makes each run's sandbox (autograder.runner.interface.SandboxFactory): None, the real "
        "Sandbox; a test's prepared runs, so that no kernel starts"
    })  # fmt: skip

    @classmethod
    def from_args(cls, args, course: Course | None = None) -> Settings:
        """The settings the command line asked for (``args`` as :mod:`autograder.commands.cli` parsed them):
        the per-cell limit from the course (:func:`cell_timeout`) and never over the notebook's, and the
        BLAS/torch threads of each kernel the machine's cores shared out over the workers."""
        course = course or getattr(args, "course", None)
        limits = Limits(
            timeout=args.timeout,
            cell_timeout=min(cell_timeout(course, getattr(args, "cell_timeout", None)), args.timeout),
            memory_mb=args.memory,
            threads=max(1, _cores() // max(1, args.workers)),
        )
        return cls(
            limits=limits,
            isolation=args.isolation,
            runner=getattr(args, "runner", "auto"),
            workers=args.workers,
            strict=getattr(args, "strict_canary", False),
            scheduler=getattr(args, "scheduler", None),
        )


def cell_timeout(course: Course | None, asked: float | None) -> float:
    """The per-cell limit: asked on the command line, else the course's ``Execute.timeout`` (what nbgrader's
    autograde uses), else :class:`Limits`' default."""
    if asked is not None:
        return asked
    configured = None
    if course is not None:
        config = course.config
        configured = config.Execute.get("timeout", config.ExecutePreprocessor.get("timeout"))
    return (
        float(configured) if isinstance(configured, int | float) and configured > 0 else Limits().cell_timeout
    )


def option(owner: type, name: str) -> dict:
    """The ``default`` and ``help`` of the field ``name`` of ``owner`` (:class:`Settings` or :class:`Limits`)
    as the command line's option for it takes them: the default the command line gives where the field says
    one (``metadata["command_line"]``), else the field's own; the help with the field's default written in."""
    found = next(f for f in fields(owner) if f.name == name)
    default = found.default if found.default is not MISSING else found.default_factory()
    given = found.metadata["command_line"]() if "command_line" in found.metadata else default
    return {"default": given, "help": found.metadata["help"].format(default=default)}
