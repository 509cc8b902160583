"""Self-checks for lecture 3 (tensors: the two-layer net in torch, devices, dtypes).

The manual backward pass is compared with torch's autograd, an independent computation of the same
gradients; the checks run on the device the runtime offers (cuda, mps or cpu).
"""

from __future__ import annotations

import numpy as np

from dlcourse.closeness import to_numpy as as_array
from dlcourse.device import get_device
from dlcourse.selfcheck import Checker


def _device():
    """The device to check on: the runtime's, except 'meta', which holds no values to compare."""
    device = get_device()
    return device if device.type != "meta" else get_device("cpu")


def _autograd_reference(x, y, w1, w2, negative_slope):
    import torch

    w1 = w1.detach().clone().requires_grad_(True)
    w2 = w2.detach().clone().requires_grad_(True)
    h_act = torch.nn.functional.leaky_relu(x @ w1, negative_slope)
    loss = (h_act @ w2 - y).pow(2).sum()
    loss.backward()
    return loss.detach(), w1.grad, w2.grad


NEGATIVE_SLOPE = 0.1


def leaky_two_layer_grads(c: Checker, fn) -> None:
    """``fn(x, y, w1, w2, negative_slope)`` returns ``(loss, grad_w1, grad_w2)`` as torch tensors for
    the two-layer net with a leaky ReLU: ``h = x @ w1``, ``h_act = h`` where ``h > 0`` and
    ``negative_slope * h`` elsewhere, ``y_pred = h_act @ w2``, ``loss = sum((y_pred - y) ** 2)``.
    Computed with torch operations and a hand-written backward pass, on the inputs' device and in
    their dtype."""
    import torch

    device = _device()
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal(shape) for shape in ((6, 5), (6, 3), (5, 4), (4, 3))]
    for dtype, rtol in ((torch.float64, 1e-9), (torch.float32, 1e-4)):
        x, y, w1, w2 = (torch.tensor(a, dtype=dtype, device=device) for a in arrays)
        originals = [t.clone() for t in (x, y, w1, w2)]
        where = f"{str(dtype).replace('torch.', '')} on {device.type}"
        result = c.call(
            f"it runs ({where}, negative_slope={NEGATIVE_SLOPE})", fn, x, y, w1, w2, NEGATIVE_SLOPE
        )
        if not c.true(
            f"it returns three values ({where})",
            isinstance(result, list | tuple) and len(result) == 3,
            hint="return loss, grad_w1, grad_w2",
        ):
            return
        if not c.true(
            f"all three are torch tensors ({where})",
            all(isinstance(t, torch.Tensor) for t in result),
            hint="stay in torch: no .numpy() inside the function",
        ):
            return
        c.true(
            f"they stay on {device.type} and in {dtype} ({where})",
            all(t.device.type == device.type and t.dtype == dtype for t in result),
            hint="got " + ", ".join(f"{t.dtype} on {t.device}" for t in result),
        )
        c.true(
            f"it leaves x, y, w1 and w2 unchanged ({where})",
            all(torch.equal(a, b) for a, b in zip((x, y, w1, w2), originals)),
            hint="build new tensors (torch.where, .clone()); never write into the inputs",
        )
        expected = _autograd_reference(*originals, NEGATIVE_SLOPE)
        for name, got, want in zip(("loss", "grad_w1", "grad_w2"), result, expected):
            # 1-element arrays for the loss: closeness reports on 0-d values need an index to point at.
            got, want = np.atleast_1d(as_array(got)), np.atleast_1d(as_array(want))
            c.close(
                f"{name} agrees with torch autograd ({where})",
                got,
                want,
                rtol=rtol,
                atol=1e-6,
                hint="the leaky ReLU's local gradient is 1 where h > 0 and negative_slope elsewhere",
            )


def to_numpy(c: Checker, fn) -> None:
    """``fn(t)`` returns a numpy array with the values of the tensor ``t``, whatever its device and
    even when it is part of an autograd graph (``requires_grad``)."""
    import torch

    device = _device()
    base = np.arange(12, dtype=np.float64).reshape(3, 4) / 4
    plain = torch.tensor(base, dtype=torch.float32, device=device)
    got = c.call(f"to_numpy on a float32 tensor on {device.type}", fn, plain)
    if not c.true(
        "it returns a numpy array", isinstance(got, np.ndarray), hint=f"got a {type(got).__name__}"
    ):
        return
    c.true("the array keeps the dtype (float32)", got.dtype == np.float32, hint=f"got {got.dtype}")
    c.close("the array holds the tensor's values", got, base.astype(np.float32))

    weights = torch.tensor(base, dtype=torch.float64, device=device, requires_grad=True)
    in_graph = weights * 2
    got = c.call("to_numpy on the output of a computation with requires_grad", fn, in_graph)
    c.true(
        "it returns a float64 numpy array",
        isinstance(got, np.ndarray) and got.dtype == np.float64,
        hint="detach from the graph first: t.detach().cpu().numpy()",
    )
    c.close("the array holds the tensor's values", got, base * 2)
