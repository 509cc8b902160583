"""Sample submissions made from an assignment's source and release: what students hand in, good and bad.

Used by ``make demo`` (the committed samples in ``source/<AID>/samples/``) and by the tests. Each
sample is a transformation of the release, so the samples follow the assignment when it changes:
``python -m autograder samples`` rewrites them, and a test checks that the committed ones are current.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import nbformat

from autograder.course import Course, is_solution, nbgrader_meta

SOLUTION_BLOCK = re.compile(
    r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION[ \t]*\n?", re.S | re.M
)


MODEL_ANSWER = re.compile(r"\*\*Model answer:?\*\*:?[ \t]*\n?(.*)", re.S)


def model_answer(text: str) -> str:
    """A written answer's source as a student who wrote the model answer would leave it: the text after
    ``**Model answer:**`` in its solution block (the rubric before it is the grader's, never a student's)."""
    block = SOLUTION_BLOCK.search(text + "\n")
    inside = block.group(1) if block else text
    found = MODEL_ANSWER.search(inside)
    return (found.group(1) if found else inside).strip()


def solution_block(course: Course | None = None) -> re.Pattern:
    """The solution block as the course's nbgrader configuration delimits it (``### BEGIN SOLUTION`` by
    default)."""
    if course is None:
        return SOLUTION_BLOCK
    config = course.config.ClearSolutions
    begin = config.get("begin_solution_delimeter", "BEGIN SOLUTION")
    end = config.get("end_solution_delimeter", "END SOLUTION")
    if (begin, end) == ("BEGIN SOLUTION", "END SOLUTION"):
        return SOLUTION_BLOCK
    return re.compile(
        rf"^[ \t]*\S*[ \t]*{re.escape(begin)}[ \t]*\n(.*?)^[ \t]*\S*[ \t]*{re.escape(end)}[ \t]*\n?",
        re.S | re.M,
    )


def _answers(source: nbformat.NotebookNode, block: re.Pattern = SOLUTION_BLOCK) -> dict[str, str]:
    """Each answer cell's code as a student who solved it would leave it (solution markers removed); a
    written answer (markdown) holds its model answer."""
    return {
        nbgrader_meta(c)["grade_id"]: model_answer(c.source)
        if c.cell_type == "markdown"
        else block.sub(lambda m: m.group(1), c.source)
        for c in source.cells
        if is_solution(c)
    }


def filled(
    course: Course, aid: str, answered: set[str] | None = None, nb: str | None = None
) -> nbformat.NotebookNode:
    """The release (of the notebook ``nb``) with answers filled in: all of them, or only those in ``answered``."""
    notebook = nbformat.read(str(course.release_notebook(aid, nb)), as_version=4)
    answers = _answers(course.read_source(aid, nb), solution_block(course))
    nb = notebook
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if is_solution(cell) and (answered is None or gid in answered):
            cell.source = answers[gid]
    return nb


CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # nbgrader_config.py's ClearSolutions.code_stub
TEXT_STUB = "YOUR ANSWER HERE"  # and its ClearSolutions.text_stub, for written answers


def untouched(course: Course, aid: str, nb: str | None = None) -> nbformat.NotebookNode:
    """The release as nbgrader generates it from the source, whatever has been saved into the release file
    since (a self-learner works in it): every answer cell holds its stub again (code or written), as the
    course's ``ClearSolutions`` writes it."""
    source = course.read_source(aid, nb)
    config = course.config.ClearSolutions
    language = source.metadata.get("kernelspec", {}).get("language", "python")
    code_stub = (
        config.get("code_stub", {}).get(language, CODE_STUB)
        if isinstance(config.get("code_stub", {}), dict)
        else CODE_STUB
    )
    text_stub = config.get("text_stub", TEXT_STUB)
    block = solution_block(course)
    nb = nbformat.read(str(course.release_notebook(aid, nb)), as_version=4)
    stubs = {}
    for cell in source.cells:
        if is_solution(cell):
            text = code_stub if cell.cell_type == "code" else text_stub
            stub = (
                lambda m, text=text: "".join(  # noqa: E731  (the stub, at the indentation of its BEGIN line)
                    m.group(0)[: len(m.group(0)) - len(m.group(0).lstrip())] + line + "\n"
                    for line in text.splitlines()
                )
            )
            stubs[nbgrader_meta(cell)["grade_id"]] = (
                block.sub(stub, cell.source).rstrip("\n") if block.search(cell.source + "\n") else text
            )
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if is_solution(cell) and gid in stubs:
            cell.source = stubs[gid]
    return nb


def solution_ids(course: Course, aid: str) -> list[str]:
    return list(_answers(course.read_source(aid)))


def strip_nbgrader_metadata(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What Colab or a copy-paste into a new notebook does: every cell loses its nbgrader metadata."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    return nb


def insert_after(nb: nbformat.NotebookNode, grade_id: str | None, code: str) -> nbformat.NotebookNode:
    """Add a code cell after the cell ``grade_id`` (at the top when None)."""
    nb = copy.deepcopy(nb)
    index = 0
    if grade_id is not None:
        index = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == grade_id) + 1
    added = nbformat.v4.new_code_cell(code)
    added["id"] = f"added-{index}"  # stable, so regenerated samples are byte-for-byte the same
    nb.cells.insert(index, added)
    return nb


# Code that a cheating student adds at the top of a blank notebook: make every check a no-op, hide
# tracebacks, forge a results file, and look for the hidden tests and the reference on disk.
CHEAT_CODE = r"""
import builtins, glob, json, os
import dlcourse.grading as g
g.check = g.check_equal = g.check_range = g.check_accuracy = lambda *a, **k: print("passed!")
get_ipython().showtraceback = lambda *a, **k: None
capture = os.environ.get("DLCOURSE_CAPTURE", "capture")
os.makedirs(capture, exist_ok=True)
with open(os.path.join(capture, "cases.jsonl"), "a") as fh:
    fh.write(json.dumps({"name": "forged", "kind": "close", "file": "0000.npy"}) + "\n")
patterns = ["/*/source/*/*.ipynb", "/*/*/source/*/*.ipynb", "/*/*/*/source/*/*.ipynb", "/tmp/*/.grading/reference/*/*",
            "/*/*/.grading/reference/*/*", "/*/*/gradebook.db", "/tmp/*/gradebook.db", "/tmp/*/submitted/*/*/*.ipynb",
            "/dev/shm/*"]
found = [p for pattern in patterns for p in glob.glob(pattern)]
print("found hidden files:", found)
"""


def samples(course: Course, aid: str) -> dict[str, str]:
    """Sample name -> file text: perfect, partial, blank, colab (metadata lost), broken, cheater. Perfect
    and colab answer the written questions with the model answers; partial answers the first half of the
    code answers only; blank leaves every stub."""
    source = course.read_source(aid)
    ids = [nbgrader_meta(c)["grade_id"] for c in source.cells if is_solution(c) and c.cell_type == "code"]
    release = nbformat.read(str(course.release_notebook(aid)), as_version=4)
    out = {
        "perfect": filled(course, aid),
        "partial": filled(course, aid, set(ids[: max(1, len(ids) // 2)])),
        "blank": release,
        "colab": strip_nbgrader_metadata(filled(course, aid)),
        "cheater": insert_after(release, None, CHEAT_CODE.strip()),
    }
    texts = {name: nbformat.writes(nb) + "\n" for name, nb in out.items()}
    texts["broken"] = (
        json.dumps({"cells": [{"cell_type": "code", "source": "print(1)"}]})[:-20] + "\n"
    )  # cut short
    return texts


def write_samples(course: Course, aid: str, target: Path | None = None) -> list[Path]:
    target = target or course.samples(aid)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in samples(course, aid).items():
        path = target / f"{name}.ipynb"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
