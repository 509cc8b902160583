"""Numeric gradients agree with torch autograd; relative error behaves as CS231n defines it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dlcourse.gradients import (
    grad_check,
    numeric_gradient,
    numeric_gradient_array,
    rel_error,
    sampled_numeric_gradient,
)

finite = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
shapes = st.tuples(st.integers(1, 4), st.integers(1, 4))

# Smooth scalar functions written twice: once for numpy, once for torch (the oracle).
FUNCTIONS = {
    "sum_sin_times": (lambda x: np.sum(np.sin(x) * x), lambda t: (torch.sin(t) * t).sum()),
    "log_sum_exp": (lambda x: np.log(np.sum(np.exp(x))), lambda t: torch.logsumexp(t.reshape(-1), 0)),
    "quartic": (lambda x: np.sum(x**4 - 2 * x**2), lambda t: (t**4 - 2 * t**2).sum()),
    "matrix_quad": (lambda x: np.sum((x @ x.T) ** 2), lambda t: ((t @ t.T) ** 2).sum()),
}


@settings(max_examples=25, deadline=None)
@given(
    x=shapes.flatmap(lambda s: arrays(np.float64, s, elements=finite)),
    which=st.sampled_from(sorted(FUNCTIONS)),
)
def test_numeric_gradient_matches_torch_autograd(x, which):
    f_np, f_torch = FUNCTIONS[which]
    t = torch.tensor(x, requires_grad=True)
    f_torch(t).backward()
    numeric = numeric_gradient(f_np, x.copy())
    np.testing.assert_allclose(numeric, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_numeric_gradient_restores_its_input():
    x = np.arange(6.0).reshape(2, 3)
    before = x.copy()
    numeric_gradient(lambda z: np.sum(z**2), x)
    np.testing.assert_array_equal(x, before)


def test_numeric_gradient_array_checks_a_layer_backward():
    rng = np.random.default_rng(0)
    x, w, dout = rng.normal(size=(4, 3)), rng.normal(size=(3, 5)), rng.normal(size=(4, 5))
    np.testing.assert_allclose(numeric_gradient_array(lambda z: z @ w, x, dout), dout @ w.T, rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(a=arrays(np.float64, 5, elements=finite), b=arrays(np.float64, 5, elements=finite))
def test_rel_error_properties(a, b):
    assert rel_error(a, a) == 0.0
    assert rel_error(a, b) == pytest.approx(rel_error(b, a))
    assert 0.0 <= rel_error(a, b) <= 1.0
    if np.all(np.abs(a) + np.abs(b) > 1e-6):
        assert rel_error(3 * a, 3 * b) == pytest.approx(rel_error(a, b), rel=1e-9)  # scale invariant


def test_rel_error_rejects_different_shapes():
    with pytest.raises(ValueError, match="equal shapes"):
        rel_error(np.zeros(3), np.zeros(4))


def test_grad_check_passes_a_right_gradient_and_points_at_a_wrong_one():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4))
    f = lambda z: np.sum(z**3)
    good = grad_check(f, x, 3 * x**2)
    assert good.passed and good.rel_error < 1e-7
    wrong = 3 * x**2
    wrong[2, 1] += 1.0  # one bad coordinate
    bad = grad_check(f, x, wrong)
    assert not bad.passed
    assert bad.worst[0][0] == (2, 1)
    assert "(2, 1)" in str(bad) and "MISMATCH" in str(bad)


def test_sampled_gradient_is_exact_on_its_samples():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 40))
    indices, values = sampled_numeric_gradient(lambda z: np.sum(z**2), x, num_samples=7, seed=3)
    assert len(indices) == 7
    np.testing.assert_allclose(values, [2 * x[i] for i in indices], rtol=1e-6)
    report = grad_check(lambda z: np.sum(z**2), x, 2 * x, num_samples=7)
    assert report.passed


def test_rel_error_takes_tensors_as_they_come_out_of_training():
    """Gradients compared in lecture 12 are tensors on the runtime's device: on a GPU (Colab) numpy cannot
    read them directly, nor a tensor that requires grad, nor bfloat16 (seen on an H200: the lecture's cell
    failed there)."""
    import torch

    a = torch.tensor([1.0, 2.0], requires_grad=True)
    assert rel_error(a, torch.tensor([1.0, 2.0])) == 0.0
    assert rel_error(a.to(torch.bfloat16), [1.0, 2.0]) == 0.0
    assert rel_error(torch.tensor([1.0]), torch.tensor([3.0])) == pytest.approx(0.5)
