"""A7's canary in every isolation mode a grader may use: bubblewrap, basic with kernels forked from a warm
parent, and basic with a fresh interpreter per kernel. In each, the grader proves itself as before a real batch
(probe, then the source's solutions and the untouched release graded through the students' path, in that
sandbox): the solutions must get full marks, unflagged, and the release 0. The reference is the run's shared one
(:mod:`tests.fixtures.warm`), built in whichever mode asked first: as for a course, its key holds no isolation.
So is the canary: its key holds the isolation, the runner, the workers and the limits, so a proof another test of
this run made in the same settings (A7's samples and lecture paste, graded in ``auto``: one of these modes) was
made by the same two runs in this mode, and is not made twice; the record says which mode ran it.

A7 runs torch's fused attention kernels, its dispatch-mode and saved-tensor hooks and a FlopCounterMode inside the
kernel; a mode that broke any of them (a missing ``/proc`` or ``/dev/shm``, a thread limit, a different torch
import in a forked kernel) would show here as solutions below full marks. ``tests/assignments/test_assignments.py`` grades
A7's samples in one mode only. bubblewrap is skipped, with the reason, where it cannot run.
"""

from __future__ import annotations

import pytest

from autograder.grading.canary import prove
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.warm import warm_copy

AID = "A7"
MODES = [("bubblewrap", "spawn"), ("basic", "fork"), ("basic", "spawn")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids="-".join)
def test_a7_solutions_get_full_marks_and_its_release_0_in_every_isolation_mode(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        isolation = resolve(*mode)
    except IsolationError as err:
        pytest.skip(str(err))
    course = warm_copy([AID], tmp_path)  # (the run's reference, and its canary of these settings)
    reference, record = prove(
        course, AID, Settings(limits=Limits(), isolation=isolation, workers=1, strict=True)
    )
    assert reference.max_score == 100
    assert record["how"] == "ran", record  # two runs in this mode (this test's, or another's in this run)
    assert record["passed"], record["problems"]
    assert record["isolation"] == isolation.describe()
    assert record["scores"] == {"solutions": "100/100 graded", "release": "0/100 graded"}, record["scores"]
