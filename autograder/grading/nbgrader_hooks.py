"""Plain ``nbgrader autograde`` (and formgrader's Autograde button) grading the same as the autograder.

nbgrader runs the hidden cases in the student's own kernel; each compares with the reference, which it
finds through ``DLCOURSE_REFERENCE``. ``nbgrader_config.py`` installs :func:`use_reference` as nbgrader's
pre-convert hook, which builds (or finds) the assignment's reference and points the kernel at it, and
:class:`RequireReference` as a sanitize step, which stops the submission with a plain message when no
reference for this assignment is set, instead of letting every hidden case fail.

nbgrader's own path has no sandbox and no outside verification: `python -m autograder grade` is the one to
use for a class.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from dlcourse.grading import REFERENCE_ENV

ASSIGNMENT_ENV = "DLCOURSE_REFERENCE_ASSIGNMENT"


def use_reference(assignment: str, student: str, notebooks, root: str) -> None:
    """nbgrader's pre-convert hook: point the kernels of ``assignment`` at its reference (one set by hand in
    ``DLCOURSE_REFERENCE``, with no assignment recorded beside it, is kept)."""
    from autograder.course import Course
    from autograder.grading.reference import build_reference

    if os.environ.get(REFERENCE_ENV) and ASSIGNMENT_ENV not in os.environ:
        return
    os.environ.pop(ASSIGNMENT_ENV, None)
    os.environ.pop(REFERENCE_ENV, None)
    reference = build_reference(Course(root=Path(root)), assignment)
    os.environ[REFERENCE_ENV] = str(reference.directory)
    os.environ[ASSIGNMENT_ENV] = assignment


class RequireReference(NbGraderPreprocessor):
    """Refuse to autograde a notebook whose hidden cases would have no reference to compare with."""

    def preprocess(self, nb, resources):
        assignment = resources.get("nbgrader", {}).get("assignment")
        directory = os.environ.get(REFERENCE_ENV)
        explicit = directory and os.environ.get(ASSIGNMENT_ENV) in (None, assignment)
        if not (explicit and Path(directory, "cells.json").is_file()):
            raise RuntimeError(
                f"no reference for {assignment}: its hidden tests cannot be graded by nbgrader's autograde alone "
                "(the reference could not be built; see the log above). Grade with "
                f"`python -m autograder grade {assignment}`, which also sandboxes the students' code."
            )
        return nb, resources
