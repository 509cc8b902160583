"""Who handed in what, and when: ``collect`` tried as a hostile student and as an unlucky class would (issue 25,
findings 1-6), and a Canvas CSV that Canvas's gradebook importer reads as meant. No kernel runs here: results
are written as the grader writes them."""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from autograder.commands import cli
from autograder.course import Course
from autograder.gradebook import gradebook
from autograder.grading.record import save_result
from autograder.intake import collect as intake
from autograder.intake.collect import collect, read_roster, received_rules, shown, student_id
from autograder.intake.late import late_penalties
from autograder.outputs.export import export_canvas
from autograder.result import Result
from tests.fixtures.toy_course import make_course

DUE = datetime(2026, 12, 1, 23, 59)
RULE = '\nc.LateWork.penalty_method = "per_day"\nc.LateWork.penalty_per_day = 0.1\n'


@pytest.fixture
def course(tmp_path):
    """The toy course with a per-day late rule and T1 in its gradebook, due ``DUE`` (written directly, as in
    test_late_work: nbgrader's `alembic heads` subprocess is answered in this process)."""
    import nbgrader.api
    from alembic.script import ScriptDirectory

    root = make_course(tmp_path / "course")
    with open(root / "nbgrader_config.py", "a", encoding="utf-8") as fh:
        fh.write(RULE)
    course = Course(root=root, db="sqlite:///" + str(root / "gradebook.db"))
    migrations = ScriptDirectory(str(Path(nbgrader.api.__file__).parent / "alembic"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nbgrader.api, "get_alembic_version", migrations.get_current_head)
        with gradebook(course) as gb:
            gb.update_or_create_assignment("T1", duedate=DUE)
            gb.add_notebook("T1", "T1")
    return course


@pytest.fixture(autouse=True)
def own_gradebook(monkeypatch):
    monkeypatch.delenv("DLCOURSE_DB_URL", raising=False)


def notebook(who: str) -> str:
    """A hand-in whose bytes say whose it is (collect never parses a notebook)."""
    return json.dumps({"cells": [], "metadata": {"who": who}, "nbformat": 4, "nbformat_minor": 5})


def make_zip(path: Path, members: dict[str, str], when=(2027, 9, 1, 12, 0, 0)) -> Path:
    """A zip whose member times are all ``when`` (Canvas writes the time it made the zip, not a hand-in's)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=when), text)
    return path


def run_collect(course: Course, capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["--course", str(course.root), "collect", "T1", *map(str, args)])
    return code, capsys.readouterr().out


def whose(course: Course, sid: str) -> str | None:
    path = course.submission("T1", sid)
    if not path.is_file():
        return None
    return json.loads(path.read_text())["metadata"]["who"]


def stamp(course: Course, sid: str) -> str | None:
    path = course.submission("T1", sid).parent / "timestamp.txt"
    return path.read_text() if path.exists() else None


def lms_ids(course: Course) -> dict[str, str | None]:
    with gradebook(course) as gb:
        return {s.id: s.lms_user_id for s in gb.students}


# ------------------------------------------------------------------------------------------ finding 1


def test_two_canvas_students_with_one_name_both_keep_their_hand_in_until_a_roster_names_them(
    course, tmp_path, capsys
):
    archive = make_zip(
        tmp_path / "canvas.zip",
        {
            "smithjohn_1001_501_T1.ipynb": notebook("john one"),
            "smithjohn_1002_502_T1.ipynb": notebook("john two"),
            "leeann_1003_503_T1.ipynb": notebook("ann"),
        },
    )
    code, out = run_collect(course, capsys, archive)
    assert code == 1  # something to resolve, and everyone collected
    assert (whose(course, "smithjohn_1001"), whose(course, "smithjohn_1002")) == ("john one", "john two")
    assert whose(course, "leeann") == "ann" and whose(course, "smithjohn") is None
    assert lms_ids(course) == {"smithjohn_1001": "1001", "smithjohn_1002": "1002", "leeann": "1003"}
    table = out[out.index("2 to resolve") :]
    assert re.search(
        r"smithjohn_1001_501_T1\.ipynb\s+1001\s+smithjohn_1001\s+smithjohn is the name of 2", table
    )
    assert re.search(r"smithjohn_1002_502_T1\.ipynb\s+1002\s+smithjohn_1002\s", table)
    assert "--roster" in out

    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n1001,jsmith,John Smith\n1002,jsmith2,Johnny Smith\n")
    code, out = run_collect(course, capsys, archive, "--roster", roster)
    assert code == 0 and "to resolve" not in out
    assert (whose(course, "jsmith"), whose(course, "jsmith2"), whose(course, "leeann")) == (
        "john one",
        "john two",
        "ann",
    )
    assert {k: v for k, v in lms_ids(course).items() if "smith" in k} == {
        "jsmith": "1001",
        "jsmith2": "1002",
        "smithjohn_1001": None,  # the roster moved the LMS ids: a later download finds jsmith and jsmith2
        "smithjohn_1002": None,
    }


def test_a_later_download_keeps_the_id_the_gradebook_holds_for_an_lms_user(course, tmp_path, capsys):
    first = make_zip(tmp_path / "a.zip", {"doejane_2001_1_T1.ipynb": notebook("jane")})
    assert run_collect(course, capsys, first)[0] == 0
    # another Jane Doe joins; the first keeps her id, the newcomer gets hers with her user id, to resolve
    second = make_zip(
        tmp_path / "b.zip",
        {
            "doejane_2001_7_T1.ipynb": notebook("jane again"),
            "doejane_2002_8_T1.ipynb": notebook("other jane"),
        },
    )
    code, out = run_collect(course, capsys, second)
    assert code == 1
    assert (whose(course, "doejane"), whose(course, "doejane_2002")) == ("jane again", "other jane")
    assert "doejane is the id of LMS user 2001 in the gradebook" in out

    # a folder the instructor's export named is that gradebook student; a file named like a user id is not the user
    inbox = tmp_path / "inbox"
    (inbox / "doejane").mkdir(parents=True)
    (inbox / "doejane" / "T1.ipynb").write_text(notebook("jane by folder"))
    (inbox / "2002.ipynb").write_text(notebook("a file named 2002"))
    found = collect(course, "T1", inbox)
    assert found.problems == [] and whose(course, "doejane") == "jane by folder"
    assert whose(course, "2002") == "a file named 2002" and whose(course, "doejane_2002") == "other jane"


def test_a_roster_that_gives_one_id_twice_is_refused(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n1,ada,Ada\n2,Ada,Ada B\n")
    with pytest.raises(ValueError, match="given to two LMS ids"):
        read_roster(roster)
    roster.write_text("lms_id,student_id\n1,ada\n2,bob\n")
    assert read_roster(roster).ids == {"1": "ada", "2": "bob"}


# ------------------------------------------------------------------------------------------ finding 2


def test_a_name_in_any_script_is_an_id_and_a_name_that_is_none_keeps_the_user_id(course, tmp_path, capsys):
    decomposed = "mu\u0308ller"  # as a Mac zips it (NFD)
    archive = make_zip(
        tmp_path / "canvas.zip",
        {
            f"{decomposed}_1014_1_T1.ipynb": notebook("müller"),
            "\u0434\u043c\u0438\u0442\u0440\u0438\u0439_1015_2_T1.ipynb": notebook("dmitry"),
            "\u092e\u0940\u0930\u093e_1016_3_T1.ipynb": notebook("mira"),  # Devanagari: a vowel sign (a mark)
            "-dash_1017_4_T1.ipynb": notebook("dash"),  # not an id: it begins with a dash
            "XXse_1018_5_T1.ipynb": notebook("åse"),
        },
    )
    # UTF-8 stored without the zip's UTF-8 flag, as Canvas's zip library writes names
    patch_member(archive, "XXse", None, new_name="\u00e5se".encode())
    code, out = run_collect(course, capsys, archive)
    assert code == 1
    assert whose(course, "m\u00fcller") == "müller"  # NFC
    assert whose(course, "\u0434\u043c\u0438\u0442\u0440\u0438\u0439") == "dmitry"
    assert whose(course, "\u092e\u0940\u0930\u093e") == "mira"
    assert whose(course, "lms_1017") == "dash" and whose(course, "\u00e5se") == "åse"
    assert re.search(
        r"1017\s+lms_1017\s+'-dash' is no usable student id; collected with its LMS user id", out
    )


# ------------------------------------------------------------------------------------------ finding 3


def test_an_id_with_a_trailing_newline_is_no_id(course, tmp_path, capsys):
    archive = make_zip(
        tmp_path / "class.zip",
        {
            "alice.ipynb": notebook("alice"),
            "alice\n.ipynb": notebook("not alice"),
            "bob/T1.ipynb": notebook("bob"),
            "bob\n/T1.ipynb": notebook("not bob"),
        },
    )
    found = collect(course, "T1", archive)
    assert set(found.students) == {"alice", "bob"}
    assert (whose(course, "alice"), whose(course, "bob")) == ("alice", "bob")
    assert sorted(p.entry for p in found.problems) == ["alice\n.ipynb", "bob\n"]
    assert all(p.collected_as == "" for p in found.problems)
    assert student_id("alice\n") is None and student_id("alice") == "alice"
    assert student_id("a" * 64) and student_id("a" * 65) is None
    assert sorted(os.listdir(course.root / "submitted")) == ["alice", "bob"]


def test_two_folders_whose_names_differ_only_in_case_are_not_merged(course, tmp_path, capsys):
    archive = make_zip(
        tmp_path / "class.zip", {"Eve/T1.ipynb": notebook("Eve"), "eve/T1.ipynb": notebook("eve")}
    )
    code, out = run_collect(course, capsys, archive)
    assert code == 1 and not (course.root / "submitted").exists()
    assert out.lower().count("eve is the name of 2 students in this download: not collected") == 2
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\nEve,eve_upper,Eve U\neve,eve_lower,Eve L\n")
    assert run_collect(course, capsys, archive, "--roster", roster)[0] == 0
    assert (whose(course, "eve_upper"), whose(course, "eve_lower")) == ("Eve", "eve")


# ------------------------------------------------------------------------------------------ finding 4


def test_names_printed_to_the_terminal_are_escaped(course, tmp_path, capsys):
    clear, hide, forged = "\x1b[2J\x1b[3J", "\x1b[8m", "\rnote: 0 files ignored; all on time"
    archive = make_zip(
        tmp_path / "class.zip",
        {
            f"{clear}.ipynb": notebook("clear"),
            f"x{hide}.txt": "hidden",
            f"ann/{forged}.ipynb": notebook("ann"),
            f"ann/T1{forged}.ipynb": notebook("ann 2"),
            "smith\u202ejohn_1001_1_T1.ipynb": notebook("bidi"),  # a right-to-left override
        },
    )
    code, out = run_collect(course, capsys, archive)
    assert code == 1
    assert not any(ch in out for ch in "\x1b\r\u202e"), repr(out)
    assert "\\x1b[2J\\x1b[3J.ipynb" in out and "x\\x1b[8m.txt" in out and "\\rnote: 0 files ignored" in out
    assert "\\u202e" in out and whose(course, "ann") in ("ann", "ann 2")
    assert shown("a\\x1b") == "a\\\\x1b" and shown("m\u00fcller") == "m\u00fcller"


# ------------------------------------------------------------------------------------------ finding 5


def test_in_a_folder_upload_a_students_file_names_say_nothing_about_who_or_when(course, tmp_path, capsys):
    inbox = tmp_path / "classroom"
    for path, who in (
        ("mallory/victim2_LATE_1_2_x.ipynb", "mallory"),
        ("victim2/T1.ipynb", "victim2"),
        ("eve/eve_123_456_T1.ipynb", "eve"),  # named like an on-time Canvas download
        ("carol/T1/T1.ipynb", "carol"),
    ):
        (inbox / path).parent.mkdir(parents=True, exist_ok=True)
        (inbox / path).write_text(notebook(who))
    (inbox / "carol/T1/timestamp.txt").write_text("2026-11-01 00:00:00.000000 UTC")  # she wrote it
    future = datetime(2027, 9, 1).timestamp()  # the folder was copied: every file time is new
    for path in inbox.rglob("*"):
        os.utime(path, (future, future))

    found = collect(course, "T1", inbox)
    assert {sid: whose(course, sid) for sid in found.students} == {
        "mallory": "mallory",
        "victim2": "victim2",
        "eve": "eve",
        "carol": "carol",
    }
    assert found.late == {} and found.times == {}
    assert all(stamp(course, sid) is None for sid in found.students)
    results = [Result(sid, "T1", max_score=100, score=100, status="graded") for sid in found.students]
    assert {
        sid: late.penalty for sid, late in late_penalties(course, "T1", results).items()
    } == dict.fromkeys(found.students, 0)
    assert {h.source for h in found.handins} == {"unknown: counts as on time"}
    assert "4 hand-in(s) have no time from the LMS or you and count as on time" in "\n".join(found.notes)

    # the instructor's rules: one student's time, then everyone else's; the exchange file only when asked
    rules = received_rules(["victim2=2026-12-02 10:00 UTC", "2026-12-01 20:00 UTC"], exchange_timestamps=True)
    found = collect(course, "T1", inbox, rules=rules)
    assert found.times == {
        "victim2": datetime(2026, 12, 2, 10, 0),
        "carol": datetime(2026, 11, 1),
        "mallory": datetime(2026, 12, 1, 20, 0),
        "eve": datetime(2026, 12, 1, 20, 0),
    }
    assert stamp(course, "victim2") == "2026-12-02 10:00:00.000000 UTC"
    sources = {h.student_id: h.source for h in found.handins}
    assert sources["victim2"] == "instructor (--received)"
    assert sources["carol"] == "exchange timestamp.txt (--exchange-timestamps)"
    assert sources["eve"] == "instructor (--received for everyone)"
    assert cli.main(["--course", str(course.root), "collect", "T1", str(inbox), "--received", "soon"]) == 2
    assert (
        cli.main(["--course", str(course.root), "collect", "T1", str(inbox), "--received", "a\nb=2026-12-01"])
        == 2
    )


def test_a_canvas_download_gives_the_lms_verdict_and_never_the_zips_times(course, tmp_path, capsys):
    archive = make_zip(
        tmp_path / "canvas.zip",
        {
            "ontime_3001_1_T1.ipynb": notebook("on time"),
            "tardy_LATE_3002_2_T1.ipynb": notebook("late"),
            "lower_late_3003_3_T1.ipynb": notebook("late too"),  # the case Canvas writes it in today
            # the part after the attachment id is the student's own file name: it names no one, marks nothing
            "mallory_3004_4_ontime_LATE_3001_9_T1.ipynb": notebook("mallory"),
        },
        when=(2027, 9, 1, 12, 0, 0),  # when the zip was made, months after the due date
    )
    code, out = run_collect(course, capsys, archive, "--received", "2027-01-01 00:00 UTC")
    assert code == 0
    assert whose(course, "ontime") == "on time" and whose(course, "mallory") == "mallory"
    assert stamp(course, "ontime") is None and stamp(course, "mallory") is None  # on time by the LMS
    assert stamp(course, "tardy") == stamp(course, "lower") == "2026-12-01 23:59:01.000000 UTC"
    assert re.search(r"tardy\s+3002\s+2026-12-01 23:59:01 UTC\s+LMS: LATE, time unknown", out)
    assert re.search(r"ontime\s+3001\s+-\s+LMS: on time", out)
    assert "2 LMS: LATE" in out and "2 LMS: on time" in out


def test_a_late_mark_with_no_due_date_to_be_late_against_is_listed_to_resolve(course, tmp_path, capsys):
    archive = make_zip(tmp_path / "canvas.zip", {"tardy_LATE_3002_2_T2.ipynb": notebook("late")})
    code = cli.main(["--course", str(course.root), "collect", "T2", str(archive)])  # T2 has no due date
    out = capsys.readouterr().out
    assert code == 1 and course.submission("T2", "tardy").is_file()
    assert "marked LATE by the LMS, but T2 has no due date: set it (`deadline`), then collect again" in out


# ------------------------------------------------------------------------------------------ finding 6


def patch_member(archive: Path, name: str, size: int | None, new_name: bytes | None = None) -> None:
    """Rewrite ``name``'s uncompressed size (a stored member), or its name (as long), in the zip's local and
    central headers, as a hand-made zip could have them."""
    data = bytearray(archive.read_bytes())
    encoded = name.encode()
    for signature, name_offset, size_offset in ((b"PK\x03\x04", 30, 22), (b"PK\x01\x02", 46, 24)):
        start = 0
        while (at := data.find(signature, start)) >= 0:
            where = at + name_offset
            if data[where : where + len(encoded)] == encoded:
                if size is not None:
                    data[at + size_offset : at + size_offset + 4] = size.to_bytes(4, "little")
                if new_name is not None:
                    data[where : where + len(encoded)] = new_name
            start = at + 4
    archive.write_bytes(bytes(data))


def test_one_bad_member_costs_one_student(course, tmp_path, capsys):
    archive = tmp_path / "class.zip"
    link = zipfile.ZipInfo("linked.ipynb")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a" * 300 + ".ipynb", notebook("long"))
        zf.writestr("longname_4001_1_" + "x" * 300 + ".ipynb", notebook("long canvas"))
        zf.writestr("Z", notebook("empty"))  # its name becomes a NUL below, which a zip reader cuts to ""
        zf.writestr("dave.ipynb", notebook("dave file"))
        zf.writestr("dave.ipynb/T1.ipynb", notebook("dave folder"))
        zf.writestr("liar.ipynb", notebook("liar") + " " * 500)
        zf.writestr(link, "/etc/passwd")
        zf.writestr("../../outside.ipynb", notebook("outside"))
        zf.writestr("erin.ipynb", notebook("erin"))
    patch_member(archive, "liar.ipynb", 10)
    patch_member(archive, "Z", None, new_name=b"\x00")

    code, out = run_collect(course, capsys, archive)
    assert code == 1 and "Traceback" not in out
    collected = {
        p.parent.parent.name: whose(course, p.parent.parent.name) for p in course.submitted("T1").values()
    }
    assert collected == {
        "erin": "erin",
        "dave": "dave file",
        "dave.ipynb": "dave folder",
        "longname": "long canvas",
    }
    problems = out[out.index("to resolve") :]
    for reason in ("is no usable student id: not collected", "a link", "unsafe path (..)"):
        assert reason in problems, reason
    assert "skipped : an empty name" in out
    assert re.search(
        r"liar\.ipynb\s+liar\s+\(not collected\)\s+its notebook liar\.ipynb could not be read", out
    )
    assert not (tmp_path / "outside.ipynb").exists()


def test_a_folder_collect_has_a_size_cap_and_follows_no_link(course, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(intake, "MAX_MEMBER_BYTES", 1000)
    inbox = tmp_path / "inbox"
    (inbox / "big").mkdir(parents=True)
    (inbox / "big" / "T1.ipynb").write_text(notebook("big") + " " * 2000)
    (inbox / "fred.ipynb").write_text(notebook("fred"))
    (inbox / "gina.ipynb").symlink_to(course.source_notebook("T1"))  # the solutions, by a link
    os.mkfifo(inbox / "hal.ipynb")  # would block a reader forever
    code, out = run_collect(course, capsys, inbox)
    assert code == 1
    assert whose(course, "fred") == "fred" and set(course.submitted("T1")) == {"fred"}
    assert re.search(r"big\s+big\s+\(not collected\)\s+its notebook big/T1\.ipynb could not be read", out)
    assert re.search(r"gina\.ipynb\s+-\s+\(not collected\)\s+skipped, a link", out)
    assert re.search(r"hal\.ipynb\s+-\s+\(not collected\)\s+skipped, not a regular file", out)


# ------------------------------------------------------------------------------------------ a name binds no LMS id


def collect_ada_from_a_folder(course: Course, tmp_path: Path, graded: bool) -> None:
    """ada_lovelace handed in through a plain folder: a student with no LMS user id (in the gradebook once her
    work is graded, only in ``submitted/`` before)."""
    inbox = tmp_path / "inbox"
    (inbox / "ada_lovelace").mkdir(parents=True)
    (inbox / "ada_lovelace" / "T1.ipynb").write_text(notebook("ada"))
    assert collect(course, "T1", inbox).problems == []
    if graded:
        grade(course, "ada_lovelace", 90)


def grade(course: Course, sid: str, score: float) -> None:
    """``sid``'s result, and their row in the gradebook, as grading makes them."""
    save_result(course, Result(sid, "T1", max_score=100, score=score, status="graded"))
    with gradebook(course) as gb:
        gb.update_or_create_student(sid)


def canvas_rows(course: Course, tmp_path: Path) -> dict[str, list[str]]:
    """The Canvas export's rows by the gradebook's student id (the ``Student`` column, where no name was given)."""
    with open(export_canvas(course, tmp_path / "canvas.csv", ["T1"]), encoding="utf-8") as fh:
        return {row[0]: row for row in list(csv.reader(fh))[1:]}


@pytest.mark.parametrize("graded", [True, False], ids=["in the gradebook", "only collected"])
def test_a_classmate_named_as_a_folder_student_in_canvas_gets_neither_her_row_nor_her_hand_in(
    course, tmp_path, capsys, graded
):
    collect_ada_from_a_folder(course, tmp_path, graded)
    # Canvas user 999 renames themselves so that Canvas writes her id as their name
    attack = make_zip(tmp_path / "canvas.zip", {"ada_lovelace_999_4242_T1.ipynb": notebook("mallory")})
    code, out = run_collect(course, capsys, attack)
    assert code == 1
    assert whose(course, "ada_lovelace") == "ada"  # her hand-in stays hers
    assert whose(course, "ada_lovelace_999") == "mallory"  # theirs is collected, under an id of its own
    expected = {"ada_lovelace": None} if graded else {}  # before grading, she is not in the gradebook
    assert lms_ids(course) == {**expected, "ada_lovelace_999": "999"}
    table = out[out.index("1 to resolve") :]
    assert re.search(
        r"ada_lovelace_999_4242_T1\.ipynb\s+999\s+ada_lovelace_999\s+ada_lovelace is a student already, with no "
        r"LMS user id, and a name alone binds none; collected with its LMS user id",
        table,
    )
    assert "if LMS user 999 is ada_lovelace, give --roster the line 999,ada_lovelace,NAME" in table

    if not graded:
        grade(course, "ada_lovelace", 90)
    grade(course, "ada_lovelace_999", 10)
    rows = canvas_rows(course, tmp_path)
    assert rows["ada_lovelace"][1:] == ["", "", "", "", "90"]  # matched by name in Canvas, never sent to 999
    assert rows["ada_lovelace_999"][1:] == ["999", "", "", "", "10"]
    # the same download again: 999 keeps the row the gradebook now holds for it, ada hers
    assert run_collect(course, capsys, attack)[0] == 0
    assert lms_ids(course).get("ada_lovelace") is None and whose(course, "ada_lovelace") == "ada"
    # had 999 been ada, the line the problem gives settles it
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n999,ada_lovelace,Ada Lovelace\n")
    assert run_collect(course, capsys, attack, "--roster", roster)[0] == 0
    assert lms_ids(course)["ada_lovelace"] == "999" and lms_ids(course)["ada_lovelace_999"] is None


def test_an_lms_id_is_bound_to_an_existing_student_by_the_roster_and_then_by_the_gradebook(
    course, tmp_path, capsys
):
    collect_ada_from_a_folder(course, tmp_path, graded=True)
    first = make_zip(tmp_path / "a.zip", {"ada_lovelace_999_1_T1.ipynb": notebook("ada in canvas")})
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n999,ada_lovelace,Ada Lovelace\n")
    code, out = run_collect(course, capsys, first, "--roster", roster)
    assert code == 0 and "to resolve" not in out
    assert whose(course, "ada_lovelace") == "ada in canvas" and lms_ids(course)["ada_lovelace"] == "999"

    # an earlier LMS hand-in is the LMS's word: 999 is ada whatever name Canvas writes now; a newcomer whose
    # name is no student's yet takes it as their id
    later = make_zip(
        tmp_path / "b.zip",
        {"byronada_999_2_T1.ipynb": notebook("ada, renamed"), "leeann_1003_3_T1.ipynb": notebook("ann")},
    )
    code, out = run_collect(course, capsys, later)
    assert code == 0 and "to resolve" not in out
    assert whose(course, "ada_lovelace") == "ada, renamed" and whose(course, "byronada") is None
    assert lms_ids(course) == {"ada_lovelace": "999", "leeann": "1003"}
    rows = canvas_rows(course, tmp_path)
    assert rows["Ada Lovelace"][1:] == ["999", "", "", "", "90"]


def test_the_id_collect_falls_back_to_is_no_other_students_either(course, tmp_path, capsys):
    first = make_zip(tmp_path / "a.zip", {"doejane_2001_1_T1.ipynb": notebook("jane")})
    assert run_collect(course, capsys, first)[0] == 0
    inbox = tmp_path / "inbox"
    (inbox / "doejane_2002").mkdir(parents=True)  # a folder student whose id is the one collect would choose
    (inbox / "doejane_2002" / "T1.ipynb").write_text(notebook("folder student"))
    assert collect(course, "T1", inbox).problems == []
    second = make_zip(tmp_path / "b.zip", {"doejane_2002_2_T1.ipynb": notebook("user 2002")})
    code, out = run_collect(course, capsys, second)
    assert code == 1
    assert whose(course, "doejane_2002") == "folder student" and whose(course, "lms_2002") == "user 2002"
    assert lms_ids(course) == {"doejane": "2001", "lms_2002": "2002"}
    assert "doejane is the id of LMS user 2001 in the gradebook" in out
    assert "if LMS user 2002 is doejane, give --roster the line 2002,doejane,NAME" in out


def test_the_gradebook_takes_an_lms_id_for_a_student_it_holds_without_it_only_from_the_roster(course):
    grade(course, "ada_lovelace", 90)
    with pytest.raises(RuntimeError, match="grader error: LMS user 999 is not ada_lovelace's"):
        intake.remember_lms_ids(course, {"ada_lovelace": "999"}, intake.Roster())
    assert lms_ids(course) == {"ada_lovelace": None}
    intake.remember_lms_ids(
        course, {"ada_lovelace": "999", "newcomer": "1000"}, intake.Roster({"999": "ada_lovelace"})
    )
    assert lms_ids(course) == {"ada_lovelace": "999", "newcomer": "1000"}


# ------------------------------------------------------------------------------------------ the Canvas CSV


def test_the_canvas_csv_has_the_columns_canvas_matches_on_and_the_assignments_canvas_id(
    course, tmp_path, capsys
):
    archive = make_zip(
        tmp_path / "canvas.zip",
        {
            "smithjohn_1001_1_T1.ipynb": notebook("one"),
            "smithjohn_1002_2_T1.ipynb": notebook("two"),
            "leeann_1003_3_T1.ipynb": notebook("ann"),
        },
    )
    (tmp_path / "inbox" / "walkin").mkdir(parents=True)
    (tmp_path / "inbox" / "walkin" / "T1.ipynb").write_text(notebook("walk-in"))
    roster = tmp_path / "roster.csv"
    roster.write_text("lms_id,student_id,name\n1001,jsmith,John Smith\n")
    run_collect(course, capsys, archive, "--roster", roster)
    run_collect(course, capsys, tmp_path / "inbox")
    for sid, score, status in (
        ("jsmith", 100, "graded"),
        ("smithjohn", 40, "graded"),  # the roster named the other one: this one keeps the name
        ("leeann", 0, "error"),
        ("walkin", 70, "graded"),
    ):
        save_result(course, Result(sid, "T1", max_score=100, score=score, status=status))

    target = tmp_path / "canvas.csv"
    code = cli.main(
        ["--course", str(course.root), "export", "--format", "canvas", "--assignment", "T1",
         "--canvas-id", "T1=4567", "--to", str(target)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    rows = list(csv.reader(target.open(encoding="utf-8")))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "T1 (4567)"]
    assert rows[1:] == [
        ["John Smith", "1001", "", "", "", "100"],
        ["leeann", "1003", "", "", "", ""],  # a grader error: left as Canvas has it
        ["smithjohn", "1002", "", "", "", "40"],
        ["walkin", "", "", "", "", "70"],
    ]
    assert "walkin" in out and "no Canvas user id" in out

    # without Canvas's id the column is the assignment's name, which Canvas matches on the title
    export_canvas(course, target, ["T1"])
    header = next(csv.reader(target.open(encoding="utf-8")))
    assert header[5] == "T1" and not re.fullmatch(r"(.*)\s\((\d+)\)", header[5])

    # only what is named: no assignment, no export
    assert cli.main(["--course", str(course.root), "export", "--format", "canvas", "--to", str(target)]) == 2
    assert "--assignment" in capsys.readouterr().err
