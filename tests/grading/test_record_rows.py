"""A first submission's gradebook rows are written in one transaction from the assignment's structure, read
once per batch (``Recorder._insert``), not by nbgrader's ``add_submission`` and an update. Both ways must
leave the same rows and values, for every kind of cell nbgrader knows, or formgrader, the export and the
feedback would differ with how a student happened to be recorded."""

from __future__ import annotations

import pytest
from nbgrader.api import Gradebook

from autograder.gradebook import made
from autograder.grading.record import Recorder
from autograder.result import CellResult, Result, WrittenResult


def release(db_url: str) -> None:
    """An assignment of two notebooks with autograded cells, a written answer (a markdown grade cell that is a
    solution cell), a task, a plain solution cell, and a written answer in the second notebook."""
    with Gradebook(made(db_url)) as gb:
        gb.add_assignment("PS")
        for nb in ("one", "two"):
            gb.add_notebook(nb, "PS")
        gb.add_grade_cell("auto_a", "one", "PS", max_score=10, cell_type="code")
        gb.add_grade_cell("auto_b", "one", "PS", max_score=5, cell_type="code")
        gb.add_grade_cell("essay", "one", "PS", max_score=4, cell_type="markdown")
        gb.add_solution_cell("essay", "one", "PS")
        gb.add_solution_cell("code_answer", "one", "PS")
        gb.add_task_cell("task", "one", "PS", max_score=3, cell_type="markdown")
        gb.add_grade_cell("auto_c", "two", "PS", max_score=6, cell_type="code")
        gb.add_grade_cell("essay2", "two", "PS", max_score=2, cell_type="markdown")
        gb.add_solution_cell("essay2", "two", "PS")


def schema(db_url: str) -> tuple[dict, list]:
    """Each table's columns (name, type, nullable) and the schema revision nbgrader's migrations read."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(db_url)
    try:
        found = inspect(engine)
        tables = {
            t: [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(t)]
            for t in found.get_table_names()
        }
        with engine.connect() as connection:
            revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        return tables, revision
    finally:
        engine.dispose()


def test_a_new_gradebook_is_the_one_nbgrader_makes_without_nbgraders_alembic_subprocess(
    tmp_path, monkeypatch
):
    """nbgrader makes a new gradebook by asking ``alembic heads`` in a subprocess (3 s of CPU each time): the
    grader makes it in this process, with the same tables and the same revision, and nbgrader then opens it
    without that subprocess; a SQLite file named by a relative path is left to nbgrader (found from its own
    working folder)."""
    import nbgrader.api

    theirs = f"sqlite:///{tmp_path / 'nbgrader.db'}"
    Gradebook(theirs).close()  # nbgrader's own way, its subprocess included
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", lambda: pytest.fail("nbgrader ran alembic"))
    ours = made(f"sqlite:///{tmp_path / 'ours.db'}")
    Gradebook(ours).close()
    assert schema(ours) == schema(theirs) and len(schema(ours)[0]) >= 10 and schema(ours)[1]
    assert made(ours) == ours and schema(ours) == schema(theirs)  # made once: a second call changes nothing
    monkeypatch.chdir(tmp_path)
    assert (
        made("sqlite:///relative.db") == "sqlite:///relative.db" and not (tmp_path / "relative.db").exists()
    )


def result(sid: str, status: str, points: dict[str, float], answered: dict[str, bool]) -> Result:
    r = Result(sid, "PS", 21.0)
    r.status = status
    r.cells = [CellResult(g, p, 10.0, p > 0) for g, p in points.items()]
    r.written = [WrittenResult(g, 4.0, None, a) for g, a in answered.items()]
    return r


RESULTS = [
    result("all", "graded", {"auto_a": 10.0, "auto_b": 5.0, "auto_c": 6.0}, {"essay": True, "essay2": True}),
    result(
        "stub", "graded", {"auto_a": 0.0, "auto_b": 0.0, "auto_c": 0.0}, {"essay": False, "essay2": False}
    ),
    result("mixed", "flagged", {"auto_a": 3.5}, {"essay": True}),  # auto_b, auto_c never ran; essay2 lost
    result("unreadable", "unreadable", {}, {}),
]


def rows(db_url: str, sid: str) -> dict:
    """Everything the gradebook holds of one submission, by names (ids differ), and its computed scores."""
    with Gradebook(db_url) as gb:
        s = gb.find_submission("PS", sid)
        found = {
            "submission": (s.timestamp, s.extension, s.score, s.max_score, s.needs_manual_grade),
            "student": (gb.find_student(sid).first_name, gb.find_student(sid).email),
        }
        for nb in s.notebooks:
            found[nb.name] = (
                nb.flagged,
                nb.late_submission_penalty,
                nb.score,
                nb.needs_manual_grade,
                sorted(
                    (g.name, g.cell.type, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                    for g in nb.grades
                ),
                sorted((c.name, c.cell.type, c.auto_comment, c.manual_comment) for c in nb.comments),
            )
        return found


@pytest.mark.parametrize("made", RESULTS, ids=[r.student_id for r in RESULTS])
def test_a_first_submission_gets_the_rows_nbgraders_add_submission_and_an_update_would(made, tmp_path):
    fast, slow = f"sqlite:///{tmp_path / 'fast.db'}", f"sqlite:///{tmp_path / 'slow.db'}"
    release(fast)
    release(slow)
    one, other = Result.from_dict(made.to_dict()), Result.from_dict(made.to_dict())
    with Recorder(fast) as recorder:
        recorder.record("PS", one)
    with Recorder(slow) as recorder:
        recorder._add_submission("PS", made.student_id)  # nbgrader's own rows, then the update
        recorder.record("PS", other)
    assert rows(fast, made.student_id) == rows(slow, made.student_id)
    assert one.written == other.written
    assert len(rows(fast, made.student_id)["one"][4]) == 4  # every grade row is there (a task has one)


def test_a_batch_records_many_first_submissions_and_a_later_run_updates_them(tmp_path):
    """One Recorder (the structure read once) for several new students, then a second run over the same
    students takes the update path and keeps an instructor's manual score."""
    db = f"sqlite:///{tmp_path / 'gb.db'}"
    release(db)
    with Recorder(db) as recorder:
        for made in RESULTS:
            recorder.record("PS", Result.from_dict(made.to_dict()))
        assert recorder.scores("PS") == {"all": 21.0, "stub": 0.0, "mixed": 3.5, "unreadable": 0.0}
    with Gradebook(db) as gb:
        essay = gb.find_grade("essay", "one", "PS", "all")
        essay.manual_score, essay.needs_manual_grade = 4.0, False
        gb.db.commit()
    again = Result.from_dict(RESULTS[0].to_dict())
    with Recorder(db) as recorder:
        recorder.record("PS", again)
        assert recorder.scores("PS")["all"] == 25.0
    # the instructor's score comes back with the result; the task is graded by hand too
    assert [(w.grade_id, w.points) for w in again.written] == [
        ("essay", 4.0),
        ("essay2", None),
        ("task", None),
    ]


def test_a_submission_recorded_meanwhile_by_another_grader_is_updated_not_duplicated(tmp_path):
    db = f"sqlite:///{tmp_path / 'gb.db'}"
    release(db)
    with Recorder(db) as mine, Recorder(db) as theirs:
        mine._shape("PS")  # the structure read first, as a batch does
        theirs.record("PS", Result.from_dict(RESULTS[1].to_dict()))
        # the other grader's row exists now; this one's insert must not fail nor add a second submission
        late = Result.from_dict({**RESULTS[0].to_dict(), "student_id": "stub"})
        assert mine._insert("PS", late) is False
        mine.record("PS", late)
    with Gradebook(db) as gb:
        assert len(gb.find_assignment("PS").submissions) == 1
        assert gb.find_submission("PS", "stub").score == 21.0


@pytest.mark.parametrize("made", RESULTS, ids=[r.student_id for r in RESULTS])
def test_an_update_in_a_few_statements_leaves_what_nbgraders_objects_would(made, tmp_path, monkeypatch):
    """A submission recorded before, whose written answer an instructor has scored (with extra credit) and
    commented on, recorded again with each kind of result: the update in a few statements (what a regrade
    takes) and the one through nbgrader's objects leave the same rows, and give back the same written
    answers. A second record of a submission never needs the objects' way."""
    dbs = {way: f"sqlite:///{tmp_path / way}.db" for way in ("fast", "slow")}
    for db in dbs.values():
        release(db)
        with Recorder(db) as recorder:
            recorder.record("PS", Result.from_dict({**RESULTS[0].to_dict(), "student_id": made.student_id}))
        with Gradebook(db) as gb:
            essay = gb.find_grade("essay", "one", "PS", made.student_id)
            essay.manual_score, essay.extra_credit, essay.needs_manual_grade = 3.0, 0.5, False
            gb.find_comment("essay", "one", "PS", made.student_id).manual_comment = "clear, but no numbers"
            gb.db.commit()
    fast, slow = Result.from_dict(made.to_dict()), Result.from_dict(made.to_dict())
    with Recorder(dbs["slow"]) as recorder:
        recorder._rewrite("PS", slow)
    with Recorder(dbs["fast"]) as recorder:
        monkeypatch.setattr(Recorder, "_rewrite", lambda *args: pytest.fail("took nbgrader's objects' way"))
        recorder.record("PS", fast)
    assert rows(dbs["fast"], made.student_id) == rows(dbs["slow"], made.student_id)
    assert fast.written == slow.written
    assert ("essay", 3.5) in [(w.grade_id, w.points) for w in fast.written] or not made.written
