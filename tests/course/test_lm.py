"""dlcourse.lm, the reference code of lecture 16, against independent computations: BPE against a naive
recount of every pair, its round trip on any Unicode text (hypothesis); RMSNorm against F.rms_norm; RoPE's
rotation with complex numbers and its offset-only scores; the KV cache against recomputation; AdamW against
torch.optim.AdamW; the schedule's formula; top-k and top-p as distributions; the FLOP count."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcourse import lm

SMALL_TEXT = (
    "the cat sat on the mat; the cat ate the rat. " * 20
    + "Caf\u00e9 \u6f22\u5b57 \U0001f40d 123 4567_x\t\n  end"
)


def naive_bpe(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """BPE by recounting every pair of every chunk after each merge, with the documented tie rule."""
    words = [list(chunk.encode()) for chunk in lm.pretokenize(text)]
    merges = []
    for new_id in range(256, vocab_size):
        counts = Counter(pair for ids in words for pair in zip(ids, ids[1:]))
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [lm._merge(ids, best, new_id) for ids in words]
    return merges


def test_train_bpe_equals_a_naive_recount_of_every_pair():
    assert lm.train_bpe(SMALL_TEXT, 300) == naive_bpe(SMALL_TEXT, 300)


def test_ties_go_to_the_smallest_pair():
    # "ab" and "cd" occur equally often: (97, 98) < (99, 100) is merged first
    assert lm.train_bpe("ab\ncd\nab\ncd", 257) == [(97, 98)]
    assert lm.train_bpe("cd\nab\ncd\nab", 257) == [(97, 98)]
    assert lm.train_bpe("ab cd ab cd", 257) == [(32, 99)]  # " cd" twice: (32, 99) ties too, and is smaller


def test_merges_stop_when_nothing_is_left_to_merge():
    merges = lm.train_bpe("aaaa", 1000)
    assert len(merges) == 2  # aa, then aaaa
    assert lm.BPETokenizer(merges).encode("aaaa") == [257]


def test_the_shipped_text_trains_and_round_trips():
    text = lm.shakespeare_text()
    assert 150_000 < len(text.encode()) <= 200_000 and text.startswith("First Citizen:")
    tokenizer = lm.BPETokenizer(lm.train_bpe(text[:40_000], 300))
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert len(ids) < 0.8 * len(text.encode())  # 44 merges already compress (0.72 measured)
    assert max(ids) == 299 and len(tokenizer) == 300


TOKENIZER = lm.BPETokenizer(lm.train_bpe(SMALL_TEXT, 320))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_on_any_unicode_text(text):
    assert "".join(lm.pretokenize(text)) == text
    ids = TOKENIZER.encode(text)
    assert TOKENIZER.decode(ids) == text
    assert all(0 <= i < len(TOKENIZER) for i in ids)


def test_rms_norm_matches_torch_and_keeps_the_dtype():
    norm = lm.RMSNorm(12)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(3, 5, 12)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (12,), norm.weight, eps=norm.eps))
    assert norm(x.bfloat16()).dtype == torch.bfloat16


def test_rope_is_a_complex_rotation_with_offset_only_scores():
    d, n = 16, 50
    cos, sin = lm.rope_tables(d, n)
    x = torch.randn(2, n, d, dtype=torch.float64)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)
    expected = torch.view_as_real(
        torch.view_as_complex(x.reshape(2, n, d // 2, 2)) * torch.polar(torch.ones_like(angle), angle)
    )
    got = lm.apply_rope(x, cos, sin)  # float32 tables: float32 accuracy
    torch.testing.assert_close(got, expected.flatten(-2), atol=1e-5, rtol=1e-5)
    assert got.dtype == torch.float64 and lm.apply_rope(x.bfloat16(), cos, sin).dtype == torch.bfloat16
    q, k = torch.randn(2, d)
    score = lambda m, j: float(lm.apply_rope(q, cos[m], sin[m]) @ lm.apply_rope(k, cos[j], sin[j]))
    assert score(5, 2) == pytest.approx(score(40, 37), abs=1e-4)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3


def small_model(seed=0, **overrides):
    torch.manual_seed(seed)
    config = dict(vocab_size=40, d_model=16, n_layers=2, n_heads=2, max_len=64) | overrides
    return lm.LanguageModel(lm.LMConfig(**config))


def test_weight_tying_and_parameter_groups():
    model = small_model()
    assert model.head.weight is model.embed.weight
    decay, no_decay = lm.parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    no_decay_ids = {id(p) for p in no_decay["params"]}
    assert id(model.embed.weight) in no_decay_ids
    assert all(id(b.norm1.weight) in no_decay_ids for b in model.blocks)
    assert all(p.dim() == 2 for p in decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len({id(p) for p in model.parameters()})


def test_the_model_is_causal_and_the_cache_equals_recomputation():
    model = small_model().eval()
    idx = torch.randint(40, (1, 20))
    with torch.no_grad():
        full = model(idx)
        changed = idx.clone()
        changed[0, 12] = (changed[0, 12] + 1) % 40
        assert torch.equal(model(changed)[0, :12], full[0, :12])  # no position looks ahead
        caches = [{} for _ in model.blocks]
        steps = [model(idx[:, :8], caches)[:, -1]]
        steps += [model(idx[:, t : t + 1], caches, start=t)[:, -1] for t in range(8, 20)]
    torch.testing.assert_close(torch.stack(steps[1:], dim=1), full[:, 8:20], atol=1e-5, rtol=1e-5)


def test_the_cache_takes_several_new_tokens_at_once():
    # a prompt fed in chunks: each new query sees the whole cache and the new keys up to its own position
    model = small_model().eval()
    idx = torch.randint(40, (2, 20))
    with torch.no_grad():
        full = model(idx)
        caches = [{} for _ in model.blocks]
        chunks = [model(idx[:, a:b], caches, start=a) for a, b in ((0, 8), (8, 13), (13, 14), (14, 20))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)


def test_generation_with_and_without_the_cache_gives_the_same_tokens():
    model = small_model().eval()
    runs = [
        lm.generate(model, [1, 2, 3], 30, torch.Generator().manual_seed(7), top_k=10, use_cache=c)
        for c in (True, False)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 30


def test_adamw_matches_torch_and_decays_decoupled():
    models = [small_model(), small_model()]
    optimizers = [lm.AdamW(lm.parameter_groups(models[0], 0.1), lr=1e-2, betas=(0.9, 0.95)),
                  torch.optim.AdamW(lm.parameter_groups(models[1], 0.1), lr=1e-2, betas=(0.9, 0.95))]  # fmt: skip
    idx = torch.randint(40, (4, 17))
    for _ in range(4):
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            lm.lm_loss(model, idx[:, :-1], idx[:, 1:]).backward()
            optimizer.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    weight = torch.ones(1, requires_grad=True)
    optimizer = lm.AdamW([weight], lr=0.01, weight_decay=0.1)
    weight.grad = torch.zeros(1)
    optimizer.step()
    assert weight.item() == pytest.approx(1 - 0.01 * 0.1)


def test_learning_rate_warms_up_then_follows_the_cosine():
    rates = [lm.learning_rate(t, 1.0, 10, 110, 0.1) for t in range(115)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert rates[60] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * 0.5)) / 2)
    assert rates[110:] == [pytest.approx(0.1)] * 5
    assert all(a >= b for a, b in zip(rates[9:], rates[10:]))


def test_top_k_and_top_p_keep_the_right_sets():
    scores = torch.log(torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05]))
    probs = lm.sampling_distribution(scores, top_k=2)
    torch.testing.assert_close(probs, torch.tensor([4 / 7, 3 / 7, 0, 0, 0]))
    probs = lm.sampling_distribution(scores, top_p=0.72)  # 0.4 + 0.3 < 0.72: the third is needed
    torch.testing.assert_close(probs, torch.tensor([0.4, 0.3, 0.15, 0, 0]) / 0.85)
    probs = lm.sampling_distribution(scores, top_p=0.3)  # the first alone reaches it
    torch.testing.assert_close(probs, torch.tensor([1.0, 0, 0, 0, 0]))
    cold = lm.sampling_distribution(scores, temperature=0.5)
    torch.testing.assert_close(cold, torch.softmax(scores / 0.5, dim=-1))
    draws = Counter(torch.multinomial(lm.sampling_distribution(scores, top_k=2), 2000, replacement=True,
                                      generator=torch.Generator().manual_seed(0)).tolist())  # fmt: skip
    assert set(draws) == {0, 1} and abs(draws[0] / 2000 - 4 / 7) < 0.04


def test_training_flops_is_six_n_per_token_plus_attention():
    model = small_model(vocab_size=64, d_model=32)
    x = torch.randint(64, (4, 16))
    counted = lm.training_flops(model, x, x)
    tokens, n = x.numel(), lm.count_parameters(model)
    attention = 6 * 2 * 2 * 16 * 32 * tokens  # 6 x 2 L n_ctx D per token
    norms = 6 * 32 * 5 * tokens  # the norms' weights are parameters the counter does not multiply
    assert counted == 6 * n * tokens + attention - norms


def test_accumulated_gradients_equal_the_whole_batch_and_training_lowers_the_loss():
    model = small_model()
    idx = torch.randint(40, (8, 17))
    lm.lm_loss(model, idx[:, :-1], idx[:, 1:]).backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for part in idx.chunk(4):
        (lm.lm_loss(model, part[:, :-1], part[:, 1:]) / 4).backward()
    for a, p in zip(whole, model.parameters()):
        torch.testing.assert_close(p.grad, a, atol=1e-6, rtol=1e-5)
    tokens = torch.tensor([i % 7 for i in range(2000)])  # a period-7 pattern: learnable
    record = lm.train(small_model(vocab_size=8), tokens[:1500], tokens[1500:], steps=60, batch=8, context=16,
                      accumulation=2, autocast_dtype=torch.bfloat16, evaluations=2)  # fmt: skip
    assert record.val_loss[-1] < 0.5 * math.log(8) and record.tokens[-1] == 60 * 2 * 8 * 16
