"""Similarity against what students really do: code moved out of the answer cells, the published solution
pasted (renamed), last term's notebook handed in again, and notebooks that break a naive reader (nested
JSON, metadata of the wrong types, a link, a 500,000-line cell). The report goes on for everyone, flags
each copy by name, and stays small."""

from __future__ import annotations

import csv
import json
import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder.commands import cli
from autograder.course import Course
from autograder.grading.record import save_result
from autograder.intake.release import release
from autograder.outputs.report import write_report
from autograder.result import Result
from tests.fixtures import similar_submissions as planted

AID = planted.AID
# fay's own solutions, moved into ordinary cells; the answer cells keep only a comment
MOVED = ("mo1", "mo2")
# the published solution of knn, every name changed and the lines spread out; logistic is the student's own
PASTED_KNN = (
    planted.KNN_HEAD
    + """    # distance of every query to every stored point
    dd = ((test_x[:, None, :] - train_x[None, :, :]) ** 2).sum(axis=2)

    near = np.argsort(dd, axis=1, kind="stable")[:, :k]
    return np.array([np.bincount(v).argmax() for v in train_y[near]])
"""
)
HUGE_LINES = 500_000


def moved_out(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    nb = planted.answered(release, {gid: "# my solution is in the cell below" for gid in answers})
    nb.cells.append(new_code_cell("\n\n".join(answers.values())))
    return nb


def write_raw(course: Course, sid: str, text: str) -> None:
    path = course.submission(AID, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def similar(tmp_path_factory):
    """The planted class, the students above and an archive of an earlier term, with the similarity report,
    its CSV and the class report written by the commands an instructor runs."""
    root = planted.make_course(tmp_path_factory.mktemp("public"))
    course = Course(root=root, db="sqlite:///" + str(root / "gradebook.db"))
    release(course, [AID])
    released = nbformat.read(str(course.release_notebook(AID)), as_version=4)
    handed_in = planted.class_submissions(released)
    handed_in.update({sid: moved_out(released, planted.HONEST_ANSWERS["fay"]) for sid in MOVED})
    handed_in["pat"] = planted.answered(
        released, {"knn": PASTED_KNN, "logistic": planted.HONEST_ANSWERS["dee"]["logistic"]}
    )
    huge = planted.answered(released, planted.HONEST_ANSWERS["cy"])
    huge.cells.append(new_code_cell("x = 1\n" * HUGE_LINES))
    handed_in["huge"] = huge
    bad_id = planted.answered(released, planted.HONEST_ANSWERS["eli"])
    for cell in bad_id.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "knn":
            cell.metadata["nbgrader"]["grade_id"] = []
    handed_in["bad_id"] = bad_id
    for sid, nb in handed_in.items():
        path = course.submission(AID, sid)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
    write_raw(course, "deep", "[" * 100_000 + "]" * 100_000)
    write_raw(course, "deep_cells", '{"nbformat": 4, "cells": ' + "[" * 50_000 + "]" * 50_000 + "}")
    wrong = json.loads(nbformat.writes(planted.answered(released, planted.HONEST_ANSWERS["dee"])))
    wrong["cells"][0]["metadata"] = {"nbgrader": {"grade_id": {"a": 1}, "solution": "yes", "points": []}}
    wrong["cells"][1]["source"] = [1, None, {"x": []}]
    wrong["cells"][2]["cell_type"] = ["code"]
    wrong["metadata"] = []
    write_raw(course, "wrong_types", json.dumps(wrong))
    linked = course.submission(AID, "linked")
    linked.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(course.source_notebook(AID), linked)

    archive = tmp_path_factory.mktemp("archive")
    earlier = archive / "2025" / "zed" / f"{AID}.ipynb"
    earlier.parent.mkdir(parents=True)
    nbformat.write(planted.answered(released, planted.ANA), str(earlier))
    os.symlink(course.source_notebook(AID), archive / "2025" / "link.ipynb")

    code = cli.main(["--course", str(root), "similarity", AID, "--archive", str(archive)])
    out = root / "reports" / AID
    with open(out / "similarity.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for sid in handed_in:  # results for the class report (as grading would record them)
        save_result(course, Result(sid, AID, 100.0, 100.0, "graded", "all tests passed"))
    write_report(course, AID, root / "reports")
    return {
        "course": course,
        "code": code,
        "page": (out / "similarity.html").read_text(encoding="utf-8"),
        "rows": rows,
        "report": (root / "reports" / f"{AID}-report.html").read_text(encoding="utf-8"),
    }


def flagged(rows, kind):
    return {(r["student_a"], r["student_b"]): r for r in rows if r["kind"] == kind and r["flagged"] == "1"}


def test_the_report_is_written_for_the_class_whatever_some_notebooks_hold(similar):
    assert similar["code"] == 0
    page = similar["page"]
    assert "deep: not compared: not a notebook: its JSON is nested too deeply" in page
    assert "deep_cells: not compared: not a notebook: its JSON is nested too deeply" in page
    assert "linked: not compared: the file is a link, not a notebook" in page
    # metadata of the wrong types is ignored, not fatal: these answers are found by content and compared
    students = {r["student_a"] for r in similar["rows"]} | {r["student_b"] for r in similar["rows"]}
    assert {"bad_id", "wrong_types", "huge", "ana", "cy"} <= students
    # and the planted pair is still the one pair of students flagged among the original class
    pairs = flagged(similar["rows"], "students")
    assert ("ana", "bo") in pairs


def test_code_moved_out_of_the_answer_cells_is_still_compared(similar):
    [pair] = [r for r in similar["rows"] if (r["student_a"], r["student_b"]) == MOVED]
    assert pair["flagged"] == "1" and float(pair["similarity"]) > 0.9, pair
    assert float(pair["overall"]) > 0.9  # over everything they wrote, not only the answer cells


def test_a_pasted_published_solution_is_flagged_by_name(similar):
    matches = flagged(similar["rows"], "published")
    assert set(matches) == {("pat", f"the published solution of {AID}.knn")}, matches
    [row] = matches.values()
    assert float(row["similarity"]) >= 0.9
    assert row["reason"] == f"matches the published solution of {AID}.knn, {float(row['similarity']):.2f}"
    assert row["reason"] in similar["page"]
    # honest solutions of the same exercise stay far below the bar
    honest = [r for r in similar["rows"] if r["kind"] == "published" and r["student_a"] in planted.HONEST]
    assert honest and max(float(r["similarity"]) for r in honest) < 0.5


def test_last_terms_notebook_is_found_in_the_archive_and_the_archive_is_not_compared_with_itself(similar):
    matches = flagged(similar["rows"], "archive")
    assert {("ana", "archive: 2025/zed/S1"), ("bo", "archive: 2025/zed/S1")} <= set(matches), matches
    assert all(a != "archive" and not a.startswith("archive:") for a, _ in matches)
    assert "matches archive: 2025/zed/S1" in similar["page"]
    assert not any("link" in r["student_b"] for r in similar["rows"])  # a link in the archive is not followed


def test_the_class_report_names_each_match(similar):
    report = similar["report"]
    assert f"<b>pat</b>: matches the published solution of {AID}.knn" in report
    assert "<b>ana</b>: matches archive: 2025/zed/S1" in report
    assert "<b>ana</b> &amp; <b>bo</b>: answers alike" in report


def test_a_huge_cell_is_compared_in_part_and_the_page_stays_small(similar):
    page = similar["page"]
    assert len(page.encode()) < 2 * 2**20, len(page)
    assert "huge: other cells: only the first 100,000 of" in page
