"""The canary's order, without a kernel (:mod:`tests.fixtures.fake_sandbox`): a batch proves the grader first (the
reference built from the source's runs, then the source's solutions and the untouched release graded through
the students' path, first in the workers' queue); a student's result that comes before the canary passed is held
and recorded after it; when the canary fails, no student starts after it and nothing of the batch is recorded."""

from __future__ import annotations

import threading
import time

import pytest

from autograder.grading.batch import Listeners, grade
from autograder.grading.canary import CanaryFailed
from autograder.grading.record import Recorder, load_result
from tests.fixtures.fake_sandbox import FakeSandboxes, hand_in, run_here, settings, toy_kind


class Scripted:
    """An ``answer`` that runs each notebook here (:func:`run_here`), the canary's release only once ``alice``
    has run (and a moment more, for her result to reach the batch), and says in ``events`` when each ran."""

    def __init__(self, solutions=run_here):
        self.events: list[str] = []
        self.alice_ran = threading.Event()
        self.solutions = solutions

    def __call__(self, notebook):
        kind = toy_kind(notebook)
        if kind == "release":
            assert self.alice_ran.wait(30), "alice never ran"
            time.sleep(0.5)
        outcome = (self.solutions if kind == "solutions" else run_here)(notebook)
        self.events.append(f"{kind} ran")
        if kind == "alice":
            self.alice_ran.set()
        return outcome

    def recorded(self, result) -> None:
        self.events.append(f"recorded {result.student_id}")


def test_the_grader_proves_itself_first_and_a_student_graded_meanwhile_is_recorded_after(toy_course):
    script = Scripted()
    fake = FakeSandboxes(script)
    hand_in(toy_course, "alice")
    results = grade(
        toy_course, "T1", settings(fake, workers=2), listeners=Listeners(on_result=script.recorded)
    )
    kinds = [toy_kind(nb) for nb in fake.notebooks]
    assert kinds[:3] == ["source"] * 3  # the reference, at each thread count
    assert sorted(kinds[3:]) == ["alice", "release", "solutions"]
    # the canary's two first in the queue: the solutions ran before alice (two workers: she was taken only when
    # one came free; which of alice and the release reached its sandbox first is the threads' race, and CI saw
    # both); alice ran before the canary's release finished, and was recorded only once the canary had passed
    assert [e for e in script.events if "source" not in e] == [
        "solutions ran", "alice ran", "release ran", "recorded alice",
    ]  # fmt: skip
    assert [(r.student_id, r.score) for r in results] == [("alice", 100.0)]  # the canary's are nobody's
    with Recorder(toy_course.db_url) as recorder:
        assert recorder.scores("T1") == {"alice": 100.0}
    probed = fake.log.index(("probe", 0, None))
    alice = next(i for i, (what, _, name) in enumerate(fake.log) if (what, name) == ("run", "alice"))
    assert probed < alice  # the sandbox was probed before a student's code ran


def test_a_proof_that_passed_is_kept_and_the_next_batch_runs_no_canary(toy_course):
    fake = FakeSandboxes()
    hand_in(toy_course, "alice")
    grade(toy_course, "T1", settings(fake))
    hand_in(toy_course, "bob", square="def square(x):\n    return x**3")
    before = len(fake.notebooks)
    (bob,) = grade(toy_course, "T1", settings(fake))
    assert [toy_kind(nb) for nb in fake.notebooks[before:]] == ["bob"] and bob.score == 60.0


def crashed_solutions(notebook):
    return run_here(notebook, status="crashed", stop_after="square")


def test_when_the_canary_fails_no_student_starts_after_it_and_nothing_is_recorded(toy_course, monkeypatch):
    """One worker: the canary's two runs first; the worker may have taken the next hand-in before the failure
    was known, but none after it (a student's run here lasts until the batch has told its workers to stop)."""
    import autograder.grading.batch

    stops: list[threading.Event] = []
    run_jobs = autograder.grading.batch.run_jobs
    monkeypatch.setattr(
        autograder.grading.batch, "run_jobs", lambda *args: stops.append(args[-1]) or run_jobs(*args)
    )

    def answer(notebook):
        kind = toy_kind(notebook)
        if kind == "solutions":
            return crashed_solutions(notebook)
        if kind not in ("source", "release"):
            assert stops[-1].wait(30), "the batch never told its workers to stop"
        return run_here(notebook)

    fake = FakeSandboxes(answer)
    students = ["alice", "bob", "carol", "dan"]
    for sid in students:
        hand_in(toy_course, sid)
    with pytest.raises(CanaryFailed, match="the source's own solutions got 0/100"):
        grade(toy_course, "T1", settings(fake))
    kinds = [toy_kind(nb) for nb in fake.notebooks]
    assert kinds[3:5] == ["solutions", "release"] and len(kinds[5:]) <= 1, kinds
    assert all(load_result(toy_course, "T1", sid) is None for sid in students)
    assert not any(toy_course.kept_run("T1", sid).exists() for sid in students)
    with Recorder(toy_course.db_url) as recorder:
        assert recorder.scores("T1") == {}


def test_when_the_canary_fails_a_student_held_meanwhile_goes_with_all_it_left(toy_course):
    script = Scripted(solutions=crashed_solutions)
    fake = FakeSandboxes(script)
    hand_in(toy_course, "alice")
    with pytest.raises(CanaryFailed, match="the source's own solutions got 0/100"):
        grade(toy_course, "T1", settings(fake, workers=2), listeners=Listeners(on_result=script.recorded))
    assert [e for e in script.events if "source" not in e] == ["solutions ran", "alice ran", "release ran"]
    assert load_result(toy_course, "T1", "alice") is None
    assert not toy_course.kept_run("T1", "alice").exists() and not toy_course.executed("T1", "alice").exists()
    with Recorder(toy_course.db_url) as recorder:
        assert recorder.scores("T1") == {}


def test_two_graders_proving_the_same_canary_at_once_keep_the_runs_of_the_one_that_passed(toy_course):
    """Graders may prove the same canary at once (two instructors, two test workers): each runs into a folder
    of its own, and only a passed canary's runs become the kept runs, whole, in one rename. Here B's proof
    begins first, and its solutions crash only once A's canary has passed and kept its runs: B's failure leaves
    them, and they decide the canary again. (Before, each proof ran into the one kept folder: B emptied it when
    it began and again when it failed, so A's record said passed over no runs.)"""
    from autograder.grading.canary import canary_path, canary_runs, prove, redecide_canary
    from autograder.runner.isolation import resolved

    def record_of_a_passed():
        found = list((toy_course.cache / "canary").glob("T1-*.json")) if toy_course.cache.exists() else []
        return any('"passed": true' in path.read_text() for path in found)

    b_began = threading.Event()

    def b_answer(notebook):
        if toy_kind(notebook) == "solutions":
            b_began.set()
            deadline = time.monotonic() + 30
            while not record_of_a_passed() and time.monotonic() < deadline:
                time.sleep(0.05)
            return crashed_solutions(notebook)
        return run_here(notebook)

    def a_answer(notebook):
        if toy_kind(notebook) == "solutions":
            assert b_began.wait(30), "B's canary never began"
        return run_here(notebook)

    failed = []

    def b() -> None:
        try:
            prove(toy_course, "T1", settings(FakeSandboxes(b_answer)))
        except CanaryFailed as err:
            failed.append(err)

    thread = threading.Thread(target=b)
    thread.start()
    reference, a_record = prove(toy_course, "T1", settings(FakeSandboxes(a_answer)))
    thread.join(60)
    assert a_record["passed"] and failed, (a_record, failed)
    a_settings = resolved(settings(FakeSandboxes(a_answer)))
    keep = canary_runs(toy_course, "T1", reference, a_settings)
    again = redecide_canary(toy_course, "T1", reference, a_settings, keep)
    assert again is not None, "the passed canary's runs are gone"
    assert (again["solutions"].score, again["release"].score) == (100.0, 0.0)
    assert not [p for p in keep.parent.iterdir() if p.name.startswith(".")], "a proof's own folder was left"
    assert canary_path(toy_course, "T1", a_record["key"]).is_file()


def test_an_upgraded_grader_runs_its_canary_again_and_a_broken_upgrade_grades_nobody(toy_course, monkeypatch):
    """A passed canary vouches for the grader that ran it. The proof's key holds the grader's whole code, and so do
    the canary's kept runs: runs made by another grader's sandbox prove nothing about this one's (a cap, a limit or
    a mount changed in ``autograder/runner`` changes every run). So an upgraded grader runs the canary again; here
    the upgrade broke the sandbox (the solutions' run crashes), and it refuses the batch, where deciding the old
    runs again would have passed it and graded bob in the broken sandbox."""
    from autograder.grading import canary as canary_module
    from autograder.grading.canary import begin_proof

    fake = FakeSandboxes()
    hand_in(toy_course, "alice")
    grade(toy_course, "T1", settings(fake))
    first = begin_proof(toy_course, "T1", settings(fake)).record
    assert first["passed"] and first["how"] == "ran"
    monkeypatch.setattr(canary_module, "_code", lambda: "the code of an upgraded grader")

    def broken(notebook):
        return crashed_solutions(notebook) if toy_kind(notebook) == "solutions" else run_here(notebook)

    hand_in(toy_course, "bob", square="def square(x):\n    return x**3")
    upgraded = FakeSandboxes(broken)
    with pytest.raises(CanaryFailed, match="the source's own solutions got 0/100"):
        grade(toy_course, "T1", settings(upgraded))
    assert "solutions" in [toy_kind(nb) for nb in upgraded.notebooks], "the upgraded grader ran no canary"
    assert load_result(toy_course, "T1", "bob") is None
    (bob,) = grade(
        toy_course, "T1", settings(FakeSandboxes())
    )  # the upgrade fixed: it proves itself by running
    again = begin_proof(toy_course, "T1", settings(fake)).record
    assert again["key"] != first["key"] and again["passed"] and again["how"] == "ran", again
    assert bob.score == 60.0


def test_the_grader_code_a_proof_holds_is_every_module_and_the_references_holds_the_measured_run(tmp_path):
    """Every Python file of the autograder and of the course package changes the proof's key, one outside what a
    reference's values depend on too (the pipeline); the reference's holds the measurement notebook's code, which
    decides what the solutions' measured runs held."""
    import shutil
    from pathlib import Path

    import autograder
    import dlcourse
    from autograder.grading.reference import code_digest, grading_code

    packages = [Path(autograder.__file__).parent, Path(dlcourse.__file__).parent]
    copies = [
        shutil.copytree(p, tmp_path / p.name, ignore=shutil.ignore_patterns("__pycache__")) for p in packages
    ]
    assert code_digest(*copies) == code_digest(*packages) == code_digest()
    with open(copies[0] / "grading" / "pipeline.py", "a") as pipeline:
        pipeline.write("\n# an upgrade\n")
    assert code_digest(*copies) != code_digest()
    assert (packages[0] / "grading" / "measure.py").read_bytes() in grading_code()
