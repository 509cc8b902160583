"""Lectures 2-4 take the ReLU's gradient at exactly 0 to be 0, as ``torch.relu`` does and the assignments
check: every hand-written backward pass agrees with torch's autograd on inputs that hit the kink."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest
import torch

LECTURES = Path(__file__).resolve().parents[2] / "lectures"
STRICT_MASK = re.compile(r"\[\s*\w+\s*<\s*0\s*\]\s*=\s*0")  # grad[h < 0] = 0 lets the gradient through at 0


def cell_source(notebook: str, cell_id: str) -> str:
    nb = nbformat.read(str(LECTURES / notebook), as_version=4)
    return next(cell.source for cell in nb.cells if cell.get("id") == cell_id)


def defined(notebook: str, cell_id: str, name: str, **namespace):
    namespace.setdefault("np", np)
    namespace.setdefault("torch", torch)
    exec(cell_source(notebook, cell_id), namespace)
    return namespace[name]


def kinked_inputs(seed: int = 0):
    """A small two-layer net's inputs, and hidden pre-activations with some entries exactly 0."""
    rng = np.random.default_rng(seed)
    x, w1 = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    w2, y = rng.standard_normal((5, 2)), rng.standard_normal((4, 2))
    h = x @ w1
    h[:, 0] = 0.0
    h[1, 2] = 0.0
    return x, y, w1, w2, h


def torch_grad_w1(x, y, w2, h):
    """grad_w1 = x.T @ dloss/dh, with dloss/dh from torch.relu's autograd."""
    h_leaf = torch.tensor(h, requires_grad=True)
    loss = ((torch.relu(h_leaf) @ torch.tensor(w2) - torch.tensor(y)) ** 2).sum()
    loss.backward()
    return x.T @ h_leaf.grad.numpy()


@pytest.mark.parametrize("notebook", ["02_numpy.ipynb", "03_tensors.ipynb", "04_autograd.ipynb"])
def test_no_mask_lets_the_gradient_through_at_zero(notebook):
    nb = nbformat.read(str(LECTURES / notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not STRICT_MASK.search(cell.source), f"{notebook} cell {cell.id}: mask with <= 0, not < 0"


def test_lecture_2_backward_gives_zero_gradient_at_zero():
    backward = defined("02_numpy.ipynb", "e5a48141", "backward")
    x, y, _, w2, h = kinked_inputs()
    h_relu = np.maximum(h, 0)
    grad_w1, _ = backward((x, y, w2, h, h_relu, h_relu @ w2))
    np.testing.assert_allclose(grad_w1, torch_grad_w1(x, y, w2, h), rtol=1e-12)


def test_lecture_2_solution_with_biases_gives_zero_gradient_at_zero():
    two_layer_bias = defined(
        "02_numpy.ipynb", "42eee394", "two_layer_bias", dlcourse=SimpleNamespace(check=lambda *args: None)
    )
    x, y, w1, w2, _ = kinked_inputs()
    b1 = np.zeros(w1.shape[1])
    b1[:2] = -(x @ w1)[0, :2]  # h[0, :2] is exactly 0
    b2 = np.zeros(w2.shape[1])
    _, (grad_w1, grad_b1, _, _) = two_layer_bias(x, y, w1, b1, w2, b2)
    h = torch.tensor(x @ w1 + b1, requires_grad=True)
    assert (h[0, :2] == 0).all()
    ((torch.relu(h) @ torch.tensor(w2) + torch.tensor(b2) - torch.tensor(y)) ** 2).sum().backward()
    np.testing.assert_allclose(grad_w1, x.T @ h.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad_b1, h.grad.numpy().sum(axis=0), rtol=1e-12)


def test_lecture_3_backward_gives_zero_gradient_at_zero():
    backward = defined("03_tensors.ipynb", "a5331d9f", "backward")
    x, y, _, w2, h = kinked_inputs()
    tx, ty, tw2, th = (torch.tensor(a) for a in (x, y, w2, h))
    th_relu = th.clamp(min=0)
    grad_w1, _ = backward((tx, ty, tw2, th, th_relu, th_relu.mm(tw2)))
    np.testing.assert_allclose(grad_w1.numpy(), torch_grad_w1(x, y, w2, h), rtol=1e-12)


def test_lecture_4_custom_relu_matches_torch_relu_at_zero():
    my_relu = defined("04_autograd.ipynb", "5eebd285", "MyReLU")
    values = torch.tensor([-1.0, 0.0, 0.0, 2.0], dtype=torch.float64)
    ours, theirs = values.clone().requires_grad_(), values.clone().requires_grad_()
    my_relu.apply(ours).sum().backward()
    torch.relu(theirs).sum().backward()
    assert torch.equal(ours.grad, theirs.grad)
    assert ours.grad.tolist() == [0.0, 0.0, 0.0, 1.0]
