"""Lecture 6's self-checks pass a correct answer and fail a wrong one or a stub."""

from __future__ import annotations

import pytest
import torch

from dlcourse import check


def stub(*_args, **_kwargs):
    raise NotImplementedError


# Adam


def adam_step(param, grad, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def adam_without_bias_correction(param, grad, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    return param - lr * m / (v.sqrt() + eps), m, v


def adam_eps_inside_the_root(param, grad, m, v, t, lr, betas, eps):
    _, m, v = adam_step(param, grad, m, v, t, lr, betas, eps)
    beta1, beta2 = betas
    return param - lr * (m / (1 - beta1**t)) / (v / (1 - beta2**t) + eps).sqrt(), m, v


def adam_forgets_to_return_the_moments(param, grad, m, v, t, lr, betas, eps):
    new_param, _, _ = adam_step(param, grad, m, v, t, lr, betas, eps)
    return new_param, m, v


def test_adam_step_passes_a_correct_answer():
    assert check("l06.adam_step", adam_step, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [stub, adam_without_bias_correction, adam_eps_inside_the_root, adam_forgets_to_return_the_moments],
)
def test_adam_step_fails_a_wrong_answer(wrong):
    assert not check("l06.adam_step", wrong, show=False).passed


# SGD with momentum as an Optimizer


class MomentumSGD(torch.optim.Optimizer):
    def __init__(self, params, lr, momentum=0.9):
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = p.grad.clone()
                else:
                    state["momentum_buffer"].mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * state["momentum_buffer"])


class PlainSGD(MomentumSGD):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(group["lr"] * p.grad)


class DampenedMomentum(MomentumSGD):
    """The exponential moving average (1 - momentum) * grad: a different rule from torch's."""

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_((1 - group["momentum"]) * p.grad)
                p.sub_(group["lr"] * buf)


class CrashesWithoutGradient(MomentumSGD):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * buf)


class KeepsBuffersElsewhere(MomentumSGD):
    def __init__(self, params, lr, momentum=0.9):
        super().__init__(params, lr, momentum)
        self.buffers = {}

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.buffers.setdefault(p, torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * buf)


class StubOptimizer(MomentumSGD):
    def step(self):
        raise NotImplementedError


class NotAnOptimizer:
    def __init__(self, params, lr, momentum=0.9):
        self.params = list(params)

    def zero_grad(self):
        pass

    def step(self):
        pass


def test_momentum_sgd_passes_a_correct_answer():
    assert check("l06.momentum_sgd", MomentumSGD, show=False).passed


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        StubOptimizer,
        PlainSGD,
        DampenedMomentum,
        CrashesWithoutGradient,
        KeepsBuffersElsewhere,
        NotAnOptimizer,
    ],
)
def test_momentum_sgd_fails_a_wrong_answer(wrong):
    assert not check("l06.momentum_sgd", wrong, show=False).passed


# Gradient accumulation


def accumulated_step(model, optimizer, loss_fn, x, y, chunks):
    optimizer.zero_grad()
    total = 0.0
    for x_part, y_part in zip(torch.chunk(x, chunks), torch.chunk(y, chunks)):
        loss = loss_fn(model(x_part), y_part) * len(x_part) / len(x)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def divides_by_the_number_of_chunks(model, optimizer, loss_fn, x, y, chunks):
    optimizer.zero_grad()
    total = 0.0
    for x_part, y_part in zip(torch.chunk(x, chunks), torch.chunk(y, chunks)):
        loss = loss_fn(model(x_part), y_part) / chunks
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def forgets_zero_grad(model, optimizer, loss_fn, x, y, chunks):
    total = 0.0
    for x_part, y_part in zip(torch.chunk(x, chunks), torch.chunk(y, chunks)):
        loss = loss_fn(model(x_part), y_part) * len(x_part) / len(x)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def steps_after_every_chunk(model, optimizer, loss_fn, x, y, chunks):
    total = 0.0
    for x_part, y_part in zip(torch.chunk(x, chunks), torch.chunk(y, chunks)):
        optimizer.zero_grad()
        loss = loss_fn(model(x_part), y_part) * len(x_part) / len(x)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


def test_accumulated_step_passes_a_correct_answer():
    assert check("l06.accumulated_step", accumulated_step, show=False).passed


@pytest.mark.parametrize(
    "wrong", [stub, divides_by_the_number_of_chunks, forgets_zero_grad, steps_after_every_chunk]
)
def test_accumulated_step_fails_a_wrong_answer(wrong):
    assert not check("l06.accumulated_step", wrong, show=False).passed
