"""Self-checks for lecture 6 (``torch.optim``: SGD, momentum, Adam and the training loop).

Every check runs the student's code next to torch's own optimizers, an independent implementation of
the same update rules, from the same starting values, and compares the results.
"""

from __future__ import annotations

import copy

import numpy as np

from dlcourse.selfcheck import Checker


def _random_tensors(seed: int, *shapes):
    import torch

    rng = np.random.default_rng(seed)
    return [torch.tensor(rng.standard_normal(shape), dtype=torch.float64) for shape in shapes]


def adam_step(c: Checker, fn) -> None:
    """``fn(param, grad, m, v, t, lr, betas, eps)`` returns ``(new_param, new_m, new_v)``: one step of Adam
    for step number ``t`` (1 for the first step), with ``m`` and ``v`` the first and second moment estimates
    (zeros before the first step), bias correction, and ``eps`` added to the square root of the corrected
    second moment. The same rule as ``torch.optim.Adam`` without weight decay."""
    import torch

    lr, betas, eps = 0.01, (0.8, 0.95), 1e-6
    start, *grads = _random_tensors(60, (4, 3), *[(4, 3)] * 5)
    grads[2] = grads[2] * 1e-3  # a step with tiny gradients: Adam still moves every weight by about lr

    reference = start.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([reference], lr=lr, betas=betas, eps=eps)
    param, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    for t, grad in enumerate(grads, start=1):
        reference.grad = grad.clone()
        optimizer.step()
        given = [param.clone(), grad.clone(), m.clone(), v.clone()]
        result = c.call(f"step {t} runs", fn, *given, t, lr, betas, eps)
        if not c.true(
            f"step {t} returns three values",
            isinstance(result, list | tuple) and len(result) == 3,
            hint="return new_param, new_m, new_v",
        ):
            return
        param, m, v = (torch.as_tensor(r, dtype=torch.float64) for r in result)
        state = optimizer.state[reference]
        for name, got, want, hint in (
            ("m", m, state["exp_avg"], "m = beta1 * m + (1 - beta1) * grad"),
            ("v", v, state["exp_avg_sq"], "v = beta2 * v + (1 - beta2) * grad**2"),
            (
                "the parameter",
                param,
                reference.detach(),
                "param - lr * m_hat / (sqrt(v_hat) + eps), with m_hat = m / (1 - beta1**t), "
                "v_hat = v / (1 - beta2**t)",
            ),
        ):
            if not c.close(
                f"after step {t}, {name} agrees with torch.optim.Adam", got, want, 1e-7, 1e-10, hint
            ):
                return


def momentum_sgd(c: Checker, optimizer_class) -> None:
    """``optimizer_class(params, lr, momentum)`` is a ``torch.optim.Optimizer`` whose ``step()`` applies SGD
    with momentum as torch does: ``buf = momentum * buf + grad`` (``buf = grad`` on the first step), then
    ``param -= lr * buf``, keeping one buffer per parameter in ``self.state`` and skipping parameters
    without a gradient."""
    import torch

    torch.manual_seed(61)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    frozen = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))  # never gets a gradient
    x, y = _random_tensors(62, (16, 5), (16, 2))
    ours = copy.deepcopy(model)
    params = [*ours.parameters(), frozen]
    optimizer = c.call(
        "optimizer_class(params, lr=0.05, momentum=0.9) builds an optimizer",
        optimizer_class,
        params,
        lr=0.05,
        momentum=0.9,
    )
    if not c.true(
        "it is a torch.optim.Optimizer",
        isinstance(optimizer, torch.optim.Optimizer),
        hint="subclass torch.optim.Optimizer and call super().__init__(params, defaults)",
    ):
        return
    reference = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(1, 6):
        for net, opt in ((ours, optimizer), (model, reference)):
            loss = torch.nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
        c.call(f"optimizer.step() runs (step {step})", lambda: optimizer.step() or True)
        reference.step()
        got = torch.cat([p.detach().reshape(-1) for p in ours.parameters()])
        want = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if not c.close(
            f"after step {step}, the weights agree with torch.optim.SGD(momentum=0.9)",
            got,
            want,
            1e-9,
            1e-12,
            hint="buf = momentum * buf + grad, then p -= lr * buf, under torch.no_grad()",
        ):
            return
    c.true(
        "a parameter without a gradient is left alone",
        torch.equal(frozen.detach(), torch.ones(3, dtype=torch.float64)),
        hint="skip parameters whose .grad is None",
    )
    buffers = [optimizer.state[p].get("momentum_buffer") for p in ours.parameters()]
    c.true(
        "it keeps one momentum buffer per parameter in self.state[p]['momentum_buffer']",
        all(isinstance(b, torch.Tensor) for b in buffers),
        hint="self.state[p] is a dict per parameter: store the buffer under 'momentum_buffer'",
    )


def accumulated_step(c: Checker, fn) -> None:
    """``fn(model, optimizer, loss_fn, x, y, chunks)`` makes ONE optimizer step whose gradient is the
    full batch's, computed chunk by chunk (``torch.chunk(x, chunks)``) so that only one chunk's
    activations are in memory at a time; ``loss_fn`` averages over its batch. Returns the full batch's
    loss as a float."""
    import torch

    for n, chunks in ((12, 3), (10, 4)):
        torch.manual_seed(63)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)).double()
        x, y = _random_tensors(64 + n, (n, 6), (n, 3))
        ours = copy.deepcopy(model)
        optimizer = torch.optim.SGD(ours.parameters(), lr=0.1)
        # Stale gradients from an earlier step: a correct answer clears them before accumulating.
        torch.nn.functional.mse_loss(ours(x), y).backward()
        where = f"{n} rows in {chunks} chunks"
        loss = c.call(
            f"it runs ({where})",
            fn,
            ours,
            optimizer,
            torch.nn.functional.mse_loss,
            x.clone(),
            y.clone(),
            chunks,
        )

        reference = torch.optim.SGD(model.parameters(), lr=0.1)
        full_loss = torch.nn.functional.mse_loss(model(x), y)
        reference.zero_grad()
        full_loss.backward()
        reference.step()
        c.close(
            f"it returns the full batch's loss ({where})",
            np.atleast_1d(float(loss)),
            np.atleast_1d(full_loss.item()),
            1e-9,
            1e-12,
            hint="weight each chunk's mean loss by len(chunk) / len(x) and add them up",
        )
        got = torch.cat([p.detach().reshape(-1) for p in ours.parameters()])
        want = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if not c.close(
            f"one step with the accumulated gradient equals one full-batch step ({where})",
            got,
            want,
            1e-9,
            1e-12,
            hint="zero_grad() once before the chunks, backward() on each chunk's loss scaled by "
            "len(chunk) / len(x), step() once after them",
        ):
            return
