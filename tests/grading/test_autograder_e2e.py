"""The autograder end to end on a toy assignment (numpy only, so fast): honest, partial, broken and
hostile submissions in one batch. Every one gets a result and a reason, and none gets a point it did
not compute, in each isolation mode a user may have: bubblewrap, and basic (no bubblewrap), with kernels forked
from a warm parent (the default) or started afresh."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder.course import Course
from autograder.grading.batch import grade
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.outputs.export import write_results_csv
from autograder.outputs.feedback import write_feedback
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.hostile import hostile_batch
from tests.fixtures.toy_course import make_course, submit
from tests.fixtures.warm import warm_toy

LIMITS = Limits(timeout=90, cell_timeout=12, memory_mb=2048, nproc=256)  # (sigint_loop waits out its cell)


@pytest.fixture
def decoys(tmp_path):
    """Files a cheater must not find although the grader knows nothing of them: a copy of a course's
    source in a folder of its own at / (as on a machine with the course in /srv or /work: root only),
    and a file in shared memory."""
    made = [Path(tempfile.mkstemp(prefix="dlcourse-decoy-", dir="/dev/shm")[1])]
    if os.geteuid() == 0:
        for top in ("/srv", "/mnt", "/opt"):
            if Path(top).is_dir():
                folder = Path(tempfile.mkdtemp(prefix="dlcourse-decoy-", dir=top))
                folder.chmod(0o755)  # readable by all, as a checkout usually is
                (folder / "source" / "T1").mkdir(parents=True)
                (folder / "source" / "T1" / "T1.ipynb").write_text("{}")
                made.append(folder)
                break
    yield made
    for path in made:
        shutil.rmtree(path) if path.is_dir() else path.unlink()


@pytest.fixture(params=[("bubblewrap", "spawn"), ("basic", "fork"), ("basic", "spawn")], ids="-".join)
def isolated_toy(request, tmp_path, decoys):
    """A fresh toy course, and an isolation mode and runner; bubblewrap is skipped (with the reason) where it
    cannot run."""
    try:
        isolation = resolve(*request.param)
    except IsolationError as err:
        pytest.skip(str(err))
    course = Course(root=warm_toy(make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    return course, isolation


@pytest.mark.slow
def test_hostile_batch_gets_exactly_the_points_it_computed(isolated_toy):
    toy, isolation = isolated_toy
    expected = hostile_batch(toy)
    results = {
        r.student_id: r for r in grade(toy, "T1", Settings(workers=2, limits=LIMITS, isolation=isolation))
    }
    assert set(results) == set(expected)
    report = {sid: (r.score, r.status, r.reason) for sid, r in results.items()}
    for sid, (score, statuses) in expected.items():
        r = results[sid]
        assert r.score in (score if isinstance(score, set) else {score}), (
            sid,
            report[sid],
            r.traceback,
        )
        assert r.status in statuses, (sid, report[sid])
        assert r.reason, sid
        assert r.max_score == 100

    # clear reasons
    assert "empty" in results["empty"].reason
    assert "stopped with NotImplementedError (this part is not answered yet)" in results["blank"].reason
    assert "stopped with NotImplementedError" in results["partial"].reason
    assert "invalid JSON" in results["badjson"].reason
    assert "format 99" in results["nbformat99"].reason
    assert any("found by its content" in n for n in results["colab"].notes)
    assert any("more than once" in n for n in results["duplicated"].notes)
    assert any("turned into markdown" in n for n in results["retyped"].notes)
    assert any("metadata of test_" in n for n in results["tampered_meta"].notes)
    assert any("tamper" in f for f in results["cheater"].flags)
    assert results["perfect"].isolation == isolation.describe()
    assert 30 < results["perfect"].peak_memory_mb < LIMITS.memory_mb * 1.5  # a kernel with numpy, measured
    assert not results["perfect"].flags and not results["colab"].flags

    # the cheater found neither the source nor the reference (where the mode hides them), and the
    # feedback shows no test code
    executed = toy.executed("T1", "cheater").read_text()
    if isolation.mode == "bubblewrap" or isolation.namespaces:
        printed = [
            out.get("text", "")
            for c in nbformat.reads(executed, as_version=4).cells
            for out in c.get("outputs", [])
            if "found hidden files" in out.get("text", "")
        ]
        assert printed == ["found hidden files: []\n"], printed
    pages = write_feedback(toy, "T1")
    assert len(pages) == len(expected)
    for page in pages:
        text = page.read_text()
        assert (
            "default_rng(7)" not in text
            and "BEGIN HIDDEN" not in text
            and "dlcourse.grading import" not in text
        )

    csv = write_results_csv(toy, "T1", toy.root / "grades.csv").read_text().splitlines()
    assert csv[0].startswith("student_id,score,max_score,status,reason")
    assert len(csv) == len(expected) + 1


@pytest.mark.slow
def test_grading_is_resumable_and_idempotent(toy):
    for sid in ("r1", "r2"):
        submit(toy, sid, filled(toy, "T1"))
    first = grade(toy, "T1", Settings(workers=2, limits=LIMITS), students=["r1", "r2"])
    assert {r.student_id: r.score for r in first} == {"r1": 100, "r2": 100}
    again = grade(toy, "T1", Settings(workers=2, limits=LIMITS), students=["r1", "r2"])
    assert again == []  # nothing changed: nothing graded twice
    submit(toy, "r2", filled(toy, "T1", {"scale"}))  # a resubmission is graded again
    changed = grade(toy, "T1", Settings(workers=2, limits=LIMITS), students=["r1", "r2"])
    assert [(r.student_id, r.score) for r in changed] == [("r2", 60)]
    from nbgrader.api import Gradebook

    with Gradebook(toy.db_url) as gb:
        assert gb.find_submission("T1", "r2").score == 60


def test_release_has_no_solutions_and_records_cells(toy):
    text = toy.release_notebook("T1").read_text()
    assert "x**2" not in text and "default_rng(7)" not in text
    assert "raise NotImplementedError()" in text
    shutil.rmtree(toy.root / "assignments" / "T1")
    release(toy, ["T1"])  # idempotent
    assert toy.release_notebook("T1").read_text() == text


@pytest.mark.slow
def test_a_killed_grader_resumes_without_grading_anything_twice(toy):
    import os
    import signal
    import subprocess
    import sys
    import time

    from nbformat.v4 import new_code_cell
    from nbgrader.api import Gradebook

    students = [f"k{i}" for i in range(4)]
    for sid in students:
        # each hand-in takes a second and a half (an added cell that waits): on a quiet machine the toy's four
        # runs otherwise end within one poll below, and the kill lands after the batch, not in it
        handin = filled(toy, "T1")
        handin.cells.append(new_code_cell("import time\ntime.sleep(1.5)"))
        submit(toy, sid, handin)
    command = [
        sys.executable,
        "-m",
        "autograder",
        "--course",
        str(toy.root),
        "grade",
        "T1",
        "--workers",
        "1",
        "--timeout",
        "60",
    ]
    command += [arg for sid in students for arg in ("--student", sid)]
    said = toy.root / "grader.err"
    with open(said, "w") as err:
        grader = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.monotonic() + 180
    while not any(toy.result("T1", s).exists() for s in students) and time.monotonic() < deadline:
        assert grader.poll() is None, f"the grader ended before the kill: {said.read_text()[-3000:]}"
        time.sleep(0.2)
    os.killpg(grader.pid, signal.SIGKILL)  # mid-batch, without warning
    grader.wait()
    done_before = {
        s: toy.result("T1", s).stat().st_mtime_ns for s in students if toy.result("T1", s).exists()
    }
    assert done_before and len(done_before) < len(students), "the kill should land mid-batch"

    rest = grade(toy, "T1", Settings(workers=2, limits=LIMITS), students=students)
    assert sorted(r.student_id for r in rest) == sorted(set(students) - set(done_before))
    for sid, mtime in done_before.items():
        assert toy.result("T1", sid).stat().st_mtime_ns == mtime  # not graded again
    with Gradebook(toy.db_url) as gb:
        rows = [s for s in gb.find_assignment("T1").submissions if s.student.id in students]
        assert sorted(s.student.id for s in rows) == students and all(s.score == 100 for s in rows)
