"""Lecture 1's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs, and that pick_device's check restores
DLCOURSE_DEVICE."""

from __future__ import annotations

import os
import platform
import sys

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


def ignores_the_override():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# A wrong answer that returns a device, so the check goes on to set DLCOURSE_DEVICE for a moment.
def test_pick_device_leaves_an_unset_override_unset():
    check("l01.pick_device", ignores_the_override, show=False)
    assert DEVICE_ENV not in os.environ


def test_pick_device_restores_an_existing_override(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    check("l01.pick_device", ignores_the_override, show=False)
    assert os.environ[DEVICE_ENV] == "cpu"


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda: None,
        lambda: "cpu",  # a name, not a torch.device
        ignores_the_override,
        lambda: torch.device("meta"),  # always the override's device
    ],
    ids=["stub", "none", "string", "ignores-override", "always-meta"],
)
def test_pick_device_fails_wrong_answers(wrong):
    assert not check("l01.pick_device", wrong, show=False).passed


def summary_without_gpu_name():
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "device": get_device().type,
    }


def summary_with_the_major_version_only():
    return {
        "python": str(sys.version_info.major),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "device": get_device().type,
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def summary_with_the_condition_reversed():
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "device": "cuda" if not torch.cuda.is_available() else "cpu",
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def summary_with_a_gpu_name_string():
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "device": get_device().type,
        "gpu_name": "none",
    }


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        lambda: [platform.python_version()],
        summary_without_gpu_name,
        summary_with_the_major_version_only,
        summary_with_the_condition_reversed,
        summary_with_a_gpu_name_string,
    ],
    ids=["stub", "list", "missing-key", "wrong-python", "wrong-device", "gpu-name-string"],
)
def test_runtime_summary_fails_wrong_answers(wrong):
    assert not check("l01.runtime_summary", wrong, show=False).passed
