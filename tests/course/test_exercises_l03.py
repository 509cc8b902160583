"""Lecture 3's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcourse import check
from dlcourse.device import DEVICE_ENV


@pytest.fixture(autouse=True)
def no_device_override(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)


def stub(*_args):
    raise NotImplementedError


# leaky_two_layer_grads --------------------------------------------------------------------------------


def plain_relu(x, y, w1, w2, negative_slope):
    """Ignores negative_slope: a plain ReLU (gradient 0 at h <= 0)."""
    h = x.mm(w1)
    h_act = h.clamp(min=0)
    y_pred = h_act.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h = grad_y_pred.mm(w2.t())
    grad_h[h <= 0] = 0
    return (y_pred - y).pow(2).sum(), x.t().mm(grad_h), h_act.t().mm(grad_y_pred)


def forgets_the_slope_in_backward(x, y, w1, w2, negative_slope):
    h = x.mm(w1)
    h_act = torch.where(h > 0, h, negative_slope * h)
    y_pred = h_act.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h = grad_y_pred.mm(w2.t())
    grad_h[h <= 0] = 0
    return (y_pred - y).pow(2).sum(), x.t().mm(grad_h), h_act.t().mm(grad_y_pred)


def numpy_out(x, y, w1, w2, negative_slope):
    x, y, w1, w2 = (t.cpu().numpy() for t in (x, y, w1, w2))
    h = x @ w1
    h_act = np.where(h > 0, h, negative_slope * h)
    y_pred = h_act @ w2
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h_act = grad_y_pred @ w2.T
    grad_h = np.where(h > 0, grad_h_act, negative_slope * grad_h_act)
    return ((y_pred - y) ** 2).sum(), x.T @ grad_h, h_act.T @ grad_y_pred


def always_float64(x, y, w1, w2, negative_slope):
    x, y, w1, w2 = (t.double() for t in (x, y, w1, w2))
    h = x.mm(w1)
    h_act = torch.where(h > 0, h, negative_slope * h)
    y_pred = h_act.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h_act = grad_y_pred.mm(w2.t())
    grad_h = torch.where(h > 0, grad_h_act, negative_slope * grad_h_act)
    return (y_pred - y).pow(2).sum(), x.t().mm(grad_h), h_act.t().mm(grad_y_pred)


def half_grad_w2(x, y, w1, w2, negative_slope):
    h = x.mm(w1)
    h_act = torch.where(h > 0, h, negative_slope * h)
    y_pred = h_act.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h_act = grad_y_pred.mm(w2.t())
    grad_h = torch.where(h > 0, grad_h_act, negative_slope * grad_h_act)
    return (y_pred - y).pow(2).sum(), x.t().mm(grad_h), h_act.t().mm(grad_y_pred) / 2


def through_numpy(x, y, w1, w2, negative_slope):
    """Right values, but a float32 loss whatever the inputs' dtype."""
    loss, grad_w1, grad_w2 = numpy_out(x, y, w1, w2, negative_slope)
    return torch.tensor(float(loss)), torch.from_numpy(grad_w1), torch.from_numpy(grad_w2)


def modifies_its_input(x, y, w1, w2, negative_slope):
    h = x.mm(w1)
    h_act = torch.where(h > 0, h, negative_slope * h)
    y_pred = h_act.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_h_act = grad_y_pred.mm(w2.t())
    grad_h = torch.where(h > 0, grad_h_act, negative_slope * grad_h_act)
    w1[w1 < 0] = 0
    return (y_pred - y).pow(2).sum(), x.t().mm(grad_h), h_act.t().mm(grad_y_pred)


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        plain_relu,
        forgets_the_slope_in_backward,
        numpy_out,
        always_float64,
        half_grad_w2,
        through_numpy,
        modifies_its_input,
    ],
    ids=[
        "stub",
        "plain-relu",
        "slope-forgotten-in-backward",
        "numpy-out",
        "always-float64",
        "half-grad-w2",
        "float32-loss",
        "modifies-input",
    ],
)
def test_leaky_two_layer_grads_fails_wrong_answers(wrong):
    assert not check("l03.leaky_two_layer_grads", wrong, show=False).passed


# to_numpy ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda t: t.numpy(),  # fails on a tensor that requires grad (and on a GPU)
        lambda t: t.detach(),  # still a tensor
        lambda t: t.detach().cpu().double().numpy(),  # changes the dtype
        lambda t: np.zeros(tuple(t.shape), dtype=np.float32),
    ],
    ids=["stub", "plain-numpy", "tensor", "float64", "zeros"],
)
def test_to_numpy_fails_wrong_answers(wrong):
    assert not check("l03.to_numpy", wrong, show=False).passed
