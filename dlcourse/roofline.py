"""Attention on the roofline: the bytes it moves, counted and measured, and a CPU roofline with its spread.

Lecture 15 imports these. One head, N queries and keys, head size d, ``element_bytes`` bytes a number:

- :func:`attention_flops`        the FLOPs of ``Q K^T`` and ``A V``: ``4 N^2 d``
- :func:`naive_attention_bytes`  ``passes`` trips over the N x N scores (six: see the lecture) plus Q, K, V, O
- :func:`fused_attention_bytes`  a FlashAttention-style kernel: Q and O once, K and V once per query tile
- :func:`operator_traffic`       bytes each torch operator of a call reads and writes, and its matrix-product FLOPs
- :func:`tiled_attention`        attention as a loop over query tiles and key tiles (online softmax), counting the
  bytes it loads from Q, K, V and stores to O
- :func:`cpu_roofline_rounds`    the CPU's matrix-product rate and copy bandwidth, measured in interleaved rounds
- :func:`verdict`                compute-bound, memory-bound, or undecided when the ridge's spread contains the intensity
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def attention_flops(n: int, d: int, heads: int = 1) -> int:
    """FLOPs of the scores ``Q K^T`` and the weighted sum ``A V``: two (N x d)(d x N)-sized products per head."""
    return heads * 4 * n * n * d


def naive_attention_bytes(n: int, d: int, element_bytes: int, passes: int = 6, heads: int = 1) -> int:
    """Bytes naive attention moves through main memory: ``passes`` reads or writes of the N x N scores
    (write ``S = Q K^T``; read S and write ``S / sqrt(d)``; read it and write ``A = softmax``; read A in ``A V``),
    plus reading Q, K, V and writing O once."""
    return heads * element_bytes * (passes * n * n + 4 * n * d)


def fused_attention_bytes(n: int, d: int, element_bytes: int, tile: int, heads: int = 1) -> int:
    """Bytes a fused kernel moves when each query tile of ``tile`` rows is loaded once, writes its rows of O once,
    and streams all of K and V through on-chip memory: ``b (2 N d + 2 N d ceil(N / tile))``. FlashAttention-2's
    loop order; FlashAttention's first version swaps the loops (K and V once, Q and O once per key tile of
    ``ceil(M / 4d)`` rows, Algorithm 1), and both are Theta(N^2 d^2 / M) for on-chip memory M (Dao et al. 2022,
    Theorem 2). Left out: the one float32 logsumexp per row a training kernel also writes (4 N bytes)."""
    query_tiles = math.ceil(n / tile)
    return heads * element_bytes * (2 * n * d + 2 * n * d * query_tiles)


@dataclass(frozen=True)
class OperatorTraffic:
    """One torch operator: its name, the bytes it read and wrote, and its matrix-product FLOPs (0 for others)."""

    name: str
    read: int
    written: int
    flops: int


def _views_without_alias_info():
    import torch

    # matmul reshapes its result back with _unsafe_view: a view whose schema does not say so
    return (torch.ops.aten._unsafe_view,)


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def operator_traffic(fn: Callable[[], object], memory: Sequence | None = None) -> list[OperatorTraffic]:
    """Run ``fn()`` and record, for every aten operator it calls that is not a view, the bytes of its tensor
    arguments (read) and results or written arguments (written), and the FLOPs of ``mm``/``bmm``.

    With ``memory`` (a list of tensors standing for main memory), only tensors that share storage with one of them
    count: the traffic of a tiled kernel, whose tiles in between stay on chip. That mode needs real tensors (CPU);
    without it, the ``meta`` device (shapes only) counts any size for free."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    storages = None if memory is None else {t.untyped_storage().data_ptr() for t in memory}

    def counted(t) -> bool:
        return isinstance(t, torch.Tensor) and (
            storages is None or t.untyped_storage().data_ptr() in storages
        )

    records: list[OperatorTraffic] = []
    unaliased_views = _views_without_alias_info()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            schema = func._schema
            view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
            if view or func.overloadpacket in unaliased_views:
                return out  # a view: it moves no bytes
            read = written = 0
            # positional arguments in order, then keyword-only ones (``out=``) by name: a written argument,
            # ``self`` of an in-place operator or an ``out=`` tensor, counts as written, every other as read
            values = list(zip(schema.arguments, args)) + [
                (argument, kwargs[argument.name]) for argument in schema.arguments if argument.name in kwargs
            ]
            for argument, value in values:
                for t in tree_flatten(value)[0]:
                    if counted(t):
                        if argument.alias_info is not None and argument.alias_info.is_write:
                            written += _nbytes(t)
                        else:
                            read += _nbytes(t)
            if not any(
                r.alias_info is not None for r in schema.returns
            ):  # fresh results, not written arguments
                written += sum(_nbytes(t) for t in tree_flatten(out)[0] if counted(t))
            flops = 0
            if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm):
                a, b = args[0], args[1]
                flops = 2 * a.numel() * b.shape[-1]
            if read or written or flops:
                records.append(
                    OperatorTraffic(str(func.overloadpacket).removeprefix("aten."), read, written, flops)
                )
            return out

    with Recorder():
        fn()
    return records


def tiled_attention(q, k, v, tile: int):
    """Attention ``softmax(q k^T / sqrt(d)) v`` for q, k, v of shape (..., N, d), computed as a FlashAttention-2
    kernel orders it: for each tile of ``tile`` query rows, stream K and V in tiles of ``tile`` rows, keep a
    running maximum ``m``, a running denominator and an output accumulator (the online softmax), and
    write the tile's rows of the output once.

    Returns ``(output, traffic)``: ``traffic`` is :func:`operator_traffic`'s records of the bytes read from q, k, v
    and written to the output (main memory); what the loop keeps in between (a score tile, the running maximum and denominator, the accumulator)
    is the kernel's on-chip memory and is not counted."""
    import torch

    n, d = q.shape[-2], q.shape[-1]
    out = torch.empty_like(q)
    inside = torch.promote_types(q.dtype, torch.float32)  # 16-bit in, float32 inside

    def loop():
        for start in range(0, n, tile):
            q_tile = q[..., start : start + tile, :] / d**0.5  # read once per query tile
            m = torch.full(q_tile.shape[:-1] + (1,), float("-inf"), dtype=inside)
            denominator = torch.zeros_like(m)
            acc = torch.zeros(q_tile.shape, dtype=inside)
            for key_start in range(0, n, tile):  # all of K and V, once per query tile
                scores = (q_tile @ k[..., key_start : key_start + tile, :].transpose(-2, -1)).to(inside)
                m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
                p = torch.exp(scores - m_new)
                correction = torch.exp(m - m_new)
                denominator = denominator * correction + p.sum(dim=-1, keepdim=True)
                acc = acc * correction + p.to(v.dtype) @ v[..., key_start : key_start + tile, :]
                m = m_new
            out[..., start : start + tile, :] = (acc / denominator).to(out.dtype)  # written once

    threads = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # tiles this small gain nothing from a second thread, and wait for it on a busy machine
    try:
        return out, operator_traffic(loop, memory=[q, k, v, out])
    finally:
        torch.set_num_threads(threads)


def cpu_roofline_rounds(
    n: int = 1024, copy_bytes: int = 64 * 2**20, rounds: int = 15, warmup: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """The CPU's float32 matrix-product rate (torch, n x n) and main-memory bandwidth (a numpy copy that reads and
    writes ``copy_bytes``), measured in ``rounds`` interleaved rounds (one product, then one copy), so that a burst
    of load from other programs falls on both. Returns two arrays, FLOP/s and bytes/s, one entry per round.

    A copy's bytes are counted as STREAM counts its Copy kernel: ``copy_bytes`` read plus ``copy_bytes`` written
    (a large contiguous numpy copy is a ``memmove``, whose stores bypass the cache, so no extra read of the
    destination happens), the same convention as the attention counts: bytes read plus bytes written."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    src = np.ones(copy_bytes // 8)
    dst = np.empty_like(src)
    for _ in range(warmup):
        a @ b
        np.copyto(dst, src)
    flops, bandwidth = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        a @ b
        flops.append(2 * n**3 / (time.perf_counter() - start))
        start = time.perf_counter()
        np.copyto(dst, src)
        bandwidth.append(2 * src.nbytes / (time.perf_counter() - start))
    return np.array(flops), np.array(bandwidth)


@dataclass(frozen=True)
class Ridge:
    """The ridge point (FLOP/byte) of each measured round: its median and the range every round fell in."""

    rounds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.rounds)

    @property
    def low(self) -> float:
        return min(self.rounds)

    @property
    def high(self) -> float:
        return max(self.rounds)


def verdict(intensity: float, ridge: Ridge | float) -> str:
    """'compute-bound' above every round's ridge, 'memory-bound' below every one, 'undecided' in between.
    A published ridge (a float) has no spread."""
    low, high = (ridge, ridge) if isinstance(ridge, float | int) else (ridge.low, ridge.high)
    if intensity > high:
        return "compute-bound"
    if intensity < low:
        return "memory-bound"
    return "undecided"
