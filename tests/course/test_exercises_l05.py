"""Lecture 5's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from dlcourse import check  # noqa: E402


def run(name, answer):
    return check(f"l05.{name}", answer, show=False)


# conv_output_size -------------------------------------------------------------------------------------


def conv_output_size_one_sided_padding(size, kernel_size, padding=0, stride=1):
    return (size + padding - kernel_size) // stride + 1


def conv_output_size_true_division(size, kernel_size, padding=0, stride=1):
    return (size + 2 * padding - kernel_size) / stride + 1


def conv_output_size_stub(size, kernel_size, padding=0, stride=1):
    raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [conv_output_size_one_sided_padding, conv_output_size_true_division, conv_output_size_stub]
)
def test_conv_output_size_fails_wrong_answers(wrong):
    assert not run("conv_output_size", wrong).passed


# ResidualBlock --------------------------------------------------------------------------------------


class ResidualBlockNoSkip(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear1 = nn.Linear(dim, dim)
        self.linear2 = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear2(self.linear1(x).clamp(min=0))


class ResidualBlockReluAfterSum(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear1 = nn.Linear(dim, dim)
        self.linear2 = nn.Linear(dim, dim)

    def forward(self, x):
        return (x + self.linear2(self.linear1(x))).clamp(min=0)


class ResidualBlockUnregistered(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.layers = [nn.Linear(dim, dim), nn.Linear(dim, dim)]  # a plain list: not registered

    def forward(self, x):
        return x + self.layers[1](self.layers[0](x).clamp(min=0))


class ResidualBlockStub(nn.Module):
    def __init__(self, dim):
        raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [ResidualBlockNoSkip, ResidualBlockReluAfterSum, ResidualBlockUnregistered, ResidualBlockStub]
)
def test_residual_block_fails_wrong_answers(wrong):
    assert not run("ResidualBlock", wrong).passed


# copy_running_weights ---------------------------------------------------------------------------------


def copy_running_weights_keeps_biases(model, w1, w2):
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(w1.T))
        model[2].weight.copy_(torch.from_numpy(w2.T))
    return model


def copy_running_weights_no_transpose(model, w1, w2):
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(w1).reshape(model[0].weight.shape))
        model[2].weight.copy_(torch.from_numpy(w2).reshape(model[2].weight.shape))
        model[0].bias.zero_()
        model[2].bias.zero_()
    return model


def copy_running_weights_float64(model, w1, w2):
    model[0].weight = nn.Parameter(torch.from_numpy(w1.T.copy()))
    model[2].weight = nn.Parameter(torch.from_numpy(w2.T.copy()))
    with torch.no_grad():
        model[0].bias.zero_()
        model[2].bias.zero_()
    return model


def copy_running_weights_no_return(model, w1, w2):
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(w1.T))
        model[2].weight.copy_(torch.from_numpy(w2.T))
        model[0].bias.zero_()
        model[2].bias.zero_()


def copy_running_weights_stub(model, w1, w2):
    raise NotImplementedError


@pytest.mark.parametrize(
    "wrong",
    [
        copy_running_weights_keeps_biases,
        copy_running_weights_no_transpose,
        copy_running_weights_float64,
        copy_running_weights_no_return,
        copy_running_weights_stub,
    ],
)
def test_copy_running_weights_fails_wrong_answers(wrong):
    assert not run("copy_running_weights", wrong).passed
