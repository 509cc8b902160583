"""A small language model end to end: a byte-level BPE tokenizer, a decoder-only Transformer with RMSNorm,
rotary position embeddings and SwiGLU, AdamW with parameter groups, a warm-up and cosine schedule, and
sampling over a KV cache.

Lecture 16 imports these and shows their source; each piece is short and written to be read.

- :func:`shakespeare_text`    the text the lecture trains on, shipped with the package (public domain)
- :func:`pretokenize`, :func:`train_bpe`, :class:`BPETokenizer`   byte-level BPE
- :func:`shakespeare_tokenizer`   the course's tokenizer: BPE trained on that text (A8's tests and its grader)
- :class:`RMSNorm`, :func:`rope_tables`, :func:`apply_rope`, :class:`SwiGLU`, :class:`Attention`,
  :class:`Block`, :class:`LMConfig`, :class:`LanguageModel`   the model (weight tying, a KV cache)
- :func:`parameter_groups`, :class:`AdamW`, :func:`learning_rate`   the optimiser and its schedule
- :func:`random_windows`, :func:`lm_loss`, :func:`evaluate`, :func:`train`   batches, the loss in float32,
  validation, a training run
- :func:`sampling_distribution`, :func:`generate`   temperature, top-k, top-p, with or without a cache
- :func:`training_flops`   FLOPs of one training step, counted by ``torch.utils.flop_counter``

The text is the opening 195 kB of the "tiny Shakespeare" corpus (Coriolanus, four fifths of it, then the
opening of Richard III, as Project Gutenberg prints them): Shakespeare's plays are in the public domain.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from dlcourse.device import synchronize

# ----------------------------------------------------------------------------- text


def shakespeare_text() -> str:
    """The 195 kB of Shakespeare that ship with the package (``dlcourse/texts/shakespeare.txt``)."""
    return resources.files("dlcourse").joinpath("texts/shakespeare.txt").read_text(encoding="utf-8")


def show_source(*objects) -> None:
    """Display the source of functions or classes of this module in a notebook, highlighted."""
    import inspect

    from IPython.display import Code, display

    for obj in objects:
        display(Code(inspect.getsource(obj), language="python"))


# ----------------------------------------------------------------------------- byte-level BPE

# Words with their leading space, runs of digits, runs of other symbols, whitespace: merges never cross these
# boundaries, so " the" becomes one token and "the." does not. (GPT-2's pattern, in the standard `re` module, whose
# \d is the decimal digits only: numerals such as "²" or "½" count as letters here, as numbers in GPT-2's.)
PRETOKEN = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def pretokenize(text: str) -> list[str]:
    """The chunks BPE works inside; joined, they give ``text`` back exactly."""
    return PRETOKEN.findall(text)


def _merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair`` (left to right, not overlapping) replaced by ``new_id``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """The merges of a byte-level BPE with ``vocab_size`` tokens (256 bytes, then one token per merge).

    Each step merges the most frequent adjacent pair of tokens inside the pre-tokenized chunks. Ties go to
    the smallest pair, ``(first id, second id)`` in numeric order, so the merges are a function of the text.
    Merge ``i`` makes token ``256 + i``. Pair counts are updated only in the chunks that contain the merged
    pair, so each step costs what it changes, not the whole text.
    """
    counts = Counter(pretokenize(text))
    words = [list(word.encode("utf-8")) for word in counts]
    frequency = list(counts.values())
    pair_counts: Counter = Counter()
    where = defaultdict(set)  # pair -> indices of the words it occurs in
    for w, ids in enumerate(words):
        for pair in zip(ids, ids[1:]):
            pair_counts[pair] += frequency[w]
            where[pair].add(w)
    merges = []
    for new_id in range(256, vocab_size):
        if not pair_counts:
            break  # every chunk is a single token: nothing left to merge
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        merges.append(best)
        for w in where.pop(best):
            ids = words[w]
            for pair in zip(ids, ids[1:]):  # the word's old pairs out ...
                pair_counts[pair] -= frequency[w]
                if pair_counts[pair] == 0:
                    del pair_counts[pair]
            words[w] = ids = _merge(ids, best, new_id)
            for pair in zip(ids, ids[1:]):  # ... and its new ones in
                pair_counts[pair] += frequency[w]
                where[pair].add(w)
    return merges


class BPETokenizer:
    """Encode text to token ids and back with the merges of :func:`train_bpe`."""

    def __init__(self, merges: Sequence[tuple[int, int]]):
        self.merges = [tuple(pair) for pair in merges]
        self.rank = {
            pair: i for i, pair in enumerate(self.merges)
        }  # the earlier a merge, the sooner it applies
        self.vocab = {i: bytes([i]) for i in range(256)}
        for i, (a, b) in enumerate(self.merges):
            self.vocab[256 + i] = self.vocab[a] + self.vocab[b]
        self._cache: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.vocab)

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.rank.get(p, math.inf))
            if pair not in self.rank:
                break  # no merge applies any more
            ids = _merge(ids, pair, 256 + self.rank[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        out = []
        for chunk in pretokenize(text):
            if chunk not in self._cache:  # a text repeats its words: each distinct chunk is encoded once
                self._cache[chunk] = self._encode_chunk(chunk)
            out.extend(self._cache[chunk])
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Bytes joined, then UTF-8 decoded; a sequence that cuts a character in two gets U+FFFD for it."""
        return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=8)
def shakespeare_tokenizer(vocab_size: int = 512) -> BPETokenizer:
    """The course's tokenizer: byte-level BPE of ``vocab_size`` tokens trained on :func:`shakespeare_text`, made
    once per size. A8's test cells and its grader both encode with it, so a held-out text reaches the grader in
    exactly the tokens the model was trained on."""
    return BPETokenizer(train_bpe(shakespeare_text(), vocab_size))


# ----------------------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, computed in float32 whatever x's dtype:
    layer norm without the mean subtracted and without a bias."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, each (max_len, head_dim / 2): position m turns pair i of a query or
    key by the angle m * base^(-2i / head_dim)."""
    frequency = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * frequency
    return angle.cos().float(), angle.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[..., 2i], x[..., 2i + 1]) of ``x`` (..., N, head_dim) by its position's angle;
    ``cos`` and ``sin`` are the N rows of :func:`rope_tables` for those positions, (N, head_dim / 2)."""
    work = torch.promote_types(x.dtype, torch.float32)  # 16-bit inputs are rotated in float32
    even, odd = x[..., 0::2].to(work), x[..., 1::2].to(work)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): a gated MLP. ``hidden`` is about 8/3 of the width, so that its three
    matrices cost what a GELU MLP's two of width 4 D cost."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    """Causal multi-head self-attention with rotary embeddings, and lecture 15's KV cache: a dict that keeps
    the (rotated) keys and values of the positions seen so far."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cos, sin, cache: dict | None = None):
        B, N, D = x.shape
        q, k, v = (t.reshape(B, N, self.n_heads, -1).transpose(1, 2) for t in self.qkv(x).split(D, dim=-1))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # position enters here, and only here
        past = 0
        if cache is not None:
            if cache:
                past = cache["k"].shape[2]
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        if past and N > 1:  # N new queries after a cache: query i sees the past and new keys 0..i
            mask = torch.ones(N, past + N, dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # no past: causal; one new token: it sees everything (is_causal would align top-left)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=N > 1)
        return self.out(y.transpose(1, 2).reshape(B, N, D))


class Block(nn.Module):
    """Pre-norm: x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""

    def __init__(self, d_model: int, n_heads: int, hidden: int):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.mlp = SwiGLU(d_model, hidden)

    def forward(self, x, cos, sin, cache=None):
        x = x + self.attn(self.norm1(x), cos, sin, cache)
        return x + self.mlp(self.norm2(x))


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 256
    hidden: int | None = None  # SwiGLU's width; None: 8/3 d_model rounded up to a multiple of 8

    @property
    def mlp_hidden(self) -> int:
        return self.hidden or -(-8 * self.d_model // 3 // 8) * 8


class LanguageModel(nn.Module):
    """Token embedding, ``n_layers`` blocks, a final RMSNorm, and the embedding matrix again as the output
    layer (weight tying): scores = h @ E^T. No position embedding: rotary embeddings act inside attention."""

    def __init__(self, config: LMConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(
            Block(config.d_model, config.n_heads, config.mlp_hidden) for _ in range(config.n_layers)
        )
        self.norm = RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.embed.weight  # one matrix, two uses
        cos, sin = rope_tables(config.d_model // config.n_heads, config.max_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for block in self.blocks:  # GPT-2: the residual branches' last layers shrink with depth
            for layer in (block.attn.out, block.mlp.down):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear) and module is not self.head:  # the head is the embedding
            nn.init.normal_(module.weight, std=0.02)
        # after the last RMSNorm each feature is about 1: embeddings of std 1/sqrt(D) start the scores near std 1.
        # The input token's own score starts near sqrt(D) (the last hidden state is mostly its embedding, rescaled),
        # so the untrained model predicts its input again: loss 8.0, not ln 512 = 6.2, for D = 64. GPT-2's 0.02
        # starts at ln V; after lecture 16's 200 steps neither ends lower at every width (measured, two seeds).
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=self.config.d_model**-0.5)

    def forward(self, idx: torch.Tensor, caches: list[dict] | None = None, start: int = 0) -> torch.Tensor:
        """``idx`` (B, N) token ids at positions start .. start + N - 1 -> scores (B, N, vocab_size)."""
        cos, sin = self.cos[start : start + idx.shape[1]], self.sin[start : start + idx.shape[1]]
        x = self.embed(idx)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, None if caches is None else caches[i])
        return self.head(self.norm(x))


def count_parameters(model: nn.Module, embedding: bool = True) -> int:
    """Parameters, each tensor once (a tied matrix counts once); without the embedding if asked."""
    unique = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in unique.values())
    return total if embedding else total - model.embed.weight.numel()


# ----------------------------------------------------------------------------- optimisation


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: matrices of linear layers decay; norms' weights, biases and embeddings do not.
    A tied matrix is an embedding and appears once."""
    no_decay = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding | RMSNorm | nn.LayerNorm):
            no_decay.update(id(p) for p in module.parameters(recurse=False))
        elif getattr(module, "bias", None) is not None:
            no_decay.add(id(module.bias))
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    return [
        {"params": [p for p in params if id(p) not in no_decay], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0},
    ]


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019), written out:

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t)
    p = p - lr * wd * p  (the decay, outside the gradient);  p = p - lr * m^ / (sqrt(v^) + eps)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                m, v, t = state["m"], state["v"], state["t"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.mul_(1 - lr * decay)
                denominator = (v / (1 - beta2**t)).sqrt_().add_(eps)
                p.addcdiv_(m, denominator, value=-lr / (1 - beta1**t))


def learning_rate(step: int, max_lr: float, warmup: int, total: int, min_lr: float = 0.0) -> float:
    """Linear warm-up from max_lr / warmup to max_lr over steps 0 .. warmup - 1, then a cosine from max_lr
    down to min_lr at step ``total`` (and min_lr after it)."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------- data, loss, evaluation


def random_windows(tokens: torch.Tensor, batch: int, context: int, generator: torch.Generator):
    """``batch`` windows of ``context`` tokens at random places, and the same shifted by one (the targets)."""
    starts = torch.randint(len(tokens) - context, (batch,), generator=generator)
    x = torch.stack([tokens[s : s + context] for s in starts])
    y = torch.stack([tokens[s + 1 : s + context + 1] for s in starts])
    return x, y


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the next token, in float32 even when the model ran under bfloat16 autocast."""
    scores = model(x)
    return F.cross_entropy(scores.float().flatten(0, 1), y.flatten())


@torch.no_grad()
def evaluate(model: nn.Module, tokens: torch.Tensor, context: int, batch: int = 32) -> float:
    """Mean loss per token over every whole window of ``context + 1`` tokens laid end to end, no overlap."""
    n = (len(tokens) - 1) // context
    x = tokens[: n * context].reshape(n, context)
    y = tokens[1 : n * context + 1].reshape(n, context)
    device = next(model.parameters()).device
    total = 0.0
    for i in range(0, n, batch):
        xb, yb = x[i : i + batch].to(device), y[i : i + batch].to(device)
        total += lm_loss(model, xb, yb).item() * len(xb)
    return total / n


@dataclass
class TrainRecord:
    """What :func:`train` measured: at each evaluation, the step, the tokens trained on and the losses."""

    steps: list[int]
    tokens: list[int]
    train_loss: list[float]  # mean of the steps since the previous evaluation
    val_loss: list[float]
    seconds: float  # training time, evaluations left out


def train(
    model: nn.Module,
    tokens: torch.Tensor,
    val_tokens: torch.Tensor,
    steps: int,
    batch: int,
    context: int,
    max_lr: float = 3e-3,
    warmup: int = 20,
    weight_decay: float = 0.1,
    accumulation: int = 1,
    autocast_dtype: torch.dtype | None = None,
    evaluations: int = 4,
    seed: int = 0,
) -> TrainRecord:
    """AdamW with parameter groups and the warm-up + cosine schedule; each step averages the gradients of
    ``accumulation`` micro-batches of ``batch`` windows; the forward pass runs under autocast when
    ``autocast_dtype`` is given (the weights and the optimiser stay float32, the loss is taken in float32);
    gradients clipped to norm 1. Validation loss (:func:`evaluate`) ``evaluations`` times, evenly spaced."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(parameter_groups(model, weight_decay), lr=max_lr, betas=(0.9, 0.95))
    record, window, seconds = TrainRecord([], [], [], [], 0.0), [], 0.0
    checkpoints = {round(steps * (i + 1) / evaluations) for i in range(evaluations)}
    for step in range(steps):
        start = time.perf_counter()
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, max_lr / 10)
        for _ in range(accumulation):
            x, y = (t.to(device) for t in random_windows(tokens, batch, context, generator))
            with torch.autocast(
                device.type, dtype=autocast_dtype or torch.float32, enabled=bool(autocast_dtype)
            ):
                loss = lm_loss(model, x, y) / accumulation  # the mean over all micro-batches, summed
            loss.backward()
            window.append(loss.item() * accumulation)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        seconds += time.perf_counter() - start
        if step + 1 in checkpoints:
            model.eval()
            record.steps.append(step + 1)
            record.tokens.append((step + 1) * accumulation * batch * context)
            record.train_loss.append(sum(window) / len(window))
            record.val_loss.append(evaluate(model, val_tokens, context))
            window = []
    record.seconds = seconds
    return record


def training_flops(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """FLOPs of one forward and backward pass on (x, y), counted by ``FlopCounterMode`` on a copy of the model
    on the ``meta`` device: shapes only, so it costs nothing, and attention is split into the matrix
    products the counter knows (on a CPU the fused attention kernel counts as 0). Element-wise operations
    (norms, activations, the softmax), a few percent here, are not counted."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    meta_model = copy.deepcopy(model).to("meta")
    with FlopCounterMode(display=False) as counter:
        lm_loss(meta_model, x.to("meta"), y.to("meta")).backward()
    return counter.get_total_flops()


# ----------------------------------------------------------------------------- sampling


def sampling_distribution(
    scores: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """Probabilities of the next token from the last dimension of ``scores``: divided by the temperature;
    only the ``top_k`` most likely kept; then only the smallest set of most likely tokens whose probability
    reaches ``top_p`` (the nucleus); renormalised. Ties at the cut are kept in ``torch.sort``'s order."""
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = torch.ones_like(sorted_probs, dtype=torch.bool)
    if top_k is not None:
        keep[..., top_k:] = False
    if top_p is not None:
        kept_probs = sorted_probs * keep
        before = kept_probs.cumsum(dim=-1) - kept_probs  # mass of the more likely tokens kept
        keep &= before < top_p * kept_probs.sum(dim=-1, keepdim=True)
    sorted_probs = sorted_probs * keep
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(dim=-1, keepdim=True)


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompt: Sequence[int],
    n_new: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
) -> list[int]:
    """``n_new`` tokens after ``prompt``, each drawn from :func:`sampling_distribution`. With the cache, each
    new token runs through the model alone; without it, the whole sequence runs again (same numbers, more
    work). The sequence must fit in ``model.config.max_len``. ``generator`` lives on the model's device."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=device)
    caches = [{} for _ in model.blocks] if use_cache else None
    scores = model(ids, caches)[0, -1]
    for _ in range(n_new):
        probs = sampling_distribution(scores, temperature, top_k, top_p)
        token = torch.multinomial(probs, 1, generator=generator)
        ids = torch.cat([ids, token[None]], dim=1)
        if use_cache:
            scores = model(token[None], caches, start=ids.shape[1] - 1)[0, -1]
        else:
            scores = model(ids)[0, -1]
    return ids[0, len(prompt) :].tolist()
