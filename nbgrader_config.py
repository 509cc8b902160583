"""nbgrader configuration: the repository root is the course directory, releases go to assignments/."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "dlcourse"
c.CourseDirectory.root = here
c.CourseDirectory.release_directory = "assignments"
# SQLite by default; several graders share PostgreSQL by setting DLCOURSE_DB_URL, e.g.
# postgresql+psycopg2://grader@dbhost:5432/gradebook (psycopg2 is in the grader extra).
c.CourseDirectory.db_url = os.environ.get(
    "DLCOURSE_DB_URL", "sqlite:///" + os.path.join(here, "gradebook.db")
)
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".grading"]
# Formgrader needs a writable exchange even when nobody uses it.
c.Exchange.root = os.environ.get("DLCOURSE_EXCHANGE", os.path.join(here, ".grading", "exchange"))
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
