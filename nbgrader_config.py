"""nbgrader configuration: the repository root is the course directory, releases go to assignments/."""

import os
import sys

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

here = os.path.dirname(os.path.abspath(__file__))
# nbgrader runs `alembic` from PATH when it opens the gradebook: `.venv/bin/nbgrader` typed without the .venv on
# PATH would stop at "FileNotFoundError: 'alembic'". The interpreter running nbgrader has it beside itself.
_bin = os.path.dirname(sys.executable)
if os.path.isfile(os.path.join(_bin, "alembic")) and _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")
c.CourseDirectory.course_id = "dlcourse"
c.CourseDirectory.root = here
c.CourseDirectory.release_directory = "assignments"
# SQLite by default; several graders share PostgreSQL by setting DLCOURSE_DB_URL, e.g.
# postgresql+psycopg2://grader@dbhost:5432/gradebook (psycopg2 is in the grader extra).
c.CourseDirectory.db_url = os.environ.get(
    "DLCOURSE_DB_URL", "sqlite:///" + os.path.join(here, "gradebook.db")
)
# samples/ holds each assignment's sample submissions (solutions among them): never released
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".grading", "samples"]
# Formgrader needs a writable exchange even when nobody uses it.
c.Exchange.root = os.environ.get("DLCOURSE_EXCHANGE", os.path.join(here, ".grading", "exchange"))
# The held-out text of check_lm_loss(heldout=...), if not the public heldout/shakespeare.txt (not in source/):
# c.HeldOut.text_file = "/path/outside/source/heldout.txt"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.Execute.interrupt_on_timeout = True

# Late work. Due dates live in the gradebook: `python -m autograder deadline A1 --due "2026-12-01 23:59 UTC"`
# (or nbgrader's `nbgrader db assignment add A1 --duedate=...`, or formgrader); one student's extension:
# `python -m autograder extension A1 jdoe --hours 48`. The rule is read alike by the autograder's export and
# feedback (computed there, so a change needs no regrading) and by nbgrader's own autograde.
c.LateWork.penalty_method = "none"  # no penalty; "zero": late work scores 0; "per_day", e.g.:
# c.LateWork.penalty_method = "per_day"
# c.LateWork.penalty_per_day = 0.1  # 10% of the score per started day late,
# c.LateWork.max_penalty = 0.5  # at most 50%,
# c.LateWork.zero_after_days = 7  # and 0 points when more than 7 days late (0: never)
# c.LateWork.grace_minutes = 15  # hand-ins up to 15 minutes late count as on time

# nbgrader's own autograde (and formgrader's Autograde button) compares hidden cases with the reference that
# `python -m autograder` builds; without one it refuses rather than fail every hidden test.
try:
    import functools

    from nbgrader.converters.autograde import Autograde

    from autograder.intake.late import LateWork
    from autograder.settings import Limits

    c.Execute.timeout = int(Limits().cell_timeout)  # one per-cell limit for nbgrader and the autograder
    from autograder.grading.nbgrader_hooks import RequireReference, use_reference

    c.AssignLatePenalties.plugin_class = LateWork  # nbgrader's autograde applies the rule above
    c.Autograde.pre_convert_hook = functools.partial(use_reference, root=here)
    c.Autograde.sanitize_preprocessors = [
        *Autograde.class_traits()["sanitize_preprocessors"].default(),
        RequireReference,
    ]
    # What formgrader shows of a student's notebook runs and loads nothing the student wrote: nbgrader's own
    # autograde writes autograded/ sanitised, as `python -m autograder grade` does (autograder/intake/sanitize.py)
    from autograder.intake.sanitize import SanitizeForFormgrader

    *before, last = Autograde.class_traits()["autograde_preprocessors"].default()
    c.Autograde.autograde_preprocessors = [*before, SanitizeForFormgrader, last]
except ImportError:  # nbgrader without this course's package: its hidden tests cannot be graded
    pass
# Formgrader's pages sanitise the HTML of outputs too (nbconvert's allowlist), as a second wall.
c.HTMLExporter.sanitize_html = True
