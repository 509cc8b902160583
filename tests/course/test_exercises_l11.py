"""Lecture 11's self-checks reject wrong answers and stubs and accept tensors that require grad; the
lecture's DDP module works.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


def shard_gradients_torch(x, y, w1, w2, world_size):
    """A right answer with autograd, returning tensors that still require grad: the check must cope."""
    w1, w2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    out = []
    for x_r, y_r in zip(np.split(x, world_size), np.split(y, world_size)):
        loss = torch.nn.functional.mse_loss(torch.tensor(x_r).mm(w1).relu().mm(w2), torch.tensor(y_r))
        g1, g2 = torch.autograd.grad(loss, (w1, w2), create_graph=True)
        out.append((g1, g2))
    return out


def test_shard_gradients_accepts_tensors_that_require_grad():
    assert check("l11.shard_gradients", shard_gradients_torch, show=False).passed


def sum_loss_shards(x, y, w1, w2, world_size):
    """The gradients of each shard's summed loss, not its mean."""
    n = len(x) // world_size
    pairs = []
    for r in range(world_size):
        x_r, y_r = x[r * n : (r + 1) * n], y[r * n : (r + 1) * n]
        h = x_r @ w1
        h_relu = np.maximum(h, 0)
        grad_y_pred = 2 * (h_relu @ w2 - y_r)
        grad_h = grad_y_pred @ w2.T
        grad_h[h <= 0] = 0
        pairs.append((x_r.T @ grad_h, h_relu.T @ grad_y_pred))
    return pairs


def full_batch_everywhere(x, y, w1, w2, world_size):
    """Every worker computes the gradients of the whole batch."""
    h = x @ w1
    h_relu = np.maximum(h, 0)
    grad_y_pred = 2 * (h_relu @ w2 - y) / y.size
    grad_h = grad_y_pred @ w2.T
    grad_h[h <= 0] = 0
    return [(x.T @ grad_h, h_relu.T @ grad_y_pred)] * world_size


def strided_shards(x, y, w1, w2, world_size):
    """Worker r takes every world_size-th example from r on, not the r-th contiguous block."""
    pairs = []
    for r in range(world_size):
        x_r, y_r = x[r::world_size], y[r::world_size]
        h = x_r @ w1
        h_relu = np.maximum(h, 0)
        grad_y_pred = 2 * (h_relu @ w2 - y_r) / y_r.size
        grad_h = grad_y_pred @ w2.T
        grad_h[h <= 0] = 0
        pairs.append((x_r.T @ grad_h, h_relu.T @ grad_y_pred))
    return pairs


@pytest.mark.parametrize(
    "wrong",
    [stub, sum_loss_shards, full_batch_everywhere, strided_shards],
    ids=["stub", "sum-loss", "full-batch", "strided"],
)
def test_shard_gradients_fails_wrong_answers(wrong):
    assert not check("l11.shard_gradients", wrong, show=False).passed


def naive_allreduce(arrays):
    """Right sums, but everybody sends its whole array to everybody else."""
    p = len(arrays)
    total = np.sum(arrays, axis=0)
    return [total.copy() for _ in range(p)], [(p - 1) * arrays[0].size] * p


def in_place_allreduce(arrays):
    """A ring on views of the workers' arrays, not on copies: the reduce-scatter adds into them."""
    p = len(arrays)
    chunks = [np.array_split(a, p) for a in arrays]
    sent = [0] * p
    for step in range(p - 1):
        outgoing = [(r, (r - step) % p, chunks[r][(r - step) % p].copy()) for r in range(p)]
        for r, index, data in outgoing:
            chunks[(r + 1) % p][index] += data
            sent[r] += data.size
    for step in range(p - 1):
        outgoing = [(r, (r + 1 - step) % p, chunks[r][(r + 1 - step) % p].copy()) for r in range(p)]
        for r, index, data in outgoing:
            chunks[(r + 1) % p][index] = data
            sent[r] += data.size
    return [np.concatenate(c) for c in chunks], sent


def reduce_scatter_only(arrays):
    """The reduce-scatter without the all-gather: each worker holds the full sum of one chunk only."""
    p = len(arrays)
    chunks = [np.array_split(a.copy(), p) for a in arrays]
    sent = [0] * p
    for step in range(p - 1):
        outgoing = [(r, (r - step) % p, chunks[r][(r - step) % p].copy()) for r in range(p)]
        for r, index, data in outgoing:
            chunks[(r + 1) % p][index] += data
            sent[r] += data.size
    return [np.concatenate(c) for c in chunks], sent


@pytest.mark.parametrize(
    "wrong",
    [stub, naive_allreduce, in_place_allreduce, reduce_scatter_only],
    ids=["stub", "naive", "in-place", "reduce-scatter-only"],
)
def test_ring_allreduce_fails_wrong_answers(wrong):
    assert not check("l11.ring_allreduce", wrong, show=False).passed


# The lecture's DDP module, dlcourse.scale: the pieces the notebook relies on.


def test_shard_splits_a_batch_into_equal_contiguous_parts():
    from dlcourse import scale

    parts = [scale.shard(64, rank, 4) for rank in range(4)]
    assert [(p.start, p.stop) for p in parts] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    with pytest.raises(ValueError):
        scale.shard(10, 0, 3)


def test_two_layer_model_holds_the_running_example():
    from dlcourse import scale
    from dlcourse.data import two_layer_data

    model, x, y = scale.two_layer_model()
    x0, y0, w1, w2 = two_layer_data(seed=0)
    assert model.hidden.weight.dtype == torch.float64
    np.testing.assert_array_equal(model.hidden.weight.detach().numpy(), w1.T)
    np.testing.assert_array_equal(model.out.weight.detach().numpy(), w2.T)
    np.testing.assert_array_equal(x.numpy(), x0)
    np.testing.assert_array_equal(y.numpy(), y0)


@pytest.mark.slow
def test_summary_writer_writes_events_without_importing_tensorflow(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from dlcourse import scale; w = scale.summary_writer(sys.argv[1]); "
        "w.add_scalar('loss', 1.0, 0); w.close(); print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
    assert list(tmp_path.glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_launch_averages_gradients_like_the_full_batch(tmp_path):
    from dlcourse import scale

    run = scale.launch(world_size=2, out_dir=tmp_path)
    ranks = [np.load(path) for path in run.files]
    model, x, y = scale.two_layer_model()
    torch.nn.functional.mse_loss(model(x), y).backward()
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(ranks[0][f"synced.{name}"], ranks[1][f"synced.{name}"])
        np.testing.assert_allclose(ranks[0][f"synced.{name}"], p.grad.numpy(), rtol=1e-10, atol=1e-12)
        assert not np.allclose(ranks[0][f"local.{name}"], ranks[1][f"local.{name}"])
