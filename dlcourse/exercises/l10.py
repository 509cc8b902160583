"""Self-checks for lecture 10 (hardware: peak FLOP/s, arithmetic intensity, the roofline).

Peak rates are compared with the figures the vendors publish (:data:`dlcourse.measure.GPU_PEAKS` and
the lectures' quotes); intensities with byte counts of real numpy arrays; the roofline's turning point
with a plain search over matrix sizes.
"""

from __future__ import annotations

import math

import numpy as np

from dlcourse.measure import GPU_PEAKS, matmul_flop_count
from dlcourse.selfcheck import Checker

# Tensor-core configurations and their published dense FP16 rates (TFLOP/s): (SMs, tensor cores per
# SM, FLOP per tensor core per cycle, boost GHz, published). The RTX 3090's 142 is the lecture's quote
# (FP16 with FP16 accumulation, GA102 white paper).
TENSOR_CORE_CASES = {
    "Tesla V100": (80, 8, 128, 1.53, GPU_PEAKS["Tesla V100"].fp16),
    "Titan RTX": (72, 8, 128, 1.77, GPU_PEAKS["Titan RTX"].fp16),
    "A100": (108, 4, 512, 1.41, GPU_PEAKS["A100"].fp16),
    "RTX 3090": (82, 4, 256, 1.70, 142.0),
}


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def peak_tflops(c: Checker, fn) -> None:
    """``fn(sms, units_per_sm, flops_per_cycle, ghz)`` returns the peak rate in TFLOP/s of a GPU with
    ``sms`` multiprocessors of ``units_per_sm`` units each (FP32 cores or tensor cores), every unit
    doing ``flops_per_cycle`` FLOPs per cycle at ``ghz`` GHz."""
    for name, peak in GPU_PEAKS.items():
        got = _number(
            c.call(
                f"peak_tflops for the {name}'s FP32 cores",
                fn,
                peak.sms,
                peak.fp32_cores_per_sm,
                2,
                peak.boost_ghz,
            )
        )
        if got is not None and 1e9 < got / peak.fp32 < 1e15:
            c.true(
                f"{name}: FP32 peak in TFLOP/s", False, hint="that is FLOP/s: divide by 1e12 to get TFLOP/s"
            )
            return
        c.close(
            f"{name}: FP32 peak is close to the published {peak.fp32} TFLOP/s",
            np.atleast_1d(np.nan if got is None else got),
            np.atleast_1d(peak.fp32),
            rtol=0.02,
            hint="SMs x cores per SM x FLOPs per cycle x clock in GHz gives GFLOP/s; divide by 1000",
        )
    for name, (sms, units, per_cycle, ghz, published) in TENSOR_CORE_CASES.items():
        got = _number(c.call(f"peak_tflops for the {name}'s tensor cores", fn, sms, units, per_cycle, ghz))
        c.close(
            f"{name}: tensor-core FP16 peak is close to the published {published} TFLOP/s",
            np.atleast_1d(np.nan if got is None else got),
            np.atleast_1d(published),
            rtol=0.02,
            hint="the same product: SMs x tensor cores per SM x FLOPs per cycle x GHz / 1000",
        )


def matmul_intensity(c: Checker, fn) -> None:
    """``fn(n, m, k, bytes_per_element)`` returns the arithmetic intensity (FLOP per byte) of the
    product of an (n x k) and a (k x m) matrix: its FLOPs over the bytes of both inputs and the output,
    each read or written once."""
    for n, m, k, dtype in (
        (64, 64, 64, np.float32),
        (128, 32, 256, np.float16),
        (1, 1000, 1000, np.float32),
        (50, 7, 3, np.float64),
    ):
        a, b = np.zeros((n, k), dtype), np.zeros((k, m), dtype)
        out = a @ b
        expected = matmul_flop_count(n, m, k) / (a.nbytes + b.nbytes + out.nbytes)
        got = _number(c.call(f"matmul_intensity({n}, {m}, {k}, {a.itemsize})", fn, n, m, k, a.itemsize))
        c.close(
            f"({n} x {k}) @ ({k} x {m}) in {np.dtype(dtype).name}: FLOPs / bytes moved",
            np.atleast_1d(np.nan if got is None else got),
            np.atleast_1d(expected),
            rtol=1e-9,
            hint="FLOPs = 2 n m k; bytes = bytes_per_element x (n k + k m + n m)",
        )
    got = _number(c.call("matmul_intensity(600, 600, 600, 4)", fn, 600, 600, 600, 4))
    c.true(
        "a square float32 product of size n has intensity n / 6",
        got is not None and math.isclose(got, 100.0, rel_tol=1e-9),
        hint=f"got {got}, expected 600 / 6 = 100",
    )


def _first_compute_bound(peak_flops: float, bandwidth: float, bytes_per_element: int) -> int:
    """Try n = 1, 2, ... until a square product's intensity reaches the ridge point peak / bandwidth."""
    n = 1
    while matmul_flop_count(n) / (3 * n * n * bytes_per_element) < peak_flops / bandwidth:
        n += 1
    return n


def smallest_compute_bound_n(c: Checker, fn) -> None:
    """``fn(peak_flops, bandwidth, bytes_per_element)`` returns the smallest size n for which an n x n
    matrix product reaches the roofline's ridge point ``peak_flops / bandwidth`` (FLOP/s and bytes/s),
    i.e. the smallest square product that can be compute-bound rather than memory-bound."""
    cases = (
        ("T4, float32", GPU_PEAKS["Tesla T4"].fp32 * 1e12, GPU_PEAKS["Tesla T4"].memory_gb_s * 1e9, 4),
        ("T4, float16", GPU_PEAKS["Tesla T4"].fp16 * 1e12, GPU_PEAKS["Tesla T4"].memory_gb_s * 1e9, 2),
        ("H100, bfloat16", GPU_PEAKS["H100"].bf16 * 1e12, GPU_PEAKS["H100"].memory_gb_s * 1e9, 2),
        ("a CPU, 200 GFLOP/s and 20 GB/s", 200e9, 20e9, 4),
    )
    for label, peak, bandwidth, size in cases:
        got = c.call(f"smallest_compute_bound_n for {label}", fn, peak, bandwidth, size)
        expected = _first_compute_bound(peak, bandwidth, size)
        c.true(
            f"{label}: n = {expected}",
            _number(got) is not None and float(got) == expected,
            hint=f"got {got}; solve 2 n / (3 x bytes) >= peak / bandwidth for the smallest whole n",
        )
