"""Facts that lecture 16's prose states, measured: each test would fail if the sentence it backs were false.

The notebook itself runs in tests/course/test_lectures.py; dlcourse.lm's code is tested in tests/course/test_lm.py. Here: what the
shipped text is (the validation tenth is another play), what weight tying does to the gradients of rare tokens'
rows, bfloat16's spacing where a language model's loss lies and where autocast takes the cross-entropy, gradient
accumulation's condition (micro-batches of equal size), and RoPE's identity in the form the lecture writes it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dlcourse import lm


def test_the_text_is_coriolanus_then_richard_iii_and_validation_is_richard_iii():
    text = lm.shakespeare_text()
    richard = text.index("GLOUCESTER:\nNow is the winter of our discontent")
    assert 0.75 < richard / len(text) < 0.85  # Coriolanus is about four fifths of the text
    validation = text[int(0.9 * len(text)) :]  # the lecture's split
    assert "CORIOLANUS:" not in validation and "MENENIUS:" not in validation


def small_model(tied=True):
    torch.manual_seed(0)
    model = lm.LanguageModel(lm.LMConfig(vocab_size=200, d_model=16, n_layers=1, n_heads=2, max_len=32))
    if not tied:
        model.head.weight = nn.Parameter(model.embed.weight.detach().clone())
    return model


def rows_with_gradient(weight: torch.Tensor) -> int:
    return int((weight.grad.abs().sum(dim=1) > 0).sum())


def test_tying_gives_every_input_row_the_output_gradient():
    # Untied: the softmax sends a gradient to every output row at every step, but only the tokens in the batch get
    # one in their input row. Tied: every row gets the output layer's gradient.
    x = torch.randint(50, (4, 16))  # tokens 0..49 only: rows 50..199 are rare tokens this batch never shows
    y = torch.randint(200, (4, 16))
    untied = small_model(tied=False)
    lm.lm_loss(untied, x, y).backward()
    assert rows_with_gradient(untied.embed.weight) == x.unique().numel() <= 50
    assert rows_with_gradient(untied.head.weight) == 200
    tied = small_model()
    lm.lm_loss(tied, x, y).backward()
    assert rows_with_gradient(tied.embed.weight) == 200


def bfloat16_spacing(value: float) -> float:
    x = torch.tensor(value, dtype=torch.bfloat16)
    return (torch.nextafter(x, torch.tensor(math.inf, dtype=torch.bfloat16)) - x).item()


def test_bfloat16_spacing_where_the_loss_lies():
    assert torch.finfo(torch.bfloat16).eps == 2**-7  # 7 stored bits of mantissa, 8 with the implicit 1
    assert bfloat16_spacing(1.0) == 2**-7
    assert bfloat16_spacing(4.0) == bfloat16_spacing(7.5) == 2**-5
    assert bfloat16_spacing(8.0) == 2**-4
    # a step of 1e-4 on a weight of 1 vanishes
    assert (torch.ones(1, dtype=torch.bfloat16) + 1e-4).item() == 1.0


def test_autocast_takes_the_cross_entropy_in_float32_and_bfloat16_outside_it_errs_by_hundredths():
    torch.manual_seed(0)
    scores = (3 * torch.randn(256, 512)).bfloat16()
    targets = torch.randint(512, (256,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.cross_entropy(scores, targets).dtype == torch.float32
    exact = F.cross_entropy(scores.double(), targets).item()
    error_bf16 = abs(F.cross_entropy(scores, targets).item() - exact)
    error_fp32 = abs(F.cross_entropy(scores.float(), targets).item() - exact)
    assert 1e-3 < error_bf16 < 0.1 and error_fp32 < 1e-5


def test_accumulation_equals_the_whole_batch_only_for_equal_micro_batches():
    model = small_model()
    idx = torch.randint(200, (8, 17))

    def gradient(parts, weights):
        model.zero_grad()
        for part, weight in zip(parts, weights):
            (lm.lm_loss(model, part[:, :-1], part[:, 1:]) * weight).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    whole = gradient([idx], [1.0])
    assert torch.allclose(gradient(idx.chunk(4), [1 / 4] * 4), whole, atol=1e-6)
    unequal = (idx[:6], idx[6:])
    assert not torch.allclose(gradient(unequal, [1 / 2, 1 / 2]), whole, atol=1e-4)  # mean of means
    assert torch.allclose(gradient(unequal, [6 / 8, 2 / 8]), whole, atol=1e-6)  # weighted by size


def test_rope_identity_as_the_lecture_writes_it():
    # <R_m q, R_n k> = <R_{m-n} q, k>: the score depends on the offset m - n
    cos, sin = lm.rope_tables(16, 64)
    q, k = torch.randn(2, 16)
    for m, n in ((9, 2), (40, 33), (5, 12)):
        rotated = lm.apply_rope(q, cos[m], sin[m]) @ lm.apply_rope(k, cos[n], sin[n])
        offset = m - n
        turned_q = lm.apply_rope(q, cos[abs(offset)], sin[abs(offset)] * (1 if offset >= 0 else -1))
        assert torch.allclose(rotated, turned_q @ k, atol=1e-5)
