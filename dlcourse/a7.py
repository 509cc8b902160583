"""Measurements for assignment A7 (attention, from the equations to a fast decoder): what a call keeps in memory.

- :func:`largest_intermediate`: the most numbers that any one tensor created by a torch operation during a call
  holds, a bound on its working memory that does not depend on the machine or the allocator;
- :func:`saved_bytes`: the bytes a call keeps for its backward pass, through ``ctx.save_for_backward`` (counted with
  autograd's saved-tensor hooks) and in whatever the ``ctx`` of the output's ``grad_fn`` holds: tensors stored on it,
  and tensors inside the dicts, lists, tuples, sets and other objects stored on it, at any depth.

No solutions live here: both functions only observe the code they are given.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["largest_intermediate", "saved_bytes"]


def largest_intermediate(fn: Callable[[], object]) -> tuple[object, int]:
    """``(fn(), numbers)``: ``numbers`` is the largest ``numel()`` of any tensor that a torch operation returned
    while ``fn()`` ran (views included: a view of part of a tensor counts its own elements). Tensors that existed
    before the call (the inputs) are not counted unless an operation returns them again. Observed with a
    ``TorchDispatchMode``, below autograd: every operation on every device is seen, and nothing is computed twice.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Largest(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.numbers = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for item in tree_leaves(out):
                if isinstance(item, torch.Tensor):
                    self.numbers = max(self.numbers, item.numel())
            return out

    with Largest() as mode:
        result = fn()
    return result, mode.numbers


def saved_bytes(fn: Callable[[], object]) -> tuple[object, int]:
    """``(fn(), bytes)``: the bytes of the tensors that ``fn()`` keeps for the backward pass, each storage once
    (a view counts its whole buffer): those saved through autograd (``ctx.save_for_backward`` and the built-in
    operations' own saved tensors, seen by ``torch.autograd.graph.saved_tensors_hooks``), and every tensor the ``ctx``
    of the result's ``grad_fn`` holds: stored as an attribute (``ctx.weights = p`` keeps ``p`` alive as surely), or
    inside a dict, list, tuple, set or any other object stored on it, at any depth (``ctx.kept = {"p": p}``)."""
    import torch

    storages: dict[int, int] = {}

    def count(tensor) -> None:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()

    def pack(tensor):
        count(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = fn()
    outputs = result if isinstance(result, tuple | list) else [result]
    seen: set[int] = set()
    for output in outputs:
        node = getattr(output, "grad_fn", None)
        if node is not None:
            _held_tensors(getattr(node, "__dict__", {}), count, seen)
    return result, sum(storages.values())


def _held_tensors(value, count: Callable[[object], None], seen: set[int]) -> None:
    """``count`` every tensor that ``value`` holds: itself, the items of a container, the attributes of an object
    (classes, modules and functions are code, not data kept for backward: not entered), each object once."""
    import types

    import torch

    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        count(value)
    elif isinstance(value, dict):
        for item in value.values():
            _held_tensors(item, count, seen)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _held_tensors(item, count, seen)
    elif not isinstance(
        value, type | types.ModuleType | types.FunctionType | types.MethodType | types.BuiltinFunctionType
    ):
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            _held_tensors(attributes, count, seen)
