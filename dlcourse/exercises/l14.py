"""Self-checks for lecture 14 (the mini-project: a measured table, read honestly).

An accuracy's confidence interval and McNemar's test are compared with scipy's binomial test; the choice of a
model with tables whose answers are worked out in the check, and whose test column points the wrong way.
"""

from __future__ import annotations

import numpy as np

from dlcourse.closeness import to_numpy
from dlcourse.selfcheck import Checker


def accuracy_interval(c: Checker, fn) -> None:
    """``fn(correct, n, confidence=0.95)`` returns ``(low, high)``, the Wilson score interval of an accuracy of
    ``correct`` right answers out of ``n``: the interval scipy's ``binomtest(correct, n).proportion_ci(confidence,
    method="wilson")`` gives."""
    from scipy.stats import binomtest

    for correct, n, confidence in (
        (90, 100, 0.95),
        (437, 500, 0.95),
        (0, 10, 0.95),
        (10, 10, 0.95),
        (1, 3, 0.95),
        (50, 100, 0.99),
        (880, 1000, 0.9),
    ):
        interval = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
        expected = [interval.low, interval.high]
        label = f"accuracy_interval({correct}, {n}, confidence={confidence})"
        got = c.call(label, fn, correct, n, confidence)
        try:
            pair = np.asarray(
                to_numpy(got) if not isinstance(got, list | tuple) else [to_numpy(v) for v in got]
            )
        except (TypeError, ValueError):
            pair = np.asarray(None)
        if not c.true(
            f"{label}: returns a pair (low, high)",
            pair.shape == (2,) and pair.dtype.kind in "iuf",
            hint="return two numbers: the lower and the upper end",
        ):
            return
        if not c.close(
            f"{label}: the Wilson interval ({expected[0]:.4f}, {expected[1]:.4f})",
            pair.astype(np.float64),
            expected,
            rtol=1e-6,
            atol=1e-9,
            hint="centre (p + z^2 / 2n) / (1 + z^2 / n), half-width z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n), "
            "with z = NormalDist().inv_cdf(1 - (1 - confidence) / 2); the normal approximation p +- z sqrt(p (1 - p) / n) "
            "is not it (at 0 or n correct it has width 0)",
        ):
            return


def mcnemar_p(c: Checker, fn) -> None:
    """``fn(correct_a, correct_b)`` takes two boolean arrays, whether model A and model B got each test example
    right, and returns McNemar's exact two-sided p-value: with ``b`` the examples only A got right and ``c`` those
    only B got right, the two-sided binomial test of ``b`` out of ``b + c`` at probability 1/2 (1.0 when
    ``b + c`` is 0)."""
    from scipy.stats import binomtest

    rng = np.random.default_rng(14)
    cases = []
    for n, accuracy_a, accuracy_b, overlap in (
        (200, 0.9, 0.85, 0.8),
        (1000, 0.91, 0.9, 0.95),
        (60, 0.5, 0.7, 0.0),
    ):
        a = rng.random(n) < accuracy_a
        agree = rng.random(n) < overlap
        b = np.where(agree, a, rng.random(n) < accuracy_b)
        cases.append((f"{n} examples, accuracies {a.mean():.0%} and {b.mean():.0%}", a, b))
    same = rng.random(50) < 0.8
    cases.append(("two models right on exactly the same examples", same, same.copy()))
    lopsided = np.ones(40, dtype=bool)
    cases.append(("B wrong on 6 examples A got right, and nothing else differs", lopsided, lopsided.copy()))
    cases[-1][2][:6] = False
    for label, a, b in cases:
        only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
        expected = 1.0 if only_a + only_b == 0 else binomtest(only_a, only_a + only_b, 0.5).pvalue
        got = c.call(f"mcnemar_p on {label}", fn, a.copy(), b.copy())
        if not c.close(
            f"{label}: {only_a} right only for A, {only_b} only for B, p = {expected:.4g}",
            float(to_numpy(got)),
            expected,
            rtol=1e-6,
            atol=1e-12,
            hint="only the examples where the models disagree count; under 'equally good' each of them is A's with "
            "probability 1/2: p = min(1, 2 * P(X <= min(b, c))) for X ~ Binomial(b + c, 1/2)",
        ):
            return


def choose_model(c: Checker, fn) -> None:
    """``fn(rows)`` takes a results table, a list of dicts with the keys ``"name"``, ``"params"``, ``"train acc"``,
    ``"val acc"``, ``"test acc"`` and ``"seconds"``, and returns the name of the model to report: the highest
    validation accuracy, and of equally accurate ones the one with fewer parameters. The test column must not
    matter."""

    def row(name, params, train, val, test, seconds=1.0):
        return {
            "name": name,
            "params": params,
            "train acc": train,
            "val acc": val,
            "test acc": test,
            "seconds": seconds,
        }

    tables = (
        (
            "the best on validation",
            [row("MLP", 100_000, 1.0, 0.62, 0.60), row("CNN", 5_000, 0.95, 0.9, 0.88)],
            "CNN",
        ),
        (
            "the test column points elsewhere",
            [row("A", 10, 0.9, 0.81, 0.95), row("B", 20, 0.9, 0.84, 0.80), row("C", 30, 1.0, 0.7, 0.97)],
            "B",
        ),
        (
            "the training column points elsewhere",
            [row("wide", 9_000, 1.0, 0.85, 0.84), row("narrow", 900, 0.9, 0.87, 0.86)],
            "narrow",
        ),
        (
            "a tie on validation: fewer parameters",
            [
                row("big", 50_000, 0.99, 0.9, 0.91),
                row("small", 4_000, 0.95, 0.9, 0.89),
                row("mid", 9_000, 0.97, 0.9, 0.92),
            ],
            "small",
        ),
        ("one model", [row("only", 1, 0.5, 0.5, 0.5)], "only"),
    )
    for label, table, expected in tables:
        copied = [dict(r) for r in table]
        got = c.call(f"choose_model: {label}", fn, copied)
        c.true(
            f"{label}: {expected!r}",
            got == expected,
            hint=f"got {got!r}; choose on the validation accuracy (fewer parameters break a tie), never on the test "
            "or training accuracy",
        )
        c.true(f"{label}: the table is left unchanged", copied == table, hint="do not sort or edit the rows")
