"""Similar submissions: a planted pair of near-copies (renamed, reordered, handed in from Colab) ranks first
and is flagged; honest solutions of the same exercise, and the starter code everyone shares, are not."""

from __future__ import annotations

import csv
import re

import nbformat
import pytest

from autograder.commands import cli
from autograder.course import Course
from autograder.intake.release import release
from autograder.outputs.similarity import (
    THRESHOLD,
    compare_pair,
    find_similar,
    fingerprint,
    starter_hashes,
    write_similarity,
)
from tests.fixtures import similar_submissions as planted


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    """S1 released, and the planted class's submissions collected."""
    root = planted.make_course(tmp_path_factory.mktemp("similar"))
    course = Course(root=root, db="sqlite:///" + str(root / "gradebook.db"))
    release(course, [planted.AID])
    released = nbformat.read(str(course.release_notebook(planted.AID)), as_version=4)
    for sid, nb in planted.class_submissions(released).items():
        path = course.submission(planted.AID, sid)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
    return course


def test_the_planted_pair_ranks_first_and_is_the_only_one_flagged(course):
    result = find_similar(course, planted.AID)
    scores = {(p.first, p.second): round(p.score, 3) for p in result.pairs}
    top = result.pairs[0]
    assert (top.first, top.second) == planted.PLANTED and top.flagged, scores
    # names are normalised away: the copy is near 1 although bo renamed every variable and helper
    assert top.score > 0.9 and all(c.score > 0.9 for c in top.cells), scores
    assert result.flagged == [top], scores
    assert max(p.score for p in result.pairs[1:]) < THRESHOLD / 2, scores
    # every honest student was compared with everyone; the blank hand-ins, all starter code, with no one
    assert set(result.students) == {*planted.PLANTED, *planted.HONEST}
    assert all("no answer differs" in result.notes[sid] for sid in planted.BLANK)
    assert "found by its content" in result.notes["bo"]  # his Colab notebook lost its metadata


def test_one_copied_answer_among_honest_ones_is_flagged(course):
    """bo's copy of ana's logistic regression handed in with his own knn (eli's approach): less than half of
    all their code is shared, but that one answer is a copy."""
    starter = starter_hashes(course, planted.AID)
    prints = {
        "ana": {gid: fingerprint("ana", gid, code, starter) for gid, code in planted.ANA.items()},
        "bo": {
            "knn": fingerprint("bo", "knn", planted.HONEST_ANSWERS["eli"]["knn"], starter),
            "logistic": fingerprint("bo", "logistic", planted.BO["logistic"], starter),
        },
    }
    pair = compare_pair("ana", "bo", prints)
    assert pair.overall < THRESHOLD <= pair.score
    assert pair.reaches(THRESHOLD) == "answer logistic: 1.00 alike"


def test_report_marks_the_shared_code_but_not_the_starter_code(course, tmp_path):
    result, page, table = write_similarity(course, planted.AID, out_dir=tmp_path)
    text = page.read_text()
    assert "data:image/png;base64," in text and "ana &amp; bo" in text
    marked = re.findall(r"<mark>(.*?)</mark>", text, re.S)
    assert any("np.dot(delta, delta)" in m for m in marked)  # bo's renamed copy of ana's loop
    # the release's signature and docstring, in every answer, are boilerplate: not shared code
    [honest] = [p for p in result.pairs if (p.first, p.second) == ("ana", "cy")]
    assert [(c.grade_id, c.score, "<mark>" in c.left) for c in honest.cells] == [
        ("knn", 0.0, False),
        ("logistic", 0.0, False),
    ]
    rows = [r for r in csv.DictReader(open(table, encoding="utf-8")) if r["kind"] == "students"]
    assert len(rows) == len(result.pairs) == 15
    assert (rows[0]["student_a"], rows[0]["student_b"], rows[0]["flagged"]) == ("ana", "bo", "1")
    assert [r["flagged"] for r in rows[1:]] == ["0"] * 14


def test_similarity_command_prints_the_threshold_and_the_flagged_pair(course, capsys):
    assert cli.main(["--course", str(course.root), "similarity", planted.AID]) == 0
    out = capsys.readouterr().out
    assert f"similarity of {THRESHOLD:g} or more" in out and "! ana & bo" in out
    assert (course.root / "reports" / planted.AID / "similarity.html").is_file()
