"""The instructor's class report page, from recorded results alone (no grading here: fast). The browser
test in tests/browser/test_browser.py renders one made from a real grading run."""

from __future__ import annotations

import html
import re

from autograder.course import Course
from autograder.files import write_json_atomic
from autograder.outputs.feedback import write_feedback
from autograder.outputs.report import page_path, write_report
from tests.fixtures.toy_course import make_course

HIDDEN_FAILURE = "t1.scale.random: 7 of 12 values differ; largest difference 3.5 at [0, 1]"


def cell(grade_id: str, points: float, worth: float, message: str = "") -> dict:
    passed = points == worth
    return {"grade_id": grade_id, "points": points, "max_points": worth, "passed": passed, "message": message,
            "kernel_verdict": "passed" if passed else "failed"}  # fmt: skip


def result(sid: str, status: str, cells: list[dict], reason: str = "", **more) -> dict:
    return {
        "student_id": sid, "assignment": "T1", "max_score": 100.0, "score": sum(c["points"] for c in cells),
        "status": status, "reason": reason, "cells": cells, "isolation": "bubblewrap (test)",
        "seconds": 4.25, "seconds_in_sandbox": 3.5, "peak_memory_mb": 812.4, **more,
    }  # fmt: skip


def planted_results(course: Course) -> None:
    """Five students: full marks, two who fail the same hidden case, a flagged one and a grader error."""
    square, scale = cell("test_square", 40, 40), cell("test_scale", 60, 60)
    rows = [
        result("ann", "graded", [square, scale], "all tests passed"),
        result("ben", "graded", [square, cell("test_scale", 0, 60, HIDDEN_FAILURE)], "1 of 2 tests failed"),
        result("cat", "graded", [square, cell("test_scale", 0, 60, HIDDEN_FAILURE.replace("3.5", "2"))]),
        result("dan", "graded", [cell("test_square", 0, 40, "t1.square.small: got [1. 2.], expected [1. 4.]"),
                                 cell("test_scale", 0, 60, "t1.scale.small: got [1. 2.], expected [3. 6.]")]),
        result("eve", "flagged", [square, scale], "all tests passed",
               flags=["test_square: the kernel reported this test cell as passing, but one of its public checks fails"]),
        result("fox", "error", [], "grader error: the kernel could not start"),
    ]  # fmt: skip
    for row in rows:
        write_json_atomic(course.result("T1", row["student_id"]), row)


def test_class_report_page_shows_failures_flags_errors_and_links(tmp_path):
    course = Course(root=make_course(tmp_path / "course"), db="sqlite:///" + str(tmp_path / "gb.db"))
    planted_results(course)
    write_feedback(course, "T1")
    similar = course.root / "reports" / "T1" / "similarity.csv"
    similar.parent.mkdir(parents=True)
    similar.write_text("rank,student_a,student_b,similarity,shared,flagged,cells\n1,ann,eve,0.97,800,1,\n")
    out = course.root / "reports"
    text, png = write_report(course, "T1", out)
    page = page_path(out, "T1").read_text(encoding="utf-8")

    assert png.read_bytes().startswith(b"\x89PNG") and "data:image/png;base64," in page
    rows = dict(re.findall(r"<tr><td>(test_\w+)</td>(.*?)</tr>", page, re.S))
    assert "4 / 5" in rows["test_square"] and "2 / 5" in rows["test_scale"]
    # the case that failed most in test_scale is the hidden one, 2 of its 3 failures, with its message
    assert "t1.scale.random</b>: 2 of 3 failures" in rows["test_scale"]
    assert html.escape(HIDDEN_FAILURE) in rows["test_scale"]
    flagged = page.split("<h2>Flagged for review</h2>")[1].split("<h2>")[0]
    assert "<b>eve</b>: test_square: the kernel reported" in flagged
    assert "<b>ann</b> &amp; <b>eve</b>: answers alike" in flagged and 'href="T1/similarity.html"' in flagged
    errors = page.split("<h2>Grader errors</h2>")[1].split("<h2>")[0]
    assert "<b>fox</b>: grader error: the kernel could not start" in errors
    assert "bubblewrap (test): 6 submission(s)" in page
    links = re.findall(r'<a href="([^"]+)">feedback</a>', page)
    assert len(links) == 6 and all((out / link).resolve().is_file() for link in links)
    assert "../feedback/ben/T1/T1.html" in links
    ann = re.search(r"<tr><td>ann</td>(.*?)</tr>", page, re.S).group(1)
    seconds, in_sandbox, megabytes = re.findall(r"<td class=num>([^<]*)</td>", ann)[1:]
    assert (seconds, in_sandbox, megabytes) == ("4.2", "3.5", "812")
