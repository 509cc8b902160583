"""A language model as plain data, and its loss on a text worked out from that data alone (numpy, float64).

A language model is graded by its loss (its perplexity, ``exp(loss)``) on a held-out text that the kernel never
receives, so a notebook cannot pass by fitting that text or by reporting a number: the kernel hands over the
trained weights as data, in the format below, and the grader works the loss out itself, in a process of its own
with capped memory and time (the evaluator of :mod:`autograder.grading.evaluate`, which already does this for
the models of :mod:`dlcourse.modeldata`). This module is that computation; nothing here imports torch.

The model is lecture 16's (:class:`dlcourse.lm.LanguageModel`): a token embedding, ``n_layers`` pre-norm blocks
(RMSNorm, causal multi-head attention with rotary position embeddings, RMSNorm, a SwiGLU MLP), a final RMSNorm,
and the embedding matrix again as the output layer. The data is one float64 vector::

    [MAGIC, vocab, d_model, n_layers, n_heads, hidden, max_len, rope_base, eps * 1e12, parameters...]

the parameters in this order, each row-major as torch stores it: the embedding (vocab, d_model); per block
``norm1`` (d_model), ``qkv`` (3 d_model, d_model), ``out`` (d_model, d_model), ``norm2`` (d_model), ``gate``
(hidden, d_model), ``up`` (hidden, d_model), ``down`` (d_model, hidden); the final norm (d_model).
"""

from __future__ import annotations

import math

import numpy as np

MAGIC = (
    16.0  # the vector's first number: lecture 16's model (a model_accuracy vector starts with its spec size)
)
HEADER = 9  # MAGIC and the eight settings
LIMITS = {"vocab": 65536, "d_model": 4096, "n_layers": 64, "n_heads": 64, "hidden": 16384, "max_len": 65536}
MAX_WORK = 4e9  # multiply-adds one evaluation may take (the grader's time); a model and text needing more are refused
MAX_ARRAY_BYTES = 64 * 2**20  # the largest array made while evaluating: windows go through a batch at a time


def lm_as_data(model) -> np.ndarray:
    """The vector of a :class:`dlcourse.lm.LanguageModel` (or any module with its parameters' names and
    config); TypeError for a model of another shape."""
    config = getattr(model, "config", None)
    names = ("vocab_size", "d_model", "n_layers", "n_heads", "max_len")
    if config is None or not all(hasattr(config, n) for n in names) or not hasattr(model, "blocks"):
        raise TypeError("the grader evaluates lecture 16's LanguageModel (an embedding, blocks, a tied head)")
    state = {k: v.detach().cpu().double().numpy() for k, v in model.state_dict().items()}
    eps = {float(m.eps) for m in model.modules() if type(m).__name__ == "RMSNorm"}
    if len(eps) != 1:
        raise TypeError("every RMSNorm of the model must have the same eps")
    hidden = state["blocks.0.mlp.gate.weight"].shape[0] if config.n_layers else 0
    parts = [state["embed.weight"]]
    for i in range(config.n_layers):
        prefix = f"blocks.{i}."
        for name in ("norm1.weight", "attn.qkv.weight", "attn.out.weight", "norm2.weight"):
            parts.append(state[prefix + name])
        for name in ("mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"):
            parts.append(state[prefix + name])
    parts.append(state["norm.weight"])
    base = float(getattr(model, "rope_base", 10000.0))
    header = [MAGIC, config.vocab_size, config.d_model, config.n_layers, config.n_heads, hidden]
    header += [config.max_len, base, eps.pop() * 1e12]
    return np.concatenate([np.array(header, dtype=np.float64), *(np.ravel(p) for p in parts)])


def decode_lm(value) -> tuple[dict, dict]:
    """``(settings, arrays)`` of a recorded vector: the settings by name, the arrays by their parameter's name
    (``embed``, ``blocks.0.qkv``, ..., ``norm``); ValueError, saying what is wrong, when it is not one."""
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind != "f" or value.size < HEADER or value[0] != MAGIC:
        raise ValueError("not a language model: expected one vector of numbers starting with its settings")
    head = value[:HEADER]
    if not np.all(np.isfinite(head)):
        raise ValueError("not a language model: its settings are not finite numbers")
    names = ("vocab", "d_model", "n_layers", "n_heads", "hidden", "max_len")
    settings = {}
    for name, number in zip(names, head[1:7]):
        if number != int(number) or not 1 <= number <= LIMITS[name]:
            raise ValueError(
                f"not a language model: {name} is {number:g}, not a whole number in 1..{LIMITS[name]}"
            )
        settings[name] = int(number)
    settings["rope_base"], settings["eps"] = float(head[7]), float(head[8]) / 1e12
    if not (1.0 < settings["rope_base"] <= 1e9 and 0.0 < settings["eps"] <= 1.0):
        raise ValueError("not a language model: its rotary base or its RMSNorm eps is out of range")
    d, heads = settings["d_model"], settings["n_heads"]
    if d % heads or (d // heads) % 2:
        raise ValueError(f"not a language model: d_model {d} over {heads} heads is not an even head width")
    shapes = parameter_shapes(settings)
    expected = sum(math.prod(shape) for shape in shapes.values())
    if value.size != HEADER + expected:
        raise ValueError(
            f"not a language model: its settings need {expected} parameters, the vector holds {value.size - HEADER}"
        )
    params = value[HEADER:]
    if not np.all(np.isfinite(params)):
        raise ValueError("the model's parameters are not all finite")
    arrays, at = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape)
        arrays[name] = params[at : at + size].reshape(shape)
        at += size
    return settings, arrays


def parameter_shapes(settings: dict) -> dict[str, tuple[int, ...]]:
    """Each parameter's name and shape, in the vector's order."""
    v, d, h = settings["vocab"], settings["d_model"], settings["hidden"]
    shapes: dict[str, tuple[int, ...]] = {"embed": (v, d)}
    for i in range(settings["n_layers"]):
        block = {"norm1": (d,), "qkv": (3 * d, d), "out": (d, d), "norm2": (d,), "gate": (h, d), "up": (h, d)}
        shapes.update({f"blocks.{i}.{name}": shape for name, shape in {**block, "down": (d, h)}.items()})
    shapes["norm"] = (d,)
    return shapes


def mean_loss(value, tokens, context: int) -> float:
    """Mean cross-entropy (nats) of each next token over every whole window of ``context + 1`` tokens of
    ``tokens`` laid end to end, no overlap, as :func:`dlcourse.lm.evaluate` computes it; perplexity is its
    ``exp``. ValueError for a vector that is no model, tokens it has no row for, a context longer than its
    ``max_len``, or a model and text that need more than :data:`MAX_WORK` multiply-adds."""
    settings, arrays = decode_lm(value)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise ValueError("tokens: expected one vector of token ids")
    if not 1 <= context <= settings["max_len"]:
        raise ValueError(f"a context of {context} tokens; the model takes 1 to {settings['max_len']}")
    n = (len(tokens) - 1) // context
    if n < 1:
        raise ValueError(f"{len(tokens)} tokens hold no window of {context + 1}")
    if tokens.min() < 0 or tokens.max() >= settings["vocab"]:
        raise ValueError(f"token ids must lie in 0..{settings['vocab'] - 1} (the model's vocabulary)")
    work = n * context * work_per_token(settings, context)
    if work > MAX_WORK:
        raise ValueError(
            f"the evaluation needs {work:.3g} multiply-adds, more than the grader's {MAX_WORK:.3g}"
        )
    x = tokens[: n * context].reshape(n, context)
    y = tokens[1 : n * context + 1].reshape(n, context)
    widest = max(
        settings["vocab"], settings["hidden"], 3 * settings["d_model"], settings["n_heads"] * context
    )
    batch = max(
        1, min(n, MAX_ARRAY_BYTES // (8 * context * widest))
    )  # (a window's largest array: its scores)
    total = 0.0
    for i in range(0, n, batch):
        total += float(token_losses(settings, arrays, x[i : i + batch], y[i : i + batch]).sum())
    return total / (n * context)


def work_per_token(settings: dict, context: int) -> float:
    """Multiply-adds of one token's forward pass: the blocks' products, attention over ``context``, the head."""
    d, h, layers = settings["d_model"], settings["hidden"], settings["n_layers"]
    return layers * (4 * d * d + 3 * d * h + 2 * context * d) + d * settings["vocab"]


def token_losses(settings: dict, arrays: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy of each next token ``y`` (B, N) after the tokens ``x`` (B, N), at positions 0..N-1."""
    eps, heads = settings["eps"], settings["n_heads"]
    b, n = x.shape
    d = settings["d_model"]
    cos, sin = _rope_tables(d // heads, n, settings["rope_base"])
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    hidden = arrays["embed"][x]  # (B, N, D)
    for i in range(settings["n_layers"]):
        p = {
            name: arrays[f"blocks.{i}.{name}"]
            for name in ("norm1", "qkv", "out", "norm2", "gate", "up", "down")
        }
        q, k, v = np.split(_rms(hidden, p["norm1"], eps) @ p["qkv"].T, 3, axis=-1)
        q, k, v = (t.reshape(b, n, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))  # (B, H, N, hd)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        scores[..., mask] = -np.inf
        attended = _softmax(scores) @ v  # (B, H, N, hd)
        hidden = hidden + attended.transpose(0, 2, 1, 3).reshape(b, n, d) @ p["out"].T
        normed = _rms(hidden, p["norm2"], eps)
        gate = normed @ p["gate"].T
        hidden = hidden + (gate / (1.0 + np.exp(-gate)) * (normed @ p["up"].T)) @ p["down"].T
    logits = _rms(hidden, arrays["norm"], eps) @ arrays["embed"].T  # (B, N, V): the tied head
    top = logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    return log_total - np.take_along_axis(logits, y[..., None], axis=-1)[..., 0]


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def _rope_tables(head_dim: int, length: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    frequency = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angle = np.arange(length, dtype=np.float64)[:, None] * frequency
    return np.cos(angle), np.sin(angle)


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)
