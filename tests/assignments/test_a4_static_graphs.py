"""A4 asks students to find what a graph capture cannot hold: its exercises only make sense while the given code
really breaks the graph, really retraces and really needs its dynamic shapes worked out, on the torch and
TensorFlow the course pins. These tests say so with the source's own cells, and fail when an upgrade (or an edit)
turns an exercise into a no-op."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from torch import nn

from autograder.course import nbgrader_meta

SOURCE = Path(__file__).resolve().parents[2] / "source" / "A4" / "A4.ipynb"


def run_cells(*grade_ids: str, **namespace) -> dict:
    """Execute the source's cells with these grade_ids (solutions included) in one namespace."""
    cells = {
        nbgrader_meta(c).get("grade_id"): c.source for c in nbformat.read(str(SOURCE), as_version=4).cells
    }
    namespace = {"np": np, "torch": torch, "nn": nn, **namespace}
    for grade_id in grade_ids:
        exec(cells[grade_id], namespace)
    return namespace


def test_the_planted_function_breaks_the_graph_and_the_solution_does_not(capsys):
    ns = run_cells("noisy_scores", "scores_without_breaks")
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 8, generator=generator), torch.randn(8, 5, generator=generator)
    planted = torch._dynamo.explain(ns["noisy_scores"])(x, w, torch.tensor(0.0))
    assert planted.graph_break_count >= 3, (
        "noisy_scores no longer breaks the graph: Part 2 has nothing to find"
    )
    fixed = torch._dynamo.explain(ns["scores_without_breaks"])(x, w, torch.tensor(0.0))
    assert (fixed.graph_count, fixed.graph_break_count) == (1, 0)
    for x_case, threshold in [(x, -1.0), (x, 1.0), (torch.zeros(3, 8), 0.0)]:
        torch.testing.assert_close(
            ns["scores_without_breaks"](x_case, w, torch.tensor(threshold)),
            ns["noisy_scores"](x_case, w, torch.tensor(threshold)),
        )
    # A fix that forgets the all-zero input (0 / 0) is caught by the public zero-input case.
    scores = torch.zeros(3, 8) @ w
    assert torch.isnan(scores / scores.abs().max()).all()


def test_an_export_with_only_the_batch_dimension_dynamic_fails_where_the_solution_passes(tmp_path):
    ns = run_cells("pair_gate")
    torch.manual_seed(0)
    gate = ns["PairGate"](32, 64, 10)
    x, mask, loss = torch.randn(8, 12, 32), torch.ones(8, 12), torch.tensor(1.0)
    solution = ns["export_pair_gate"](gate, x, mask, loss, str(tmp_path / "pair_gate.pt2")).module()
    batch = torch.export.Dim("batch")
    batch_only = torch.export.export(
        gate, (x, mask, loss), dynamic_shapes={"x": {0: batch}, "mask": {0: batch}, "prev_loss": None}
    ).module()
    with torch.no_grad():
        for shape in [(2, 4), (17, 100)]:  # shapes of the hidden checks
            x_new, mask_new = torch.randn(*shape, 32), torch.ones(*shape)
            torch.testing.assert_close(solution(x_new, mask_new, loss), gate(x_new, mask_new, loss))
            with pytest.raises(Exception):  # noqa: B017  (torch raises a guard error; its class varies)
                batch_only(x_new, mask_new, loss)
    with pytest.raises(Exception, match="(?i)constraint|steps|specializ|guard"):  # noqa: B017
        steps = torch.export.Dim("steps")  # the steps dimension without the rule that T is even
        torch.export.export(
            gate, (x, mask, loss), dynamic_shapes={"x": {1: steps}, "mask": {1: steps}, "prev_loss": None}
        )


def test_tf_function_of_train_step_retraces_and_the_solution_traces_once():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    ns = run_cells("train_step", "train_step_graph", tf=tf)
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((10, 6)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    x, y = rng.standard_normal((16, 10)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    calls = [(16, 1e-3), (8, 1e-3), (16, 2e-3), (5, 1e-3), (11, 5e-4)]

    def count(step, model_vars=None):
        for batch, lr in calls:
            if model_vars is None:  # the solution: numpy arrays and Python floats go straight in
                step(x[:batch], y[:batch], lr)
            else:  # tf.function(train_step): tensors, and the learning rate as a Python float
                step(model_vars, tf.constant(x[:batch]), tf.constant(y[:batch]), lr)
        return step.experimental_get_tracing_count()

    def fresh():
        return tf.Variable(w1), tf.Variable(w2)

    assert count(tf.function(ns["train_step"]), fresh()) >= 4, "Part 6's demo no longer retraces"
    assert count(tf.function(ns["train_step"], reduce_retracing=True), fresh()) > 1, (
        "reduce_retracing alone now traces once: Part 6's text and its written question say otherwise"
    )
    assert count(ns["make_train_step_graph"](fresh())) == 1
