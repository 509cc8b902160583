"""Stage 5, record: results into nbgrader's gradebook (SQLite or PostgreSQL), and one JSON file per
submission that makes grading resumable.

A submission's result file is written last and atomically, after its gradebook row. A grader killed at
any point leaves each submission either recorded (the file exists and matches the submission and the
reference) or not; running again grades exactly the ones that are not.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from autograder.course import Course
from autograder.result import Result


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_result(course: Course, aid: str, sid: str) -> Result | None:
    """The stored result of one submission, or None when there is none (or it cannot be read)."""
    try:
        return Result.from_dict(json.loads(course.result(aid, sid).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def load_results(course: Course, aid: str) -> list[Result]:
    """Every stored result of ``aid``, by student id."""
    folder = course.results_dir(aid)
    found = (
        [load_result(course, aid, p.stem) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    )
    return [r for r in found if r]


def save_result(course: Course, result: Result) -> Path:
    """Written last and atomically: its presence marks the submission as done."""
    path = course.result(result.assignment, result.student_id)
    write_json_atomic(path, result.to_dict())
    return path


class Recorder:
    """The gradebook, opened once for a whole batch."""

    def __init__(self, db_url: str):
        self.gradebook = Gradebook(db_url)

    def close(self) -> None:
        self.gradebook.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def knows(self, aid: str) -> bool:
        try:
            self.gradebook.find_assignment(aid)
            return True
        except MissingEntry:
            return False

    def record(self, aid: str, result: Result) -> None:
        """Write one submission's automatic scores; manual scores already given are kept."""
        if result.is_error:
            raise ValueError(f"{result.student_id}: a grader error is never recorded as a score")
        gb, sid = self.gradebook, result.student_id
        gb.update_or_create_student(sid)
        try:
            submission = gb.find_submission(aid, sid)
        except MissingEntry:
            with warnings.catch_warnings():
                # nbgrader's add_submission builds rows in a way SQLAlchemy 2 warns about; the rows are written.
                warnings.filterwarnings("ignore", message=r"Object of type <\w+> not in session")
                submission = gb.add_submission(aid, sid)
        points = {cell.grade_id: cell.points for cell in result.cells}
        for notebook in submission.notebooks:  # the submission's grade rows, loaded together
            for grade in notebook.grades:
                grade.auto_score = points.get(grade.name, 0.0)
                grade.needs_manual_grade = grade.manual_score is not None
        gb.db.commit()

    def scores(self, aid: str) -> dict[str, float]:
        return {s.student.id: s.score for s in self.gradebook.find_assignment(aid).submissions}
