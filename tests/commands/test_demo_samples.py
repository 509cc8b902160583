"""`make demo` grades an assignment's bundled samples, the notebooks in source/<AID>/samples/, and nothing the
test suite keeps beside them (the wrong-work corpus in samples/wrong/ is read by the tests, not graded here)."""

from __future__ import annotations

import nbformat

from autograder.commands.cli import main
from autograder.course import Course
from autograder.intake.samples import filled
from tests.fixtures import toy_course


def test_demo_grades_the_samples_and_says_nothing_of_the_corpus_beside_them(tmp_path, capsys):
    course = Course(toy_course.make_course(tmp_path / "course"))
    samples = course.samples("T1")
    (samples / "wrong").mkdir(parents=True)
    (samples / "wrong" / "square_cubes.toml").write_text('bug = "cubes"\n')
    from autograder.intake.release import release

    release(course, ["T1"])
    nbformat.write(filled(course, "T1"), str(samples / "perfect.ipynb"))
    code = main(
        ["--course", str(course.root), "demo", "--out", str(tmp_path / "out"), "--isolation", "basic"]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "T1/perfect" in printed.out and "100/100" in printed.out
    assert "not notebooks" not in printed.out + printed.err and "toml" not in printed.out + printed.err
    assert (tmp_path / "out" / "grades.csv").read_text().count("\n") == 2  # the header and perfect
