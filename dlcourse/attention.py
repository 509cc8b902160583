"""Measuring attention: FLOPs by module, which fused kernel ran, time per generated token, and offline text.

Lecture 15 (and the attention assignment) import these; the attention itself, its masks, heads and
positional encodings are written in the notebooks, where they are taught.

- :func:`flop_counts`       FLOPs of one call, per module, counted by ``torch.utils.flop_counter``
- :func:`attention_kernels` the attention operators a call ran (which backend of
  ``scaled_dot_product_attention`` was picked)
- :func:`per_token_times`   seconds for each step of a decoding loop, synchronised
- :func:`tensor_bytes`      bytes held by the tensors in a (nested) container, each storage once
- :func:`python_docs_text`  a few hundred kB of English text that ships with every Python
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable, Iterable

from dlcourse.device import synchronize


def flop_counts(fn: Callable[[], object]) -> dict[str, int]:
    """FLOPs of ``fn()``, per module: ``{"Global": total, "Block.attn": ..., "Block.attn.qkv": ...}``.

    A module's count includes its submodules' (``"Block"`` counts everything inside the block). Matrix
    products count 2 FLOPs per multiply-add. torch's counter knows the matrix products and the fused
    attention kernels of CUDA, but not the CPU's fused attention kernel, which it counts as 0: run ``fn``
    on the ``"meta"`` device (shapes only, no arithmetic, any size for free), where attention is split
    into the matrix products the counter knows.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}


def attention_kernels(fn: Callable[[], object]) -> list[str]:
    """Names of the attention operators that ``fn()`` ran, in the order first seen, from torch's profiler.

    ``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels: on a CPU
    ``aten::_scaled_dot_product_flash_attention_for_cpu`` (fused) or the math fallback
    (``aten::_scaled_dot_product_attention_math``, plain matrix products and a softmax); on CUDA
    FlashAttention (``..._flash_attention``), memory-efficient attention (``..._efficient_attention``)
    or cuDNN (``..._cudnn_attention``). The profiler's C++ library may print two lines on the terminal.
    """
    from torch.profiler import ProfilerActivity, profile

    # acc_events: one cycle, the same events; torch 2.11 warns without it that it clears them each cycle
    with profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:
        fn()
    names: list[str] = []
    for event in prof.events():
        if "attention" in event.name and event.name not in names:
            names.append(event.name)
    return names


def per_token_times(step: Callable[[int], object], n_tokens: int, device=None) -> list[float]:
    """Call ``step(i)`` for ``i = 0 .. n_tokens - 1`` and return each call's seconds, synchronising
    ``device`` after every call, so that a GPU's queued work is counted in the token that queued it."""
    synchronize(device)
    times = []
    for i in range(n_tokens):
        start = time.perf_counter()
        step(i)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def tensor_bytes(container) -> int:
    """Bytes of the torch tensors in ``container`` (a tensor, or lists, tuples and dicts of them),
    each storage counted once, whole (a view of part of a buffer counts the buffer)."""
    import torch

    storages: dict[int, int] = {}

    def visit(item) -> None:
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, dict):
            for value in item.values():
                visit(value)
        elif isinstance(item, list | tuple):
            for value in item:
                visit(value)

    visit(container)
    return sum(storages.values())


# Standard-library modules with long, plain-English documentation. The text differs a little between
# Python versions; every version has all of these.
DOC_MODULES = (
    "argparse",
    "collections",
    "functools",
    "itertools",
    "json",
    "logging",
    "os",
    "pathlib",
    "re",
    "string",
    "subprocess",
    "textwrap",
    "threading",
    "typing",
    "unittest",
)


def python_docs_text(modules: Iterable[str] = DOC_MODULES, max_chars: int | None = None) -> str:
    """The docstrings of ``modules`` and of their public classes, functions and methods, as one text
    of printable ASCII lines (other characters dropped), each docstring once. Offline: it reads the
    installed standard library, no download."""
    seen: set[str] = set()
    parts: list[str] = []

    def add(obj) -> None:
        # The object's own docstring: inspect.getdoc would borrow a missing one from base classes, where
        # another library may have put its own (TensorFlow does, on collections.abc).
        doc = inspect.cleandoc(obj.__doc__) if isinstance(obj.__doc__, str) else None
        if doc and doc not in seen:
            seen.add(doc)
            parts.append(doc)

    for name in modules:
        module = importlib.import_module(name)
        add(module)
        # The public names the module declares: what else sits in its namespace can depend on what the
        # program imported before (another module may add a name to it), and the text must not.
        for attribute in sorted(getattr(module, "__all__", None) or vars(module)):
            if attribute.startswith("_"):
                continue
            member = getattr(module, attribute, None)
            if getattr(member, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(member) or inspect.isfunction(member):
                add(member)
            if inspect.isclass(member):
                for method_name in sorted(vars(member)):
                    if not method_name.startswith("_") and inspect.isfunction(vars(member)[method_name]):
                        add(vars(member)[method_name])
    text = "\n\n".join(parts)
    text = "".join(ch for ch in text if ch == "\n" or 32 <= ord(ch) < 127)
    return text[:max_chars] if max_chars else text
