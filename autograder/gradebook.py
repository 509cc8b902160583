"""The course's nbgrader gradebook (SQLite or PostgreSQL, as ``Course.db_url`` says), opened in one place: for
writing (it is made where it does not exist) or for reading (None where a SQLite file does not exist yet, so
reading a due date or a manual grade never creates one)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traitlets.config import Config

from autograder.course import Course, sqlite_file


def course_config(course: Course) -> Config:
    """The course's ``nbgrader_config.py``, loaded as nbgrader loads it (traitlets' Python config loader)."""
    return course.config


def gradebook(course: Course, config: Config | None = None):
    """nbgrader's gradebook of the course, under its course id. nbgrader runs ``alembic`` when it creates
    one: the executable beside this Python goes on ``PATH``, as :func:`autograder.intake.release.nbgrader_env` does
    for nbgrader's subprocesses."""
    from nbgrader.api import Gradebook

    here = str(Path(sys.executable).parent)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    config = course_config(course) if config is None else config
    return Gradebook(course.db_url, config.CourseDirectory.get("course_id", "default_course"))


def open_gradebook(course: Course, config: Config | None = None):
    """The gradebook to read, or None where it is a SQLite file that does not exist yet (reading a due date
    never creates one)."""
    url = course.db_url
    if sqlite_file(url) is not None and not sqlite_file(url).is_file():
        return None
    return gradebook(course, config)
