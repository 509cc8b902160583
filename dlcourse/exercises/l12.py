"""Self-checks for lecture 12 (fast training: loss scaling, honest timers, activation memory).

A loss-scaled step is compared with plain float64 arithmetic on the same numbers; a timer with a
simulated asynchronous device whose work is done only when it is synchronised; a count of activation
bytes with the bytes that torch autograd really saves for backward, counted with saved-tensor hooks.
"""

from __future__ import annotations

import time

import numpy as np

from dlcourse.closeness import to_numpy
from dlcourse.measure import saved_activation_bytes
from dlcourse.selfcheck import Checker


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def scaled_sgd_step(c: Checker, fn) -> None:
    """``fn(params, scaled_grads, scale, lr)`` takes lists of float32 tensors: parameters and the
    gradients of the loss multiplied by ``scale``. It returns ``(new_params, new_scale)``: if every
    gradient is finite, the parameters after one SGD step with the true gradients
    (``p - lr * g / scale``) and the scale unchanged; if any gradient holds an inf or a nan, the
    parameters unchanged (the step is skipped) and the scale halved. The inputs are left unchanged."""
    import torch

    generator = torch.Generator().manual_seed(12)
    shapes = ((4, 3), (3,), (2, 5))
    params = [torch.randn(s, generator=generator) for s in shapes]
    scale, lr = 1024.0, 0.1
    true_grads = [1e-4 * torch.randn(s, generator=generator) for s in shapes]
    finite = [g * scale for g in true_grads]
    with_inf = [g.clone() for g in finite]
    with_inf[1][0] = float("inf")
    with_nan = [g.clone() for g in finite]
    with_nan[2][1, 3] = float("nan")
    originals = [t.clone() for t in params + finite + with_inf + with_nan]

    def answer(description, grads):
        result = c.call(description, fn, params, grads, scale, lr)
        ok = c.true(
            f"{description}: returns (new_params, new_scale) with one tensor per parameter",
            isinstance(result, list | tuple) and len(result) == 2 and len(result[0]) == len(params),
            hint="return a list of parameters and the new scale, as a pair",
        )
        return result if ok else None

    result = answer("a step with finite gradients", finite)
    if result is None:
        return
    new_params, new_scale = result
    for i, (p, g, new) in enumerate(zip(params, true_grads, new_params)):
        expected = to_numpy(p).astype(np.float64) - lr * to_numpy(g).astype(np.float64)
        c.close(
            f"finite gradients: parameter {i} moves by -lr x (scaled gradient / scale)",
            new,
            expected,
            rtol=1e-5,
            atol=1e-7,
            hint="unscale first: the true gradient is the scaled one divided by the scale",
        )
    c.true(
        "finite gradients: the scale stays the same",
        _number(new_scale) == scale,
        hint=f"got {new_scale}; only an overflow changes the scale here",
    )
    for label, grads in (("an inf", with_inf), ("a nan", with_nan)):
        result = answer(f"a step whose gradients hold {label}", grads)
        if result is None:
            return
        new_params, new_scale = result
        c.true(
            f"gradients with {label}: the step is skipped, every parameter unchanged",
            all(np.array_equal(to_numpy(new), to_numpy(p)) for new, p in zip(new_params, params)),
            hint="check every gradient with torch.isfinite (it catches inf and nan) before updating anything",
        )
        c.true(
            f"gradients with {label}: the scale is halved",
            _number(new_scale) == scale / 2,
            hint=f"got {new_scale}, expected {scale / 2}",
        )
    current = params + finite + with_inf + with_nan
    c.true(
        "the parameters and gradients passed in are left unchanged",
        all(np.array_equal(a.numpy(), b.numpy(), equal_nan=True) for a, b in zip(current, originals)),
        hint="return new tensors (p - lr * g / scale) instead of updating in place",
    )


class _SimulatedGpu:
    """A device that queues work: a launch returns at once, and the work is done (slept) only when
    someone synchronises. The first ``slow`` launches cost ``first_cost`` seconds, the rest ``cost``."""

    def __init__(self, slow: int, first_cost: float, cost: float):
        self.slow, self.first_cost, self.cost = slow, first_cost, cost
        self.launches, self.queued = 0, 0.0

    def launch(self) -> None:
        self.launches += 1
        self.queued += self.first_cost if self.launches <= self.slow else self.cost

    def synchronize(self) -> None:
        time.sleep(self.queued)
        self.queued = 0.0


def synced_timer(c: Checker, fn) -> None:
    """``fn(step, sync, repeat, warmup)`` calls ``step()`` ``warmup`` times untimed, then times
    ``repeat`` calls and returns their durations in seconds, one per call; ``sync()`` waits until
    all queued work is done, and each duration must cover the work of exactly one call."""
    cost, first_cost = 0.01, 0.3  # seconds; wide apart, so that a busy machine cannot blur them
    for repeat, warmup in ((5, 2), (3, 1)):
        gpu = _SimulatedGpu(warmup, first_cost, cost)
        label = f"repeat={repeat}, warmup={warmup}"
        times = c.call(f"synced_timer with {label}", fn, gpu.launch, gpu.synchronize, repeat, warmup)
        values = [_number(t) for t in times] if isinstance(times, list | tuple) else None
        if not c.true(
            f"{label}: one duration per timed call",
            values is not None and len(values) == repeat and None not in values,
            hint=f"return a list of {repeat} numbers (seconds)",
        ):
            return
        c.true(
            f"{label}: step() ran warmup + repeat = {warmup + repeat} times",
            gpu.launches == warmup + repeat,
            hint=f"step() ran {gpu.launches} times",
        )
        c.true(
            f"{label}: every duration covers its call's work ({cost * 1e3:.0f} ms), not just the launch",
            min(values) >= 0.9 * cost,
            hint=f"shortest {min(values) * 1e3:.2f} ms: call sync() after step(), before reading the clock",
        )
        c.true(
            f"{label}: no duration includes the warm-up's work ({first_cost * 1e3:.0f} ms a call)",
            max(values) < 0.9 * first_cost,  # (a duration that holds warm-up work holds all of a call's)
            hint=f"longest {max(values) * 1e3:.1f} ms: run the warm-up calls, then sync() before starting the clock",
        )


def _saved_activation_bytes(batch: int, sizes, dtype) -> int:
    """Bytes of the non-parameter tensors torch autograd saves in a forward pass of the ReLU MLP."""
    import torch
    from torch import nn

    layers = []
    for i, (d_in, d_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(d_in, d_out, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return saved_activation_bytes(nn.Sequential(*layers), torch.randn(batch, sizes[0], dtype=dtype))


def activation_bytes(c: Checker, fn) -> None:
    """``fn(batch, sizes, bytes_per_element)`` returns the bytes that autograd keeps for backward in a
    forward pass of an MLP with layer sizes ``sizes = [d_0, ..., d_L]`` (Linear layers d_i -> d_i+1,
    a ReLU after every Linear but the last), not counting the weights: each Linear keeps its input,
    each ReLU its output, and a ReLU's output is the next Linear's input, kept once."""
    import torch

    dtypes = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}
    for batch, sizes, size in (
        (64, [1000, 100, 10], 4),
        (32, [64, 128, 128, 10], 2),
        (16, [20, 30, 40, 50, 5], 8),
        (10, [7, 3], 4),
    ):
        expected = _saved_activation_bytes(batch, sizes, dtypes[size])
        got = _number(c.call(f"activation_bytes({batch}, {sizes}, {size})", fn, batch, list(sizes), size))
        c.true(
            f"batch {batch}, sizes {sizes}, {size}-byte numbers: {expected:,} bytes, as autograd saves",
            got == expected,
            hint=f"got {got}: batch x bytes x (d_0 + every hidden size once); the output is not kept",
        )
