"""The grader's proof says what it is doing: a line per finished step with its count (each reference run, each
measured cell, each of the canary's two results) and, while one step runs on, a heartbeat line at least every
:data:`autograder.progress.HEARTBEAT_SECONDS`, which stops when the step ends."""

from __future__ import annotations

import re
import sys
import time
from types import SimpleNamespace

import pytest

import autograder.progress


def test_a_slow_reference_step_beats_at_least_every_n_seconds_and_stops_when_it_ends(tmp_path, monkeypatch):
    import autograder.grading.canary
    from autograder.course import Course
    from autograder.runner.isolation import resolve
    from autograder.settings import Settings
    from tests.fixtures.toy_course import make_course

    every = 0.2
    monkeypatch.setattr(autograder.progress, "HEARTBEAT_SECONDS", every)
    said: list[tuple[float, str]] = []

    def slow_build(course, aid, settings=None, force=False, say=None):
        time.sleep(1.5)
        say(f"{aid}: reference: run 1 of 1 done (1 thread, 1 s)")  # a step's own line resets the beat
        time.sleep(1.5)
        return SimpleNamespace(how="decided again from its kept runs")  # nothing ran: no probe after it

    monkeypatch.setattr(autograder.grading.canary, "build_reference", slow_build)
    toy = Course(root=make_course(tmp_path / "course"))  # its source only: the reference is not built
    begun = time.monotonic()
    autograder.grading.canary._the_reference(
        toy, "T1", Settings(isolation=resolve("basic")), "if anything runs",
        lambda line: said.append((time.monotonic(), line)),
    )  # fmt: skip
    ended = time.monotonic()
    time.sleep(4 * every)
    assert all(t <= ended for t, _ in said), "a heartbeat after its step had ended"
    beats = [line for _, line in said if "still running" in line]
    assert all(re.fullmatch(r"T1: reference: still running, \d+ s", line) for line in beats), beats
    # about one per `every` over the three seconds (a third of them: a loaded machine wakes late)
    assert len(beats) >= 3.0 / every / 3, said
    assert "T1: reference: run 1 of 1 done (1 thread, 1 s)" in [line for _, line in said]
    times = [begun, *(t for t, _ in said if t >= begun), ended]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # the step's first line comes at once; then never a silence as long as a step (a loaded machine may wake a beat
    # late, so the bound is not `every` itself)
    assert max(gaps) < every + 1.0 < 1.5, gaps


def test_a_heartbeat_with_no_listener_starts_no_thread():
    beat = autograder.progress.Heartbeat(None, "T1: reference")
    with beat:
        beat("a line nobody hears")
        assert beat.thread is None


@pytest.mark.slow
def test_grade_says_each_reference_run_measured_cell_and_canary_result_with_its_count(tmp_path, monkeypatch):
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    from autograder.grading.batch import Listeners, grade
    from autograder.grading.reference import CALIBRATION_THREADS, load_reference
    from autograder.intake.samples import filled
    from autograder.runner.sandbox import Limits
    from autograder.settings import Settings
    from tests.fixtures.measured import measured_toy_course
    from tests.fixtures.toy_course import submit

    course = measured_toy_course(tmp_path)
    submit(course, "ada", filled(course, "T1"))
    limits = Limits()
    every = 0.5
    monkeypatch.setattr(autograder.progress, "HEARTBEAT_SECONDS", every)
    said: list[tuple[float, str]] = []
    (result,) = grade(course, "T1", Settings(workers=1, limits=limits), listeners=Listeners(on_progress=lambda line: said.append((time.monotonic(), line))))  # fmt: skip
    lines = [line for _, line in said]
    shown = "\n".join(f"{t - said[0][0]:6.1f} {line}" for t, line in said)
    proved = next(t for t, line in said if "proved itself" in line)
    times = [t for t, _ in said if t <= proved]
    assert max(b - a for a, b in zip(times, times[1:])) < every + 2.0, shown  # never silent while it proves
    reference = load_reference(course.reference_dir / "T1")
    runs = len({*CALIBRATION_THREADS, limits.threads})
    done = [
        re.fullmatch(rf"T1: reference: run (\d+) of {runs} done \((\d+) threads?, \d+ s\)", line)
        for line in lines
    ]
    done = [m for m in done if m]
    assert sorted(int(m[1]) for m in done) == list(range(1, runs + 1)), lines
    assert sorted(int(m[2]) for m in done) == sorted({*CALIBRATION_THREADS, limits.threads}), lines
    measured = [g for g, cell in reference.cells.items() if cell.get("measure")]
    assert measured and [line for line in lines if ": measuring " in line] == [
        f"T1: measuring {g} ({i} of {len(measured)})" for i, g in enumerate(measured, 1)
    ]
    full = f"{reference.max_score:g}"
    canary = sorted(
        line.rsplit(" (", 1)[0] for line in lines if line.startswith("T1: canary: ") and "still" not in line
    )
    assert canary == [
        f"T1: canary: release graded 0/{full}",
        f"T1: canary: solutions graded {full}/{full}",
    ], lines
    assert {line.rsplit(" (", 1)[1] for line in lines if " graded " in line} == {"1 of 2)", "2 of 2)"}, lines
    # in order: the reference's runs, its measured cell, then the canary, then the students
    first = {what: next(i for i, line in enumerate(lines) if what in line) for what in
             ("run 1 of", "measuring", "canary: ", "proved itself")}  # fmt: skip
    assert first["run 1 of"] < first["measuring"] < first["canary: "] < first["proved itself"], lines
    assert result.score == reference.max_score


def test_grading_the_students_is_never_silent_for_long_either(tmp_path, monkeypatch):
    """After the proof, a student's notebook can run for half a minute (A6's does): a heartbeat says the batch is
    still at work, each result's line restarts its clock, and nothing is said once the batch is done."""
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    from autograder.course import Course
    from autograder.grading.batch import Listeners, grade
    from autograder.intake.release import release
    from autograder.intake.samples import filled
    from autograder.settings import Settings
    from tests.fixtures import toy_course
    from tests.fixtures.hostile import with_cells

    course = Course(toy_course.make_course(tmp_path / "course"))
    release(course, ["T1"])
    grade(course, "T1", Settings(workers=1))  # the proof, kept: the next batch is the students' only
    toy_course.submit(course, "slow", with_cells(filled(course, "T1"), "import time\ntime.sleep(3)"))
    every = 0.5
    monkeypatch.setattr(autograder.progress, "HEARTBEAT_SECONDS", every)
    said: list[tuple[float, str]] = []
    results = []
    (result,) = grade(course, "T1", Settings(workers=1), listeners=Listeners(on_progress=lambda line: said.append((time.monotonic(), line)), on_result=lambda r: results.append(time.monotonic())))  # fmt: skip
    beats = [t for t, line in said if line.startswith("T1: grading the students: still running")]
    ended = time.monotonic()
    time.sleep(4 * every)
    assert len(beats) >= 3, said  # the notebook sleeps 3 s
    assert results and all(t <= ended for t, _ in said), "a heartbeat after the batch was done"
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    assert max(gaps) < every + 1.0, gaps  # (a period of 1.5 s would beat twice in the 3 s)
    assert result.score == 100


def test_doctor_and_regrade_show_the_proofs_progress(tmp_path, monkeypatch, capsys):
    """`doctor` and `regrade` prove the grader too (a reference built, a canary run): they print its steps."""
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    import inspect

    import autograder.grading.canary
    from autograder.commands.cli import main
    from autograder.course import Course
    from autograder.intake.release import release
    from tests.fixtures import toy_course

    course = Course(toy_course.make_course(tmp_path / "course"))
    release(course, ["T1"])
    assert main(["--course", str(course.root), "doctor", "T1", "--isolation", "basic"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"T1: reference: run 1 of \d+ done", printed), printed
    assert "T1: canary: solutions graded" in printed, printed

    from autograder.grading.batch import grade
    from autograder.intake.samples import filled
    from autograder.settings import Settings

    toy_course.submit(course, "ada", filled(course, "T1"))
    grade(course, "T1", Settings(workers=1, isolation="basic"))
    said = []
    real = autograder.grading.canary.prove

    def proving(*args, **kwargs):
        said.append(inspect.signature(real).bind(*args, **kwargs).arguments.get("say"))
        return real(*args, **kwargs)

    monkeypatch.setattr(autograder.grading.canary, "prove", proving)
    main(["--course", str(course.root), "regrade", "T1", "--isolation", "basic"])
    assert said and callable(said[0]), said
