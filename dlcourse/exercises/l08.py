"""Checks for lecture 8 (static graphs): tracing's blind spot, torch.export with a dynamic batch, torch.cond.

Each check builds its own small functions, modules and inputs, and decides by properties that hold by
construction (which branch an input takes) or by comparing with the eager module it handed over.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

from dlcourse.selfcheck import Checker

# What a failing torch.export prints besides raising: a log line from the symbolic-shapes logger and the
# partial graph, written straight to stderr.
_SYMBOLIC_SHAPES_LOGGER = "torch.fx.experimental.symbolic_shapes"


@contextlib.contextmanager
def quiet_failed_export():
    """Run a ``torch.export`` call that may fail without its extra output (a log line and the partial graph
    on stderr). The exception itself still propagates, with its full message."""
    logger = logging.getLogger(_SYMBOLIC_SHAPES_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _jit_warnings_ignored():
    """The warnings that tracing on purpose triggers: TorchScript's deprecation and the TracerWarning."""
    import torch

    with warnings.catch_warnings():
        deprecated = r"`torch\.jit\.\w+` is deprecated"
        warnings.filterwarnings("ignore", message=deprecated, category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        yield


def _double_if_positive(x):
    if x.sum() > 0:
        return x * 2
    return -x


def _smooth(x):
    import torch

    return torch.tanh(x) * 2 + 1


def trace_is_faithful(c: Checker, fn):
    """``fn(function, example, other) -> bool``: trace ``function`` on ``example`` and say whether the trace
    gives the same result as ``function`` itself on ``other``.

    The cases are built so the answer is known: a function without control flow traces faithfully; a
    function with an ``if`` on tensor data traces faithfully only for inputs that take the branch the
    example took.
    """
    import torch

    ones = torch.ones(3)
    cases = [
        ("no control flow, input of the other sign", _smooth, ones, -ones, True),
        ("`if x.sum() > 0`, other input takes the same branch", _double_if_positive, ones, 3 * ones, True),
        ("`if x.sum() > 0`, other input takes the other branch", _double_if_positive, ones, -ones, False),
        ("`if x.sum() > 0`, traced on the negative branch", _double_if_positive, -ones, 2 * ones, False),
    ]
    for description, function, example, other, expected in cases:
        with _jit_warnings_ignored():
            answer = c.call(description, fn, function, example.clone(), other.clone())
        hint = (
            "the trace recorded only the branch the example took"
            if expected is False
            else "the trace and the function agree here: compare their outputs, not the code"
        )
        c.true(f"{description}: the answer is {expected}", answer is expected or answer == expected, hint)


def _small_net(seed: int = 0):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3)).eval()


def export_dynamic_batch(c: Checker, fn):
    """``fn(module, example) -> torch.export.ExportedProgram`` with dimension 0 of the input dynamic.

    The exported program must agree with the eager module on batch sizes other than the example's.
    """
    import torch

    module = _small_net()
    example = torch.randn(5, 6)
    program = c.call("export the module with a dynamic batch dimension", fn, module, example)
    if not c.true(
        "returns a torch.export.ExportedProgram",
        isinstance(program, torch.export.ExportedProgram),
        f"got {type(program).__name__}; return what torch.export.export returns",
    ):
        return
    runnable = program.module()
    for batch in (5, 2, 17):
        x = torch.randn(batch, 6)
        with torch.no_grad():
            expected = module(x)
        try:
            with torch.no_grad():
                got = runnable(x)
        except Exception as err:  # a static export refuses any other batch size
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            c.true(
                f"runs on a batch of {batch}",
                False,
                f"it raised {type(err).__name__}: {first_line[:160]}. Mark dimension 0 as dynamic with "
                "dynamic_shapes and torch.export.Dim",
            )
            continue
        c.close(f"agrees with the eager module on a batch of {batch}", got, expected, rtol=1e-5, atol=1e-6)


def relu_or_tanh(c: Checker, fn):
    """``fn(x)``: ``relu(x)`` where ``x.mean() > 0``, else ``tanh(x)``, written so that torch.export captures
    both branches (``torch.cond``).

    Checked eagerly on inputs of either sign, then exported once and run on both kinds of input.
    """
    import torch
    from torch import nn

    torch.manual_seed(1)
    positive = torch.randn(8).abs() + 0.1
    negative = -torch.randn(8).abs() - 0.1
    # Same length as the others: the export below has static shapes. Means +0.5 (relu) and -0.5 (tanh).
    mixed_positive = torch.tensor([6.0, -1.0, 0.5, -0.5, 1.0, -1.5, 0.25, -0.75])
    mixed_negative = -mixed_positive
    expected = {
        "positive mean": (positive, positive.clamp(min=0)),
        "negative mean": (negative, torch.tanh(negative)),
        "mixed signs, positive mean": (mixed_positive, mixed_positive.clamp(min=0)),
        "mixed signs, negative mean": (mixed_negative, torch.tanh(mixed_negative)),
    }
    eager_right = True
    for name, (x, want) in expected.items():
        got = c.call(f"eager call, {name}", fn, x.clone())
        eager_right &= c.close(f"eager result, {name}", got, want, rtol=1e-6, atol=1e-7)

    class Wrapped(nn.Module):
        def forward(self, x):
            return fn(x)

    try:
        with quiet_failed_export():
            program = torch.export.export(Wrapped(), (positive.clone(),))
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        c.true(
            "torch.export captures the function",
            False,
            f"export failed with {type(err).__name__}: {first_line[:120]}. A Python `if` on tensor data "
            "cannot be exported: use torch.cond(predicate, true_fn, false_fn, (x,))",
        )
        return
    c.true("torch.export captures the function", True)
    runnable = program.module()
    for name, (x, want) in expected.items():
        c.close(
            f"exported program, {name}",
            runnable(x.clone()),
            want,
            rtol=1e-6,
            atol=1e-7,
            hint="the eager calls were right, so the exported graph lost a branch: use torch.cond"
            if eager_right
            else "",
        )
