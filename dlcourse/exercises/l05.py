"""Checks for lecture 5 (torch.nn): convolution output sizes, a residual block, weights in nn.Linear.

Reference values come from torch itself (running a real ``Conv2d``), from numpy and from properties,
never from a stored answer.
"""

from __future__ import annotations

from dlcourse.selfcheck import Checker

# (size, kernel_size, padding, stride): the digits' convolutions, MNIST's, and strided ones.
_CONV_CASES = [
    (8, 3, 1, 1),
    (4, 3, 1, 1),
    (28, 5, 0, 1),
    (12, 5, 0, 1),
    (8, 3, 0, 2),
    (7, 2, 0, 2),
    (32, 5, 2, 2),
    (224, 11, 2, 4),
]


def conv_output_size(c: Checker, conv_output_size) -> None:
    """``conv_output_size(size, kernel_size, padding=0, stride=1) -> int``: the height (or width) of
    a convolution's output for an input of height (or width) ``size``."""
    import torch

    for size, kernel, padding, stride in _CONV_CASES:
        conv = torch.nn.Conv2d(1, 1, kernel, padding=padding, stride=stride, bias=False, device="meta")
        expected = conv(torch.empty(1, 1, size, size, device="meta")).shape[-1]
        got = c.call(
            f"conv_output_size({size}, {kernel}, padding={padding}, stride={stride})",
            conv_output_size,
            size,
            kernel,
            padding=padding,
            stride=stride,
        )
        c.true(
            f"size {size}, kernel {kernel}, padding {padding}, stride {stride}: {expected} like nn.Conv2d",
            got == expected and int(got) == got,
            f"got {got!r}; padding adds to both sides, and the division by the stride rounds down",
        )


def ResidualBlock(c: Checker, ResidualBlock) -> None:
    """``ResidualBlock(dim)``: an ``nn.Module`` with two ``nn.Linear(dim, dim)`` layers whose forward
    returns ``x + linear2(relu(linear1(x)))``."""
    import torch

    dim = 6
    block = c.call(f"ResidualBlock({dim})", ResidualBlock, dim)
    c.true(
        "it is an nn.Module",
        isinstance(block, torch.nn.Module),
        "subclass torch.nn.Module and call super().__init__()",
    )
    if not isinstance(block, torch.nn.Module):
        return
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    shapes_ok = len(linears) == 2 and all(m.in_features == dim and m.out_features == dim for m in linears)
    c.true(
        "it holds two registered nn.Linear(dim, dim) layers",
        shapes_ok,
        f"found {len(linears)} nn.Linear layers; assign them as attributes in __init__ to register them",
    )
    n_params = sum(p.numel() for p in block.parameters())
    c.true(
        "it has 2 * (dim * dim + dim) parameters",
        n_params == 2 * (dim * dim + dim),
        f"found {n_params}, expected {2 * (dim * dim + dim)}",
    )
    if not shapes_ok:
        return
    x = torch.randn(5, dim, generator=torch.Generator().manual_seed(5))
    out = c.call("block(x)", block, x)
    if not c.true(
        "block(x) returns a tensor of x's shape",
        isinstance(out, torch.Tensor) and out.shape == x.shape,
        f"got {out!r}"[:120],
    ):
        return
    with torch.no_grad():
        candidates = [x + b(torch.relu(a(x))) for a, b in (linears, linears[::-1])]
    c.close(
        "forward returns x + linear2(relu(linear1(x)))",
        out,
        min(candidates, key=lambda ref: float((ref - out.detach()).abs().max())),
        rtol=1e-5,
        atol=1e-6,
    )
    if out.requires_grad:
        block.zero_grad()
        out.sum().backward()
    c.true(
        "every parameter gets a gradient",
        all(p.grad is not None for p in block.parameters()),
        "use both layers in forward, and no torch.no_grad() there",
    )


def copy_running_weights(c: Checker, copy_running_weights) -> None:
    """``copy_running_weights(model, w1, w2) -> model``: put the running example's numpy weights
    ``w1`` (D_in, H) and ``w2`` (H, D_out) into ``nn.Sequential(Linear(D_in, H), ReLU(), Linear(H, D_out))``,
    with zero biases, so that ``model(x)`` computes ``relu(x @ w1) @ w2``."""
    import numpy as np
    import torch

    rng = np.random.default_rng(7)
    d_in, hidden, d_out = 6, 5, 3
    x = rng.standard_normal((4, d_in))
    w1, w2 = rng.standard_normal((d_in, hidden)), rng.standard_normal((hidden, d_out))
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, d_out)
    )
    result = c.call("copy_running_weights(model, w1, w2)", copy_running_weights, model, w1.copy(), w2.copy())
    c.true("it returns the model", result is model, "return the model you were given, after filling it")
    linears = [model[0], model[2]]
    c.true(
        "the layers keep their shapes: weight (out_features, in_features)",
        [tuple(m.weight.shape) for m in linears] == [(hidden, d_in), (d_out, hidden)],
        "nn.Linear stores weight as (out, in) and computes x @ weight.T + bias: copy w1.T, not w1",
    )
    params = list(model.parameters())
    c.true(
        "they are still trainable float32 parameters",
        len(params) == 4
        and all(
            isinstance(p, torch.nn.Parameter) and p.requires_grad and p.dtype == torch.float32 for p in params
        ),
        "copy the values in place, under torch.no_grad(): weight.copy_(torch.from_numpy(w1.T))",
    )
    c.true(
        "the biases are zero",
        all(m.bias is not None and not m.bias.detach().any() for m in linears),
        "the running example has no biases: set them to zero with bias.zero_()",
    )
    with torch.no_grad():
        out = c.call("model(x)", model, torch.tensor(x, dtype=torch.float32))
    c.close(
        "model(x) equals relu(x @ w1) @ w2 (numpy)", out, np.maximum(x @ w1, 0) @ w2, rtol=1e-4, atol=1e-5
    )
