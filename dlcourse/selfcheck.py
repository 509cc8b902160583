"""The students' self-check: run an exercise's public checks on your own code, in plain words.

In a notebook::

    from dlcourse import check
    check("l02.graph_gradients", my_function)

prints one line per check (passed, failed with a hint, or not done yet) and returns a
:class:`Report`. It never raises for a wrong answer, so a notebook keeps running; the report's
``passed`` attribute says whether everything passed.

Exercises are registered in the modules of :mod:`dlcourse.exercises`: ``"l02.graph_gradients"`` is the
function ``graph_gradients`` in ``dlcourse/exercises/l02.py``. Checks test behaviour (shapes, numeric
gradients, agreement with torch or with a known property), so the package ships no solutions.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from dlcourse.closeness import ATOL, RTOL, close_report

PASS, FAIL, TODO = "passed", "failed", "not done yet"
_SYMBOL = {PASS: "\u2713", FAIL: "\u2717", TODO: "\u2026"}


class NotDone(Exception):
    """Raised inside a check when the student's code is still a stub."""


@dataclass
class Line:
    description: str
    status: str
    hint: str = ""


@dataclass
class Report:
    exercise: str
    lines: list[Line] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(line.status == PASS for line in self.lines)

    def __str__(self) -> str:
        out = [f"Self-check {self.exercise}:"]
        for line in self.lines:
            out.append(
                f"  {_SYMBOL[line.status]} {line.description}" + (f" -- {line.hint}" if line.hint else "")
            )
        done = sum(line.status == PASS for line in self.lines)
        verdict = "all passed" if self.passed else f"{done} of {len(self.lines)} passed"
        out.append(f"  {verdict}.")
        return "\n".join(out)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


class Checker:
    """What a registered exercise check uses to call the student's code and record verdicts."""

    def __init__(self, report: Report):
        self.report = report

    def call(self, description: str, fn: Callable, *args, **kwargs):
        """Call the student's ``fn``; a stub (NotImplementedError, or returning None) or a crash is
        recorded as a line with an explanation and stops the check (NotDone)."""
        try:
            result = fn(*args, **kwargs)
        except NotImplementedError:
            self.report.lines.append(Line(description, TODO, "the function still raises NotImplementedError"))
            raise NotDone from None
        except Exception as err:  # the student's code crashed: say where, in their words
            frame = traceback.extract_tb(err.__traceback__)[-1]
            hint = f"it raised {type(err).__name__}: {err} (line {frame.lineno}: {frame.line})"
            self.report.lines.append(Line(description, FAIL, hint))
            raise NotDone from None
        if result is None:
            self.report.lines.append(
                Line(description, TODO, "the function returned None: did you forget `return`?")
            )
            raise NotDone
        return result

    def close(
        self, description: str, got, expected, rtol: float = RTOL, atol: float = ATOL, hint: str = ""
    ) -> bool:
        problem = close_report(got, expected, rtol=rtol, atol=atol, name="result")
        if problem and hint:
            problem = f"{problem.rstrip('.')}. {hint}"
        self.report.lines.append(Line(description, FAIL if problem else PASS, problem or ""))
        return problem is None

    def true(self, description: str, condition: bool, hint: str = "") -> bool:
        self.report.lines.append(Line(description, PASS if condition else FAIL, "" if condition else hint))
        return bool(condition)


def check(exercise: str, *answer, show: bool = True, **kwargs) -> Report:
    """Run the public checks of ``exercise`` (e.g. ``"l04.sigmoid_function"``) on your ``answer``."""
    module_name, _, name = exercise.partition(".")
    try:
        module = importlib.import_module(f"dlcourse.exercises.{module_name}")
        checker_fn = getattr(module, name)
    except (ImportError, AttributeError):
        raise KeyError(f"no exercise called {exercise!r} in dlcourse.exercises") from None
    report = Report(exercise)
    try:
        checker_fn(Checker(report), *answer, **kwargs)
    except NotDone:
        pass
    if show:
        print(report)
    return report
