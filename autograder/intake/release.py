"""Student releases, generated from source/ by nbgrader into assignments/ (never edited by hand)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autograder.course import Course
from autograder.intake.notebooks import QUIET_ENV

# a written answer's rubric and model answer sit in its solution block: neither may reach a release
LEAK_MARKERS = (
    "BEGIN SOLUTION",
    "END SOLUTION",
    "BEGIN HIDDEN TESTS",
    "END HIDDEN TESTS",
    "**Rubric (",
    "**Model answer",
)


def nbgrader_env(course: Course) -> dict[str, str]:
    """Environment for an nbgrader subprocess: this Python's bin/ on PATH (nbgrader runs `alembic`)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(QUIET_ENV)
    env["DLCOURSE_DB_URL"] = course.db_url
    return env


def run_nbgrader(course: Course, *args: str, db_url: str | None = None) -> subprocess.CompletedProcess:
    """Run an nbgrader command on the course directory; raise with its output if it fails."""
    env = nbgrader_env(course)
    if db_url:
        env["DLCOURSE_DB_URL"] = db_url
    command = [
        sys.executable, "-m", "nbgrader", *args,
        f"--CourseDirectory.root={course.root}", f"--CourseDirectory.db_url={db_url or course.db_url}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=course.root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def release(course: Course, aids: list[str] | None = None, db_url: str | None = None) -> list[Path]:
    """Generate the release of each assignment (all by default) and check that nothing leaked."""
    written = []
    for aid in aids or course.assignments():
        course.source_notebook(aid, (course.notebooks(aid) or [None])[0])  # a clear error for an unknown id
        run_nbgrader(course, "generate_assignment", aid, "--force", "--log-level=WARN", db_url=db_url)
        for nb in course.notebooks(aid):
            notebook = course.release_notebook(aid, nb)
            leaks = [m for m in LEAK_MARKERS if m in notebook.read_text(encoding="utf-8")]
            if leaks:
                raise RuntimeError(f"{notebook} still contains {leaks}: the release would leak solutions")
            written.append(notebook)
    return written


def copied_files(course: Course, aid: str) -> list[Path]:
    """What the release of ``aid`` holds besides its notebooks (data files, helpers), as nbgrader copied them
    from the source."""
    folder = course.release / aid
    notebooks = {course.release_notebook(aid, nb) for nb in course.notebooks(aid)}
    return (
        sorted(p for p in folder.rglob("*") if p.is_file() and p not in notebooks) if folder.is_dir() else []
    )
