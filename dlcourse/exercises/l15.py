"""Self-checks for lecture 15 (attention and the Transformer: causal attention, multi-head attention, patches).

Causal attention in numpy is compared with torch's ``scaled_dot_product_attention`` in float64, also on
inputs whose scores are large enough to overflow a softmax that does not subtract the maximum;
multi-head attention with ``torch.nn.MultiheadAttention`` whose weights are the ones handed to the
student, on shapes where no two sizes are alike, so that a wrong head split or merge cannot hide behind
a square matrix or a single head; cutting images into patches with ``torch.nn.functional.unfold``.
"""

from __future__ import annotations

import numpy as np

from dlcourse.selfcheck import Checker


def _unchanged(arrays, originals) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(arrays, originals))


def causal_attention(c: Checker, fn) -> None:
    """``fn(X, W_Q, W_K, W_V)`` takes numpy float64 arrays, ``X`` (N, D_X), ``W_Q`` and ``W_K`` (D_X, D_Q),
    ``W_V`` (D_X, D_V), and returns ``Y`` (N, D_V) = softmax(Q K^T / sqrt(D_Q)) V with Q = X W_Q,
    K = X W_K, V = X W_V, where position i attends to positions 0..i only (itself included). The inputs
    are left unchanged, and scores in the thousands must not overflow."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(15)
    for n, d_x, d_q, d_v, size in (
        (5, 6, 3, 4, 1.0),
        (1, 3, 2, 4, 1.0),
        (7, 4, 5, 2, 1.0),
        (6, 5, 3, 4, 30.0),  # scores in the thousands: exp overflows unless the row's maximum is subtracted
    ):
        X = size * rng.standard_normal((n, d_x))
        weights = [rng.standard_normal((d_x, d)) for d in (d_q, d_q, d_v)]
        originals = [a.copy() for a in (X, *weights)]
        q, k, v = (torch.from_numpy(X @ w) for w in weights)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        label = f"X {X.shape}, D_Q {d_q}, D_V {d_v}" + (", large scores" if size > 1 else "")
        got = c.call(f"causal_attention with {label}", fn, X, *weights)
        ok = c.close(
            f"{label}: the same numbers as scaled_dot_product_attention(is_causal=True), shape {(n, d_v)}",
            got,
            expected,
            rtol=1e-9,
            atol=1e-9,
            hint="mask the scores of later positions with -inf before the softmax (a position sees itself), "
            "scale by 1/sqrt(D_Q), softmax each row, and subtract each row's maximum before exp",
        )
        c.true(
            f"{label}: the inputs are left unchanged",
            _unchanged((X, *weights), originals),
            hint="compute new arrays instead of writing into X or the weights",
        )
        if not ok:
            return


def _reference_mha(n, d_model, n_heads, seed):
    """An ``nn.MultiheadAttention`` in float64 with random weights and biases, its input and output."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)
    mha = nn.MultiheadAttention(d_model, n_heads, dtype=torch.float64)
    with torch.no_grad():
        for parameter in (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias):
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    x = torch.randn(n, d_model, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        expected, _ = mha(x, x, x, need_weights=False)
    arrays = [
        t.detach().numpy().copy()
        for t in (x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    ]
    return arrays, expected


def multi_head_attention(c: Checker, fn) -> None:
    """``fn(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads)`` takes numpy float64
    arrays laid out as ``nn.MultiheadAttention`` keeps its parameters, ``x`` (N, D), ``in_proj_weight``
    (3D, D) (the query, key and value projections stacked, each (out, in) as in ``nn.Linear``),
    ``in_proj_bias`` (3D,), ``out_proj_weight`` (D, D), ``out_proj_bias`` (D,), and returns the (N, D)
    output of unmasked self-attention with ``n_heads`` heads of size D / n_heads, as
    ``nn.MultiheadAttention`` computes it."""
    for n, d_model, n_heads in ((5, 12, 3), (7, 8, 4), (3, 10, 5), (6, 8, 2), (4, 6, 1)):
        arrays, expected = _reference_mha(n, d_model, n_heads, seed=n * 100 + d_model)
        label = f"N {n}, D {d_model}, {n_heads} heads of size {d_model // n_heads}"
        got = c.call(f"multi_head_attention with {label}", fn, *[a.copy() for a in arrays], n_heads)
        ok = c.close(
            f"{label}: the same numbers as nn.MultiheadAttention with these weights",
            got,
            expected,
            rtol=1e-9,
            atol=1e-9,
            hint="split each projection's D columns into heads with reshape(N, H, D // H) and move the head axis "
            "first (transpose), scale by 1/sqrt(D // H), softmax over the keys, undo the transpose before "
            "reshaping back to (N, D), then apply the output projection; x @ W.T + b, as nn.Linear does",
        )
        if not ok:
            return
    arrays, _ = _reference_mha(5, 12, 3, seed=1)
    originals = [a.copy() for a in arrays]
    c.call("multi_head_attention on arrays it must not change", fn, *arrays, 3)
    c.true(
        "the inputs are left unchanged",
        _unchanged(arrays, originals),
        hint="compute new arrays instead of writing into the ones you are given",
    )


def patchify(c: Checker, fn) -> None:
    """``fn(images, patch)`` cuts a batch of images, a torch tensor (B, C, H, W) with H and W multiples of
    ``patch``, into (B, (H / patch) * (W / patch), C * patch * patch): patches in reading order (left to
    right along the top row of patches, then the next row), each flattened channel by channel, row by row,
    as ``F.unfold(images, patch, stride=patch).transpose(1, 2)`` orders them."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(15)
    for b, channels, h, w, patch in ((2, 3, 8, 12, 4), (1, 2, 6, 4, 2), (3, 1, 9, 6, 3), (2, 4, 4, 4, 4)):
        images = torch.randn(b, channels, h, w, generator=generator, dtype=torch.float64)
        original = images.clone()
        expected = F.unfold(images, patch, stride=patch).transpose(1, 2)
        label = f"images {tuple(images.shape)}, patch {patch}"
        got = c.call(f"patchify with {label}", fn, images, patch)
        ok = c.close(
            f"{label}: shape {tuple(expected.shape)}, patches in reading order, each flattened as (C, patch, patch)",
            got,
            expected,
            rtol=0,
            atol=0,
            hint="reshape to (B, C, H/p, p, W/p, p), move the two patch-grid axes before the channel axis "
            "(permute), then flatten; a reshape alone mixes pixels of different patches",
        )
        c.true(
            f"{label}: the images are left unchanged",
            torch.equal(images, original),
            hint="do not write into the images",
        )
        if not ok:
            return
