"""A notebook built to break the grader is the student's ``unreadable`` with a reason, never a grader error:
JSON nested past Python's recursion limit, metadata of the wrong types, huge numbers, lone surrogates, a link
to the course's own source (also as a Gradescope upload), a file too large to read. Checksums of a 500 MB
hand-in are taken in chunks. No kernel starts here."""

from __future__ import annotations

import json
import os
import tracemalloc
from types import SimpleNamespace

import nbformat
import pytest

from autograder.commands.gradescope import run_on_gradescope
from autograder.course import Course
from autograder.files import sha256_file
from autograder.grading.pipeline import Grading, Job, repair_stage
from autograder.intake.release import release
from autograder.intake.repair import MAX_NOTEBOOK_BYTES, Template, repair
from autograder.result import Result
from tests.fixtures.toy_course import make_course, submit


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    course = Course(root=make_course(tmp_path_factory.mktemp("malformed") / "course"))
    release(course, ["T1"])
    return course


def release_json(course: Course) -> dict:
    return json.loads(course.release_notebook("T1").read_text())


def with_cell_change(course: Course, index: int, **change) -> str:
    nb = release_json(course)
    nb["cells"][index].update(change)
    return json.dumps(nb)


def with_nbgrader(course: Course, index: int, **fields) -> str:
    nb = release_json(course)
    nb["cells"][index]["metadata"]["nbgrader"].update(fields)
    return json.dumps(nb)


# submission -> what repair must say is fatal (None: readable, repaired with notes)
FATAL = {
    "nested_list": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "nested_cells": ('{"nbformat": 4, "cells": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    "nested_metadata": (
        '{"nbformat": 4, "metadata": ' + '{"a":' * 50_000 + "1" + "}" * 50_001,
        "nested too deeply",
    ),
    "huge_integer": ('{"nbformat": 4, "cells": [], "x": ' + "9" * 10_000 + "}", "not a notebook"),
    "nbformat_a_list": ('{"nbformat": [' + "4," * 10_000 + '4], "cells": []}', "unsupported notebook format"),
    "nbformat_true": ('{"nbformat": true, "cells": []}', "unsupported notebook format"),
}


@pytest.mark.parametrize("sid", sorted(FATAL))
def test_unreadable_json_is_the_students_with_a_short_reason(course, sid):
    text, reason = FATAL[sid]
    submit(course, sid, text)
    repaired = repair(course, "T1", course.submission("T1", sid))
    assert repaired.notebook is None and reason in repaired.fatal, repaired.fatal
    assert len(repaired.fatal) < 200


@pytest.mark.parametrize(
    ("sid", "make"),
    [
        ("grade_id_list", lambda c: with_nbgrader(c, 2, grade_id=[])),
        ("grade_id_dict", lambda c: with_nbgrader(c, 3, grade_id={"a": 1})),
        ("points_text", lambda c: with_nbgrader(c, 3, points="ten", solution="yes", locked=None)),
        ("nbgrader_list", lambda c: with_cell_change(c, 2, metadata={"nbgrader": [1, 2]})),
        ("metadata_text", lambda c: with_cell_change(c, 2, metadata="x")),
        ("cell_type_list", lambda c: with_cell_change(c, 4, cell_type=["code"])),
        ("source_junk", lambda c: with_cell_change(c, 2, source=[1, None, {"a": [[[]]]}, "x = 1\n"])),
        ("source_number", lambda c: with_cell_change(c, 2, source=12)),
        ("surrogate", lambda c: with_cell_change(c, 2, source="x = '\ud800'\n")),
    ],
)
def test_wrong_types_in_a_notebook_are_ignored_and_it_is_still_graded(course, sid, make):
    submit(course, sid, make(course))
    repaired = repair(course, "T1", course.submission("T1", sid))
    assert repaired.fatal is None, repaired.fatal
    graded = [
        c.metadata["nbgrader"]["grade_id"]
        for c in repaired.notebook.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    ]
    assert graded == ["test_square", "test_scale"]
    nbformat.validate(repaired.notebook)
    nbformat.writes(repaired.notebook).encode("utf-8")  # the notebook to run can be written as UTF-8


def test_the_pipeline_records_an_unreadable_notebook_as_the_students_not_as_a_grader_error(course):
    submit(course, "nested_for_pipeline", "[" * 100_000 + "]" * 100_000)
    batch = SimpleNamespace(course=course, aid="T1", templates={"": Template.read(course, "T1")})
    reference = SimpleNamespace(
        cells={"test_square": {"points": 40}, "test_scale": {"points": 60}}, written={}
    )
    result = Result("nested_for_pipeline", "T1", 100.0)
    grading = Grading(
        Job("nested_for_pipeline"), reference, course.submission("T1", "nested_for_pipeline"), result
    )
    assert repair_stage(batch, grading) is False
    assert (result.status, result.score) == ("unreadable", 0.0)
    assert "nested too deeply" in result.reason and not result.is_error


def test_links_and_oversized_files_are_not_read(course, tmp_path):
    submit(course, "linked", "")
    course.submission("T1", "linked").unlink()
    os.symlink(course.source_notebook("T1"), course.submission("T1", "linked"))
    assert "link" in repair(course, "T1", course.submission("T1", "linked")).fatal
    big = course.submission("T1", "big")
    big.parent.mkdir(parents=True, exist_ok=True)
    with open(big, "wb") as fh:
        fh.truncate(MAX_NOTEBOOK_BYTES + 1)
    assert "not graded" in repair(course, "T1", big).fatal
    fifo = course.submission("T1", "fifo")
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    assert "not a regular file" in repair(course, "T1", fifo).fatal  # and it did not block


def test_a_gradescope_upload_that_links_to_the_source_scores_nothing(course, tmp_path):
    upload = tmp_path / "submission"
    (upload / "sub").mkdir(parents=True)
    os.symlink(course.source_notebook("T1"), upload / "T1.ipynb")
    os.symlink(course.source.parent, upload / "sub" / "course")  # a linked folder is not walked either
    results = tmp_path / "results.json"
    data = run_on_gradescope(course, "T1", upload, results)
    assert data["score"] == 0
    assert data["output"].startswith("unreadable: no .ipynb file was uploaded (T1.ipynb is a link")
    assert json.loads(results.read_text())["score"] == 0


def test_the_checksum_of_a_500_mb_hand_in_is_taken_in_chunks(tmp_path):
    path = tmp_path / "big.ipynb"
    with open(path, "wb") as fh:
        fh.truncate(500 * 2**20)  # sparse: no disk used
    tracemalloc.start()
    digest = sha256_file(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(digest) == 64 and peak < 16 * 2**20, peak
