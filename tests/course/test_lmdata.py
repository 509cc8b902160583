"""dlcourse.lmdata: lecture 16's language model (and the same with grouped-query attention) as plain data, and its
loss worked out from that data alone in numpy, as the grader's evaluator does for A8 (the kernel hands over
weights, never a loss)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

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
        "vocab": 40, "d_model": 16, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "hidden": config.mlp_hidden,
        "max_len": 32, "rope_base": 10000.0, "eps": pytest.approx(1e-6),
    }  # fmt: skip
    assert np.array_equal(arrays["embed"], model.embed.weight.detach().double().numpy())
    qkv = model.blocks[1].attn.qkv.weight.detach().double().numpy()  # the fused matrix: q, then k and v
    assert np.array_equal(arrays["blocks.1.q"], qkv[:16]) and np.array_equal(arrays["blocks.1.kv"], qkv[16:])
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
        (vector(i5=3), "do not divide its 2 query heads"),
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
    # one window's widest array: 8 tokens x the MLP's 24 (lecture 16's width for d_model 8)
    monkeypatch.setattr(lmdata, "MAX_ARRAY_BYTES", 8 * 8 * 24 - 1)
    with pytest.raises(ValueError, match="one window of 8 tokens takes an array of"):
        lmdata.mean_loss(value, np.arange(20) % 20, 8)
    monkeypatch.setattr(lmdata, "MAX_WORK", 1000.0)
    with pytest.raises(ValueError, match="more than the grader's"):
        lmdata.mean_loss(value, np.arange(100) % 20, 8)


def test_windows_go_through_a_batch_at_a_time_with_the_same_loss(monkeypatch):
    config = lm.LMConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, max_len=16)
    value = lmdata.lm_as_data(trained_looking(config))
    tokens = np.random.default_rng(3).integers(0, 30, 300)
    whole = lmdata.mean_loss(value, tokens, 8)
    monkeypatch.setattr(
        lmdata, "MAX_ARRAY_BYTES", 8 * 8 * 48
    )  # one window at a time (its MLP: 8 x 48 numbers)
    assert lmdata.mean_loss(value, tokens, 8) == pytest.approx(whole, rel=1e-12)
    assert math.isfinite(whole) and whole > 0


# ----------------------------------------------------------------------------- grouped-query attention


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d, dtype=torch.float64))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GQAttention(nn.Module):
    """Written from the description (not from lmdata): ``kv`` holds the keys' rows, then the values'; query head
    h reads key and value head h // (n_heads // n_kv_heads); each pair (2i, 2i+1) of a query or key turns by the
    angle m * base^(-2i / head_dim) at position m."""

    def __init__(self, d: int, heads: int, kv_heads: int, base: float):
        super().__init__()
        self.heads, self.kv_heads, self.hd, self.base = heads, kv_heads, d // heads, base
        self.q = nn.Linear(d, d, bias=False, dtype=torch.float64)
        self.kv = nn.Linear(d, 2 * kv_heads * self.hd, bias=False, dtype=torch.float64)
        self.out = nn.Linear(d, d, bias=False, dtype=torch.float64)

    def rotate(self, x):  # (B, H, N, hd)
        n = x.shape[2]
        angle = torch.arange(n, dtype=torch.float64)[:, None] * self.base ** (
            -torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd
        )
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * angle.cos() - x2 * angle.sin()
        out[..., 1::2] = x1 * angle.sin() + x2 * angle.cos()
        return out

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).split(self.kv_heads * self.hd, dim=-1)
        k = k.view(b, n, self.kv_heads, self.hd).transpose(1, 2)
        v = v.view(b, n, self.kv_heads, self.hd).transpose(1, 2)
        q, k = self.rotate(q), self.rotate(k)
        group = self.heads // self.kv_heads
        outs = []
        for h in range(self.heads):  # one head at a time, reading its group's key and value head
            scores = q[:, h] @ k[:, h // group].transpose(-1, -2) / math.sqrt(self.hd)
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            outs.append(scores.softmax(-1) @ v[:, h // group])
        return self.out(torch.cat(outs, dim=-1))


class GQABlock(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int, eps: float, base: float):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.attn = GQAttention(d, heads, kv_heads, base)
        self.mlp = nn.Module()
        for name, shape in (("gate", (d, hidden)), ("up", (d, hidden)), ("down", (hidden, d))):
            setattr(self.mlp, name, nn.Linear(*shape, bias=False, dtype=torch.float64))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h = self.norm2(x)
        return x + self.mlp.down(torch.nn.functional.silu(self.mlp.gate(h)) * self.mlp.up(h))


class GQAConfig:
    def __init__(self, **sizes):
        self.__dict__.update(sizes)


class GQAModel(nn.Module):
    def __init__(self, config: GQAConfig, eps: float = 1e-5, rope_base: float = 500.0):
        super().__init__()
        c = self.config = config
        self.rope_base = rope_base
        self.embed = nn.Embedding(c.vocab_size, c.d_model, dtype=torch.float64)
        self.blocks = nn.ModuleList(
            GQABlock(c.d_model, c.n_heads, c.n_kv_heads, c.hidden, eps, rope_base) for _ in range(c.n_layers)
        )
        self.norm = RMSNorm(c.d_model, eps)
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(torch.randn_like(p) * (0.3 if "norm" not in name else 1.0) + ("norm" in name))

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.T  # the tied head


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 1), (2, 2)])
def test_a_grouped_query_model_has_the_loss_torch_gives_it(heads, kv_heads):
    torch.manual_seed(4)
    config = GQAConfig(vocab_size=31, d_model=16, n_layers=2, n_heads=heads, n_kv_heads=kv_heads, max_len=16,
                       hidden=24)  # fmt: skip
    model = GQAModel(config).eval()
    tokens = torch.randint(0, 31, (150,), generator=torch.Generator().manual_seed(5))
    context = 12
    n = (len(tokens) - 1) // context
    x, y = tokens[: n * context].view(n, context), tokens[1 : n * context + 1].view(n, context)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    value = lmdata.lm_as_data(model)
    settings, arrays = lmdata.decode_lm(value)
    assert settings["n_kv_heads"] == kv_heads and settings["rope_base"] == 500.0
    assert settings["eps"] == pytest.approx(1e-5)
    assert arrays["blocks.1.kv"].shape == (2 * kv_heads * 16 // heads, 16)
    assert lmdata.mean_loss(value, tokens.numpy(), context) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_work_of_a_grouped_query_model_counts_its_fewer_keys_and_values():
    base = {"vocab": 100, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "hidden": 64}
    full = lmdata.work_per_token(base, 16)
    grouped = lmdata.work_per_token({**base, "n_kv_heads": 1}, 16)
    assert full - grouped == 2 * (2 * 32 * 32 - 2 * 8 * 32)  # two layers, keys and values of 32 -> of 8 wide
    assert full == 2 * (4 * 32 * 32 + 3 * 32 * 64 + 2 * 16 * 32) + 32 * 100  # lecture 16's: q, k, v, out


def test_a_model_laid_out_otherwise_is_refused_as_a_type_error():
    config = GQAConfig(vocab_size=20, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, max_len=8, hidden=8)
    model = GQAModel(config)
    config.n_kv_heads = 2  # the config says two key and value heads; the weights hold one
    with pytest.raises(TypeError, match="blocks.0.kv is not as its config says"):
        lmdata.lm_as_data(model)
    del model.blocks[0].attn.q  # no queries at all
    config.n_kv_heads = 1
    with pytest.raises(TypeError, match="blocks.0.q is not as its config says"):
        lmdata.lm_as_data(model)
