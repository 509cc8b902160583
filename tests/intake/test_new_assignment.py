"""An instructor's own assignment in this course's format: ``python -m autograder new AID`` writes a starter
that meets the conventions and grades (its solutions 100, its release 0); ``check --help`` lists the
conventions; a hidden check given an expected value is graded as hidden; the course's own nbgrader
configuration decides the per-cell time limit and the layout's folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import nbformat
import pytest

from autograder.course import ROOT, Course
from autograder.intake.conventions import check, notes, problems
from autograder.intake.new import new

AID = "N1"


def fresh_course(tmp: Path) -> Course:
    shutil.copy(ROOT / "nbgrader_config.py", tmp / "nbgrader_config.py")
    return Course(
        root=tmp, db="sqlite:///" + str(tmp / "gradebook.db"), cache_root=tmp / ".grading" / "cache"
    )


def test_new_refuses_a_bad_or_taken_id(tmp_path):
    course = fresh_course(tmp_path)
    with pytest.raises(ValueError, match="assignment id"):
        new(course, "../evil")
    new(course, AID)
    with pytest.raises(FileExistsError):
        new(course, AID)


def test_check_help_lists_the_conventions():
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "check", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0
    for words in (
        "points add up to 100",
        "set-up cell",
        "BEGIN HIDDEN TESTS",
        "one notebook",
        "autograder new",
    ):
        assert words in done.stdout, words


@pytest.mark.skipif(sys.platform != "linux", reason="grading runs on Linux only")
def test_the_starter_meets_the_conventions_and_grades(tmp_path):
    from autograder.grading.batch import grade
    from autograder.runner.sandbox import Limits
    from autograder.settings import Settings

    course = fresh_course(tmp_path)
    assert "check N1 --update" in new(course, AID)
    assert problems(course, AID) == []
    assert check(course, [AID], update=True) == 0  # releases it and writes its samples
    for name in ("perfect", "blank", "partial"):
        folder = course.submission_folder(AID, name)
        folder.mkdir(parents=True)
        shutil.copy(course.samples(AID) / f"{name}.ipynb", folder / f"{AID}.ipynb")
    results = {
        r.student_id: r
        for r in grade(course, AID, Settings(workers=2, limits=Limits(timeout=120, cell_timeout=60)))
    }
    assert results["perfect"].score == 100 and results["perfect"].status == "graded"
    assert results["blank"].score == 0
    assert all(c.decided == "outside" for c in results["perfect"].cells)


@pytest.mark.skipif(sys.platform != "linux", reason="grading runs on Linux only")
def test_a_hidden_check_given_an_expected_value_stays_hidden(tmp_path):
    """An author's slip the issue found: ``check(name, value, expected=...)`` inside the hidden tests. The kernel
    records it as public; the grader keeps it hidden (its failure told without the value), and, as its value is
    written in the test the kernel runs, a condition: it joins the hidden case before it and earns nothing alone."""
    from autograder.grading.batch import grade
    from autograder.grading.reference import build_reference
    from autograder.runner.sandbox import Limits
    from autograder.settings import Settings

    course = fresh_course(tmp_path)
    new(course, AID)
    path = course.source_notebook(AID)
    nb = nbformat.read(str(path), as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    test.source = test.source.replace(
        "### END HIDDEN TESTS",
        'check("softmax.hidden_rows_sum_to_one", softmax(rng.normal(size=(4, 3))).sum(axis=1), expected=[1.0, 1.0, 1.0, 1.0])\n### END HIDDEN TESTS',
    )
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    nbformat.write(nb, str(path))
    assert any("softmax.hidden_rows_sum_to_one" in line for line in notes(course, AID))
    assert check(course, [AID], update=True) == 0
    reference = build_reference(course, AID, Settings(limits=Limits(timeout=120, cell_timeout=60)))
    assert reference.cases["softmax.hidden_rows_sum_to_one"].public is False
    groups = {g["name"]: g["cases"] for g in reference.cells["test_softmax"]["groups"]}
    owner = next(name for name, cases in groups.items() if "softmax.hidden_rows_sum_to_one" in cases)
    assert owner != "softmax.hidden_rows_sum_to_one" and not reference.cases[owner].public
    wrong = nbformat.read(str(course.release_notebook(AID)), as_version=4)  # exp(x) / exp(x).sum() + 0.5
    cell = next(
        c
        for c in wrong.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == answer.metadata["nbgrader"]["grade_id"]
    )
    cell.source = "import numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max(axis=1, keepdims=True))\n    return e / e.sum(axis=1, keepdims=True) + 0.5\n"
    folder = course.submission_folder(AID, "wrong")
    folder.mkdir(parents=True)
    nbformat.write(wrong, str(folder / f"{AID}.ipynb"))
    result = grade(course, AID, Settings(workers=1, limits=Limits(timeout=120, cell_timeout=60)))[0]
    group = next(g for g in result.cells[0].groups if g.name == owner)
    assert not group.passed and "1." not in group.message and "reference solution" in group.message


def test_the_course_configuration_decides_limits_and_folders(tmp_path, monkeypatch):
    from autograder.settings import Settings, cell_timeout

    monkeypatch.delenv("DLCOURSE_DB_URL", raising=False)
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.Execute.timeout = 42\nc.CourseDirectory.db_url = 'sqlite:////nowhere/gb.db'\n"
    )
    course = Course(root=tmp_path)
    assert cell_timeout(course, None) == 42 and cell_timeout(course, 7) == 7
    args = Namespace(timeout=600, cell_timeout=None, memory=4096, workers=2, isolation="auto", course=course)
    assert Settings.from_args(args).limits.cell_timeout == 42
    assert course.release == tmp_path / "release" and course.db_url == "sqlite:////nowhere/gb.db"
    assert Course().release == ROOT / "assignments"  # this course names its own
    assert cell_timeout(Course(), None) == Course().config.Execute.timeout  # one value, from Limits


def test_a_release_reads_what_nbgrader_in_the_course_folder_reads(tmp_path, monkeypatch):
    """The release is made by nbgrader's own API in the grader's process: it reads the user's Jupyter config
    folder as the ``nbgrader`` command does, the course's file winning where both set a value, and it makes the
    gradebook as nbgrader would, without nbgrader's ``alembic`` subprocess."""
    import nbgrader.api
    from nbgrader.api import Gradebook

    from autograder.intake.release import release
    from tests.fixtures.toy_course import make_course

    monkeypatch.delenv("DLCOURSE_DB_URL", raising=False)
    user = tmp_path / "jupyter"
    user.mkdir()
    header = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("The user-wide header")])
    nbformat.write(header, str(user / "header.ipynb"))
    (user / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.IncludeHeaderFooter.header = {str(user / 'header.ipynb')!r}\n"
        "c.ClearSolutions.code_stub = {'python': '# the user-wide stub'}\n"  # the course's file sets its own
    )
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(user))
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", lambda: pytest.fail("nbgrader ran alembic"))
    course = Course(root=make_course(tmp_path / "course"))
    (notebook,) = release(course, ["T1"])
    cells = nbformat.read(str(notebook), as_version=4).cells
    assert cells[0].source == "The user-wide header"
    assert any("# YOUR CODE HERE" in c.source for c in cells)  # the course's stub wins
    assert "user-wide stub" not in notebook.read_text() and "BEGIN SOLUTION" not in notebook.read_text()
    with Gradebook(course.db_url) as gb:
        assert [c.name for c in gb.find_notebook("T1", "T1").grade_cells]
