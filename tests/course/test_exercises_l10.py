"""Lecture 10's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import math

import pytest

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda sms, units, per_cycle, ghz: sms * units * per_cycle * ghz * 1e9,  # FLOP/s, not TFLOP/s
        lambda sms, units, per_cycle, ghz: sms * units * ghz / 1e3,  # forgets the FLOPs per cycle
        lambda sms, units, per_cycle, ghz: None,
    ],
    ids=["stub", "flop-per-second", "no-flops-per-cycle", "returns-none"],
)
def test_peak_tflops_fails_wrong_answers(wrong):
    assert not check("l10.peak_tflops", wrong, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda n, m, k, b: 2 * n * m * k / (b * (n * k + k * m)),  # forgets writing the output
        lambda n, m, k, b: n * m * k / (b * (n * k + k * m + n * m)),  # counts multiply-adds, not FLOPs
        lambda n, m, k, b: 2 * n * m * k / (4 * (n * k + k * m + n * m)),  # assumes float32 always
    ],
    ids=["stub", "no-output", "macs", "fixed-float32"],
)
def test_matmul_intensity_fails_wrong_answers(wrong):
    assert not check("l10.matmul_intensity", wrong, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda peak, bw, b=4: 3 * b * peak / (2 * bw),  # not rounded up to a whole size
        lambda peak, bw, b=4: math.ceil(peak / bw),  # the ridge point itself, not a size
        lambda peak, bw, b=4: math.ceil(3 * 4 * peak / (2 * bw)),  # ignores the element size
    ],
    ids=["stub", "not-whole", "ridge-point", "fixed-float32"],
)
def test_smallest_compute_bound_n_fails_wrong_answers(wrong):
    assert not check("l10.smallest_compute_bound_n", wrong, show=False).passed
