"""Lecture 4's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dlcourse import check  # noqa: E402


def run(name, answer):
    return check(f"l04.{name}", answer, show=False)


def _loss(x, y, w1, w2):
    return (x.mm(w1).relu().mm(w2) - y).pow(2).sum()


# train_step ---------------------------------------------------------------------------------------


def train_step_no_zero(x, y, w1, w2, learning_rate):
    loss = _loss(x, y, w1, w2)
    loss.backward()
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
    return loss.item()


def train_step_rebinds(x, y, w1, w2, learning_rate):
    loss = _loss(x, y, w1, w2)
    loss.backward()
    with torch.no_grad():
        w1 = w1 - learning_rate * w1.grad
        w2 = w2 - learning_rate * w2.grad
    return loss.item()


def train_step_mean_loss(x, y, w1, w2, learning_rate):
    loss = (x.mm(w1).relu().mm(w2) - y).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for w in (w1, w2):
            w -= learning_rate * w.grad
            w.grad.zero_()
    return loss.item()


def train_step_stub(x, y, w1, w2, learning_rate):
    raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [train_step_no_zero, train_step_rebinds, train_step_mean_loss, train_step_stub]
)
def test_train_step_fails_wrong_answers(wrong):
    assert not run("train_step", wrong).passed


def test_forgetting_zero_is_named_in_the_report():
    text = str(run("train_step", train_step_no_zero))
    assert "zero" in text


# Tanh ---------------------------------------------------------------------------------------------


class TanhWrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * (1 - y)


class TanhIgnoresUpstream(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return 1 - y * y


class TanhWrongForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * (1 - y * y)


class TanhStub(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad_y):
        raise NotImplementedError


class TanhBackwardStub(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [TanhWrongBackward, TanhIgnoresUpstream, TanhWrongForward, TanhStub, TanhBackwardStub]
)
def test_tanh_fails_wrong_answers(wrong):
    assert not run("Tanh", wrong).passed


# microbatch_gradients ---------------------------------------------------------------------------------


def microbatch_gradients_zeroing(x, y, w1, w2, num_chunks):
    for x_part, y_part in zip(x.chunk(num_chunks), y.chunk(num_chunks)):
        for w in (w1, w2):
            if w.grad is not None:
                w.grad.zero_()
        _loss(x_part, y_part, w1, w2).backward()
    return w1.grad.clone(), w2.grad.clone()


def microbatch_gradients_averaging(x, y, w1, w2, num_chunks):
    for x_part, y_part in zip(x.chunk(num_chunks), y.chunk(num_chunks)):
        (_loss(x_part, y_part, w1, w2) / num_chunks).backward()
    return w1.grad.clone(), w2.grad.clone()


def microbatch_gradients_stub(x, y, w1, w2, num_chunks):
    raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [microbatch_gradients_zeroing, microbatch_gradients_averaging, microbatch_gradients_stub]
)
def test_microbatch_gradients_fails_wrong_answers(wrong):
    assert not run("microbatch_gradients", wrong).passed
