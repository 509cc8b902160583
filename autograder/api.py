"""What code outside the grader (the benchmarks, a course's own scripts) may use: ``from autograder.api import
grade``; how to grade is one :class:`Settings` (``grade(course, "A1", Settings(workers=4))``). Everything else in
the package may change without notice."""

from autograder.commands.regrade import regrade
from autograder.commands.workflows import throwaway_course
from autograder.course import ROOT, Course, is_graded_test, is_solution, nbgrader_meta
from autograder.grading.batch import Listeners, grade
from autograder.grading.canary import prove
from autograder.intake.notebooks import execute_notebook
from autograder.intake.release import release, run_nbgrader
from autograder.intake.repair import repair
from autograder.intake.samples import SOLUTION_BLOCK, filled, solution_ids, untouched
from autograder.runner.forkserver import warm_parents
from autograder.runner.isolation import resolve
from autograder.runner.linux import nvidia_gpu_here
from autograder.runner.sandbox import set_uid_base
from autograder.settings import Limits, Settings


def kept_values(course: Course, aid: str, sid: str) -> dict:
    """case name -> the value a student's last run captured, as kept for ``regrade`` ({} where none was)."""
    from autograder.grading.pipeline import kept_outcome
    from dlcourse.grading import load_cases

    outcome = kept_outcome(course.kept_run(aid, sid))
    return load_cases(outcome.capture)[1] if outcome is not None else {}


def run_in_sandbox(notebook, limits: Limits, isolation: str = "auto"):
    """Run ``notebook`` (an nbformat notebook) once in a sandbox started as the grader starts one, in
    ``isolation`` (resolved as ``autograder run --isolation`` resolves it), and return its outcome: ``status``
    (``finished`` when every cell ran), ``detail``, and ``summary["cells"]`` with each cell's ``output``."""
    from autograder.runner.sandbox import Sandbox

    sandbox = Sandbox(limits, 0, ("numpy",), resolve(isolation)).start()
    try:
        return sandbox.run(notebook)
    finally:
        sandbox.cleanup()


def cold_start() -> None:
    """Forget what this process keeps between batches (the warm parents, the isolation probes), so that the
    next batch starts as a new instructor's first one does."""
    from autograder.grading import canary
    from autograder.runner.forkserver import stop_all

    stop_all()
    canary._PROBED.clear()


__all__ = [
    "ROOT", "SOLUTION_BLOCK", "Course", "Limits", "Listeners", "Settings", "cold_start", "execute_notebook", "filled", "grade", "is_graded_test", "kept_values",
    "is_solution", "nbgrader_meta", "nvidia_gpu_here", "prove", "regrade", "release", "repair", "resolve", "run_in_sandbox", "run_nbgrader",
    "set_uid_base", "solution_ids", "throwaway_course", "untouched", "warm_parents",
]  # fmt: skip
