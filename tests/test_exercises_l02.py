"""Lecture 2's self-checks pass a correct answer and fail a wrong one or a stub."""

from __future__ import annotations

import numpy as np
import pytest

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


def graph_gradients(x, y, z):
    b = x * y + z
    grad_b = 2 * b
    return grad_b * y, grad_b * x, grad_b


def two_layer_bias(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    h_relu = np.maximum(h, 0)
    y_pred = h_relu @ w2 + b2
    loss = np.sum((y_pred - y) ** 2)
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grad_h[h < 0] = 0
    grads = (x.T @ grad_h, grad_h.sum(axis=0), h_relu.T @ grad_y_pred, grad_y_pred.sum(axis=0))
    return loss, grads


def pairwise_sq_distances(a, b):
    return (a**2).sum(axis=1)[:, None] - 2 * a @ b.T + (b**2).sum(axis=1)[None, :]


def test_graph_gradients_passes_a_correct_answer():
    assert check("l02.graph_gradients", graph_gradients, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda x, y, z: (y, x, np.ones_like(z)),  # lecture 2's graph: forgets the square node
        lambda x, y, z: graph_gradients(x, y, z)[:2],
        lambda x, y, z: tuple(g.T for g in graph_gradients(x, y, z)),
    ],
    ids=["stub", "no-square", "two-grads", "transposed"],
)
def test_graph_gradients_fails_wrong_answers(wrong):
    assert not check("l02.graph_gradients", wrong, show=False).passed


def test_graph_gradients_fails_an_answer_that_overwrites_its_inputs():
    def in_place(x, y, z):
        grads = graph_gradients(x.copy(), y, z)
        x *= 0
        return grads

    assert not check("l02.graph_gradients", in_place, show=False).passed


def test_two_layer_bias_passes_a_correct_answer():
    assert check("l02.two_layer_bias", two_layer_bias, show=False).passed


def no_relu_mask(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grads = (x.T @ grad_h, grad_h.sum(axis=0), np.maximum(h, 0).T @ grad_y_pred, grad_y_pred.sum(axis=0))
    return np.sum((y_pred - y) ** 2), grads


def bias_summed_wrong_axis(x, y, w1, b1, w2, b2):
    loss, (g_w1, _g_b1, g_w2, g_b2) = two_layer_bias(x, y, w1, b1, w2, b2)
    h = x @ w1 + b1
    grad_h = 2 * (np.maximum(h, 0) @ w2 + b2 - y) @ w2.T
    grad_h[h < 0] = 0
    return loss, (g_w1, grad_h.mean(axis=0), g_w2, g_b2)


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        no_relu_mask,
        bias_summed_wrong_axis,
        lambda *args: two_layer_bias(*args)[1],
        lambda *args: (two_layer_bias(*args)[0] / 2, two_layer_bias(*args)[1]),
    ],
    ids=["stub", "no-relu-mask", "bias-mean", "no-loss", "half-loss"],
)
def test_two_layer_bias_fails_wrong_answers(wrong):
    assert not check("l02.two_layer_bias", wrong, show=False).passed


def test_pairwise_sq_distances_passes_a_correct_answer():
    assert check("l02.pairwise_sq_distances", pairwise_sq_distances, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda a, b: np.sqrt(np.maximum(pairwise_sq_distances(a, b), 0)),  # distances, not squared
        lambda a, b: pairwise_sq_distances(b, a),  # (m, n): transposed
        lambda a, b: (a**2).sum(axis=1)[:, None] + (b**2).sum(axis=1)[None, :],  # forgets the cross term
    ],
    ids=["stub", "not-squared", "transposed", "no-cross-term"],
)
def test_pairwise_sq_distances_fails_wrong_answers(wrong):
    assert not check("l02.pairwise_sq_distances", wrong, show=False).passed
