"""A wrong earlier part costs only its own points. Where a later part's tests need an earlier part's piece (A3's
checkpoints are tested by training, which Part 5 writes; A5's accumulated steps scale their losses, which Part 1
writes), the test cell brings a given, correct one of its own. Each case takes the source's solutions, breaks
only the earlier part, and grades the notebook for real: the earlier part's tests lose points, nothing else does.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import nbgrader_meta
from autograder.intake.samples import filled
from tests.fixtures.lecture_paste import MAIN, grade_pasted

# assignment -> (answer cell broken, (its text, replaced by), the earlier part's test cells, the later part's)
BROKEN = {
    # Part 5's train never steps: it zeroes the gradients where it should step, and returns the losses of a model
    # it never trained
    "A3": (
        "train",
        ("optimizer.step()", "optimizer.zero_grad()"),
        {"test_train", "test_train_device"},
        "test_checkpoint",
    ),
    # Part 1's LossScaler never scales the loss (and still divides the gradients by the scale)
    "A5": (
        "loss_scaler",
        ("return loss * self.scale", "return loss"),
        {"test_loss_scaler", "test_scaler_vs_gradscaler"},
        "test_autocast_step",
    ),
}


def broken_earlier_part(aid: str) -> str:
    """The source's solutions in the release of ``aid``, with only the earlier part's answer broken."""
    answer, (text, replaced_by), _, _ = BROKEN[aid]
    nb = filled(MAIN, aid)
    (cell,) = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == answer]
    assert cell.source.count(text) == 1, f"{aid}: the answer {answer} no longer holds {text!r}"
    cell.source = cell.source.replace(text, replaced_by)
    return nbformat.writes(nb) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("aid", sorted(BROKEN))
def test_a_wrong_earlier_part_costs_only_its_own_points(aid, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    _, _, earlier, later = BROKEN[aid]
    result = grade_pasted(aid, broken_earlier_part(aid), tmp_path)
    points = {cell.grade_id: (cell.points, cell.max_points) for cell in result.cells}
    summary = (aid, result.score, result.status, points, result.reason[:200])
    assert result.status == "graded", summary
    assert points[later][0] == points[later][1], summary  # the later part keeps its full points
    lost = {grade_id for grade_id, (got, full) in points.items() if got < full}
    assert lost and lost <= earlier, summary  # the earlier part loses points, and only it
