"""Lecture 2's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import numpy as np
import pytest

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


# graph_gradients --------------------------------------------------------------------------------------


def graph_gradients_two_grads(x, y, z):
    grad_b = 2 * (x * y + z)
    return grad_b * y, grad_b * x


def graph_gradients_transposed(x, y, z):
    grad_b = 2 * (x * y + z)
    return (grad_b * y).T, (grad_b * x).T, grad_b.T


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda x, y, z: (y, x, np.ones_like(z)),  # lecture 2's graph: forgets the square node
        graph_gradients_two_grads,
        graph_gradients_transposed,
    ],
    ids=["stub", "no-square", "two-grads", "transposed"],
)
def test_graph_gradients_fails_wrong_answers(wrong):
    assert not check("l02.graph_gradients", wrong, show=False).passed


def test_graph_gradients_fails_an_answer_that_overwrites_its_inputs():
    def in_place(x, y, z):
        grad_b = 2 * (x * y + z)
        grads = grad_b * y, grad_b * x, grad_b
        x *= 0
        return grads

    assert not check("l02.graph_gradients", in_place, show=False).passed


# two_layer_bias ---------------------------------------------------------------------------------------


def no_relu_mask(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grads = (x.T @ grad_h, grad_h.sum(axis=0), np.maximum(h, 0).T @ grad_y_pred, grad_y_pred.sum(axis=0))
    return np.sum((y_pred - y) ** 2), grads


def bias_summed_wrong_axis(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grad_h[h <= 0] = 0
    grads = (x.T @ grad_h, grad_h.mean(axis=0), np.maximum(h, 0).T @ grad_y_pred, grad_y_pred.sum(axis=0))
    return np.sum((y_pred - y) ** 2), grads


def two_layer_bias_no_loss(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grad_h[h <= 0] = 0
    return x.T @ grad_h, grad_h.sum(axis=0), np.maximum(h, 0).T @ grad_y_pred, grad_y_pred.sum(axis=0)


def two_layer_bias_half_loss(x, y, w1, b1, w2, b2):
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    grad_y_pred = 2 * (y_pred - y)
    grad_h = grad_y_pred @ w2.T
    grad_h[h <= 0] = 0
    grads = (x.T @ grad_h, grad_h.sum(axis=0), np.maximum(h, 0).T @ grad_y_pred, grad_y_pred.sum(axis=0))
    return np.sum((y_pred - y) ** 2) / 2, grads


@pytest.mark.parametrize(
    "wrong",
    [stub, no_relu_mask, bias_summed_wrong_axis, two_layer_bias_no_loss, two_layer_bias_half_loss],
    ids=["stub", "no-relu-mask", "bias-mean", "no-loss", "half-loss"],
)
def test_two_layer_bias_fails_wrong_answers(wrong):
    assert not check("l02.two_layer_bias", wrong, show=False).passed


# pairwise_sq_distances --------------------------------------------------------------------------------


def pairwise_distances_not_squared(a, b):
    sq = (a**2).sum(axis=1)[:, None] - 2 * a @ b.T + (b**2).sum(axis=1)[None, :]
    return np.sqrt(np.maximum(sq, 0))


def pairwise_sq_distances_transposed(a, b):
    return (b**2).sum(axis=1)[:, None] - 2 * b @ a.T + (a**2).sum(axis=1)[None, :]  # (m, n)


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        pairwise_distances_not_squared,
        pairwise_sq_distances_transposed,
        lambda a, b: (a**2).sum(axis=1)[:, None] + (b**2).sum(axis=1)[None, :],  # forgets the cross term
    ],
    ids=["stub", "not-squared", "transposed", "no-cross-term"],
)
def test_pairwise_sq_distances_fails_wrong_answers(wrong):
    assert not check("l02.pairwise_sq_distances", wrong, show=False).passed
