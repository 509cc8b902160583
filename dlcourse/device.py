"""One rule for choosing a device, used everywhere: never hard-code 'cuda'."""

from __future__ import annotations

import os

from dlcourse._lazy import loaded, optional

DEVICE_ENV = "DLCOURSE_DEVICE"


def get_device(prefer: str | None = None):
    """Return the best ``torch.device``: cuda, then mps, then cpu.

    ``prefer`` (or the environment variable ``DLCOURSE_DEVICE``) overrides the choice, e.g. ``"cpu"``
    to compare, or ``"meta"`` to check placement without computing. Asking for a device that is not
    there raises ``RuntimeError`` rather than silently falling back.
    """
    import torch

    choice = prefer or os.environ.get(DEVICE_ENV)
    if choice:
        device = torch.device(choice)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {choice!r} was asked for, but this runtime has no CUDA GPU")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise RuntimeError(f"device {choice!r} was asked for, but MPS is not available here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device=None) -> None:
    """Wait until queued GPU work has finished; a no-op on the CPU.

    GPU calls return before the work is done, so a timer that does not synchronise measures only
    the launch. Every timing in the course goes through this function.
    """
    torch = loaded("torch") or (optional("torch") if device is not None else None)
    if torch is None:
        return
    kind = getattr(device, "type", device) or ("cuda" if torch.cuda.is_available() else "cpu")
    if str(kind).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
    elif str(kind) == "mps" and torch.backends.mps.is_available():
        torch.mps.synchronize()
