"""Student releases, generated from source/ by nbgrader into assignments/ (never edited by hand)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autograder.course import Course
from autograder.gradebook import made
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
    """Run an nbgrader command on the course directory, its gradebook made first (here, not by nbgrader's
    ``alembic`` subprocess: :func:`autograder.gradebook.made`); raise with its output if it fails."""
    made(db_url or course.db_url)
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


def nbgrader_settings(course: Course, db_url: str | None = None):
    """What ``nbgrader`` run in the course's folder reads: each ``nbgrader_config.py`` (and ``.json``) on Jupyter's
    config path, the system's first and the user's last, then the course's own; with the course's root and
    gradebook (``db_url``, else the course's) set as ``run_nbgrader`` sets them on its command line."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(course.root)]:
        for loader in (PyFileConfigLoader, JSONFileConfigLoader):
            suffix = ".py" if loader is PyFileConfigLoader else ".json"
            try:
                config.merge(loader(f"nbgrader_config{suffix}", path=folder).load_config())
            except ConfigFileNotFound:
                continue
    config.merge(Config({"CourseDirectory": {"root": str(course.root), "db_url": db_url or course.db_url}}))
    return config


def generate(course: Course, aid: str, db_url: str | None = None) -> None:
    """``nbgrader generate_assignment --force`` for ``aid``, in this process, as nbgrader's own API runs it for
    formgrader (``NbGraderAPI.generate_assignment``, without the exchange it checks first), with what nbgrader
    in the course's folder would read (:func:`nbgrader_settings`): a subprocess took 3 s more per assignment,
    nbgrader's imports. Raises with nbgrader's log if it fails."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    config = nbgrader_settings(course, made(db_url or course.db_url))
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = aid
    converter = GenerateAssignment(coursedir=coursedir, config=config)
    converter.force, converter.create_assignment = True, True
    done = capture_log(converter)
    if not done["success"]:
        raise RuntimeError(
            f"nbgrader generate_assignment {aid} failed:\n{done.get('log', '')}\n{done.get('error', '')}"
        )


def release(course: Course, aids: list[str] | None = None, db_url: str | None = None) -> list[Path]:
    """Generate the release of each assignment (all by default) and check that nothing leaked."""
    written = []
    for aid in aids or course.assignments():
        course.source_notebook(aid, (course.notebooks(aid) or [None])[0])  # a clear error for an unknown id
        generate(course, aid, db_url)
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
