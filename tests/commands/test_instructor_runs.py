"""An instructor's second run and first release: ``grade`` with every hand-in already graded and the proof
kept starts no sandbox (no probe, no warm parent) and skips every student; ``release`` lists the data files
it copied beside the notebooks."""

from __future__ import annotations

import sys

import pytest

from autograder.grading.batch import Listeners, grade
from autograder.intake.samples import filled
from autograder.settings import Settings
from tests.fixtures.toy_course import submit


@pytest.mark.slow
def test_grading_again_with_nothing_changed_skips_the_proof(toy, monkeypatch):
    if sys.platform != "linux":
        pytest.skip("grading runs on Linux only")
    import autograder.grading.batch
    import autograder.grading.canary

    submit(toy, "ada", filled(toy, "T1"))
    first = grade(toy, "T1", Settings(workers=1))
    assert [r.student_id for r in first] == ["ada"]

    def started(*_args, **_kw):
        raise AssertionError("a sandbox started, with every hand-in graded and the proof kept")

    monkeypatch.setattr(autograder.grading.canary, "_reference_beside_the_probe", started)
    monkeypatch.setattr(autograder.grading.canary, "_probe_or_discard", started)
    monkeypatch.setattr(autograder.grading.batch, "prestart", started)
    said: list[str] = []
    assert grade(toy, "T1", Settings(workers=1), listeners=Listeners(on_progress=said.append)) == []
    assert not any("probing" in line for line in said), said
    # a new hand-in runs: the proof probes again
    submit(toy, "bea", filled(toy, "T1"))
    with pytest.raises(AssertionError, match="a sandbox started"):
        grade(toy, "T1", Settings(workers=1))


def test_release_lists_the_data_files_it_copied(toy, capsys):
    from autograder.commands.cli import main

    data = toy.source / "T1" / "data"
    data.mkdir(exist_ok=True)
    (data / "values.csv").write_text("1,2,3\n")
    assert main(["--course", str(toy.root), "release", "T1"]) == 0
    out = capsys.readouterr().out
    assert "released assignments/T1/T1.ipynb" in out
    assert "copied assignments/T1/data/values.csv" in out
