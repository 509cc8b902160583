"""Self-checks for lecture 2 (numpy: computational graphs, manual backprop, gradient checks).

Every gradient is compared with central differences (:mod:`dlcourse.gradients`), in float64 and on
small inputs, so a check takes milliseconds and says which gradient is off.
"""

from __future__ import annotations

import numpy as np

from dlcourse.gradients import numeric_gradient
from dlcourse.selfcheck import Checker

GRADIENT_RTOL, GRADIENT_ATOL = 1e-6, 1e-8


def _as_tuple(value, length: int):
    if isinstance(value, list | tuple) and len(value) == length:
        return tuple(value)
    return None


def _squared_graph(x, y, z) -> float:
    return float(np.sum((x * y + z) ** 2))


def _numeric_graph_gradients(x, y, z) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        numeric_gradient(lambda v: _squared_graph(v, y, z), x.copy()),
        numeric_gradient(lambda v: _squared_graph(x, v, z), y.copy()),
        numeric_gradient(lambda v: _squared_graph(x, y, v), z.copy()),
    )


def graph_gradients(c: Checker, fn) -> None:
    """``fn(x, y, z)`` returns ``(grad_x, grad_y, grad_z)``, the gradients of
    ``c = sum((x * y + z) ** 2)`` (lecture 2's graph with one more node, ``d = b ** 2``)."""
    for shape, seed in (((3, 4), 1), ((2, 5), 2)):
        rng = np.random.default_rng(seed)
        x, y, z = (rng.standard_normal(shape) for _ in range(3))
        originals = (x.copy(), y.copy(), z.copy())
        grads = _as_tuple(c.call(f"graph_gradients on inputs of shape {shape}", fn, x, y, z), 3)
        if not c.true(
            f"it returns three gradients (shape {shape})", grads is not None, hint="return a tuple"
        ):
            return
        c.true(
            "it leaves x, y and z unchanged",
            all(np.array_equal(a, b) for a, b in zip((x, y, z), originals)),
            hint="compute new arrays instead of writing into the inputs",
        )
        numeric = _numeric_graph_gradients(*originals)
        for name, got, expected in zip(("grad_x", "grad_y", "grad_z"), grads, numeric):
            c.close(
                f"{name} matches central differences (shape {shape})",
                got,
                expected,
                rtol=GRADIENT_RTOL,
                atol=GRADIENT_ATOL,
                hint="the new node's local gradient is 2 * b; multiply it into everything upstream",
            )


def _relu_net_with_bias(x, y, w1, b1, w2, b2) -> float:
    h = x @ w1 + b1
    y_pred = np.maximum(h, 0) @ w2 + b2
    return float(np.sum((y_pred - y) ** 2))


def _bias_net_inputs(seed: int = 3):
    """Small inputs whose hidden pre-activations stay away from ReLU's kink (so that central
    differences are exact up to rounding)."""
    rng = np.random.default_rng(seed)
    N, D_in, H, D_out = 4, 5, 6, 3
    while True:
        x = rng.standard_normal((N, D_in))
        y = rng.standard_normal((N, D_out))
        w1 = rng.standard_normal((D_in, H))
        b1 = rng.standard_normal(H)
        w2 = rng.standard_normal((H, D_out))
        b2 = rng.standard_normal(D_out)
        h = x @ w1 + b1
        if np.min(np.abs(h)) > 1e-3 and (h > 0).any() and (h < 0).any():
            return x, y, w1, b1, w2, b2


def two_layer_bias(c: Checker, fn) -> None:
    """``fn(x, y, w1, b1, w2, b2)`` returns ``(loss, (grad_w1, grad_b1, grad_w2, grad_b2))`` for
    ``h = x @ w1 + b1``, ``y_pred = max(h, 0) @ w2 + b2``, ``loss = sum((y_pred - y) ** 2)``."""
    inputs = _bias_net_inputs()
    originals = tuple(a.copy() for a in inputs)
    result = _as_tuple(
        c.call("two_layer_bias runs on a small net (N=4, D_in=5, H=6, D_out=3)", fn, *inputs), 2
    )
    if not c.true(
        "it returns (loss, grads)",
        result is not None,
        hint="return loss, (grad_w1, grad_b1, grad_w2, grad_b2)",
    ):
        return
    loss, grads = result
    grads = _as_tuple(grads, 4)
    if not c.true(
        "grads holds four arrays", grads is not None, hint="return loss, (grad_w1, grad_b1, grad_w2, grad_b2)"
    ):
        return
    c.true(
        "it leaves the inputs unchanged",
        all(np.array_equal(a, b) for a, b in zip(inputs, originals)),
        hint="work on copies: the update is the training loop's job",
    )
    x, y, w1, b1, w2, b2 = (a.copy() for a in originals)
    # Compared as 1-element arrays: closeness reports on 0-d arrays need an index to point at.
    c.close(
        "the loss is sum((y_pred - y) ** 2)",
        np.atleast_1d(np.asarray(loss, dtype=np.float64)),
        np.atleast_1d(_relu_net_with_bias(*originals)),
    )
    numeric = {
        "grad_w1": numeric_gradient(lambda v: _relu_net_with_bias(x, y, v, b1, w2, b2), w1.copy()),
        "grad_b1": numeric_gradient(lambda v: _relu_net_with_bias(x, y, w1, v, w2, b2), b1.copy()),
        "grad_w2": numeric_gradient(lambda v: _relu_net_with_bias(x, y, w1, b1, v, b2), w2.copy()),
        "grad_b2": numeric_gradient(lambda v: _relu_net_with_bias(x, y, w1, b1, w2, v), b2.copy()),
    }
    hints = {
        "grad_w1": "grad_w1 = x.T @ grad_h, with grad_h zeroed where h <= 0",
        "grad_b1": "a bias added to every row collects the sum over rows: grad_h.sum(axis=0)",
        "grad_w2": "grad_w2 = h_relu.T @ grad_y_pred",
        "grad_b2": "a bias added to every row collects the sum over rows: grad_y_pred.sum(axis=0)",
    }
    for (name, expected), got in zip(numeric.items(), grads):
        c.close(
            f"{name} matches central differences",
            got,
            expected,
            rtol=GRADIENT_RTOL,
            atol=1e-6,
            hint=hints[name],
        )


def _sq_distance(u, v) -> float:
    return sum((p - q) ** 2 for p, q in zip(u, v))


def pairwise_sq_distances(c: Checker, fn) -> None:
    """``fn(a, b)`` returns the (n, m) matrix of squared distances ``|a[i] - b[j]|^2`` between the
    rows of ``a`` (n, d) and ``b`` (m, d)."""
    for (n, m, d), seed in (((5, 7, 3), 4), ((1, 2, 4), 5), ((6, 6, 1), 6)):
        rng = np.random.default_rng(seed)
        a, b = rng.standard_normal((n, d)), rng.standard_normal((m, d))
        got = c.call(f"pairwise_sq_distances on a ({n}, {d}) and b ({m}, {d})", fn, a.copy(), b.copy())
        # A plain loop over every pair: slow, but obviously right.
        expected = np.array([[_sq_distance(a[i], b[j]) for j in range(m)] for i in range(n)])
        c.close(
            f"it matches the double loop for n={n}, m={m}, d={d}",
            got,
            expected,
            rtol=1e-7,
            atol=1e-9,
            hint="|a - b|^2 = |a|^2 - 2 a.b + |b|^2; broadcast an (n, 1) column against a (1, m) row",
        )
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 3))
    self_distances = c.call("pairwise_sq_distances of a set with itself", fn, a.copy(), a.copy())
    if np.ndim(self_distances) == 2:
        self_distances = np.diag(np.asarray(self_distances, dtype=np.float64))
    c.close(
        "the distance of each row to itself is (close to) zero",
        self_distances,
        np.zeros(4),
        atol=1e-9,
    )
