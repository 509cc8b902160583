"""The course's nbgrader gradebook (SQLite or PostgreSQL, as ``Course.db_url`` says), opened in one place: for
writing (it is made where it does not exist) or for reading (None where a SQLite file does not exist yet, so
reading a due date or a manual grade never creates one).

A new gradebook is made here, in this process (:func:`made`), never by nbgrader: nbgrader's ``Gradebook`` asks a
subprocess (``alembic heads``) for the schema's revision each time it creates a database, about 3 s of CPU, once
per course for an instructor but once per gradebook for a grader's tests and a service's first start.
"""

from __future__ import annotations

from traitlets.config import Config

from autograder.course import Course, sqlite_file

_HEAD: list[str] = []  # nbgrader's newest schema revision, read once per process


def alembic_head() -> str:
    """nbgrader's newest schema revision, as its ``alembic heads`` subprocess finds it: alembic reads nbgrader's
    own migrations folder, here in this process."""
    if not _HEAD:
        from alembic.script import ScriptDirectory
        from nbgrader.dbutil import ALEMBIC_DIR

        _HEAD.append(ScriptDirectory(ALEMBIC_DIR).get_current_head())
    return _HEAD[0]


def made(db_url: str) -> str:
    """The gradebook at ``db_url``, made where it has no tables yet as nbgrader's ``Gradebook`` makes one (its
    tables, and ``alembic_version`` holding nbgrader's newest revision), in one transaction, so that nbgrader
    then finds it made and starts no ``alembic`` subprocess. Another process that made it meanwhile wins. A
    SQLite file named by a relative path, or in a folder that does not exist, is left to nbgrader (it is found from
    nbgrader's working folder, and nbgrader says what is missing). Returns ``db_url``."""
    from nbgrader.api import Base
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import DBAPIError

    file = sqlite_file(db_url)
    if file is not None and not (file.is_absolute() and file.parent.is_dir()):
        return db_url
    engine = create_engine(db_url, future=True)
    try:
        if inspect(engine).get_table_names():
            return db_url
        try:
            with engine.begin() as connection:
                Base.metadata.create_all(bind=connection)
                connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
                connection.execute(
                    text("INSERT INTO alembic_version (version_num) VALUES (:head)"), {"head": alembic_head()}
                )
        except DBAPIError:
            if "alembic_version" not in inspect(engine).get_table_names():
                raise
    finally:
        engine.dispose()
    return db_url


def course_config(course: Course) -> Config:
    """The course's ``nbgrader_config.py``, loaded as nbgrader loads it (traitlets' Python config loader)."""
    return course.config


def gradebook(course: Course, config: Config | None = None):
    """nbgrader's gradebook of the course, under its course id, made first where it does not exist
    (:func:`made`)."""
    from nbgrader.api import Gradebook

    config = course_config(course) if config is None else config
    return Gradebook(made(course.db_url), config.CourseDirectory.get("course_id", "default_course"))


def open_gradebook(course: Course, config: Config | None = None):
    """The gradebook to read, or None where it is a SQLite file that does not exist yet (reading a due date
    never creates one)."""
    url = course.db_url
    if sqlite_file(url) is not None and not sqlite_file(url).is_file():
        return None
    return gradebook(course, config)
