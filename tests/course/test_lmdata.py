"""dlcourse.lmdata: lecture 16's language model as plain data, and its loss worked out from that data alone in
numpy, as the grader's evaluator will for A8 (the kernel hands over weights, never a loss)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dlcourse import lm, lmdata


def trained_looking(config: lm.LMConfig, seed: int = 0) -> lm.LanguageModel:
    """A model whose weights are all random (norms and embedding too), so no term of the forward is trivial."""
    torch.manual_seed(seed)
    model = lm.LanguageModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "norm" not in name else 1.0) + ("norm" in name))
    return model.eval()


@pytest.mark.parametrize(
    "config, context",
    [
        (lm.LMConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=2, max_len=32), 12),
        (lm.LMConfig(vocab_size=37, d_model=24, n_layers=1, n_heads=3, max_len=16, hidden=40), 16),
        (lm.LMConfig(vocab_size=20, d_model=8, n_layers=3, n_heads=1, max_len=8), 1),
    ],
)
def test_the_loss_from_the_data_is_lecture_16s_evaluate(config, context):
    model = trained_looking(config)
    tokens = torch.randint(0, config.vocab_size, (200,), generator=torch.Generator().manual_seed(1))
    expected = lm.evaluate(model, tokens, context)
    got = lmdata.mean_loss(lmdata.lm_as_data(model), tokens.numpy(), context)
    assert got == pytest.approx(expected, rel=1e-5), (got, expected)  # (torch in float32, numpy in float64)


def test_a_later_token_changes_no_earlier_loss():
    """Causal: the loss at each position depends on the tokens up to it only."""
    config = lm.LMConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, max_len=16)
    settings, arrays = lmdata.decode_lm(lmdata.lm_as_data(trained_looking(config)))
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 30, (1, 10)), rng.integers(0, 30, (1, 10))
    before = lmdata.token_losses(settings, arrays, x, y)
    x2 = x.copy()
    x2[0, 6] = (x2[0, 6] + 1) % 30
    after = lmdata.token_losses(settings, arrays, x2, y)
    assert np.array_equal(before[0, :6], after[0, :6]) and not np.allclose(before[0, 6:], after[0, 6:])


def test_the_vector_round_trips_and_holds_what_the_model_holds():
    config = lm.LMConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=4, max_len=32)
    model = trained_looking(config)
    settings, arrays = lmdata.decode_lm(lmdata.lm_as_data(model))
    assert settings == {
        "vocab": 40, "d_model": 16, "n_layers": 2, "n_heads": 4, "hidden": config.mlp_hidden, "max_len": 32,
        "rope_base": 10000.0, "eps": pytest.approx(1e-6),
    }  # fmt: skip
    assert np.array_equal(arrays["embed"], model.embed.weight.detach().double().numpy())
    assert np.array_equal(arrays["blocks.1.down"], model.blocks[1].mlp.down.weight.detach().double().numpy())
    assert sum(a.size for a in arrays.values()) == lm.count_parameters(model)


def vector(**changes) -> np.ndarray:
    config = lm.LMConfig(vocab_size=20, d_model=8, n_layers=1, n_heads=2, max_len=8)
    value = lmdata.lm_as_data(trained_looking(config))
    for index, number in changes.items():
        value[int(index[1:])] = number
    return value


@pytest.mark.parametrize(
    "value, words",
    [
        (np.zeros(3), "starting with its settings"),
        (vector(i1=20.5), "vocab is 20.5"),
        (vector(i2=0), "d_model is 0"),
        (vector(i4=3), "not an even head width"),
        (vector(i3=2), "need"),  # two blocks' worth of settings, one block's parameters
        (vector(i7=float("nan")), "not finite"),
        (vector(i20=float("inf")), "not all finite"),
        (np.append(vector(), 1.0), "the vector holds"),
        (vector(i1=1e9), "vocab is 1e+09"),
    ],
)
def test_what_is_no_model_is_refused_with_what_is_wrong(value, words):
    with pytest.raises(ValueError, match="not a language model|not all finite") as err:
        lmdata.mean_loss(value, np.arange(10) % 20, 4)
    assert words in str(err.value)


def test_tokens_it_has_no_row_for_a_context_too_long_and_too_much_work_are_refused(monkeypatch):
    value = vector()
    with pytest.raises(ValueError, match="0..19"):
        lmdata.mean_loss(value, np.array([1, 2, 20, 3, 4]), 2)
    with pytest.raises(ValueError, match="1 to 8"):
        lmdata.mean_loss(value, np.arange(20) % 20, 9)
    with pytest.raises(ValueError, match="no window"):
        lmdata.mean_loss(value, np.array([1, 2]), 4)
    monkeypatch.setattr(lmdata, "MAX_WORK", 1000.0)
    with pytest.raises(ValueError, match="more than the grader's"):
        lmdata.mean_loss(value, np.arange(100) % 20, 8)


def test_windows_go_through_a_batch_at_a_time_with_the_same_loss(monkeypatch):
    config = lm.LMConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, max_len=16)
    value = lmdata.lm_as_data(trained_looking(config))
    tokens = np.random.default_rng(3).integers(0, 30, 300)
    whole = lmdata.mean_loss(value, tokens, 8)
    monkeypatch.setattr(lmdata, "MAX_ARRAY_BYTES", 1)  # one window at a time
    assert lmdata.mean_loss(value, tokens, 8) == pytest.approx(whole, rel=1e-12)
    assert math.isfinite(whole) and whole > 0
