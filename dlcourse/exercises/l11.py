"""Self-checks for lecture 11 (scale: data parallelism and all-reduce).

Shard gradients are compared with torch autograd on each shard, and their average with autograd on
the whole batch; an all-reduce with the plain sum of the workers' arrays and with the traffic a ring
must send.
"""

from __future__ import annotations

import numpy as np

from dlcourse.closeness import to_numpy
from dlcourse.data import two_layer_loss
from dlcourse.selfcheck import Checker


def _autograd_mean_loss_gradients(x, y, w1, w2):
    """Gradients of ``mean((relu(x @ w1) @ w2 - y) ** 2)`` with respect to w1 and w2, by torch autograd."""
    import torch

    x, y = torch.from_numpy(x), torch.from_numpy(y)
    w1 = torch.from_numpy(w1.copy()).requires_grad_()
    w2 = torch.from_numpy(w2.copy()).requires_grad_()
    loss = two_layer_loss(x, y, w1, w2, reduction="mean")
    return torch.autograd.grad(loss, (w1, w2))


def shard_gradients(c: Checker, fn) -> None:
    """``fn(x, y, w1, w2, world_size)`` returns a list of ``world_size`` pairs ``(grad_w1, grad_w2)``:
    worker r's gradients of the mean squared error ``mean((relu(x_r @ w1) @ w2 - y_r) ** 2)`` on its own
    contiguous shard ``x_r = x[r * n // world_size : (r + 1) * n // world_size]`` (and ``y_r`` alike)."""
    rng = np.random.default_rng(11)
    n, d_in, h, d_out = 12, 7, 5, 3
    x, y = rng.standard_normal((n, d_in)), rng.standard_normal((n, d_out))
    w1, w2 = rng.standard_normal((d_in, h)), rng.standard_normal((h, d_out))
    originals = tuple(a.copy() for a in (x, y, w1, w2))
    full = _autograd_mean_loss_gradients(x, y, w1, w2)
    for world_size in (1, 2, 3, 4):
        shards = c.call(f"shard_gradients with world_size={world_size}", fn, x, y, w1, w2, world_size)
        if not c.true(
            f"world_size={world_size}: one (grad_w1, grad_w2) pair per worker",
            isinstance(shards, list | tuple)
            and len(shards) == world_size
            and all(len(s) == 2 for s in shards),
            hint="return a list with one (grad_w1, grad_w2) pair per worker",
        ):
            return
        size = n // world_size
        for rank, (g1, g2) in enumerate(shards):
            part = slice(rank * size, (rank + 1) * size)
            e1, e2 = _autograd_mean_loss_gradients(x[part], y[part], w1, w2)
            ok = c.close(
                f"world_size={world_size}, worker {rank}: grad_w1 of its shard",
                g1,
                e1,
                rtol=1e-7,
                atol=1e-10,
                hint="use rows rank*size to (rank+1)*size, and a mean (not a sum) over the shard",
            )
            ok = (
                c.close(
                    f"world_size={world_size}, worker {rank}: grad_w2 of its shard",
                    g2,
                    e2,
                    rtol=1e-7,
                    atol=1e-10,
                )
                and ok
            )
            if not ok:
                return
        mean1 = sum(to_numpy(g1).astype(np.float64) for g1, _ in shards) / world_size
        mean2 = sum(to_numpy(g2).astype(np.float64) for _, g2 in shards) / world_size
        c.close(
            f"world_size={world_size}: the workers' average is the full batch's gradient of w1",
            mean1,
            full[0],
            rtol=1e-7,
            atol=1e-10,
        )
        c.close(
            f"world_size={world_size}: the workers' average is the full batch's gradient of w2",
            mean2,
            full[1],
            rtol=1e-7,
            atol=1e-10,
        )
    c.true(
        "it leaves x, y, w1 and w2 unchanged",
        all(np.array_equal(a, b) for a, b in zip((x, y, w1, w2), originals)),
        hint="a worker computes gradients; it does not change the data or the weights",
    )


def ring_allreduce(c: Checker, fn) -> None:
    """``fn(arrays)`` simulates a ring all-reduce of ``p`` workers' 1-d arrays of equal length ``L``
    (a multiple of ``p``) and returns ``(results, sent)``: ``results[r]`` is what worker r holds at
    the end (the elementwise sum of all the arrays), ``sent[r]`` how many elements worker r sent.
    A ring sends ``2 (p - 1) L / p`` elements per worker, whatever ``p`` is."""
    rng = np.random.default_rng(12)
    for p in (1, 2, 3, 4, 6):
        length = 12
        arrays = [rng.standard_normal(length) for _ in range(p)]
        originals = [a.copy() for a in arrays]
        answer = c.call(f"ring_allreduce of {p} workers' arrays of length {length}", fn, arrays)
        if not c.true(
            f"p={p}: it returns (results, sent) with one entry per worker",
            isinstance(answer, list | tuple)
            and len(answer) == 2
            and len(answer[0]) == p
            and len(answer[1]) == p,
            hint="return results, sent: two lists of length p",
        ):
            return
        results, sent = answer
        total = np.sum(originals, axis=0)
        for rank, got in enumerate(results):
            c.close(
                f"p={p}: worker {rank} ends with the sum of all arrays",
                got,
                total,
                rtol=1e-12,
                atol=1e-12,
                hint="reduce-scatter (p - 1 steps), then all-gather (p - 1 steps)",
            )
        expected_sent = 2 * (p - 1) * length // p
        c.true(
            f"p={p}: every worker sent 2 (p - 1) L / p = {expected_sent} elements",
            [int(s) for s in sent] == [expected_sent] * p,
            hint=f"got {list(sent)}: each of the 2 (p - 1) steps sends one chunk of L / p elements",
        )
        c.true(
            f"p={p}: the workers' own arrays are left unchanged",
            all(np.array_equal(a, b) for a, b in zip(arrays, originals)),
            hint="work on copies of the arrays",
        )
