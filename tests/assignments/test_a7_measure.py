"""A7's measurements (dlcourse.a7): the largest tensor a call creates, and the bytes it keeps for backward, including
what a custom Function hides on its ctx."""

from __future__ import annotations

import torch

from dlcourse.a7 import largest_intermediate, saved_bytes


def test_largest_intermediate_sees_the_scores_of_naive_attention_and_not_of_a_loop():
    q, k, v = (torch.randn(2, 50, 4) for _ in range(3))
    naive_out, naive = largest_intermediate(lambda: torch.softmax(q @ k.mT, dim=-1) @ v)
    assert naive == 2 * 50 * 50  # the (L, S) scores of both sequences

    def row_by_row():
        return torch.cat([torch.softmax(q[:, i : i + 1] @ k.mT, dim=-1) @ v for i in range(50)], dim=1)

    looped_out, looped = largest_intermediate(row_by_row)
    assert looped == 2 * 50 * 4  # the output is the largest tensor now
    torch.testing.assert_close(looped_out, naive_out)


class KeepsWeightsOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        weights = torch.softmax(q @ k.mT, dim=-1)
        ctx.save_for_backward(q, k)
        ctx.weights = weights  # kept alive as surely as a saved tensor
        ctx.scale = 1.0
        return weights

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError


def test_saved_bytes_counts_saved_tensors_and_tensors_on_ctx_once():
    q = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    _, kept = saved_bytes(lambda: KeepsWeightsOnCtx.apply(q, k))
    assert kept == 8 * (3 * 5 + 7 * 5 + 3 * 7)
    _, plain = saved_bytes(
        lambda: (q * 2).sum()
    )  # mul saves nothing for a constant factor; sum saves nothing
    assert plain == 0
    _, product = saved_bytes(lambda: q @ k.mT)  # a product keeps both factors; k.mT is a view of k's storage
    assert product == 8 * (3 * 5 + 7 * 5)


class KeepsWeightsInContainers(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        weights = torch.softmax(q @ k.mT, dim=-1)
        ctx.save_for_backward(q, k)
        ctx.kept = {"weights": weights}  # a dict on ctx keeps the weights alive as surely as an attribute
        ctx.nested = [
            (weights.T, {"again": [weights * 2]})
        ]  # a view of the same buffer, and a new one, nested
        ctx.holder = type("Holder", (), {})()
        ctx.holder.scores = q @ k.mT  # on an object stored on ctx
        ctx.function = torch.softmax  # code, not data: not entered
        return weights

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError


def test_saved_bytes_counts_tensors_in_dicts_lists_and_objects_on_ctx():
    q = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    _, kept = saved_bytes(lambda: KeepsWeightsInContainers.apply(q, k))
    # q and k, the weights once (their transpose shares the buffer), the doubled weights, the scores
    assert kept == 8 * (3 * 5 + 7 * 5 + 3 * 7 + 3 * 7 + 3 * 7)
