"""Timing and hardware measurement: warm-up and device synchronisation done right, FLOP/s,
bandwidth, and the published peak figures to compare them with.

GPU work is asynchronous: a call returns when the kernel is queued, not when it is done. Every timer
here synchronises the device before it starts and after each call, and discards warm-up calls (the
first ones pay for memory allocation, cuBLAS heuristics, compilation and caches).
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlcourse.device import synchronize


@dataclass(frozen=True)
class Timing:
    """Seconds per call: every repeat, with median, mean and best."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def __str__(self) -> str:
        return f"{format_seconds(self.median)} median of {len(self.times)} (best {format_seconds(self.best)})"


@contextlib.contextmanager
def quiet_stderr():
    """Hide what compiled libraries write straight to the process's standard error (file descriptor 2)
    inside the block; Python's own ``sys.stderr`` (warnings, tracebacks) is left alone where it is not that
    descriptor. Some torch builds' profiler prints ``profiler_start`` and ``profiler_stop`` lines there,
    and nbgrader scores a test cell that wrote to standard error as failed."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def time_it(
    fn: Callable[[], object], repeat: int = 10, warmup: int = 2, device=None, number: int = 1
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` timings of ``number`` calls each,
    synchronising ``device`` (a torch device or name; None for CPU-only code) around every timing."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / number)
    return Timing(tuple(times))


def matmul_flop_count(n: int, m: int | None = None, k: int | None = None) -> int:
    """FLOPs of an (n x k) @ (k x m) product: n*m dot products of length k, each k multiplies and k adds."""
    m = n if m is None else m
    k = n if k is None else k
    return 2 * n * m * k


def matmul_flops_numpy(n: int, dtype=np.float32, repeat: int = 5) -> float:
    """Measured FLOP/s of numpy's n x n matrix product (BLAS on the CPU)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    timing = time_it(lambda: a @ b, repeat=repeat, warmup=1)
    return matmul_flop_count(n) / timing.median


def matmul_flops(n: int, device="cpu", dtype=None, repeat: int = 5, allow_tf32: bool | None = None) -> float:
    """Measured FLOP/s of torch's n x n matrix product on ``device`` in ``dtype`` (default float32).

    ``allow_tf32`` switches TensorFloat-32 for float32 matmuls on Ampere and newer GPUs (and restores
    the previous setting afterwards).
    """
    import torch

    dtype = dtype or torch.float32
    device = torch.device(device)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    if allow_tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    try:
        timing = time_it(lambda: a @ b, repeat=repeat, warmup=2, device=device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return matmul_flop_count(n) / timing.median


def copy_bandwidth_numpy(nbytes: int = 64 * 2**20, repeat: int = 5) -> float:
    """Measured main-memory bandwidth in bytes/s on the CPU: a copy reads and writes every byte."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    timing = time_it(lambda: np.copyto(dst, src), repeat=repeat, warmup=1)
    return 2 * src.nbytes / timing.median


def transfer_bandwidth(
    nbytes: int = 64 * 2**20, pinned: bool = False, device="cuda", repeat: int = 5
) -> float:
    """Measured host-to-device copy bandwidth in bytes/s, from pageable or pinned (page-locked) memory.

    Pinned memory lets the GPU's copy engine read the buffer directly (DMA); pageable memory is first
    staged through a pinned buffer by the driver, which costs bandwidth.
    """
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("host-to-device bandwidth needs a CUDA GPU")
    host = torch.ones(nbytes // 4, dtype=torch.float32)
    if pinned:
        host = host.pin_memory()
    timing = time_it(lambda: host.to(device, non_blocking=pinned), repeat=repeat, warmup=2, device=device)
    return host.numel() * 4 / timing.median


@dataclass(frozen=True)
class GpuPeak:
    """Published dense peak throughput (TFLOP/s) and memory bandwidth (GB/s) of a GPU."""

    name: str
    sms: int
    fp32_cores_per_sm: int
    boost_ghz: float
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    memory_gb_s: float
    source: str
    fp8: float | None = None  # dense FP8 tensor-core rate (E4M3 or E5M2 inputs); None where the chip has none

    def fp32_from_arithmetic(self) -> float:
        """SMs x FP32 cores per SM x 2 FLOP per cycle (a fused multiply-add) x clock, in TFLOP/s."""
        return self.sms * self.fp32_cores_per_sm * 2 * self.boost_ghz / 1e3


# Dense figures (no structured sparsity) from NVIDIA's data sheets and architecture white papers.
# tf32/fp16/bf16/fp8 are tensor-core rates; None where the chip has no such tensor-core mode (FP8 needs
# compute capability 8.9, Ada, or 9.0, Hopper; data sheets print it "with sparsity", twice these). One entry per
# variant whose figures differ: an A100 with 40 GB of HBM2 has 1,555 GB/s, with 80 GB 2,039 (SXM) or
# 1,935 (PCIe); an H100 PCIe has fewer SMs, a lower clock and HBM2e instead of HBM3.
GPU_PEAKS: dict[str, GpuPeak] = {
    p.name: p
    for p in (
        GpuPeak("Tesla T4", 40, 64, 1.59, 8.1, None, 65.0, None, 320, "NVIDIA T4 data sheet"),
        GpuPeak("Tesla V100", 80, 64, 1.53, 15.7, None, 125.0, None, 900, "NVIDIA V100 data sheet (SXM2)"),
        GpuPeak(
            "Tesla V100 PCIe", 80, 64, 1.38, 14.0, None, 112.0, None, 900, "NVIDIA V100 data sheet (PCIe)"
        ),
        GpuPeak("Titan RTX", 72, 64, 1.77, 16.3, None, 130.0, None, 672, "NVIDIA Turing white paper"),
        GpuPeak("RTX 3090", 82, 128, 1.70, 35.6, 35.6, 71.0, 71.0, 936, "NVIDIA Ampere GA102 white paper"),
        GpuPeak("A100", 108, 64, 1.41, 19.5, 156.0, 312.0, 312.0, 2039, "NVIDIA A100 data sheet (SXM 80GB)"),
        GpuPeak(
            "A100 80GB PCIe", 108, 64, 1.41, 19.5, 156.0, 312.0, 312.0, 1935, "NVIDIA A100 data sheet (PCIe)"
        ),
        GpuPeak("A100 40GB", 108, 64, 1.41, 19.5, 156.0, 312.0, 312.0, 1555, "NVIDIA A100 data sheet (40GB)"),
        GpuPeak("L4", 58, 128, 2.04, 30.3, 60.0, 121.0, 121.0, 300, "NVIDIA L4 data sheet", fp8=242.5),
        GpuPeak(
            "H100",
            132,
            128,
            1.98,
            67.0,
            494.7,
            989.4,
            989.4,
            3350,
            "NVIDIA H100 data sheet (SXM)",
            fp8=1978.9,
        ),
        GpuPeak(
            "H100 PCIe",
            114,
            128,
            1.755,
            51.0,
            378.0,
            756.0,
            756.0,
            2000,
            "NVIDIA H100 data sheet (PCIe)",
            fp8=1513.0,
        ),
        GpuPeak(
            "H200",
            132,
            128,
            1.98,
            67.0,
            494.7,
            989.4,
            989.4,
            4800,
            "NVIDIA H200 data sheet (SXM)",
            fp8=1978.9,
        ),
    )
}

# Brand words that some drivers put before the model and others do not ("NVIDIA GeForce RTX 3090",
# "Tesla T4", "NVIDIA TITAN RTX").
_GPU_BRAND_WORDS = ("nvidia", "tesla", "geforce")

# The names ``torch.cuda.get_device_name`` reports, normalised by :func:`normalise_gpu_name`, for each
# entry of GPU_PEAKS. Exact matches only: a name that is not here (an L40S, an A100 MIG slice, an H100 NVL,
# an RTX 3090 Ti) has different figures, and no figures are better than a neighbour's.
GPU_REPORTED_NAMES: dict[str, str] = {
    "t4": "Tesla T4",
    "v100 sxm2 16gb": "Tesla V100",
    "v100 sxm2 32gb": "Tesla V100",
    "v100 pcie 16gb": "Tesla V100 PCIe",
    "v100 pcie 32gb": "Tesla V100 PCIe",
    "titan rtx": "Titan RTX",
    "rtx 3090": "RTX 3090",
    "a100 sxm4 80gb": "A100",
    "a100 80gb pcie": "A100 80GB PCIe",
    "a100 sxm4 40gb": "A100 40GB",
    "a100 pcie 40gb": "A100 40GB",
    "l4": "L4",
    "h100 80gb hbm3": "H100",
    "h100 pcie": "H100 PCIe",
    "h200": "H200",
}


def normalise_gpu_name(device_name: str) -> str:
    """Lower case, dashes and underscores as spaces, single spaces, leading brand words dropped:
    'NVIDIA A100-SXM4-40GB' -> 'a100 sxm4 40gb', 'Tesla T4' -> 't4'."""
    words = device_name.lower().replace("-", " ").replace("_", " ").split()
    while words and words[0] in _GPU_BRAND_WORDS:
        words.pop(0)
    return " ".join(words)


def gpu_peak(device_name: str) -> GpuPeak | None:
    """The published figures for a GPU by the name torch reports (``torch.cuda.get_device_name()``,
    e.g. 'NVIDIA A100-SXM4-40GB') or by its key in GPU_PEAKS; None for any other name."""
    name = normalise_gpu_name(device_name)
    key = GPU_REPORTED_NAMES.get(name)
    if key is None:
        key = next((k for k in GPU_PEAKS if normalise_gpu_name(k) == name), None)
    return GPU_PEAKS[key] if key is not None else None


@dataclass(frozen=True)
class CpuInfo:
    model: str
    cores: int
    ghz: float | None
    fp32_flops_per_cycle: int
    vector_isa: str

    def peak_fp32(self) -> float | None:
        """Estimated peak FLOP/s: cores x clock x FP32 FLOPs per cycle per core."""
        return cpu_peak_flops(self.cores, self.ghz, self.fp32_flops_per_cycle) if self.ghz else None


def cpu_peak_flops(cores: int, ghz: float, flops_per_cycle: int) -> float:
    """cores x GHz x FLOPs per cycle. FLOPs per cycle per core in float32: 2 FMA units x 8 lanes (AVX2)
    x 2 = 32, or x 16 lanes (AVX-512) = 64."""
    return cores * ghz * 1e9 * flops_per_cycle


def cpu_info() -> CpuInfo:
    """The CPU's model, usable cores, clock and vector width, read from /proc/cpuinfo where there is one."""
    model, ghz, flags = platform.processor() or platform.machine(), None, set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "cpu MHz" and ghz is None:
                    ghz = float(value) / 1000
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if "avx512f" in flags:
        isa, per_cycle = "AVX-512", 64
    elif "avx2" in flags and "fma" in flags:
        isa, per_cycle = "AVX2+FMA", 32
    elif "avx" in flags:
        isa, per_cycle = "AVX", 16
    else:
        isa, per_cycle = "unknown (assuming 128-bit SIMD with FMA)", 16
    return CpuInfo(model, cores, ghz, per_cycle, isa)


def saved_activation_bytes(model, x) -> int:
    """Bytes of the tensors that autograd keeps from ``model(x)``'s forward pass for the backward pass.

    Counts each storage once (a view shares its base's memory) and leaves out the model's parameters,
    which are not activations. Measured with ``torch.autograd.graph.saved_tensors_hooks``.
    """
    import torch

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return sum(saved.values())
