"""Lecture 12's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import time

import pytest
import torch

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


def no_unscale(params, grads, scale, lr):
    if not all(torch.isfinite(g).all() for g in grads):
        return list(params), scale / 2
    return [p - lr * g for p, g in zip(params, grads)], scale


def inf_only(params, grads, scale, lr):
    if any(torch.isinf(g).any() for g in grads):
        return list(params), scale / 2
    return [p - lr * g / scale for p, g in zip(params, grads)], scale


def never_skips(params, grads, scale, lr):
    return [p - lr * g / scale for p, g in zip(params, grads)], scale


def always_halves(params, grads, scale, lr):
    if not all(torch.isfinite(g).all() for g in grads):
        return list(params), scale / 2
    return [p - lr * g / scale for p, g in zip(params, grads)], scale / 2


def in_place(params, grads, scale, lr):
    if not all(torch.isfinite(g).all() for g in grads):
        return params, scale / 2
    for p, g in zip(params, grads):
        p.sub_(lr * g / scale)
    return params, scale


def first_tensor_only(params, grads, scale, lr):
    if not torch.isfinite(grads[0]).all():
        return list(params), scale / 2
    return [p - lr * g / scale for p, g in zip(params, grads)], scale


@pytest.mark.parametrize(
    "wrong",
    [stub, no_unscale, inf_only, never_skips, always_halves, in_place, first_tensor_only],
    ids=["stub", "no-unscale", "inf-only", "never-skips", "always-halves", "in-place", "first-tensor-only"],
)
def test_scaled_sgd_step_fails_wrong_answers(wrong):
    assert not check("l12.scaled_sgd_step", wrong, show=False).passed


def unsynced(step, sync, repeat=5, warmup=2):  # times the launches only
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def no_warmup(step, sync, repeat=5, warmup=2):  # the first timing includes the one-off start-up costs
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def no_sync_before_start(step, sync, repeat=5, warmup=2):
    # The warm-up's queued work lands in the first timing.
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def one_number(step, sync, repeat=5, warmup=2):  # the total time, not a list of timings
    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(repeat):
        step()
        sync()
    return time.perf_counter() - start


@pytest.mark.parametrize(
    "wrong",
    [stub, unsynced, no_warmup, no_sync_before_start, one_number],
    ids=["stub", "unsynced", "no-warmup", "no-sync-before-start", "one-number"],
)
def test_synced_timer_fails_wrong_answers(wrong):
    assert not check("l12.synced_timer", wrong, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda b, sizes, e: b * e * sum(sizes),  # keeps the output too
        lambda b, sizes, e: b * e * sum(sizes[1:-1]),  # forgets the input
        lambda b, sizes, e: b * e * (sizes[0] + 2 * sum(sizes[1:-1])),  # Linear and ReLU outputs both kept
        lambda b, sizes, e: b * 4 * (sizes[0] + sum(sizes[1:-1])),  # assumes float32
    ],
    ids=["stub", "with-output", "no-input", "double-hidden", "fixed-float32"],
)
def test_activation_bytes_fails_wrong_answers(wrong):
    assert not check("l12.activation_bytes", wrong, show=False).passed
