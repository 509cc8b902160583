"""The graded assignments: releases are generated and leak nothing, the sources earn full marks from
plain nbgrader, the bundled sample submissions grade as they should with the autograder (the perfect one is
the canary's solutions hand-in, byte for byte, and its result is the proof's; the colab one runs the same
answers through a student's path), with the same scores as nbgrader on the honest ones (marker ``agreement``), and
each hand-in of the corpus of wrong work scores what its rules table promises (tests/fixtures/wrong_work.py)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.course import Course, is_graded_test, nbgrader_meta
from autograder.grading.batch import grade
from autograder.grading.reference import build_reference
from autograder.intake.conventions import problems
from autograder.intake.release import LEAK_MARKERS, release, run_nbgrader
from autograder.intake.samples import filled, samples
from autograder.settings import Settings
from tests.fixtures import wrong_work
from tests.fixtures.warm import AIDS, ISOLATION, MAIN, warm_copy


def course_copy(tmp: Path, aids: list[str]) -> Course:
    """An unreleased copy of the course whose references and canaries the run's tests share (built once in a
    run, by whichever test asks first: :mod:`tests.fixtures.warm`); nothing from an earlier run is reused."""
    return warm_copy(aids, tmp, released=False)


def test_every_assignment_is_released():
    assert AIDS, "no assignments in source/"
    for aid in AIDS:
        assert MAIN.release_notebook(aid).is_file(), f"run `make release`: {aid} has no release"


@pytest.mark.slow
def test_releases_are_current_and_leak_nothing(tmp_path):
    course = course_copy(tmp_path, AIDS)
    release(course, AIDS)
    for aid in AIDS:
        fresh = course.release_notebook(aid).read_text()
        assert fresh == MAIN.release_notebook(aid).read_text(), f"{aid}: release is stale, run `make release`"
        for marker in LEAK_MARKERS:
            assert marker not in fresh
        source = MAIN.read_source(aid)
        released = nbformat.reads(fresh, as_version=4)
        released_text = "\n".join(c.source for c in released.cells)
        given = re.sub(
            r"### BEGIN SOLUTION\n.*?### END SOLUTION",
            "",
            "\n".join(c.source for c in source.cells),
            flags=re.S,
        )
        for cell in source.cells:
            for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S):
                lines = [line.strip() for line in block.splitlines() if len(line.strip()) > 25]
                leaked = [line for line in lines if line in released_text and line not in given]
                assert not leaked, f"{aid}: solution lines in the release: {leaked[:3]}"
            for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
                names = re.findall(r"check\w*\(\s*\"([^\"]+)\"", block)
                assert not [n for n in names if n in released_text], (
                    f"{aid}: hidden case names in the release"
                )


@pytest.mark.parametrize("aid", AIDS)
def test_assignment_meets_the_conventions(aid):
    assert problems(MAIN, aid) == []


def test_the_convention_check_names_what_is_broken(tmp_path):
    course = course_copy(tmp_path, AIDS[:1])
    nb = course.read_source(AIDS[0])
    tests = [c for c in nb.cells if is_graded_test(c)]
    nbgrader_meta(tests[0])["points"] += 1
    tests[1].source = tests[1].source.replace("### BEGIN HIDDEN TESTS", "# hidden tests were here")
    nbgrader_meta(tests[2])["grade_id"] = nbgrader_meta(tests[3])["grade_id"]
    nbformat.write(nb, str(course.source_notebook(AIDS[0])))
    found = "\n".join(problems(course, AIDS[0]))
    assert "add up to 101" in found and "has no hidden tests" in found and "used more than once" in found


@pytest.mark.parametrize("aid", AIDS)
def test_committed_samples_are_current(aid):
    for name, text in samples(MAIN, aid).items():
        path = MAIN.samples(aid) / f"{name}.ipynb"
        assert path.read_text() == text, f"run `python -m autograder samples {aid}`"


def forgers(release_nb) -> dict[str, nbformat.NotebookNode]:
    """The untouched release with one more cell that records, before any test runs, every value the release's
    test cells hold: each check's literal ``expected``, each range check's bound, ``True`` for every other
    ``check_equal`` (``forger_cell``); and the same with a hook that reads each test cell's code as it arrives,
    hidden tests included (``forger_hook``, from tests/grading/test_forgers.py)."""
    import ast
    import json

    from nbformat.v4 import new_code_cell

    from tests.fixtures.hostile import HOOK

    records = []
    for cell in release_nb.cells:
        if not is_graded_test(cell):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            kind = getattr(func, "id", getattr(func, "attr", ""))
            if not isinstance(node, ast.Call) or not kind.startswith("check") or not node.args:
                continue
            if not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            try:
                if "expected" in keywords or len(node.args) > 2:
                    value = ast.literal_eval(keywords.get("expected") or node.args[2])
                elif kind == "check_range":
                    value = ast.literal_eval(keywords.get("low") or keywords.get("high") or node.args[2])
                elif kind == "check_equal":
                    value = True
                else:
                    continue
            except (ValueError, TypeError, SyntaxError, IndexError):
                continue
            records.append([node.args[0].value, kind, value])
    forge = (
        "def forge_every_recording():\n"
        "    from dlcourse import grading\n\n"
        f"    for name, kind, value in {records!r}:\n"
        "        try:\n"
        "            if kind == 'check_range':\n"
        "                grading.check_range(name, value, low=value, high=value)\n"
        "            elif kind == 'check_equal':\n"
        "                grading.check_equal(name, value, expected=value)\n"
        "            else:\n"
        "                grading.check(name, value, expected=value)\n"
        "        except Exception:\n"
        "            pass\n\n\n"
        "forge_every_recording()\n"
    )
    made = {}
    for name, code in (("forger_cell", forge), ("forger_hook", HOOK)):
        nb = nbformat.from_dict(json.loads(json.dumps(release_nb)))
        nb.cells.insert(0, new_code_cell(code))
        made[name] = nb
    return made


def nbgrader_scores(course: Course, aid: str, students: list[str]) -> dict[str, float]:
    """Plain nbgrader, verdicts in the student's kernel: with no DLCOURSE_REFERENCE set, its pre-convert
    hook (nbgrader_config.py) finds the reference that the hidden cases compare with."""
    from nbgrader.api import Gradebook

    assert "DLCOURSE_REFERENCE" not in os.environ
    others = sorted(p.name for p in (course.root / "submitted").iterdir() if p.name not in students)
    # one nbgrader run for them all (its --student takes one id; the others are excluded by name)
    run_nbgrader(
        course, "autograde", aid, "--force", "--log-level=WARN",
        f"--CourseDirectory.student_id_exclude={','.join(others)}",
    )  # fmt: skip
    with Gradebook(course.db_url) as gb:
        return {s: gb.find_submission(aid, s).score for s in students}


def canary_solutions(course: Course, aid: str, settings: Settings):
    """The result of the canary's solutions hand-in of the proof that ``settings`` found passed, decided again
    outside the kernel from its kept run (whichever test of the run proved it, in the same settings)."""
    import time

    from autograder.grading.canary import begin_proof, redecide_canary

    proof = begin_proof(course, aid, settings, probe="if anything runs")
    assert proof.record is not None and proof.record["passed"], "grade() proved nothing"
    # a test on the other worker that proved the same canary at once may be replacing its kept runs: tried again
    for _ in range(3):
        try:
            found = redecide_canary(course, aid, proof.reference, proof.settings, proof.keep)
        except OSError:
            found = None
        if found is not None:
            return found["solutions"]
        time.sleep(2)
    raise AssertionError("the canary's runs were not kept")


@pytest.mark.slow
@pytest.mark.parametrize("aid", AIDS)
def test_samples_grade_as_expected(aid, tmp_path, monkeypatch):
    # The grader's own environment asks for 4 BLAS threads, the sandbox gives each kernel 1: the
    # reference is built in the sandbox and calibrated across thread counts, so the grade cannot move.
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    course = course_copy(tmp_path, [aid])  # (this run's cache: the canary of these settings is its own)
    release(course, [aid])
    reference = build_reference(course, aid)
    assert reference.max_score == 100
    texts = samples(MAIN, aid)
    # the perfect sample is the canary's solutions hand-in, byte for byte: graded by the proof, through the students'
    # path, in these settings (below), not a second time
    assert texts["perfect"] == nbformat.writes(filled(course, aid)) + "\n"
    for name, text in texts.items():
        if name in ("lecture_paste", "perfect"):  # lecture_paste: tests/assignments/test_lecture_paste_*.py
            continue
        course.submission(aid, name).parent.mkdir(parents=True)
        course.submission(aid, name).write_text(text)
    blank = nbformat.read(str(course.release_notebook(aid)), as_version=4)
    for name, forger in forgers(blank).items():  # the forgers, on every assignment
        course.submission(aid, name).parent.mkdir(parents=True)
        nbformat.write(forger, str(course.submission(aid, name)))
    # the corpus of wrong work, in the same batch (no reference of its own), a hand-in per pack of entries
    packs = {
        wrong_work.student_id(i): pack for i, pack in enumerate(wrong_work.packs(wrong_work.corpus(aid)))
    }
    for sid, pack in packs.items():
        course.submission(aid, sid).parent.mkdir(parents=True)
        nbformat.write(wrong_work.notebook(pack), str(course.submission(aid, sid)))
    # one worker and the assignment's isolation: the settings of the other tests that grade its hand-ins
    # (tests/fixtures/lecture_paste.py), so that the run proves its canary once, not twice
    settings = Settings(workers=1, isolation=ISOLATION[aid])
    results = {r.student_id: r for r in grade(course, aid, settings)}
    results["perfect"] = canary_solutions(course, aid, settings)
    summary = {sid: (r.score, r.status, r.reason[:120]) for sid, r in results.items()}
    assert results["perfect"].score == 100, summary
    assert results["colab"].score == 100, summary
    assert any("found by its content" in note for note in results["colab"].notes)
    assert results["blank"].score == 0, summary
    assert results["broken"].score == 0 and results["broken"].status == "unreadable"
    assert results["cheater"].score == 0 and results["cheater"].status == "flagged", summary
    assert 0 < results["partial"].score < 100, summary
    for name in ("forger_cell", "forger_hook"):  # no answer, and every value the tests hold recorded
        assert results[name].score == 0 and results[name].status == "flagged", summary

    assert not results["perfect"].flags and not results["colab"].flags, summary
    shares = wrong_work.case_shares(reference)
    wrongly_graded = [
        problem
        for sid, pack in packs.items()
        for entry in pack
        for problem in wrong_work.problems(entry, results[sid], shares, pack)
    ]
    assert not wrongly_graded, "\n".join(wrongly_graded)


@pytest.mark.slow
@pytest.mark.agreement  # (plain nbgrader checks the grader, it is not a user's path: make test-agreement, and CI)
@pytest.mark.parametrize("aid", AIDS)
def test_plain_nbgrader_gives_the_source_full_marks_and_the_honest_partial_our_score(
    aid, tmp_path, monkeypatch
):
    """Plain nbgrader's own autograde (the course's hooks only) on the source and the partial sample: the source
    earns full marks, the partial the score this grader gives it, in the settings of the test above (whose
    reference and canary the run shares: :mod:`tests.fixtures.warm`)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    course = course_copy(tmp_path, [aid])
    release(course, [aid])
    partial = course.submission(aid, "partial")
    partial.parent.mkdir(parents=True)
    partial.write_text(samples(MAIN, aid)["partial"])
    [ours] = grade(course, aid, Settings(workers=1, isolation=ISOLATION[aid]))
    assert 0 < ours.score < 100 and ours.status == "graded", (ours.score, ours.status, ours.reason)
    solution = course.root / "submitted" / "solution" / aid  # the source itself, for nbgrader only
    solution.mkdir(parents=True)
    shutil.copy(MAIN.source_notebook(aid), solution / f"{aid}.ipynb")
    plain = nbgrader_scores(course, aid, ["solution", "partial"])
    assert plain["solution"] == 100, "the source must earn full marks from nbgrader's own autograde"
    assert plain["partial"] == ours.score, "nbgrader and the autograder disagree on an honest partial"


@pytest.mark.parametrize("aid", AIDS)
def test_the_canary_release_is_nbgraders_release_even_after_a_student_saved_into_it(aid, tmp_path):
    from autograder.intake.samples import filled, untouched

    release_text = MAIN.release_notebook(aid).read_text()
    assert [c.source for c in untouched(MAIN, aid).cells] == [
        c.source for c in nbformat.reads(release_text, as_version=4).cells
    ]
    course = course_copy(tmp_path, [aid])
    course.release_notebook(aid).parent.mkdir(parents=True)
    nbformat.write(filled(MAIN, aid), str(course.release_notebook(aid)))  # answers saved into the release
    assert [c.source for c in untouched(course, aid).cells] == [
        c.source for c in nbformat.reads(release_text, as_version=4).cells
    ]


@pytest.mark.parametrize("aid", AIDS)
def test_the_wrong_work_is_well_formed(aid):
    """Each wrong hand-in of the corpus changes answer cells only, each one away from its solution, and names the
    graded cells it must lose and a promise below full marks (or, where it must be flagged for review, whatever it
    keeps); an assignment with a corpus has six or more."""
    from autograder.intake.samples import filled

    wrong = wrong_work.corpus(aid)
    if not wrong:
        pytest.skip(f"{aid} has no wrong work in {wrong_work.folder(aid).relative_to(MAIN.root)} yet")
    assert len(wrong) >= 6, [entry.name for entry in wrong]
    perfect = [c.source for c in filled(MAIN, aid).cells]
    graded = {nbgrader_meta(c)["grade_id"] for c in MAIN.read_source(aid).cells if is_graded_test(c)}
    for entry in wrong:
        cells = wrong_work.notebook(entry).cells
        changed = {nbgrader_meta(c)["grade_id"] for c, before in zip(cells, perfect) if c.source != before}
        assert changed == set(entry.answers), (entry.name, changed)
        if (
            entry.flagged
        ):  # judged by its flag for review (A8: weights that ignore the seed): it may keep every point
            assert set(entry.loses) <= graded and 0 <= entry.promised <= 100, (entry.name, entry.loses)
        else:
            assert entry.loses and set(entry.loses) <= graded, (entry.name, entry.loses)
            assert 0 <= entry.promised < 100, entry.name
        assert entry.bug and entry.why, entry.name
        if entry.known is not None:
            assert entry.known != entry.promised or entry.known_loses, entry.name
            assert entry.known_why and set(entry.known_loses or ()) <= graded, entry.name
