"""Results into nbgrader's gradebook (SQLite or PostgreSQL), and one JSON file per
submission that makes grading resumable.

A submission's result file is written last and atomically, after its gradebook row. A grader killed at
any point leaves each submission either recorded (the file exists and matches the submission and the
reference) or not; running again grades exactly the ones that are not.

Written answers (markdown answer cells with points) are graded by hand in formgrader. They are recorded
as nbgrader's own autograde records a markdown grade cell: ``auto_score`` None and ``needs_manual_grade``
True, so formgrader lists them for grading, or 0 with nothing to grade where the answer is still the
release's stub (with the auto comment "No response."). A manual score an instructor gave is never
overwritten, by a regrade or a new run of the same submission: the gradebook is where manual scores live,
and :func:`with_manual_grades` reads them back for feedback, export and reports.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import (
    Comment,
    Grade,
    Gradebook,
    MissingEntry,
    Student,
    SubmittedAssignment,
    SubmittedNotebook,
    new_uuid,
)
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from autograder.course import Course
from autograder.files import write_json_atomic
from autograder.gradebook import made
from autograder.result import Result, WrittenResult


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


def is_written_grade(grade) -> bool:
    """A gradebook row of a written answer: a markdown grade cell (graded by hand, never autograded)."""
    return getattr(grade.cell, "cell_type", None) == "markdown"


def _comment(gb: Gradebook, name: str, notebook: str, aid: str, sid: str):
    try:
        return gb.find_comment(name, notebook, aid, sid)
    except MissingEntry:
        return None


def _written(grade, answered: bool, comment, notebook: str = "") -> WrittenResult:
    """A written answer as the gradebook holds it: the manual score (with extra credit) when given, 0 for
    an unanswered one, else None (awaiting manual grading)."""
    text = (comment.manual_comment or "") if comment is not None else ""
    row = _GradeRow(grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade)
    return _written_row(grade.name, float(grade.cell.max_score), row, answered, text, notebook)


@dataclass
class _GradeRow:
    """The columns of a grade row that recording reads and writes."""

    auto_score: float | None
    manual_score: float | None
    extra_credit: float | None
    needs_manual_grade: bool


def _written_row(
    name: str, max_score: float, row: _GradeRow, answered: bool, text: str, notebook: str
) -> WrittenResult:
    if row.manual_score is not None:
        points = row.manual_score + (row.extra_credit or 0.0)
    elif not row.needs_manual_grade and row.auto_score is not None:
        points = row.auto_score
    else:
        points = None
    return WrittenResult(name, max_score, points, answered, text, notebook)


def with_manual_grades(course: Course, aid: str, results: list[Result]) -> list[Result]:
    """``results`` with each written answer's manual score and comment as the gradebook holds them now
    (instructors grade in formgrader after the autograder ran); a result the gradebook does not know keeps
    what it recorded. Reads only."""
    from autograder.gradebook import open_gradebook

    todo = [r for r in results if not r.is_error and r.written]
    book = open_gradebook(course) if todo else None
    if book is None:
        return results
    with book as gb:
        for r in todo:
            try:
                submission = gb.find_submission(aid, r.student_id)
            except MissingEntry:
                continue
            now = {
                grade.name: (grade, notebook.name)
                for notebook in submission.notebooks
                for grade in notebook.grades
                if is_written_grade(grade)
            }
            for index, w in enumerate(r.written):
                if w.grade_id in now:
                    grade, notebook = now[w.grade_id]
                    comment = _comment(gb, w.grade_id, notebook, aid, r.student_id)
                    r.written[index] = _written(grade, w.answered, comment, notebook)
    return results


@dataclass(frozen=True)
class _Cell:
    id: str
    name: str
    written: bool  # a markdown grade or task cell: graded by hand
    max_score: float


@dataclass(frozen=True)
class _Shape:
    """One released notebook as the gradebook holds it: the rows a new submission of it gets."""

    id: str
    name: str
    graded: tuple[_Cell, ...]  # grade cells, then task cells (each gets a Grade row)
    solutions: tuple[tuple[str, str], ...]  # (id, name) of solution cells, then task cells (Comment rows)

    @property
    def commented(self) -> frozenset[str]:
        """Names of the cells with a comment row (where a written answer's comment goes, as ``find_comment``
        finds it: a solution or a task cell of that name)."""
        return frozenset(name for _, name in self.solutions)


class Recorder:
    """The gradebook, opened once for a whole batch."""

    def __init__(self, db_url: str):
        self.gradebook = Gradebook(made(db_url))  # (made here, without nbgrader's alembic subprocess)
        self._shapes: dict[str, tuple[str, tuple[_Shape, ...]]] = {}

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
        # an existing submission first (a regrade, --force: no insert that fails), then a new one; a submission
        # another grader recorded meanwhile makes the insert fail, and is updated
        if self._update(aid, result) or self._insert(aid, result) or self._update(aid, result):
            return
        self._rewrite(aid, result)

    def _rewrite(self, aid: str, result: Result) -> None:
        """The same values as :meth:`_update`, through nbgrader's objects, one lazy load per grade's cell
        (16 queries a submission): for rows this batch's shape of the assignment does not know."""
        gb, sid = self.gradebook, result.student_id
        try:
            submission = gb.find_submission(aid, sid)
        except MissingEntry:
            submission = self._add_submission(aid, sid)
        points = {cell.grade_id: cell.points for cell in result.cells}
        answered = {w.grade_id: w.answered for w in result.written}
        written = {}
        for notebook in submission.notebooks:  # the submission's grade rows, loaded together
            for grade in notebook.grades:
                row = _GradeRow(
                    grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade
                )
                done = _decide(row, grade.name, is_written_grade(grade), points, answered, result.status)
                grade.auto_score, grade.needs_manual_grade = row.auto_score, row.needs_manual_grade
                if done is None:
                    continue
                comment = _comment(gb, grade.name, notebook.name, aid, sid)
                if comment is not None:
                    comment.auto_comment = None if done else "No response."
                written[grade.name] = _written(grade, done, comment, notebook.name)
        gb.db.commit()
        result.written = _in_order(written, answered)

    def _add_submission(self, aid: str, sid: str):
        gb = self.gradebook
        gb.update_or_create_student(sid)
        with warnings.catch_warnings():
            # nbgrader's add_submission builds rows in a way SQLAlchemy 2 warns about; the rows are written.
            warnings.filterwarnings("ignore", message=r"Object of type <\w+> not in session")
            return gb.add_submission(aid, sid)

    def _shape(self, aid: str) -> tuple[str, tuple[_Shape, ...]]:
        """The released assignment's id and notebooks, read once per batch (a release happens before)."""
        if aid not in self._shapes:
            assignment = self.gradebook.find_assignment(aid)
            shapes = []
            for nb in assignment.notebooks:
                graded = [*nb.grade_cells, *nb.task_cells]
                shapes.append(
                    _Shape(
                        nb.id, nb.name,
                        tuple(_Cell(c.id, c.name, c.cell_type == "markdown", float(c.max_score)) for c in graded),
                        tuple((c.id, c.name) for c in [*nb.solution_cells, *nb.task_cells]),
                    )
                )  # fmt: skip
            self._shapes[aid] = (assignment.id, tuple(shapes))
            self.gradebook.db.commit()  # (ends the read: the batch's writes come in their own transactions)
        return self._shapes[aid]

    def _insert(self, aid: str, result: Result) -> bool:
        """A first submission: every row nbgrader's ``add_submission`` would make, with this result's
        scores, in one transaction (the same rows and values as :meth:`record` gives an existing one).
        False, with nothing written, where the rows exist by now (another process recorded it)."""
        gb, sid = self.gradebook, result.student_id
        assignment_id, shapes = self._shape(aid)
        points = {cell.grade_id: cell.points for cell in result.cells}
        answered = {w.grade_id: w.answered for w in result.written}
        rows: dict[type, list[dict]] = {SubmittedNotebook: [], Grade: [], Comment: []}
        submission_id = new_uuid()
        written, comments = {}, {}
        for shape in shapes:
            notebook_id = new_uuid()
            rows[SubmittedNotebook].append(
                {"id": notebook_id, "assignment_id": submission_id, "notebook_id": shape.id, "flagged": False}
            )
            for cell in shape.graded:
                if cell.name in points or (cell.name not in answered and not cell.written):
                    score, manual = points.get(cell.name, 0.0), False
                else:
                    done = answered.get(cell.name, result.status != "unreadable")
                    score, manual = (None, True) if done else (0.0, False)
                    if cell.name in shape.commented:
                        comments[(shape.id, cell.name)] = None if done else "No response."
                    points_now = None if manual else score
                    written[cell.name] = WrittenResult(
                        cell.name, cell.max_score, points_now, done, "", shape.name
                    )
                rows[Grade].append(
                    {"id": new_uuid(), "notebook_id": notebook_id, "cell_id": cell.id, "auto_score": score,
                     "manual_score": None, "extra_credit": None, "needs_manual_grade": manual}
                )  # fmt: skip
            for cell_id, name in shape.solutions:
                rows[Comment].append(
                    {"id": new_uuid(), "notebook_id": notebook_id, "cell_id": cell_id,
                     "auto_comment": comments.get((shape.id, name)), "manual_comment": None}
                )  # fmt: skip
        db = gb.db
        try:
            if db.get(Student, sid) is None:
                db.execute(insert(Student.__table__), [{"id": sid}])
            db.execute(
                insert(SubmittedAssignment.__table__),
                [{"id": submission_id, "assignment_id": assignment_id, "student_id": sid}],
            )
            for model, values in rows.items():
                if values:
                    db.execute(insert(model.__table__), values)
            db.commit()
        except IntegrityError:
            db.rollback()
            return False
        result.written = _in_order(written, answered)
        return True

    def _update(self, aid: str, result: Result) -> bool:
        """An existing submission's rows rewritten in one transaction, read and written in a few statements:
        the values :meth:`_rewrite` gives them (a regrade of a class writes 40 submissions, 0.6 s that way).
        False, with nothing written, where the submission has no rows, or a row whose cell this batch's
        shape of the assignment does not know."""
        db = self.gradebook.db
        assignment_id, shapes = self._shape(aid)
        cells = {c.id: (shape, c) for shape in shapes for c in shape.graded}
        commented = {cell_id: name for shape in shapes for cell_id, name in shape.solutions}
        grades, comments = _rows_of(db, assignment_id, result.student_id, commented)
        if not grades or not all(g.cell_id in cells for g in grades) or None in {n for _, n in comments}:
            db.rollback()
            return False
        points = {cell.grade_id: cell.points for cell in result.cells}
        answered = {w.grade_id: w.answered for w in result.written}
        written, changed, said = {}, [], []
        for g in grades:
            shape, cell = cells[g.cell_id]
            row = _GradeRow(g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
            done = _decide(row, cell.name, cell.written, points, answered, result.status)
            changed.append({"b_id": g.id, "b_auto": row.auto_score, "b_manual": row.needs_manual_grade})
            if done is None:
                continue
            comment = comments.get((g.notebook_id, cell.name))
            if comment is not None:
                said.append({"b_id": comment[0], "b_text": None if done else "No response."})
            text = (comment[1] or "") if comment is not None else ""
            written[cell.name] = _written_row(cell.name, cell.max_score, row, done, text, shape.name)
        grade, comment = Grade.__table__, Comment.__table__
        db.execute(
            update(grade).where(grade.c.id == bindparam("b_id"))
            .values(auto_score=bindparam("b_auto"), needs_manual_grade=bindparam("b_manual")),
            changed,
        )  # fmt: skip
        if said:
            db.execute(
                update(comment).where(comment.c.id == bindparam("b_id")).values(auto_comment=bindparam("b_text")),
                said,
            )  # fmt: skip
        db.commit()
        result.written = _in_order(written, answered)
        return True

    def scores(self, aid: str) -> dict[str, float]:
        return {s.student.id: s.score for s in self.gradebook.find_assignment(aid).submissions}


def _decide(
    row: _GradeRow, name: str, written: bool, points: dict, answered: dict, status: str
) -> bool | None:
    """Set a grade row's automatic score and whether it awaits manual grading, as this result decides;
    for a written answer, return whether it was answered (None for an autograded cell)."""
    if name in points or (name not in answered and not written):
        row.auto_score = points.get(name, 0.0)
        row.needs_manual_grade = row.manual_score is not None
        return None
    done = answered.get(name, status != "unreadable")
    if row.manual_score is not None:  # an instructor's score stands, whatever is regraded
        row.needs_manual_grade = False
    elif done:
        row.auto_score, row.needs_manual_grade = None, True
    else:  # still the release's stub: 0, nothing to grade (as nbgrader's autograde does)
        row.auto_score, row.needs_manual_grade = 0.0, False
    return done


def _rows_of(db, assignment_id: str, sid: str, commented: dict[str, str]) -> tuple[list, dict]:
    """One submission's grade rows, and its comment rows by (submitted notebook, cell name): three queries."""
    mine = select(SubmittedAssignment.id).where(
        SubmittedAssignment.assignment_id == assignment_id, SubmittedAssignment.student_id == sid
    )
    notebooks = select(SubmittedNotebook.id).where(SubmittedNotebook.assignment_id.in_(mine))
    grades = db.execute(
        select(Grade.id, Grade.notebook_id, Grade.cell_id, Grade.auto_score, Grade.manual_score,
               Grade.extra_credit, Grade.needs_manual_grade).where(Grade.notebook_id.in_(notebooks))
    ).all()  # fmt: skip
    if not grades:  # a first submission: no rows yet
        return grades, {}
    comments = {
        (notebook_id, commented.get(cell_id)): (comment_id, manual)
        for comment_id, notebook_id, cell_id, manual in db.execute(
            select(Comment.id, Comment.notebook_id, Comment.cell_id, Comment.manual_comment).where(
                Comment.notebook_id.in_(notebooks)
            )
        )
    }
    return grades, comments


def _in_order(written: dict[str, WrittenResult], answered: dict[str, bool]) -> list[WrittenResult]:
    """The written answers in the result's own order, then any other the gradebook holds, by name."""
    order = list(answered) + sorted(set(written) - set(answered))
    return [written[name] for name in order if name in written]
