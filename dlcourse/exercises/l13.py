"""Self-checks for lecture 13 (training that generalises: convolution, early stopping, data splits).

A convolution by hand is compared with ``torch.nn.functional.conv2d`` on random inputs; an early-stopping
rule with validation histories whose answers are worked out in the check; a stratified split with the
properties that define one (no overlap, nothing left out, every class in its share, a seed that matters).
"""

from __future__ import annotations

import numpy as np

from dlcourse.closeness import to_numpy
from dlcourse.selfcheck import Checker


def conv2d(c: Checker, fn) -> None:
    """``fn(x, weight, bias, stride, padding)`` returns the cross-correlation that ``F.conv2d`` computes:
    ``x`` (N, C_in, H, W), ``weight`` (C_out, C_in, kH, kW), ``bias`` (C_out,), the same ``stride`` and
    zero ``padding`` (ints) in both directions; the result has shape (N, C_out, H_out, W_out) with
    ``H_out = (H + 2 * padding - kH) // stride + 1`` (and ``W_out`` alike)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(13)
    for n, c_in, h, w, c_out, kh, kw, stride, padding in (
        (1, 1, 5, 5, 1, 3, 3, 1, 0),
        (2, 3, 7, 6, 4, 3, 3, 1, 0),
        (2, 3, 7, 6, 4, 3, 3, 2, 1),
        (3, 2, 6, 8, 5, 2, 3, 1, 1),
        (1, 2, 9, 9, 3, 3, 3, 3, 2),
    ):
        x = torch.randn(n, c_in, h, w, generator=generator, dtype=torch.float64)
        weight = torch.randn(c_out, c_in, kh, kw, generator=generator, dtype=torch.float64)
        bias = torch.randn(c_out, generator=generator, dtype=torch.float64)
        originals = [t.clone() for t in (x, weight, bias)]
        expected = F.conv2d(x, weight, bias, stride=stride, padding=padding)
        label = f"x {tuple(x.shape)}, weight {tuple(weight.shape)}, stride {stride}, padding {padding}"
        got = c.call(f"conv2d with {label}", fn, x, weight, bias, stride, padding)
        ok = c.close(
            f"{label}: the same numbers as F.conv2d, shape {tuple(expected.shape)}",
            got,
            expected,
            rtol=1e-9,
            atol=1e-9,
            hint="slide the kernel without flipping it (deep learning's 'convolution' is a cross-correlation), "
            "add the bias, pad with zeros on all four sides, and step by the stride",
        )
        c.true(
            f"{label}: the inputs are left unchanged",
            all(torch.equal(a, b) for a, b in zip((x, weight, bias), originals)),
            hint="pad a copy (F.pad) instead of writing into x",
        )
        if not ok:
            return
    c.true(
        "the result is a torch tensor or a numpy array",
        isinstance(got, torch.Tensor | np.ndarray),
        hint=f"got {type(got).__name__}",
    )


def _as_int(value) -> int | None:
    try:
        number = float(to_numpy(value))
    except (TypeError, ValueError):
        return None
    return int(number) if number == int(number) else None


def early_stopping(c: Checker, fn) -> None:
    """``fn(val_losses, patience)`` takes the validation losses of the epochs so far (a list, oldest first)
    and returns ``(best_epoch, stop)``: the index of the epoch with the lowest loss (the earliest, if several
    are equally low: a tie is no improvement), and whether to stop, that is whether the last ``patience``
    epochs all came after the best one."""
    cases = (
        ([0.9], 3, 0, False),
        ([1.0, 0.8, 0.7, 0.6], 2, 3, False),
        ([1.0, 0.8, 0.9, 0.85], 2, 1, True),
        ([1.0, 0.8, 0.9, 0.85], 3, 1, False),
        ([1.0, 0.8, 0.8, 0.8], 2, 1, True),  # a tie is no improvement
        ([1.0, 0.5, 0.9, 0.8, 0.7], 3, 1, True),  # improving on the previous epoch is not enough
        ([1.0, 0.5, 0.9, 0.8, 0.7], 4, 1, False),
        ([2.0, 1.5, 1.7, 1.4, 1.6, 1.8, 1.9], 3, 3, True),
        ([0.3, 0.4, 0.5], 1, 0, True),
        ([0.3, 0.4, 0.5], 5, 0, False),
    )
    for losses, patience, best, stop in cases:
        history = list(losses)
        result = c.call(f"early_stopping({losses}, patience={patience})", fn, history, patience)
        if not c.true(
            f"{losses}, patience {patience}: returns a pair (best_epoch, stop)",
            isinstance(result, list | tuple) and len(result) == 2,
            hint="return two values: the best epoch's index and True or False",
        ):
            return
        got_best, got_stop = result
        c.true(
            f"{losses}, patience {patience}: best epoch {best}, stop {stop}",
            _as_int(got_best) == best and isinstance(got_stop, bool | np.bool_) and bool(got_stop) == stop,
            hint=f"got ({got_best!r}, {got_stop!r}); count the epochs since the best one, "
            "and keep the first of equally low losses",
        )
        c.true(
            f"{losses}, patience {patience}: the history passed in is left unchanged",
            history == list(losses),
            hint="do not sort or change the list you are given",
        )


def _split_problems(labels: np.ndarray, fractions, parts) -> list[str]:
    """What is wrong with ``parts`` as a stratified split of ``labels`` into ``fractions``: no overlap,
    nothing left out, and each class's count in each part less than 2 from its exact share."""
    n = len(labels)
    if not (isinstance(parts, list | tuple) and len(parts) == 3):
        return ["return three index arrays: (train, validation, test)"]
    try:
        arrays = [np.asarray(to_numpy(p)).reshape(-1) for p in parts]
    except (TypeError, ValueError) as err:
        return [f"the parts could not be read as index arrays ({err})"]
    if not all(a.dtype.kind in "iu" for a in arrays):
        return [f"the indices must be integers, got dtypes {[str(a.dtype) for a in arrays]}"]
    joined = np.concatenate(arrays)
    problems = []
    if len(np.unique(joined)) != len(joined):
        problems.append("some example is in two parts, or twice in one: the parts must not overlap")
    if joined.size and (joined.min() < 0 or joined.max() >= n):
        problems.append(f"indices must lie in 0..{n - 1}")
    elif set(joined.tolist()) != set(range(n)):
        problems.append(f"{n - len(set(joined.tolist()))} examples are in no part: every one must be in one")
    if not problems:
        for name, part, fraction in zip(("train", "validation", "test"), arrays, fractions):
            for label in np.unique(labels):
                count, share = int(np.sum(labels[part] == label)), fraction * np.sum(labels == label)
                if abs(count - share) >= 2:
                    problems.append(
                        f"class {label} has {count} examples in the {name} part, its share is {share:g}: "
                        "split each class on its own"
                    )
                    return problems
    return problems


def stratified_split(c: Checker, fn) -> None:
    """``fn(labels, fractions, seed)`` returns ``(train, val, test)``: integer index arrays that together hold
    every index of ``labels`` exactly once, with each class split in the proportions ``fractions`` (a triple
    that sums to 1; each class's count in each part less than 2 from its exact share), in an order drawn from
    ``seed``: the same seed gives the same split, another seed another one."""
    rng = np.random.default_rng(13)
    unbalanced = rng.permutation(np.repeat([0, 1, 2], [600, 300, 100]))
    balanced = rng.permutation(np.arange(120) % 4)
    splits = {}
    for name, labels, fractions, seed in (
        ("1,000 labels in classes of 600, 300 and 100", unbalanced, (0.6, 0.2, 0.2), 0),
        ("1,000 labels in classes of 600, 300 and 100", unbalanced, (0.6, 0.2, 0.2), 1),
        ("1,000 labels in classes of 600, 300 and 100", unbalanced, (0.5, 0.25, 0.25), 0),
        ("120 labels in 4 classes of 30", balanced, (0.7, 0.15, 0.15), 5),
    ):
        original = labels.copy()
        label = f"{name}, fractions {fractions}, seed {seed}"
        parts = c.call(f"stratified_split of {label}", fn, labels, fractions, seed)
        problems = _split_problems(labels, fractions, parts)
        if not c.true(f"{label}: a stratified split", not problems, hint="; ".join(problems)):
            return
        c.true(
            f"{label}: the labels passed in are left unchanged",
            np.array_equal(labels, original),
            hint="shuffle indices, not the labels array",
        )
        splits[(name, fractions, seed)] = [np.asarray(to_numpy(p)).reshape(-1) for p in parts]
    key = ("1,000 labels in classes of 600, 300 and 100", (0.6, 0.2, 0.2), 0)
    again = [
        np.asarray(to_numpy(p)).reshape(-1) for p in c.call("the same split again", fn, unbalanced, *key[1:])
    ]
    c.true(
        "the same labels, fractions and seed give the same split",
        all(np.array_equal(a, b) for a, b in zip(again, splits[key])),
        hint="draw every random number from a generator made from the seed, np.random.default_rng(seed)",
    )
    other = splits[(key[0], key[1], 1)]
    c.true(
        "another seed gives another split",
        not all(np.array_equal(np.sort(a), np.sort(b)) for a, b in zip(other, splits[key])),
        hint="shuffle each class's indices with the seeded generator before cutting them into parts",
    )
