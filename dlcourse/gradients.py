"""Numeric gradients by central differences, and the checks that compare them with analytic ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dlcourse.closeness import to_numpy


def rel_error(a, b, eps: float = 1e-12) -> float:
    """CS231n's relative error: ``max(|a - b| / max(eps, |a| + |b|))`` over all entries.

    Rules of thumb in float64: above 1e-2 the gradient is probably wrong; 1e-4 to 1e-2 is
    suspicious; below 1e-7 is right (kinks such as ReLU's can push a correct one up to ~1e-5).
    """
    a = to_numpy(a).astype(np.float64)  # a tensor on a GPU, one that requires grad, bfloat16: all fine
    b = to_numpy(b).astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"rel_error needs equal shapes, got {a.shape} and {b.shape}")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(eps, np.abs(a) + np.abs(b))))


def central_difference(
    f: Callable[[np.ndarray], float], x: np.ndarray, idx: tuple[int, ...], h: float = 1e-5
) -> float:
    """``(f(x + h e_idx) - f(x - h e_idx)) / 2h``: the slope of ``f`` along one coordinate of ``x``.

    ``x`` is changed in place while probing and restored afterwards, so ``f`` may close over it.
    """
    old = x[idx]
    x[idx] = old + h
    f_plus = float(f(x))
    x[idx] = old - h
    f_minus = float(f(x))
    x[idx] = old
    return (f_plus - f_minus) / (2 * h)


def numeric_gradient(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Gradient of a scalar function ``f`` at ``x`` by central differences, one coordinate at a time.

    Cost: two calls of ``f`` per entry of ``x``; see :func:`sampled_numeric_gradient` for big arrays.
    """
    grad = np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        grad[idx] = central_difference(f, x, idx, h)
    return grad


def numeric_gradient_array(
    f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, upstream: np.ndarray, h: float = 1e-5
) -> np.ndarray:
    """Gradient of ``sum(f(x) * upstream)`` at ``x``: the numeric check for a layer's backward pass,
    where ``upstream`` plays the role of ``dout``."""
    return numeric_gradient(lambda z: np.sum(f(z) * upstream), x, h)


def sampled_numeric_gradient(
    f: Callable[[np.ndarray], float], x: np.ndarray, num_samples: int = 10, h: float = 1e-5, seed: int = 0
) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Central differences at ``num_samples`` random coordinates only: ``(indices, values)``.

    For weight matrices with thousands of entries, a few random coordinates catch almost every bug
    at a tiny fraction of the cost.
    """
    rng = np.random.default_rng(seed)
    indices = [tuple(int(rng.integers(n)) for n in x.shape) for _ in range(num_samples)]
    return indices, np.array([central_difference(f, x, idx, h) for idx in indices])


@dataclass
class GradCheckReport:
    """What a gradient check found: the overall relative error and the worst coordinates."""

    name: str
    rel_error: float
    tolerance: float
    worst: list[tuple[tuple[int, ...], float, float, float]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.rel_error <= self.tolerance

    def __str__(self) -> str:
        verdict = "OK" if self.passed else "MISMATCH"
        lines = [
            f"{self.name}: relative error {self.rel_error:.2e} (tolerance {self.tolerance:.0e}) {verdict}"
        ]
        if not self.passed:
            lines.append("  worst coordinates (index: analytic vs numeric, relative error):")
            lines += [f"    {idx}: {a:+.6e} vs {n:+.6e}  ({e:.1e})" for idx, a, n, e in self.worst]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):  # IPython shows the report, not a dataclass dump
        p.text(str(self))


def grad_check(
    f: Callable[[np.ndarray], float],
    x: np.ndarray,
    analytic: np.ndarray,
    name: str = "gradient",
    tolerance: float = 1e-6,
    num_samples: int | None = None,
    h: float = 1e-5,
    show: int = 5,
) -> GradCheckReport:
    """Compare an analytic gradient of scalar ``f`` at ``x`` with central differences.

    Checks every coordinate, or ``num_samples`` random ones. The report lists the ``show`` worst
    coordinates, which usually points straight at the bug (a whole row off: a transposed matrix;
    only negative inputs off: a ReLU mask).
    """
    analytic = np.asarray(analytic, dtype=np.float64)
    if analytic.shape != x.shape:
        raise ValueError(f"{name}: analytic gradient has shape {analytic.shape}, but x has shape {x.shape}")
    if num_samples is None:
        numeric = numeric_gradient(f, x, h)
        indices = [tuple(int(i) for i in idx) for idx in np.ndindex(x.shape)]
        a_vals, n_vals = analytic.reshape(-1), numeric.reshape(-1)
    else:
        indices, n_vals = sampled_numeric_gradient(f, x, num_samples, h)
        a_vals = np.array([analytic[idx] for idx in indices])
    errors = np.abs(a_vals - n_vals) / np.maximum(1e-12, np.abs(a_vals) + np.abs(n_vals))
    order = np.argsort(errors)[::-1][:show]
    worst = [(indices[k], float(a_vals[k]), float(n_vals[k]), float(errors[k])) for k in order]
    return GradCheckReport(name, float(errors.max(initial=0.0)), tolerance, worst)
