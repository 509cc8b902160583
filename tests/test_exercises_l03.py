"""Lecture 3's self-checks pass a correct answer and fail a wrong one or a stub."""

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


def leaky_two_layer_grads(x, y, w1, w2, negative_slope):
    h = x.mm(w1)
    h_act = torch.where(h > 0, h, negative_slope * h)
    y_pred = h_act.mm(w2)
    loss = (y_pred - y).pow(2).sum()
    grad_y_pred = 2.0 * (y_pred - y)
    grad_w2 = h_act.t().mm(grad_y_pred)
    grad_h_act = grad_y_pred.mm(w2.t())
    grad_h = torch.where(h > 0, grad_h_act, negative_slope * grad_h_act)
    return loss, x.t().mm(grad_h), grad_w2


def plain_relu(x, y, w1, w2, negative_slope):
    return leaky_two_layer_grads(x, y, w1, w2, 0.0)


def to_numpy(t):
    return t.detach().cpu().numpy()


def test_leaky_two_layer_grads_passes_a_correct_answer():
    assert check("l03.leaky_two_layer_grads", leaky_two_layer_grads, show=False).passed


def through_numpy(x, y, w1, w2, negative_slope):
    """Right values, but a float32 loss whatever the inputs' dtype."""
    loss, grad_w1, grad_w2 = (t.cpu().numpy() for t in leaky_two_layer_grads(x, y, w1, w2, negative_slope))
    return torch.tensor(float(loss)), torch.from_numpy(grad_w1), torch.from_numpy(grad_w2)


def forgets_the_slope_in_backward(x, y, w1, w2, negative_slope):
    loss, _, grad_w2 = leaky_two_layer_grads(x, y, w1, w2, negative_slope)
    h = x.mm(w1)
    grad_h = (2.0 * (torch.where(h > 0, h, negative_slope * h).mm(w2) - y)).mm(w2.t())
    grad_h[h < 0] = 0
    return loss, x.t().mm(grad_h), grad_w2


def modifies_its_input(x, y, w1, w2, negative_slope):
    result = leaky_two_layer_grads(x, y, w1, w2, negative_slope)
    w1[w1 < 0] = 0
    return result


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        plain_relu,
        forgets_the_slope_in_backward,
        lambda *args: tuple(t.cpu().numpy() for t in leaky_two_layer_grads(*args)),
        lambda *args: tuple(t.double() for t in leaky_two_layer_grads(*args)),
        lambda *args: (*leaky_two_layer_grads(*args)[:2], leaky_two_layer_grads(*args)[2] / 2),
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


def test_to_numpy_passes_a_correct_answer():
    assert check("l03.to_numpy", to_numpy, show=False).passed


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
