"""Regrading after a source edit: decided again from the kept runs where the edit allows it, run again
where it does not, old results kept, feedback rewritten for those whose score moved."""

from __future__ import annotations

import json

import nbformat
import pytest

from autograder.commands import regrade as regrade_module
from autograder.commands.regrade import regrade
from autograder.course import Course, nbgrader_meta
from autograder.grading import canary as canary_module
from autograder.grading import reference as reference_module
from autograder.grading.batch import grade
from autograder.grading.reference import source_inputs
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.toy_course import TEST_SCALE, make_course, submit

LIMITS = Limits(timeout=90, cell_timeout=60)

HIDDEN = 'check("t1.scale.random", scale(rng.normal(size=(3, 4)), -0.5))'
PUBLIC = 'check("t1.scale.small", scale(np.array([1.0, 2.0]), 3), expected=[3.0, 6.0])'

# an edit of the test_scale cell -> whether a kept run still answers its questions
EDITS = [
    ("a hidden case's tolerance", TEST_SCALE.replace(HIDDEN, HIDDEN[:-1] + ", rtol=1e-2)"), True),
    (
        "a comment and blank lines",
        TEST_SCALE.replace("import numpy as np", "import numpy as np  # again\n\n"),
        True,
    ),
    ("a hidden case's inputs", TEST_SCALE.replace("size=(3, 4)", "size=(4, 4)"), False),
    ("a public check's expected value", TEST_SCALE.replace("[3.0, 6.0]", "[3.0, 6.5]"), False),
    ("a public check's tolerance", TEST_SCALE.replace(PUBLIC, PUBLIC[:-1] + ", rtol=1e-2)"), False),
    ("a hidden case removed", TEST_SCALE.replace(HIDDEN, ""), False),
    ("a magic line", TEST_SCALE + "\n%time 1", False),
]


@pytest.mark.parametrize("what, edited, same", EDITS, ids=[e[0] for e in EDITS])
def test_which_edits_leave_a_kept_run_valid(what, edited, same):
    from tests.fixtures.toy_course import source_notebook

    nb = source_notebook()
    before = source_inputs(nb)
    cell = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_scale")
    cell.source = edited
    nbgrader_meta(cell)["points"] = 70  # points are never part of it
    after = source_inputs(nb)
    assert (before == after) is same, what
    assert {k for k in before if before[k] != after.get(k)} <= {"test_scale"}


def edit_source(course: Course, old: str, new: str) -> None:
    path = course.source_notebook("T1")
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "test_scale")
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, str(path))


def forbidden(*args, **kwargs):
    raise AssertionError("this edit changed only decisions: nothing may run")


@pytest.mark.slow
def test_a_tolerance_edit_is_decided_again_without_running_and_an_input_edit_runs_again(
    tmp_path, monkeypatch
):
    course = Course(root=make_course(tmp_path / "course"))
    release(course, ["T1"])
    isolation = resolve("auto")
    submit(course, "ada", filled(course, "T1"))
    submit(course, "cyd", filled(course, "T1", {"scale"}))
    # ben's scale is right for the public case and 0.1% off on the hidden one (a negative factor): the public
    # case earns nothing by itself, so his scale earns nothing
    ben = filled(course, "T1")
    for cell in ben.cells:
        if nbgrader_meta(cell).get("grade_id") == "scale":
            cell.source = cell.source.replace(
                "return x * factor", "return x * factor * (1.001 if factor < 0 else 1)"
            )
    submit(course, "ben", ben)
    submit(course, "dee", nbformat.writes(filled(course, "T1"))[:300])  # cut off: unreadable, nothing runs
    first = {
        r.student_id: r for r in grade(course, "T1", Settings(workers=2, limits=LIMITS, isolation=isolation))
    }
    assert {s: r.score for s, r in first.items()} == {"ada": 100, "ben": 40, "cyd": 60, "dee": 0}
    assert first["dee"].status == "unreadable"
    assert all((course.kept_run("T1", s) / "run.json").is_file() for s in first if s != "dee")

    edit_source(course, HIDDEN, HIDDEN[:-1] + ", rtol=1e-2)")
    with monkeypatch.context() as nothing_runs:  # the reference and the canary are decided again, not run
        nothing_runs.setattr(reference_module, "_run_source", forbidden)
        nothing_runs.setattr(canary_module, "run_canary", forbidden)
        nothing_runs.setattr(regrade_module, "grade", forbidden)  # the unreadable one too: read, not run
        nothing_runs.setattr(canary_module, "probe_isolation", forbidden)  # it guards runs: none here
        report = regrade(course, "T1", Settings(limits=LIMITS, isolation=isolation, workers=2))
    assert (
        report.proof == "reference decided again from its kept runs, canary decided again from its kept runs"
    )
    changes = {c.student_id: c for c in report.changes}
    assert {s: (c.new.score, c.how) for s, c in changes.items()} == {
        "ada": (100, "decided again"),
        "ben": (100, "decided again"),
        "cyd": (60, "decided again"),
        "dee": (0, "decided again"),
    }
    assert changes["dee"].new.status == "unreadable" and changes["dee"].new.reason == first["dee"].reason
    assert changes["dee"].new.reference == report.changes[0].new.reference != first["dee"].reference
    assert all("sandbox_run" not in c.new.timings for c in changes.values())  # no student code ran
    assert changes["ben"].moved and changes["ben"].cells() == ["test_scale: 0 -> 60"]
    assert not changes["ada"].moved and not changes["cyd"].moved
    history = sorted((course.results_dir("T1") / "history").glob("*.json"))
    assert [json.loads(p.read_text())["score"] for p in history if p.name.startswith("ben.")] == [40]
    assert "100 / 100" in course.feedback_page("T1", "ben").read_text()
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        assert {s.student.id: s.score for s in gb.find_assignment("T1").submissions} == {
            "ada": 100,
            "ben": 100,
            "cyd": 60,
            "dee": 0,
        }

    # the points of a cell: decided again too, nothing runs; ben keeps full marks, cyd's scale is worth less
    nb = nbformat.read(str(course.source_notebook("T1")), as_version=4)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "test_scale":
            cell.metadata["nbgrader"]["points"] = 40
    nbformat.write(nb, str(course.source_notebook("T1")))
    with monkeypatch.context() as nothing_runs:
        nothing_runs.setattr(reference_module, "_run_source", forbidden)
        nothing_runs.setattr(canary_module, "run_canary", forbidden)
        report = regrade(course, "T1", Settings(limits=LIMITS, isolation=isolation, workers=2))
    assert {c.student_id: (c.new.score, c.new.max_score) for c in report.changes} == {
        "ada": (80, 80), "ben": (80, 80), "cyd": (40, 80), "dee": (0, 80)
    }  # fmt: skip

    # new inputs for the hidden case: every kept run is stale, so each submission runs again
    edit_source(course, "size=(3, 4)", "size=(4, 4)")
    submit(course, "cyd", filled(course, "T1"))  # and cyd handed in again meanwhile
    report = regrade(course, "T1", Settings(limits=LIMITS, isolation=isolation, workers=2))
    changes = {c.student_id: c for c in report.changes}
    assert {s: c.new.score for s, c in changes.items()} == {"ada": 80, "ben": 80, "cyd": 80, "dee": 0}
    assert changes["ada"].how == "run again: the source changed what test_scale runs"
    assert changes["cyd"].how == "run again: handed in again"
    assert all("sandbox_run" in c.new.timings for s, c in changes.items() if s != "dee")


@pytest.mark.slow
@pytest.mark.parametrize("what_runs", ["the reference", "the canary"])
def test_a_regrade_probes_the_sandbox_before_anything_runs_and_keeps_nothing_a_failed_probe_guarded(
    tmp_path, monkeypatch, what_runs
):
    """A regrade probes only where something has to run; then the probe comes first (the canary's runs) or
    decides whether what ran beside it is kept (the reference): a failed probe refuses the regrade, keeps
    no reference and records nothing."""
    from autograder.runner.isolation import IsolationError

    course = Course(root=make_course(tmp_path / "course"))
    release(course, ["T1"])
    submit(course, "ada", filled(course, "T1"))
    (first,) = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=resolve("auto")))
    if what_runs == "the reference":
        edit_source(course, "size=(3, 4)", "size=(4, 4)")  # new inputs: the source runs again
    else:  # only a tolerance: the reference is decided again, but the canary's kept runs are gone
        edit_source(course, HIDDEN, HIDDEN[:-1] + ", rtol=1e-2)")
        for kept in (course.cache / "canary-runs").iterdir():
            kept.rename(kept.with_name(kept.name + "-gone"))
    probed = []

    def failing_probe(*args, **kwargs):
        probed.append(True)
        raise IsolationError("the probe found the solutions visible")

    monkeypatch.setattr(canary_module, "probe_isolation", failing_probe)
    monkeypatch.setattr(canary_module, "run_canary", forbidden)  # the canary never runs unprobed
    with pytest.raises(IsolationError, match="solutions visible"):
        regrade(course, "T1", Settings(limits=LIMITS, isolation=resolve("auto"), workers=1))
    assert probed
    stamp = course.reference_dir / "T1" / reference_module.STAMP_FILE
    if what_runs == "the reference":
        assert not stamp.exists()  # built beside a failed probe: not kept
    assert json.loads(course.result("T1", "ada").read_text())["reference"] == first.reference  # nothing new
    assert not (course.results_dir("T1") / "history").exists()


def test_regrade_refuses_an_assignment_nobody_has_been_graded_on(tmp_path):
    course = Course(root=make_course(tmp_path / "course"))
    with pytest.raises(RuntimeError, match="nothing to regrade"):
        regrade(course, "T1", Settings(limits=LIMITS, isolation=resolve("basic"), workers=1))


def test_the_capture_is_read_without_following_links_or_blocking_and_kept_for_its_bytes_only(tmp_path):
    """The capture is written by the student's code: a link, a FIFO or a device in it must not make anyone
    read what it points to, block, or read forever; a kept run decides only the bytes it was made from."""
    import os

    from autograder.grading.pipeline import KEPT_LAYOUT, keep_run, kept_outcome
    from autograder.runner.protocol import read_capture
    from autograder.runner.sandbox import Outcome

    capture = tmp_path / "scratch" / "capture"
    capture.mkdir(parents=True)
    (capture / "cases.jsonl").write_text("{}\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("the gradebook password")
    (capture / "0001.npy").symlink_to(secret)
    os.mkfifo(capture / "0002.npy")
    (capture / "0003.npy").symlink_to("/dev/zero")
    files, problems = read_capture(capture)
    assert [name for name, _ in files] == ["cases.jsonl"]
    assert len(problems) == 3
    linked = tmp_path / "linked"
    linked.symlink_to(capture)  # a capture folder replaced by a link is not followed either
    assert read_capture(linked)[0] == []

    held = {"cases.jsonl": b"{}\n", "0000.npy": b"\x93NUMPY", "0000e.npy": b""}
    keep_run(tmp_path / "kept", Outcome("finished", 1.5, held, {"cells": []}, "tail"), "sha-a")
    kept = kept_outcome(tmp_path / "kept", "sha-a")
    assert (kept.status, kept.seconds, kept.summary, kept.capture) == ("finished", 1.5, {"cells": []}, held)
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["capture.zip", "run.json"]  # two files
    assert kept_outcome(tmp_path / "kept", "sha-b") is None  # handed in again: never decided from this run
    run = tmp_path / "kept" / "run.json"
    run.write_text(run.read_text().replace(f'"layout": {KEPT_LAYOUT}', '"layout": 1'))
    assert kept_outcome(tmp_path / "kept", "sha-a") is None  # an earlier grader's layout: graded again


def test_a_kept_capture_gives_back_only_the_names_a_check_writes_within_the_bound(tmp_path, monkeypatch):
    """The kept zip is the grader's, but it is read as bounded as a run's report: another name (a path, the
    run's own summary) is never handed to verify, and one larger than any run keeps is refused."""
    import zipfile

    from autograder.grading import pipeline

    path = tmp_path / "capture.zip"
    with zipfile.ZipFile(path, "w") as kept:
        for name in ("cases.jsonl", "0001.npy", "../0002.npy", "run.json", "0003.pkl"):
            kept.writestr(name, name.encode())
        with pytest.warns(UserWarning, match="Duplicate name"):  # a second 0001.npy: the first one counts
            kept.writestr("0001.npy", b"again")
    assert pipeline.kept_capture(path) == {"cases.jsonl": b"cases.jsonl", "0001.npy": b"0001.npy"}
    monkeypatch.setattr(pipeline, "KEPT_BYTES", 20)
    with pytest.raises(ValueError, match="larger than any run keeps"):
        pipeline.kept_capture(path)


@pytest.mark.parametrize("aid", Course().assignments())
def test_the_benchmarks_tolerance_edit_keeps_every_kept_run_valid(aid):
    """``make bench`` measures regrade after this edit: it must be one that regrade decides without running."""
    from benchmarks.grading import loosen_a_hidden_tolerance

    text = Course().source_notebook(aid).read_text(encoding="utf-8")
    edited, case = loosen_a_hidden_tolerance(text)
    assert edited != text and case.startswith(aid.lower() + ".")
    assert source_inputs(nbformat.reads(edited, as_version=4)) == source_inputs(
        nbformat.reads(text, as_version=4)
    )
