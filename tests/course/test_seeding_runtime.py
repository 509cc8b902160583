"""Seeding reproduces numbers in every framework; the runtime banner and device choice behave."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import dlcourse
from dlcourse import get_device, seed_everything
from dlcourse.runtime import ENABLE_GPU_HINT, banner_text, versions


def draw_all(tf):
    return (random.random(), np.random.rand(), torch.rand(1).item(), float(tf.random.uniform([1])[0]))


def test_seed_everything_repeats_every_framework(tf):
    seed_everything(123)
    first = draw_all(tf)
    seed_everything(123)
    second = draw_all(tf)
    seed_everything(124)
    third = draw_all(tf)
    assert first == second
    assert all(a != b for a, b in zip(first, third))


def test_seed_everything_returns_a_seeded_generator():
    assert seed_everything(5).normal() == np.random.default_rng(5).normal()


def test_deterministic_mode_switches_torch(tf):
    try:
        seed_everything(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_banner_names_versions_and_gpu_status():
    text = banner_text()
    v = versions()
    assert v["torch"].split("+")[0] in text and v["numpy"] in text and "Python" in text
    if not torch.cuda.is_available():
        assert ENABLE_GPU_HINT in text


def test_in_colab_is_false_here():
    assert dlcourse.in_colab() is False


def test_get_device_prefers_accelerators_and_obeys_override(monkeypatch):
    expected = (
        "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    )
    assert get_device().type == expected
    assert get_device("cpu").type == "cpu"
    monkeypatch.setenv("DLCOURSE_DEVICE", "meta")
    assert get_device().type == "meta"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is missing")
def test_asking_for_missing_cuda_is_an_error():
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        get_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_banner_names_the_gpu():
    assert torch.cuda.get_device_name(0) in banner_text()
