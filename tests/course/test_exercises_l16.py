"""Lecture 16's self-checks reject wrong answers and stubs, and accept right answers in other forms.

The positive control is the lecture's own hidden solutions, run by tests/course/test_lectures.py; here, right answers
written differently (dlcourse.lm's code, a loop, a math formula in numpy) pass, and the mistakes students make
fail: RoPE on the two halves instead of interleaved pairs, a wrong frequency, rotating by the wrong sign,
a dtype not kept; top-p that drops the token crossing p, or forgets to renormalise; a warm-up that starts at 0,
a cosine that ends at 0 or runs past the end."""

from __future__ import annotations

import math

import numpy as np
import torch

from dlcourse import check, lm


def stub(*_args):
    raise NotImplementedError


# rotate


def rotate_with(pairs="interleaved", exponent=lambda i, d: -2 * i / d, sign=1.0, keep_dtype=True):
    def rotate(x, positions, base=10000.0):
        d = x.shape[-1]
        i = torch.arange(d // 2, dtype=torch.float64)
        angle = sign * positions.double()[:, None] * base ** exponent(i, d)
        cos, sin = angle.cos(), angle.sin()
        if pairs == "interleaved":
            a, b = x[..., 0::2].double(), x[..., 1::2].double()
            out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        else:  # the two halves, as some code bases pair them: another convention than the one asked for
            a, b = x[..., : d // 2].double(), x[..., d // 2 :].double()
            out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        return out.to(x.dtype) if keep_dtype else out

    return rotate


def rotate_with_lm(x, positions, base=10000.0):
    cos, sin = lm.rope_tables(x.shape[-1], int(positions.max()) + 1, base)
    return lm.apply_rope(x, cos[positions], sin[positions])


def test_rotate_accepts_right_answers():
    assert check("l16.rotate", rotate_with(), show=False).passed
    assert check("l16.rotate", rotate_with_lm, show=False).passed  # float32 tables


def test_rotate_rejects_wrong_answers_and_stubs():
    wrong = [
        rotate_with(pairs="halves"),
        rotate_with(exponent=lambda i, d: -i / d),  # frequencies base^(-i/d)
        rotate_with(exponent=lambda i, d: -2 * (i + 1) / d),  # off by one pair
        rotate_with(sign=-1.0),  # turned the other way
        rotate_with(keep_dtype=False),  # float64 for float32 input
        lambda x, positions, base=10000.0: x.clone(),  # no rotation at all
        lambda x, positions, base=10000.0: x + positions.to(x.dtype)[:, None],  # adds the position
        stub,
    ]
    for answer in wrong:
        assert not check("l16.rotate", answer, show=False).passed


def test_rotate_rejects_an_answer_that_writes_into_x():
    def in_place(x, positions, base=10000.0):
        x.copy_(rotate_with()(x, positions, base))
        return x

    assert not check("l16.rotate", in_place, show=False).passed


# top_p_filter


def top_p_loop(probs, p):
    out = torch.zeros_like(probs)
    flat, flat_out = probs.reshape(-1, probs.shape[-1]), out.reshape(-1, probs.shape[-1])
    for row, row_out in zip(flat, flat_out):
        total = 0.0
        for index in torch.argsort(row, descending=True).tolist():
            row_out[index] = row[index]
            total += float(row[index])
            if total >= p:
                break
        row_out /= row_out.sum()
    return out


def top_p_numpy(probs, p):  # returns numpy: accepted too
    array = probs.numpy()
    order = np.argsort(-array, axis=-1)
    sorted_probs = np.take_along_axis(array, order, axis=-1)
    kept = np.where(np.cumsum(sorted_probs, axis=-1) - sorted_probs < p, sorted_probs, 0.0)
    out = np.zeros_like(array)
    np.put_along_axis(out, order, kept, axis=-1)
    return out / out.sum(axis=-1, keepdims=True)


def test_top_p_accepts_right_answers():
    for answer in (top_p_loop, top_p_numpy, lambda probs, p: lm.sampling_distribution(probs.log(), top_p=p)):
        assert check("l16.top_p_filter", answer, show=False).passed


def test_top_p_rejects_wrong_answers_and_stubs():
    def drops_the_crossing_token(probs, p):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        kept = torch.where(sorted_probs.cumsum(-1) <= p, sorted_probs, 0.0)
        kept[..., 0] = sorted_probs[..., 0]
        out = torch.zeros_like(probs).scatter(-1, order, kept)
        return out / out.sum(-1, keepdim=True)

    def not_renormalised(probs, p):
        out = top_p_loop(probs, p)
        return torch.where(out > 0, probs, 0.0)

    def keeps_the_least_likely(probs, p):  # sorted the wrong way round
        sorted_probs, order = probs.sort(dim=-1)
        kept = torch.where(sorted_probs.cumsum(-1) - sorted_probs < p, sorted_probs, 0.0)
        out = torch.zeros_like(probs).scatter(-1, order, kept)
        return out / out.sum(-1, keepdim=True)

    def top_k_instead(probs, p):
        return lm.sampling_distribution(probs.log(), top_k=3)

    for answer in (drops_the_crossing_token, not_renormalised, keeps_the_least_likely, top_k_instead, stub):
        assert not check("l16.top_p_filter", answer, show=False).passed


# schedule


def schedule_with(start_at_zero=False, end=None, clamp=True):
    def schedule(step, max_lr, warmup, total, min_lr):
        if step < warmup:
            return max_lr * (step if start_at_zero else step + 1) / warmup
        progress = (min(step, total) if clamp else step) - warmup
        floor = min_lr if end is None else end
        return floor + (max_lr - floor) * (1 + math.cos(math.pi * progress / (total - warmup))) / 2

    return schedule


def test_schedule_accepts_right_answers():
    assert check("l16.schedule", lm.learning_rate, show=False).passed
    assert check("l16.schedule", schedule_with(), show=False).passed


def test_schedule_rejects_wrong_answers_and_stubs():
    wrong = [
        schedule_with(start_at_zero=True),
        schedule_with(end=0.0),  # ignores min_lr
        schedule_with(clamp=False),  # the cosine rises again after total
        lambda step, max_lr, warmup, total, min_lr: max_lr,  # constant
        stub,
    ]
    for answer in wrong:
        assert not check("l16.schedule", answer, show=False).passed
