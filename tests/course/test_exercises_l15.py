"""Lecture 15's self-checks reject wrong answers and stubs, and accept right answers in other forms (torch
instead of numpy, an einsum, F.unfold).

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs. The multi-head check must catch what a unit test with
one head or square shapes lets through: wrong head splits and merges, the wrong scale, the wrong axis."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dlcourse import check

# Some wrong answers overflow or take the maximum of a row of -inf on purpose: numpy says so, and that is expected.
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")


def stub(*_args):
    raise NotImplementedError


def softmax(E, axis=-1):
    exp_E = np.exp(E - E.max(axis=axis, keepdims=True))
    return exp_E / exp_E.sum(axis=axis, keepdims=True)


# causal_attention


def causal_torch(X, W_Q, W_K, W_V):
    """A right answer in torch, through SDPA."""
    q, k, v = (torch.from_numpy(X @ w) for w in (W_Q, W_K, W_V))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_causal_attention_accepts_a_torch_answer():
    assert check("l15.causal_attention", causal_torch, show=False).passed


def causal_with(mask_offset=1, scale=None, stable=True, axis=1, after=False):
    """Causal attention with one thing changed: the diagonal the mask starts at, the scale, the softmax."""

    def answer(X, W_Q, W_K, W_V):
        Q, K, V = X @ W_Q, X @ W_K, X @ W_V
        E = Q @ K.T / (np.sqrt(Q.shape[1]) if scale is None else scale(Q, V))
        future = np.triu(np.ones(E.shape, dtype=bool), k=mask_offset)
        if after:  # masked after the softmax: the rows no longer sum to 1
            return np.where(future, 0.0, softmax(E, axis=axis)) @ V
        E = np.where(future, -np.inf, E)
        if stable:
            return softmax(E, axis=axis) @ V
        exp_E = np.exp(E)
        return exp_E / exp_E.sum(axis=axis, keepdims=True) @ V

    return answer


def anti_causal(X, W_Q, W_K, W_V):  # sees the future, not the past
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    E = np.where(np.tril(np.ones((len(X), len(X)), dtype=bool), k=-1), -np.inf, Q @ K.T / np.sqrt(Q.shape[1]))
    return softmax(E, axis=1) @ V


def unmasked(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return softmax(Q @ K.T / np.sqrt(Q.shape[1]), axis=1) @ V


def returns_the_weights(X, W_Q, W_K, W_V):
    Q, K = X @ W_Q, X @ W_K
    E = np.where(np.triu(np.ones((len(X), len(X)), dtype=bool), k=1), -np.inf, Q @ K.T / np.sqrt(Q.shape[1]))
    return softmax(E, axis=1)


def scales_x_in_place(X, W_Q, W_K, W_V):  # right numbers, but the caller's X is scaled
    X /= np.sqrt(W_Q.shape[1])
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    E = np.where(np.triu(np.ones((len(X), len(X)), dtype=bool), k=1), -np.inf, Q @ K.T * np.sqrt(Q.shape[1]))
    return softmax(E, axis=1) @ (V * np.sqrt(W_Q.shape[1]))


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        causal_with(mask_offset=0),
        causal_with(scale=lambda Q, V: 1.0),
        causal_with(scale=lambda Q, V: np.sqrt(V.shape[1])),
        causal_with(stable=False),
        causal_with(axis=0),
        causal_with(after=True),
        anti_causal,
        unmasked,
        returns_the_weights,
        scales_x_in_place,
    ],
    ids=[
        "stub",
        "masks-the-diagonal",
        "no-scale",
        "scale-by-D_V",
        "unstable-softmax",
        "softmax-over-queries",
        "mask-after-softmax",
        "anti-causal",
        "unmasked",
        "returns-weights",
        "in-place",
    ],
)
def test_causal_attention_fails_wrong_answers(wrong):
    assert not check("l15.causal_attention", wrong, show=False).passed


# multi_head_attention


def mha_torch(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
    """A right answer with torch's functional multi-head attention on the same parameters."""
    t = torch.from_numpy(x)[:, None]  # (N, batch 1, D)
    out, _ = F.multi_head_attention_forward(
        t,
        t,
        t,
        x.shape[1],
        n_heads,
        torch.from_numpy(in_proj_weight),
        torch.from_numpy(in_proj_bias),
        None,
        None,
        False,
        0.0,
        torch.from_numpy(out_proj_weight),
        torch.from_numpy(out_proj_bias),
        need_weights=False,
    )
    return out[:, 0]


def mha_einsum(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
    """A right answer with einsum and no transposes."""
    n, d = x.shape
    q, k, v = (
        t.reshape(n, n_heads, d // n_heads) for t in np.split(x @ in_proj_weight.T + in_proj_bias, 3, 1)
    )
    weights = softmax(np.einsum("ihd,jhd->hij", q, k) / np.sqrt(d // n_heads), axis=-1)
    return np.einsum("hij,jhd->ihd", weights, v).reshape(n, d) @ out_proj_weight.T + out_proj_bias


@pytest.mark.parametrize("right", [mha_torch, mha_einsum], ids=["functional", "einsum"])
def test_multi_head_attention_accepts_right_answers(right):
    assert check("l15.multi_head_attention", right, show=False).passed


def mha_with(split="right", merge="right", scale="head", axis=-1, out=True, transpose_w=True, bias=True):
    """Multi-head attention with one step done wrong."""

    def answer(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
        n, d = x.shape
        h, dh = n_heads, d // n_heads
        W = in_proj_weight.T if transpose_w else in_proj_weight
        q, k, v = np.split(x @ W + (in_proj_bias if bias else 0.0), 3, axis=1)
        if split == "right":
            q, k, v = (t.reshape(n, h, dh).transpose(1, 0, 2) for t in (q, k, v))
        elif split == "reshape":  # (N, D) straight to (H, N, D/H): rows cut into heads
            q, k, v = (t.reshape(h, n, dh) for t in (q, k, v))
        elif split == "head-last":  # (N, D) -> (N, D/H, H): each head takes every H-th column
            q, k, v = (t.reshape(n, dh, h).transpose(2, 0, 1) for t in (q, k, v))
        s = {"head": np.sqrt(dh), "model": np.sqrt(d), "none": 1.0}[scale]
        weights = softmax(q @ k.transpose(0, 2, 1) / s, axis=axis)
        y = weights @ v  # (H, N, D/H)
        if merge == "right":
            y = y.transpose(1, 0, 2).reshape(n, d)
        elif merge == "reshape":  # no transpose back: heads and positions mixed up
            y = y.reshape(n, d)
        elif merge == "head-last":
            y = y.transpose(1, 2, 0).reshape(n, d)
        return y @ out_proj_weight.T + out_proj_bias if out else y

    return answer


def interleaved_projections(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
    """Reads in_proj_weight as [q_h, k_h, v_h] per head instead of [Q; K; V]."""
    n, d = x.shape
    dh = d // n_heads
    qkv = (x @ in_proj_weight.T + in_proj_bias).reshape(n, n_heads, 3, dh).transpose(2, 1, 0, 3)
    q, k, v = qkv
    y = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(dh)) @ v
    return y.transpose(1, 0, 2).reshape(n, d) @ out_proj_weight.T + out_proj_bias


def single_head(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
    """Ignores n_heads: one head of width D."""
    return mha_with()(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, 1)


def writes_into_x(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads):
    result = mha_with()(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_heads)
    x[:] = 0.0
    return result


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        mha_with(split="reshape"),
        mha_with(merge="reshape"),
        mha_with(split="reshape", merge="reshape"),
        mha_with(split="head-last", merge="head-last"),
        mha_with(scale="model"),
        mha_with(scale="none"),
        mha_with(axis=1),
        mha_with(out=False),
        mha_with(transpose_w=False),
        mha_with(bias=False),
        interleaved_projections,
        single_head,
        writes_into_x,
    ],
    ids=[
        "stub",
        "split-by-reshape",
        "merge-by-reshape",
        "split-and-merge-by-reshape",
        "heads-interleaved",
        "scale-by-model-width",
        "no-scale",
        "softmax-over-queries",
        "no-output-projection",
        "weight-not-transposed",
        "no-bias",
        "interleaved-projections",
        "one-head",
        "writes-into-x",
    ],
)
def test_multi_head_attention_fails_wrong_answers(wrong):
    assert not check("l15.multi_head_attention", wrong, show=False).passed


# patchify


def patchify_unfold(images, patch):
    return F.unfold(images, patch, stride=patch).transpose(1, 2).numpy()


def test_patchify_accepts_unfold_as_numpy():
    assert check("l15.patchify", patchify_unfold, show=False).passed


def patchify_with(order):
    def answer(images, patch):
        b, c, h, w = images.shape
        grid = images.reshape(b, c, h // patch, patch, w // patch, patch)
        return grid.permute(*order).reshape(b, -1, c * patch * patch)

    return answer


def reshape_only(images, patch):
    b, c, _, _ = images.shape
    return images.reshape(b, -1, c * patch * patch)


def zeroes_the_images(images, patch):
    result = patchify_with((0, 2, 4, 1, 3, 5))(images, patch).clone()
    images.zero_()
    return result


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        patchify_with((0, 2, 4, 3, 5, 1)),  # channels last inside a patch
        patchify_with((0, 4, 2, 1, 3, 5)),  # patches column by column
        patchify_with((0, 2, 4, 1, 5, 3)),  # each patch transposed
        reshape_only,
        zeroes_the_images,
    ],
    ids=["stub", "channels-last", "column-order", "patch-transposed", "reshape-only", "in-place"],
)
def test_patchify_fails_wrong_answers(wrong):
    assert not check("l15.patchify", wrong, show=False).passed
