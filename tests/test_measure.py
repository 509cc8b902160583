"""Measurement returns positive, plausible figures on the CPU; the published-peak table is consistent."""

from __future__ import annotations

import time

import pytest
import torch

from dlcourse import measure


def test_time_it_measures_sleep():
    timing = measure.time_it(lambda: time.sleep(0.01), repeat=3, warmup=1)
    assert len(timing.times) == 3
    assert 0.009 < timing.median < 0.5
    assert timing.best <= timing.median
    assert "ms" in str(timing)


def test_time_it_warms_up_before_timing():
    calls = []
    measure.time_it(lambda: calls.append(1), repeat=4, warmup=3, number=2)
    assert len(calls) == 3 + 4 * 2


def test_flop_count():
    assert measure.matmul_flop_count(2) == 16
    assert measure.matmul_flop_count(3, 4, 5) == 2 * 3 * 4 * 5


def test_matmul_flops_are_plausible_on_cpu():
    info = measure.cpu_info()
    ceiling = (info.peak_fp32() or 1e12) * 4  # turbo clocks above the nominal one, never 4x
    for flops in (measure.matmul_flops_numpy(256, repeat=3), measure.matmul_flops(256, "cpu", repeat=3)):
        assert 1e8 < flops < ceiling


def test_copy_bandwidth_is_plausible():
    assert 1e8 < measure.copy_bandwidth_numpy(8 * 2**20, repeat=3) < 1e12


def test_cpu_info_reads_this_machine():
    info = measure.cpu_info()
    assert info.cores >= 1 and info.fp32_flops_per_cycle in (16, 32, 64)
    assert measure.cpu_peak_flops(2, 3.0, 32) == 192e9


def test_published_arithmetic_matches_published_peaks():
    # The lectures' worked examples: SMs x cores x 2 x clock reproduces the data-sheet figure.
    for name in ("RTX 3090", "Titan RTX", "A100", "H100", "Tesla T4"):
        peak = measure.GPU_PEAKS[name]
        assert peak.fp32_from_arithmetic() == pytest.approx(peak.fp32, rel=0.05), name


def test_gpu_peak_lookup_by_reported_name():
    assert measure.gpu_peak("NVIDIA A100-SXM4-40GB").name == "A100"
    assert measure.gpu_peak("Tesla T4").name == "Tesla T4"
    assert measure.gpu_peak("NVIDIA H100 80GB HBM3").name == "H100"
    assert measure.gpu_peak("Some Unknown Accelerator") is None


def test_transfer_bandwidth_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only error")
    with pytest.raises(RuntimeError, match="CUDA"):
        measure.transfer_bandwidth(2**20)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pinned_transfer_is_not_slower_than_pageable():
    pageable = measure.transfer_bandwidth(64 * 2**20, pinned=False)
    pinned = measure.transfer_bandwidth(64 * 2**20, pinned=True)
    assert pinned > 0.8 * pageable
