"""A language model as plain data, and its loss on a text worked out from that data alone (numpy, float64).

A language model is graded by its loss (its perplexity, ``exp(loss)``) on a held-out text that the kernel never
receives, so a notebook cannot pass by fitting that text or by reporting a number: the kernel hands over the
trained weights as data, in the format below, and the grader works the loss out itself, in a process of its own
with capped memory and time (the evaluator of :mod:`autograder.grading.evaluate`, which already does this for
the models of :mod:`dlcourse.modeldata`). This module is that computation; nothing here imports torch.

The model is lecture 16's (:class:`dlcourse.lm.LanguageModel`), or the same with grouped-query attention: a
token embedding, ``n_layers`` pre-norm blocks (RMSNorm, causal attention with rotary position embeddings,
RMSNorm, a SwiGLU MLP), a final RMSNorm, and the embedding matrix again as the output layer. Attention has
``n_heads`` query heads and ``n_kv_heads`` key and value heads (``n_kv_heads`` divides ``n_heads``; query head
``h`` reads key and value head ``h // (n_heads // n_kv_heads)``); lecture 16's model is the case
``n_kv_heads = n_heads``, its fused ``qkv`` matrix split into ``q`` (its first ``d_model`` rows) and ``kv``. The
data is one float64 vector::

    [MAGIC, vocab, d_model, n_layers, n_heads, n_kv_heads, hidden, max_len, rope_base, eps * 1e12, parameters...]

the parameters in this order, each row-major as torch stores it: the embedding (vocab, d_model); per block
``norm1`` (d_model), ``q`` (d_model, d_model), ``kv`` (2 n_kv_heads head_dim, d_model: the keys' rows, then the
values'; key head ``j`` is rows ``j head_dim`` to ``(j + 1) head_dim``), ``out`` (d_model, d_model), ``norm2``
(d_model), ``gate`` (hidden, d_model), ``up`` (hidden, d_model), ``down`` (d_model, hidden); the final norm
(d_model). ``head_dim`` is ``d_model / n_heads``.
"""

from __future__ import annotations

import math

import numpy as np

MAGIC = (
    16.0  # the vector's first number: lecture 16's model (a model_accuracy vector starts with its spec size)
)
SIZES = ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "hidden", "max_len")  # the header's order
HEADER = 3 + len(SIZES)  # MAGIC, the sizes, the rotary base and the RMSNorm eps
LIMITS = {"vocab": 65536, "d_model": 4096, "n_layers": 64, "n_heads": 64, "n_kv_heads": 64, "hidden": 16384,
          "max_len": 65536}  # fmt: skip
# a block's parameters, in the vector's order, and where the model keeps each (``q`` and ``kv``: see lm_as_data)
BLOCK = ("norm1", "q", "kv", "out", "norm2", "gate", "up", "down")
KEYS = {"norm1": "norm1.weight", "out": "attn.out.weight", "norm2": "norm2.weight", "gate": "mlp.gate.weight",
        "up": "mlp.up.weight", "down": "mlp.down.weight"}  # fmt: skip
MAX_WORK = 4e9  # multiply-adds one evaluation may take (the grader's time); a model and text needing more are refused
MAX_ARRAY_BYTES = 64 * 2**20  # the largest array made while evaluating: windows go through a batch at a time


def lm_as_data(model) -> np.ndarray:
    """The vector of a :class:`dlcourse.lm.LanguageModel`, or of a module laid out as it is with grouped-query
    attention (``attn.q`` and ``attn.kv`` in place of ``attn.qkv``, ``config.n_kv_heads``); TypeError, saying
    what is wrong, for a model of another shape."""
    config = getattr(model, "config", None)
    names = ("vocab_size", "d_model", "n_layers", "n_heads", "max_len")
    if config is None or not all(hasattr(config, n) for n in names) or not hasattr(model, "blocks"):
        raise TypeError("the grader evaluates lecture 16's LanguageModel (an embedding, blocks, a tied head)")
    state = {k: v.detach().cpu().double().numpy() for k, v in model.state_dict().items()}
    eps = {m.eps for m in model.modules() if type(m).__name__ == "RMSNorm"}
    if len(eps) != 1 or not isinstance(next(iter(eps)), int | float):
        raise TypeError("every RMSNorm of the model must have the same eps, a number")
    d, layers = int(config.d_model), int(config.n_layers)
    kv_heads = getattr(config, "n_kv_heads", None) or config.n_heads  # (lecture 16's LMConfig has none)
    hidden = (
        state["blocks.0.mlp.gate.weight"].shape[0] if layers and "blocks.0.mlp.gate.weight" in state else 0
    )
    settings = dict(
        zip(SIZES, (config.vocab_size, d, layers, config.n_heads, kv_heads, hidden, config.max_len))
    )
    parts = {"embed": state.get("embed.weight")}
    for i in range(layers):
        prefix = f"blocks.{i}."
        fused = state.get(prefix + "attn.qkv.weight")
        q = state.get(prefix + "attn.q.weight") if fused is None else fused[:d]
        kv = state.get(prefix + "attn.kv.weight") if fused is None else fused[d:]
        block = {name: state.get(prefix + key) for name, key in KEYS.items()} | {"q": q, "kv": kv}
        parts.update({f"{prefix}{name}": block[name] for name in BLOCK})
    parts["norm"] = state.get("norm.weight")
    try:
        shapes = parameter_shapes({k: int(v) for k, v in settings.items()})
    except (ZeroDivisionError, ValueError):
        shapes = {}
    wrong = [name for name, shape in shapes.items() if parts.get(name) is None or parts[name].shape != shape]
    if not shapes or wrong:
        raise TypeError(
            "the grader evaluates lecture 16's LanguageModel, or the same with grouped-query attention: "
            f"{(wrong or ['its sizes'])[0]} is not as its config says"
        )
    header = [MAGIC, *settings.values(), float(getattr(model, "rope_base", 10000.0)), float(eps.pop()) * 1e12]
    return np.concatenate([np.array(header, dtype=np.float64), *(np.ravel(parts[name]) for name in shapes)])


def decode_lm(value) -> tuple[dict, dict]:
    """``(settings, arrays)`` of a recorded vector: the settings by name, the arrays by their parameter's name
    (``embed``, ``blocks.0.norm1``, ``blocks.0.q``, ..., ``norm``); ValueError, saying what is wrong, when it
    is not one."""
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind != "f" or value.size < HEADER or value[0] != MAGIC:
        raise ValueError("not a language model: expected one vector of numbers starting with its settings")
    head = value[:HEADER]
    if not np.all(np.isfinite(head)):
        raise ValueError("not a language model: its settings are not finite numbers")
    settings = {}
    for name, number in zip(SIZES, head[1 : 1 + len(SIZES)]):
        if number != int(number) or not 1 <= number <= LIMITS[name]:
            raise ValueError(
                f"not a language model: {name} is {number:g}, not a whole number in 1..{LIMITS[name]}"
            )
        settings[name] = int(number)
    settings["rope_base"], settings["eps"] = float(head[-2]), float(head[-1]) / 1e12
    if not (1.0 < settings["rope_base"] <= 1e9 and 0.0 < settings["eps"] <= 1.0):
        raise ValueError("not a language model: its rotary base or its RMSNorm eps is out of range")
    d, heads, kv_heads = settings["d_model"], settings["n_heads"], settings["n_kv_heads"]
    if d % heads or (d // heads) % 2:
        raise ValueError(f"not a language model: d_model {d} over {heads} heads is not an even head width")
    if heads % kv_heads:
        raise ValueError(
            f"not a language model: {kv_heads} key and value heads do not divide its {heads} query heads"
        )
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
    kv = 2 * settings["n_kv_heads"] * (d // settings["n_heads"])
    block = {"norm1": (d,), "q": (d, d), "kv": (kv, d), "out": (d, d), "norm2": (d,), "gate": (h, d),
             "up": (h, d), "down": (d, h)}  # fmt: skip
    shapes: dict[str, tuple[int, ...]] = {"embed": (v, d)}
    for i in range(settings["n_layers"]):
        shapes.update({f"blocks.{i}.{name}": block[name] for name in BLOCK})
    shapes["norm"] = (d,)
    return shapes


def mean_loss(value, tokens, context: int) -> float:
    """Mean cross-entropy (nats) of each next token over every whole window of ``context + 1`` tokens of
    ``tokens`` laid end to end, no overlap, as :func:`dlcourse.lm.evaluate` computes it; perplexity is its
    ``exp``. ValueError for a vector that is no model, tokens it has no row for, a context longer than its
    ``max_len``, a model and text that need more than :data:`MAX_WORK` multiply-adds, or a window whose
    arrays would each be over :data:`MAX_ARRAY_BYTES`."""
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
    widest = max(
        settings["vocab"], settings["hidden"], 2 * settings["d_model"], settings["n_heads"] * context
    )
    window = 8 * context * widest  # a window's largest array: its scores, its logits or its MLP's middle
    if window > MAX_ARRAY_BYTES:
        raise ValueError(
            f"one window of {context} tokens takes an array of {window / 2**20:.0f} MB, more than the "
            f"grader's {MAX_ARRAY_BYTES // 2**20} MB"
        )
    x = tokens[: n * context].reshape(n, context)
    y = tokens[1 : n * context + 1].reshape(n, context)
    batch = max(1, min(n, MAX_ARRAY_BYTES // window))
    total = 0.0
    for i in range(0, n, batch):
        total += float(token_losses(settings, arrays, x[i : i + batch], y[i : i + batch]).sum())
    return total / (n * context)


def work_per_token(settings: dict, context: int) -> float:
    """Multiply-adds of one token's forward pass: the blocks' products (the queries, the fewer keys and values
    of grouped-query attention, the output, the MLP), attention over ``context``, the head."""
    d, h, layers = settings["d_model"], settings["hidden"], settings["n_layers"]
    kv = 2 * settings["n_kv_heads"] * (d // settings["n_heads"])
    return layers * (2 * d * d + kv * d + 3 * d * h + 2 * context * d) + d * settings["vocab"]


def token_losses(settings: dict, arrays: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy of each next token ``y`` (B, N) after the tokens ``x`` (B, N), at positions 0..N-1."""
    eps, heads, kv_heads = settings["eps"], settings["n_heads"], settings["n_kv_heads"]
    b, n = x.shape
    d = settings["d_model"]
    cos, sin = _rope_tables(d // heads, n, settings["rope_base"])
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    hidden = arrays["embed"][x]  # (B, N, D)
    for i in range(settings["n_layers"]):
        p = {name: arrays[f"blocks.{i}.{name}"] for name in BLOCK}
        normed = _rms(hidden, p["norm1"], eps)
        q = (normed @ p["q"].T).reshape(b, n, heads, -1).transpose(0, 2, 1, 3)  # (B, H, N, hd)
        k, v = (
            t.reshape(b, n, kv_heads, -1).transpose(0, 2, 1, 3) for t in np.split(normed @ p["kv"].T, 2, -1)
        )
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        group = heads // kv_heads  # each key and value head serves this many query heads, side by side
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
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
