"""Lecture 1's self-checks pass a correct answer and fail a wrong one or a stub."""

from __future__ import annotations

import os
import platform

import numpy as np
import pytest
import torch

from dlcourse import check, get_device
from dlcourse.device import DEVICE_ENV


@pytest.fixture(autouse=True)
def no_device_override(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)


def stub(*_args):
    raise NotImplementedError


def pick_device():
    choice = os.environ.get(DEVICE_ENV)
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def runtime_summary():
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "device": str(get_device()),
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def test_pick_device_passes_a_correct_answer():
    assert check("l01.pick_device", pick_device, show=False).passed
    assert DEVICE_ENV not in os.environ  # the check restores the environment


def test_pick_device_restores_an_existing_override(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    check("l01.pick_device", pick_device, show=False)
    assert os.environ[DEVICE_ENV] == "cpu"


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda: None,
        lambda: "cpu",  # a name, not a torch.device
        lambda: torch.device("cuda" if torch.cuda.is_available() else "cpu"),  # ignores the override
        lambda: torch.device("meta"),  # always the override's device
    ],
    ids=["stub", "none", "string", "ignores-override", "always-meta"],
)
def test_pick_device_fails_wrong_answers(wrong):
    assert not check("l01.pick_device", wrong, show=False).passed


def test_runtime_summary_passes_a_correct_answer():
    assert check("l01.runtime_summary", runtime_summary, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda: [platform.python_version()],
        lambda: {key: value for key, value in runtime_summary().items() if key != "gpu_name"},
        lambda: {**runtime_summary(), "python": "3"},
        lambda: {**runtime_summary(), "device": "cuda" if not torch.cuda.is_available() else "cpu"},
        lambda: {**runtime_summary(), "gpu_name": "none"},
    ],
    ids=["stub", "list", "missing-key", "wrong-python", "wrong-device", "gpu-name-string"],
)
def test_runtime_summary_fails_wrong_answers(wrong):
    assert not check("l01.runtime_summary", wrong, show=False).passed
