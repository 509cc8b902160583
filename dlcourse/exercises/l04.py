"""Checks for lecture 4 (autograd): a training step, a custom ``autograd.Function``, micro-batches.

Every reference value here comes from central differences or from torch's own ``tanh``, never from
a stored answer.
"""

from __future__ import annotations

import numpy as np

from dlcourse.data import two_layer_data, two_layer_loss
from dlcourse.gradients import numeric_gradient
from dlcourse.selfcheck import Checker

# A small version of the running example, so that numeric gradients cost nothing.
_N, _D_IN, _H, _D_OUT = 8, 6, 5, 3


def _problem(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return two_layer_data(_N, _D_IN, _H, _D_OUT, seed=seed)


def _loss(x, y, w1, w2) -> float:
    return float(two_layer_loss(x, y, w1, w2))


def _numeric_gradients(x, y, w1, w2) -> tuple[np.ndarray, np.ndarray]:
    w1, w2 = w1.copy(), w2.copy()
    grad_w1 = numeric_gradient(lambda w: _loss(x, y, w, w2), w1)
    grad_w2 = numeric_gradient(lambda w: _loss(x, y, w1, w), w2)
    return grad_w1, grad_w2


def _number(value) -> float:
    """A float from a number or a one-element tensor (detached, so torch does not warn); NaN otherwise."""
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return float("nan")


def _leaves(*arrays):
    import torch

    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


def train_step(c: Checker, train_step) -> None:
    """``train_step(x, y, w1, w2, learning_rate) -> float``: one step of gradient descent on the
    two-layer net with autograd. It returns the loss before the update as a Python float, updates
    the leaf tensors ``w1`` and ``w2`` in place and leaves their gradients zeroed."""
    import torch

    x, y, w1_0, w2_0 = _problem(seed=4)
    lr = 1e-3
    xt, yt = torch.tensor(x), torch.tensor(y)
    w1, w2 = _leaves(w1_0, w2_0)

    loss = c.call("first call train_step(x, y, w1, w2, 1e-3)", train_step, xt, yt, w1, w2, lr)
    c.true(
        "it returns the loss as a Python number",
        isinstance(loss, (float, int)),
        f"got {type(loss).__name__}; use loss.item() to turn a one-element tensor into a float",
    )
    c.close(
        "the returned loss is the sum of squared errors before the update",
        _number(loss),
        _loss(x, y, w1_0, w2_0),
    )
    c.true(
        "w1 and w2 are still leaf tensors that require grad",
        w1.is_leaf and w2.is_leaf and w1.requires_grad and w2.requires_grad,
        "update them in place (w1 -= ...) inside `with torch.no_grad():`",
    )
    g1, g2 = _numeric_gradients(x, y, w1_0, w2_0)
    w1_1, w2_1 = w1_0 - lr * g1, w2_0 - lr * g2
    moved = not np.allclose(w1.detach().numpy(), w1_0)
    c.true(
        "the weights passed in were changed",
        moved,
        "`w1 = w1 - ...` makes a new tensor inside your function, the caller's w1 stays put: use w1 -= ...",
    )
    if not moved:
        return
    c.close("w1 after one step equals w1 - lr * dloss/dw1 (numeric gradient)", w1, w1_1, rtol=1e-5, atol=1e-7)
    c.close("w2 after one step equals w2 - lr * dloss/dw2 (numeric gradient)", w2, w2_1, rtol=1e-5, atol=1e-7)
    zeroed = all(w.grad is None or not w.grad.any() for w in (w1, w2))
    c.true(
        "the gradients are zero after the step",
        zeroed,
        "call w1.grad.zero_() and w2.grad.zero_() after the update",
    )

    c.call("second call train_step(x, y, w1, w2, 1e-3)", train_step, xt, yt, w1, w2, lr)
    g1, g2 = _numeric_gradients(x, y, w1_1, w2_1)
    c.close(
        "the second step uses only the new gradient (not the sum of both)",
        w1,
        w1_1 - lr * g1,
        rtol=1e-5,
        atol=1e-7,
        hint="gradients accumulate in .grad: zero them after every update",
    )


def Tanh(c: Checker, Tanh) -> None:
    """``Tanh``: a ``torch.autograd.Function`` whose forward computes tanh and saves its output,
    and whose backward returns ``grad_y * (1 - y**2)``."""
    import torch

    torch_gen = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, dtype=torch.float64, generator=torch_gen, requires_grad=True)
    y = c.call("Tanh.apply(x)", Tanh.apply, x)
    c.close("forward equals torch.tanh", y, torch.tanh(x))
    c.true(
        "the output is part of a graph (requires grad)",
        isinstance(y, torch.Tensor) and y.requires_grad,
        "call Tanh.apply(x), and return a tensor from forward",
    )
    if not (isinstance(y, torch.Tensor) and y.requires_grad and y.grad_fn is not None):
        return
    upstream = torch.randn(4, 5, dtype=torch.float64, generator=torch_gen)
    (grad_x,) = c.call("backward through Tanh", torch.autograd.grad, y, x, upstream)
    reference = x.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(torch.tanh(reference), reference, upstream)
    c.close("backward equals grad_y * (1 - tanh(x)**2)", grad_x, expected)
    ok = c.call(
        "torch.autograd.gradcheck(Tanh.apply, (x,)) in float64",
        torch.autograd.gradcheck,
        Tanh.apply,
        (x,),
        raise_exception=False,
    )
    c.true(
        "gradcheck agrees with central differences",
        bool(ok),
        "compare your backward with the derivative of tanh",
    )
    nodes = [fn for fn, _ in y.grad_fn.next_functions if fn is not None]
    c.true(
        "the whole of tanh is one node of the graph",
        all(type(fn).__name__ == "AccumulateGrad" for fn in nodes),
        "the graph of y should lead straight from your Function's node to x",
    )


def microbatch_gradients(c: Checker, microbatch_gradients) -> None:
    """``microbatch_gradients(x, y, w1, w2, num_chunks) -> (grad_w1, grad_w2)``: split the batch into
    ``num_chunks`` pieces, call backward on each piece's sum-of-squares loss without zeroing in
    between, and return the accumulated gradients: they equal the whole batch's."""
    x, y, w1_0, w2_0 = _problem(seed=5)
    g1, g2 = _numeric_gradients(x, y, w1_0, w2_0)
    import torch

    xt, yt = torch.tensor(x), torch.tensor(y)
    for chunks in (1, 4):
        w1, w2 = _leaves(w1_0, w2_0)
        result = c.call(
            f"microbatch_gradients(x, y, w1, w2, num_chunks={chunks})",
            microbatch_gradients,
            xt,
            yt,
            w1,
            w2,
            chunks,
        )
        ok = isinstance(result, (tuple, list)) and len(result) == 2
        c.true(f"{chunks} chunk(s): it returns two gradients", ok, f"got {type(result).__name__}")
        if not ok:
            return
        hint = "do not zero the gradients between chunks: accumulating them is the point"
        c.close(
            f"{chunks} chunk(s): grad_w1 equals the whole batch's (numeric)",
            result[0],
            g1,
            rtol=1e-5,
            atol=1e-7,
            hint=hint,
        )
        c.close(
            f"{chunks} chunk(s): grad_w2 equals the whole batch's (numeric)",
            result[1],
            g2,
            rtol=1e-5,
            atol=1e-7,
            hint=hint,
        )
