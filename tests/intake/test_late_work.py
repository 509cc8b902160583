"""Late work: due dates and extensions in nbgrader's gradebook, hand-in times from an LMS zip, the penalty rule
from the course's nbgrader config, and exports that show the raw score, the penalty and the final score. No
kernel runs here: results are written as the grader writes them (a result file and a gradebook row)."""

from __future__ import annotations

import csv
import zipfile
from datetime import datetime

import pytest
from nbgrader.api import Gradebook
from nbgrader.preprocessors import AssignLatePenalties
from nbgrader.utils import parse_utc

from autograder.commands import cli
from autograder.course import Course
from autograder.gradebook import course_config, gradebook
from autograder.grading.record import Recorder, save_result
from autograder.intake.collect import Roster, collect, received_rules
from autograder.intake.late import DAY, LateWork, assess, late_rule
from autograder.outputs.export import export_canvas, write_results_csv
from autograder.outputs.feedback import write_feedback
from autograder.outputs.gradesheet import record_in_gradebook
from autograder.result import CellResult, Result
from tests.fixtures.toy_course import make_course

RULE = """
c.LateWork.penalty_method = "per_day"
c.LateWork.penalty_per_day = 0.1
c.LateWork.max_penalty = 0.5
c.LateWork.zero_after_days = 7
"""


@pytest.mark.parametrize(
    "method, per_day, cap, zero_after, grace_minutes, seconds_late, score, expected",
    [
        ("none", 0.1, 0.5, 0, 0, 3 * DAY, 80, None),
        ("zero", 0.1, 0.5, 0, 0, 1, 80, 80),
        ("zero", 0.1, 0.5, 0, 15, 600, 80, None),  # within the grace period
        ("per_day", 0.1, 0.5, 0, 0, 0, 80, None),  # on time
        ("per_day", 0.1, 0.5, 0, 0, 1, 80, 8),  # a started day counts as a day
        ("per_day", 0.1, 0.5, 0, 0, DAY, 80, 8),
        ("per_day", 0.1, 0.5, 0, 0, DAY + 1, 80, 16),
        ("per_day", 0.1, 0.5, 0, 0, 3 * DAY - 5, 100, 30),
        ("per_day", 0.1, 0.5, 0, 0, 10 * DAY, 80, 40),  # the cap
        ("per_day", 0.1, 0.5, 7, 0, 7 * DAY, 80, 40),
        ("per_day", 0.1, 0.5, 7, 0, 7 * DAY + 1, 80, 80),  # zero after 7 days
        ("per_day", 0.1, 0.5, 0, 15, 15 * 60, 80, None),
        ("per_day", 0.1, 0.5, 0, 15, 15 * 60 + 1, 80, 8),
        ("per_day", 0.25, 1.0, 0, 0, 3 * DAY, 60, 45),
        ("per_day", 0.1, 0.5, 0, 0, DAY, 0, None),  # nothing to take
    ],
)
def test_penalty_rule(method, per_day, cap, zero_after, grace_minutes, seconds_late, score, expected):
    rule = LateWork(
        penalty_method=method,
        penalty_per_day=per_day,
        max_penalty=cap,
        zero_after_days=zero_after,
        grace_minutes=grace_minutes,
    )
    penalty = rule.late_submission_penalty("sid", score, seconds_late)
    assert penalty == (None if expected is None else pytest.approx(expected))


def test_assess_bounds_the_penalty_and_leaves_a_grader_error_unscored():
    rule = LateWork(penalty_method="zero")
    due, submitted = datetime(2026, 12, 1, 23, 59), datetime(2026, 12, 2, 1, 0)
    late = assess(Result("a", "T1", max_score=100, score=70, status="graded"), submitted, due, rule)
    assert (late.seconds_late, late.penalty, late.final) == (3660, 70, 0)
    on_time = assess(Result("a", "T1", max_score=100, score=70, status="graded"), due, due, rule)
    assert (on_time.penalty, on_time.final) == (0, 70)
    error = assess(Result("b", "T1", max_score=100, status="error"), submitted, due, rule)
    assert error.final is None and error.penalty == 0


def test_the_rule_comes_from_the_course_config_for_us_and_for_nbgrader(tmp_path, root):
    rule = late_rule(Course(root=root))  # the course's own config: nbgrader's plugin, no penalty by default
    assert isinstance(rule, LateWork) and rule.penalty_method == "none"
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.AssignLatePenalties.plugin_class = 'autograder.intake.late.LateWork'\n" + RULE
    )
    course = Course(root=tmp_path)
    rule = late_rule(course)
    assert isinstance(rule, LateWork)
    assert (rule.penalty_method, rule.penalty_per_day, rule.zero_after_days) == ("per_day", 0.1, 7)
    nbgrader_side = AssignLatePenalties(config=course_config(course))  # what nbgrader's autograde runs
    nbgrader_side.init_plugin()
    assert nbgrader_side.plugin_inst.late_submission_penalty("s", 50, 1.5 * DAY) == pytest.approx(10)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The toy course with the late rule set, and T1 in its gradebook as a release leaves it, written here
    directly (a release would take a second; the gradebook is made as the grader makes every one,
    :func:`autograder.gradebook.made`)."""
    root = make_course(tmp_path_factory.mktemp("late"))
    with open(root / "nbgrader_config.py", "a", encoding="utf-8") as fh:
        fh.write(RULE)
    course = Course(root=root, db="sqlite:///" + str(root / "gradebook.db"))
    with gradebook(course) as gb:
        gb.update_or_create_assignment("T1")
        gb.add_notebook("T1", "T1")
        for name, points in (("test_square", 40), ("test_scale", 60)):
            gb.add_grade_cell(name, "T1", "T1", max_score=points, cell_type="code")
    return course


@pytest.fixture(autouse=True)
def course_gradebook(monkeypatch):
    monkeypatch.delenv("DLCOURSE_DB_URL", raising=False)  # the command line finds the course's own


def zip_member(zf: zipfile.ZipFile, name: str, when: tuple, text: str = "{}") -> None:
    zf.writestr(zipfile.ZipInfo(name, date_time=when), text)


def graded(sid: str, square: bool, scale: bool) -> Result:
    cells = [
        CellResult("test_square", 40.0 * square, 40, square),
        CellResult("test_scale", 60.0 * scale, 60, scale),
    ]
    score = sum(c.points for c in cells)
    return Result(sid, "T1", max_score=100, score=score, status="graded", cells=cells)


def run_cli(course: Course, *args: str) -> None:
    assert cli.main(["--course", str(course.root), *args]) == 0


def table(course: Course, target) -> dict[str, dict[str, str]]:
    with open(write_results_csv(course, "T1", target), encoding="utf-8") as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh)}


def scores(rows: dict[str, dict[str, str]]) -> dict[str, tuple[str, str, str]]:
    return {sid: (r["raw_score"], r["late_submission_penalty"], r["score"]) for sid, r in rows.items()}


def test_lms_zip_due_date_extension_and_exports(course, tmp_path, capsys):
    run_cli(course, "deadline", "T1", "--due", "2026-12-01 23:59 UTC")
    run_cli(course, "extension", "T1", "ext", "--hours", "48")  # before the hand-in, as extensions are given
    assert "ext: 2 days, 0:00:00 more on T1, due 2026-12-03 23:59:00 UTC" in capsys.readouterr().out

    archive = tmp_path / "canvas.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zip_member(zf, "ontime_11111_2222222_T1.ipynb", (2026, 12, 1, 20, 0, 0))
        zip_member(zf, "clock_11112_2222223_T1.ipynb", (2026, 12, 2, 3, 0, 0))  # the LMS had it on time
        zip_member(zf, "unknown_LATE_33333_4444444_T1.ipynb", (2026, 12, 1, 12, 0, 0))  # late, time unknown
        zip_member(zf, "twodays_LATE_55555_6666666_T1-1.ipynb", (2026, 12, 3, 10, 0, 0))
        zip_member(zf, "ext_LATE_77777_8888888_T1.ipynb", (2026, 12, 3, 10, 0, 0))  # within the extension
        zip_member(zf, "broken_LATE_99999_1111111_T1.ipynb", (2026, 12, 2, 10, 0, 0))
        zip_member(zf, "week/T1/T1.ipynb", (2026, 11, 1, 0, 0, 0))  # nbgrader's layout, its own time
        zip_member(zf, "week/T1/timestamp.txt", (2026, 11, 1, 0, 0, 0), "2026-12-09 12:00:00.000000 UTC")
    # a LATE mark says late, not how late: the instructor gives twodays' time; week handed in through nbgrader's
    # exchange, whose timestamp.txt is read only when asked for. The extension made ext a student before any
    # hand-in: which LMS user that is, the roster says (a name alone never binds an LMS user to a student)
    rules = received_rules(["twodays=2026-12-03 10:00 UTC"], exchange_timestamps=True)
    found = collect(course, "T1", archive, rules=rules, roster=Roster({"77777": "ext"}))
    assert found.late == {
        "ontime": False,
        "clock": False,
        "unknown": True,
        "twodays": True,
        "ext": True,
        "broken": True,
    }
    stamp = (course.submission("T1", "unknown").parent / "timestamp.txt").read_text()
    assert stamp == "2026-12-01 23:59:01.000000 UTC" and parse_utc(stamp) == datetime(2026, 12, 1, 23, 59, 1)
    assert "clock" not in found.times and "ontime" not in found.times  # on time by the LMS: no time known
    assert found.times["twodays"] == datetime(2026, 12, 3, 10, 0)
    assert found.times["week"] == datetime(2026, 12, 9, 12, 0)
    sources = {h.student_id: h.source for h in found.handins}
    assert sources["unknown"].startswith("LMS: LATE, time unknown") and sources["clock"] == "LMS: on time"
    assert sources["twodays"] == "instructor (--received)"

    results = [
        graded("ontime", True, True),
        graded("clock", True, True),
        graded("unknown", True, False),
        graded("twodays", True, True),
        graded("ext", False, True),
        graded("week", True, True),
    ]
    with Recorder(course.db_url) as recorder:
        for result in results:
            recorder.record("T1", result)
            save_result(course, result)
        assert recorder.scores("T1")["ext"] == 60  # the row the extension made keeps its grades
    save_result(course, Result("broken", "T1", max_score=100, status="error", reason="grader error: test"))

    rows = table(course, tmp_path / "grades.csv")
    assert list(rows["ontime"])[-4:] == ["raw_score", "late_submission_penalty", "timestamp", "duedate"]
    assert scores(rows) == {
        "ontime": ("100", "0", "100"),
        "clock": ("100", "0", "100"),
        "unknown": ("40", "4", "36"),  # one started day: 10%
        "twodays": ("100", "20", "80"),  # 1 day 10 h late: 20%
        "ext": ("60", "0", "60"),
        "week": ("100", "100", "0"),  # more than 7 days late
        "broken": ("", "", ""),  # a grader error stays unscored
    }
    assert rows["ext"]["duedate"] == "2026-12-03 23:59:00 UTC"
    assert rows["twodays"]["timestamp"] == "2026-12-03 10:00:00 UTC"

    with open(export_canvas(course, tmp_path / "canvas.csv", ["T1"]), encoding="utf-8") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "T1"]
    assert ["unknown", "33333", "", "", "", "36"] in canvas and ["broken", "99999", "", "", "", ""] in canvas

    pages = {p.stem: p.read_text() for p in write_feedback(course, "T1", tmp_path / "feedback")}
    assert "36 / 100 (tests 40, late penalty 4)" in pages["unknown"]
    assert "exact time is not known" in pages["unknown"]
    assert "1 day, 10:01:00 after the due date" in pages["twodays"]
    assert (
        "Late penalty (10% of the score per started day late, at most 50%; zero when more than 7"
        in pages["twodays"]
    )
    assert "with your extension" in pages["ext"] and "late penalty" not in pages["ext"]

    # nbgrader's own export (and formgrader) read the same hand-in times and penalties from the gradebook
    assert record_in_gradebook(course, "T1") == 6
    with Gradebook(course.db_url) as gb:
        submissions = {s.student.id: s for s in gb.find_assignment("T1").submissions}
        assert {sid: (s.score, s.late_submission_penalty) for sid, s in submissions.items()} == {
            "ontime": (100, 0),
            "clock": (100, 0),
            "unknown": (40, 4),
            "twodays": (100, 20),
            "ext": (60, 0),
            "week": (100, 100),
        }
        assert submissions["unknown"].total_seconds_late == 1

    # an extension changed afterwards needs no regrading
    run_cli(course, "extension", "T1", "twodays", "--until", "2026-12-04 00:00 UTC")
    run_cli(course, "extension", "T1", "ext", "--hours", "0")
    again = scores(table(course, tmp_path / "again.csv"))
    assert again["twodays"] == ("100", "0", "100") and again["ext"] == (
        "60",
        "6",
        "54",
    )  # LATE, time unknown: 1 s late


def test_commands_refuse_what_they_cannot_do(course, capsys):
    assert (
        cli.main(["--course", str(course.root), "deadline", "T1", "--due", "2026-12-01 23:59 Mars/Base"]) == 2
    )
    assert cli.main(["--course", str(course.root), "extension", "NOPE", "ada", "--hours", "2"]) == 2
    assert cli.main(["--course", str(course.root), "extension", "T1", "ada", "--hours", "-2"]) == 2
    err = capsys.readouterr().err
    assert "unknown time zone 'Mars/Base'" in err and "no assignment NOPE" in err and "negative" in err
