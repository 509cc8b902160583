"""Lecture 6's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import pytest
import torch

from dlcourse import check


def stub(*_args, **_kwargs):
    raise NotImplementedError


# Adam


def adam_without_bias_correction(param, grad, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    return param - lr * m / (v.sqrt() + eps), m, v


def adam_eps_inside_the_root(param, grad, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    return param - lr * m_hat / (v_hat + eps).sqrt(), m, v


def adam_forgets_to_return_the_moments(param, grad, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    new_m = beta1 * m + (1 - beta1) * grad
    new_v = beta2 * v + (1 - beta2) * grad**2
    m_hat = new_m / (1 - beta1**t)
    v_hat = new_v / (1 - beta2**t)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


@pytest.mark.parametrize(
    "wrong",
    [stub, adam_without_bias_correction, adam_eps_inside_the_root, adam_forgets_to_return_the_moments],
)
def test_adam_step_fails_a_wrong_answer(wrong):
    assert not check("l06.adam_step", wrong, show=False).passed


# SGD with momentum as an Optimizer


class StubOptimizer(torch.optim.Optimizer):
    """The exercise as the lecture hands it out: the constructor is given, step() is to be written. The
    wrong answers below keep this constructor and get step() wrong."""

    def __init__(self, params, lr, momentum=0.9):
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self):
        raise NotImplementedError


class PlainSGD(StubOptimizer):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(group["lr"] * p.grad)


class DampenedMomentum(StubOptimizer):
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


class CrashesWithoutGradient(StubOptimizer):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * buf)


class KeepsBuffersElsewhere(StubOptimizer):
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


class NotAnOptimizer:
    def __init__(self, params, lr, momentum=0.9):
        self.params = list(params)

    def zero_grad(self):
        pass

    def step(self):
        pass


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


@pytest.mark.parametrize(
    "wrong", [stub, divides_by_the_number_of_chunks, forgets_zero_grad, steps_after_every_chunk]
)
def test_accumulated_step_fails_a_wrong_answer(wrong):
    assert not check("l06.accumulated_step", wrong, show=False).passed
