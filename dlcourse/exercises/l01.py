"""Self-checks for lecture 1 (set-up and runtime)."""

from __future__ import annotations

import os
import platform

import numpy as np

from dlcourse.device import DEVICE_ENV, get_device
from dlcourse.selfcheck import Checker


def pick_device(c: Checker, fn) -> None:
    """``fn()`` returns the ``torch.device`` to compute on: the one named by ``DLCOURSE_DEVICE`` if
    that is set, else cuda, then mps, then cpu."""
    import torch

    device = c.call("pick_device() returns something", fn)
    if not c.true(
        "it returns a torch.device",
        isinstance(device, torch.device),
        hint=f"it returned a {type(device).__name__}; wrap the name: torch.device('cpu')",
    ):
        return
    expected = get_device()
    c.true(
        f"on this runtime it picks '{expected.type}', as dlcourse.get_device() does",
        device.type == expected.type,
        hint=f"it picked '{device.type}'",
    )
    saved = os.environ.get(DEVICE_ENV)
    os.environ[DEVICE_ENV] = "meta"
    try:
        overridden = c.call("with DLCOURSE_DEVICE=meta it still returns a device", fn)
    finally:
        if saved is None:
            os.environ.pop(DEVICE_ENV, None)
        else:
            os.environ[DEVICE_ENV] = saved
    c.true(
        "it follows DLCOURSE_DEVICE (this check sets it to 'meta' for a moment)",
        getattr(overridden, "type", None) == "meta",
        hint=f"it returned {overridden!r}; read os.environ.get('DLCOURSE_DEVICE') first",
    )


SUMMARY_KEYS = ("python", "numpy", "torch", "device", "gpu_name")


def runtime_summary(c: Checker, fn) -> None:
    """``fn()`` returns a dict with the keys ``python``, ``numpy``, ``torch`` (version strings),
    ``device`` (the name of the device to use, e.g. ``'cpu'``) and ``gpu_name`` (the CUDA GPU's name,
    or None without one)."""
    import torch

    summary = c.call("runtime_summary() returns something", fn)
    if not c.true("it returns a dict", isinstance(summary, dict), hint=f"got a {type(summary).__name__}"):
        return
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if not c.true("it has the keys " + ", ".join(SUMMARY_KEYS), not missing, hint=f"missing: {missing}"):
        return
    c.true(
        "python is this interpreter's version",
        summary["python"] == platform.python_version(),
        hint=f"got {summary['python']!r}, expected {platform.python_version()!r} (platform.python_version())",
    )
    c.true(
        "numpy is numpy's version",
        summary["numpy"] == np.__version__,
        hint=f"got {summary['numpy']!r}, expected {np.__version__!r}",
    )
    c.true(
        "torch is torch's version",
        summary["torch"] == torch.__version__,
        hint=f"got {summary['torch']!r}, expected {torch.__version__!r}",
    )
    expected_device = get_device().type
    c.true(
        "device names the device to use",
        str(summary["device"]).split(":")[0] == expected_device,
        hint=f"got {summary['device']!r}, expected {expected_device!r}",
    )
    expected_gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    c.true(
        "gpu_name is the CUDA GPU's name, or None without one",
        summary["gpu_name"] == expected_gpu,
        hint=f"got {summary['gpu_name']!r}, expected {expected_gpu!r}",
    )
