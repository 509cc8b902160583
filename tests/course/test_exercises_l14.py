"""Lecture 14's self-checks reject wrong answers and stubs, and accept right answers in other forms (scipy's
interval, a numpy tail sum, a sort).

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy.stats import binom

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


# accuracy_interval


def z_of(confidence):
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson_from_score_equation(correct, n, confidence=0.95):
    """A right answer another way: the two roots of (p - q)^2 = z^2 q (1 - q) / n, solved as a quadratic in q."""
    z2, p = z_of(confidence) ** 2, correct / n
    a, b, c = 1 + z2 / n, -(2 * p + z2 / n), p * p
    root = math.sqrt(b * b - 4 * a * c)
    return np.array([(-b - root) / (2 * a), (-b + root) / (2 * a)])


def test_accuracy_interval_accepts_the_score_equations_roots():
    assert check("l14.accuracy_interval", wilson_from_score_equation, show=False).passed


def normal_approximation(correct, n, confidence=0.95):  # the textbook interval: width 0 at 0 or n correct
    p = correct / n
    half = z_of(confidence) * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def always_95(correct, n, confidence=0.95):  # ignores the confidence it is given
    return wilson_from_score_equation(correct, n, 0.95)


def z_of_one_tail(correct, n, confidence=0.95):  # z for a one-sided bound: 1.645 at 95%
    z2, p = NormalDist().inv_cdf(confidence) ** 2, correct / n
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = math.sqrt(z2) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def centre_at_p(correct, n, confidence=0.95):  # Wilson's half-width around the raw accuracy
    z2, p = z_of(confidence) ** 2, correct / n
    half = math.sqrt(z2) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return p - half, p + half


@pytest.mark.parametrize(
    "wrong",
    [stub, normal_approximation, always_95, z_of_one_tail, centre_at_p, lambda k, n, c=0.95: k / n],
    ids=["stub", "normal-approximation", "ignores-confidence", "one-tailed-z", "centred-at-p", "one-number"],
)
def test_accuracy_interval_fails_wrong_answers(wrong):
    assert not check("l14.accuracy_interval", wrong, show=False).passed


# mcnemar_p


def mcnemar_with_scipy_cdf(correct_a, correct_b):
    only_a = int(np.sum(correct_a & ~correct_b))
    only_b = int(np.sum(~correct_a & correct_b))
    if only_a + only_b == 0:
        return 1.0
    return np.float64(min(1.0, 2 * binom.cdf(min(only_a, only_b), only_a + only_b, 0.5)))


def test_mcnemar_accepts_scipys_binomial_cdf():
    assert check("l14.mcnemar_p", mcnemar_with_scipy_cdf, show=False).passed


def one_sided(correct_a, correct_b):  # forgets the factor 2 of a two-sided test
    only_a, only_b = int(np.sum(correct_a & ~correct_b)), int(np.sum(~correct_a & correct_b))
    n = only_a + only_b
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n


def counts_every_example(correct_a, correct_b):  # a binomial over all test examples, agreements included
    only_a, n = int(np.sum(correct_a & ~correct_b)), len(correct_a)
    tail = sum(math.comb(n, k) for k in range(min(only_a, n - only_a) + 1)) / 2**n
    return min(1.0, 2 * tail)


def accuracy_difference(correct_a, correct_b):  # a size of effect, not a p-value
    return abs(float(np.mean(correct_a)) - float(np.mean(correct_b)))


def zero_when_equal(correct_a, correct_b):  # 0 disagreements: no evidence of a difference, p must be 1
    only_a, only_b = int(np.sum(correct_a & ~correct_b)), int(np.sum(~correct_a & correct_b))
    n = only_a + only_b
    if n == 0:
        return 0.0
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n)


@pytest.mark.parametrize(
    "wrong",
    [stub, one_sided, counts_every_example, accuracy_difference, zero_when_equal],
    ids=["stub", "one-sided", "all-examples", "accuracy-difference", "zero-when-equal"],
)
def test_mcnemar_fails_wrong_answers(wrong):
    assert not check("l14.mcnemar_p", wrong, show=False).passed


# choose_model


def choose_by_sorting_a_copy(rows):
    return sorted(rows, key=lambda row: (row["val acc"], -row["params"]), reverse=True)[0]["name"]


def test_choose_model_accepts_a_sorted_copy():
    assert check("l14.choose_model", choose_by_sorting_a_copy, show=False).passed


def sorts_in_place(rows):
    rows.sort(key=lambda row: (-row["val acc"], row["params"]))
    return rows[0]["name"]


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        sorts_in_place,
        lambda rows: max(rows, key=lambda row: row["test acc"])["name"],  # chooses on the test split
        lambda rows: max(rows, key=lambda row: row["train acc"])["name"],  # rewards memorising
        lambda rows: max(rows, key=lambda row: row["val acc"])[
            "name"
        ],  # a tie goes to the first, not the smallest
        lambda rows: max(rows, key=lambda row: (row["val acc"], row["test acc"]))["name"],  # test breaks ties
        lambda rows: max(rows, key=lambda row: row["val acc"]),  # the row, not its name
    ],
    ids=["stub", "sorts", "test", "train", "first-of-ties", "test-breaks-ties", "row"],
)
def test_choose_model_fails_wrong_answers(wrong):
    assert not check("l14.choose_model", wrong, show=False).passed
