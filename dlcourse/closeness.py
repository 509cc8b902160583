"""One comparison for numpy arrays, torch tensors and TensorFlow tensors, with messages that help."""

from __future__ import annotations

import numpy as np

from dlcourse._lazy import loaded

# The default tolerance of every comparison (numpy's allclose, with a tighter atol): the one place it is written.
RTOL, ATOL = 1e-5, 1e-8


def framework_of(value) -> str:
    """'torch', 'tensorflow', 'numpy' or 'python' for a value (never imports a framework)."""
    module = type(value).__module__.split(".")[0]
    if module in ("torch", "tensorflow", "numpy"):
        return module
    if module in ("keras", "tf_keras"):
        return "tensorflow"
    return "python"


def describe(value) -> str:
    """A short description: framework, shape, dtype and (for tensors) device."""
    fw = framework_of(value)
    if fw == "torch":
        return f"torch tensor shape {tuple(value.shape)} dtype {value.dtype} on {value.device}"
    if fw == "tensorflow" and hasattr(value, "shape"):
        device = getattr(value, "device", "") or "?"
        return f"TF tensor shape {tuple(value.shape)} dtype {value.dtype.name} on {device}"
    if fw == "numpy" or isinstance(value, np.ndarray):
        arr = np.asarray(value)
        return f"numpy array shape {arr.shape} dtype {arr.dtype}"
    return f"{type(value).__name__} {value!r}"[:120]


def to_numpy(value) -> np.ndarray:
    """Bring a numpy, torch (any device, with or without grad) or TF value to a numpy array."""
    fw = framework_of(value)
    if fw == "torch":
        torch = loaded("torch")
        if value.device.type == "meta":
            raise ValueError("a tensor on the 'meta' device has a shape but no values")
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.detach().cpu().numpy()
    if fw == "tensorflow" and hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def close_report(actual, expected, rtol: float = RTOL, atol: float = ATOL, name: str = "value") -> str | None:
    """None when ``actual`` and ``expected`` agree, else a message that says how they differ."""
    try:
        a = to_numpy(actual)
    except ValueError as err:
        return f"{name}: {err} ({describe(actual)})"
    e = to_numpy(expected)
    if a.shape != e.shape:
        hint = " (transposed?)" if a.shape == e.shape[::-1] and a.ndim == 2 else ""
        return f"{name}: shape {a.shape} but expected {e.shape}{hint}. Got {describe(actual)}."
    numeric = np.issubdtype(a.dtype, np.number) or a.dtype == bool
    if not numeric or not (np.issubdtype(e.dtype, np.number) or e.dtype == bool):
        if a.dtype == e.dtype and np.array_equal(a, e):
            return None
        return f"{name}: got {a!r}, expected {e!r}"
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    if not np.all(np.isfinite(a64) == np.isfinite(e64)):
        return f"{name}: contains NaN or inf where the expected value does not. Got {describe(actual)}."
    bad = ~np.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    diff = np.abs(a64 - e64).reshape(-1)
    diff[~np.isfinite(diff)] = 0.0
    flat = int(np.argmax(np.where(bad.reshape(-1), diff, -1.0)))
    worst = tuple(int(i) for i in np.unravel_index(flat, a.shape))
    return (
        f"{name}: {int(bad.sum())} of {a.size} entries differ (rtol={rtol:g}, atol={atol:g}); "
        f"worst at index {worst}: got {a64.reshape(-1)[flat]:.6g}, expected {e64.reshape(-1)[flat]:.6g}. "
        f"Got {describe(actual)}."
    )


def assert_close(actual, expected, rtol: float = RTOL, atol: float = ATOL, name: str = "value") -> None:
    """Assert that two values agree within tolerance, whatever framework each comes from.

    The message names the shapes, dtypes and devices and the worst entry, so a failure says what to fix.
    """
    message = close_report(actual, expected, rtol=rtol, atol=atol, name=name)
    if message:
        raise AssertionError(message)
