"""Self-checks for lecture 16 (a language model end to end: rotary embeddings, top-p sampling, the schedule).

Rotary embeddings are compared with the same rotation written with complex numbers (a pair (a, b) is a + ib,
turned by multiplying with e^(i angle)), on several shapes, dtypes and non-contiguous positions, and the scores
of rotated queries and keys must depend on the offset only; top-p with a plain loop over each sorted row;
the warm-up and cosine schedule with torch's ``LinearLR`` and ``CosineAnnealingLR`` chained by
``SequentialLR`` on an optimiser. None of them uses ``dlcourse.lm``.
"""

from __future__ import annotations

import math

import numpy as np

from dlcourse.selfcheck import Checker


def _rotate_with_complex(x, positions, base):
    import torch

    d = x.shape[-1]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2)


def rotate(c: Checker, fn) -> None:
    """``fn(x, positions, base=10000.0)`` rotates each pair (x[..., 2i], x[..., 2i+1]) of the vector at position
    m (``x`` (..., N, d), ``positions`` N integers) by the angle m * base^(-2i / d) and returns x's shape and
    dtype."""
    import torch

    generator = torch.Generator().manual_seed(16)
    cases = (
        ((6, 8), torch.arange(6), 10000.0, torch.float64),
        ((2, 3, 5, 16), torch.arange(5), 10000.0, torch.float64),
        ((4, 6), torch.tensor([0, 5, 9, 100]), 10000.0, torch.float64),
        ((3, 7, 12), torch.arange(3, 10), 500.0, torch.float64),
        ((2, 9, 32), torch.arange(9), 10000.0, torch.float32),
    )
    for shape, positions, base, dtype in cases:
        x = torch.randn(shape, generator=generator, dtype=dtype)
        original = x.clone()
        expected = _rotate_with_complex(x, positions, base)
        label = f"x {tuple(shape)} {str(dtype)[6:]}, positions {positions.tolist()[:4]}..., base {base:g}"
        got = c.call(f"rotate with {label}", fn, x, positions, base)
        ok = c.close(
            f"{label}: each pair turned by position x base^(-2i/d)",
            got,
            expected.to(dtype),
            rtol=2e-5,  # angles in float32 (torch's default) are right too
            atol=2e-5,
            hint="pair i is (x[..., 2i], x[..., 2i+1]) (interleaved, not the two halves); its angle is "
            "m * base ** (-2i / d) with 2i = 0, 2, ..., d - 2; (a, b) -> (a cos - b sin, a sin + b cos)",
        )
        ok = ok and c.true(
            f"{label}: dtype {str(dtype)[6:]} kept, input unchanged",
            getattr(got, "dtype", None) == dtype and torch.equal(x, original),
            hint="return x's dtype (compute in float64 if you like, then .to(x.dtype)), and do not write into x",
        )
        if not ok:
            return
    q, k = torch.randn(2, 16, generator=generator, dtype=torch.float64)
    scores = []
    for m, n in ((3, 1), (40, 38), (200, 198)):
        rq = c.call("rotate on one query", fn, q[None], torch.tensor([m]))
        rk = c.call("rotate on one key", fn, k[None], torch.tensor([n]))
        scores.append(float((rq @ rk.T).item()))
    c.true(
        "a query at m and a key at n score the same for (3, 1), (40, 38), (200, 198): the offset only",
        max(scores) - min(scores) < 1e-4,
        hint=f"scores {scores}: the same rotation for queries and keys, by the position's angle",
    )


def _top_p_loop(row: np.ndarray, p: float) -> np.ndarray:
    out, mass = np.zeros_like(row), 0.0
    for index in np.argsort(-row, kind="stable"):
        if mass >= p:
            break
        out[index] = row[index]
        mass += row[index]
    return out / out.sum()


def top_p_filter(c: Checker, fn) -> None:
    """``fn(probs, p)`` keeps, in each row of ``probs`` (..., V), the smallest set of most likely tokens whose
    probabilities reach ``p``, renormalised; the rest 0."""
    import torch

    rng = np.random.default_rng(16)
    for shape in ((12,), (3, 20), (2, 2, 9)):
        rows = rng.dirichlet(np.full(shape[-1], 0.5), size=int(np.prod(shape[:-1]))).reshape(shape)
        first = np.sort(rows.reshape(-1, shape[-1]), axis=1)[:, -1].min()
        for p in (0.5, 0.9, 1.0, 0.5 * first):
            probs = torch.from_numpy(rows.copy())
            expected = np.stack([_top_p_loop(r, p) for r in rows.reshape(-1, shape[-1])]).reshape(shape)
            label = f"probs {shape}, p = {p:.3g}" + (
                " (the first token alone reaches it)" if p < first else ""
            )
            got = c.call(f"top_p_filter with {label}", fn, probs, p)
            got_array = got.detach().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
            ok = c.true(
                f"{label}: the kept set",
                got_array.shape == expected.shape and np.array_equal(got_array > 0, expected > 0),
                hint="sort each row in descending order; keep a token while the mass of the tokens before it "
                "is below p (the token that crosses p is kept); the first token is always kept",
            )
            ok = ok and c.close(
                f"{label}: renormalised to sum to 1",
                got,
                expected,
                rtol=1e-6,
                atol=1e-7,
                hint="divide by the kept mass",
            )
            if not ok:
                return


def _torch_schedule(max_lr, warmup, total, min_lr, n_steps):
    import warnings

    import torch

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=max_lr)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        optimizer,
        [
            torch.optim.lr_scheduler.LinearLR(optimizer, 1 / warmup, 1.0, total_iters=max(1, warmup - 1)),
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=min_lr),
        ],
        milestones=[warmup],
    )
    rates = []
    with warnings.catch_warnings():  # stepping the scheduler without an optimiser step is what we mean here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(n_steps):
            rates.append(optimizer.param_groups[0]["lr"])
            scheduler.step()
    return rates


def schedule(c: Checker, fn) -> None:
    """``fn(step, max_lr, warmup, total, min_lr)``: max_lr (step + 1) / warmup for step < warmup, then a cosine
    from max_lr to min_lr at step ``total``, min_lr after it."""
    for max_lr, warmup, total, min_lr in ((1e-2, 20, 300, 1e-3), (3e-4, 5, 40, 0.0), (1.0, 1, 10, 0.1)):
        expected = _torch_schedule(max_lr, warmup, total, min_lr, total + 1)
        expected += [min_lr] * 3  # past the end: the floor
        label = f"max_lr {max_lr:g}, warm-up {warmup}, total {total}, min_lr {min_lr:g}"
        got = [
            c.call(f"schedule at step {t} with {label}", fn, t, max_lr, warmup, total, min_lr)
            for t in range(total + 4)
        ]
        ok = c.close(
            f"{label}: steps 0 to {total + 3} as torch's LinearLR then CosineAnnealingLR",
            np.array(got, dtype=float),
            np.array(expected),
            rtol=1e-7,
            atol=1e-12,
            hint="warm-up: max_lr * (step + 1) / warmup (step 0 is not 0); then min_lr + (max_lr - min_lr) * "
            "(1 + cos(pi * (step - warmup) / (total - warmup))) / 2, held at min_lr from step total on",
        )
        if not ok:
            return
    c.true(
        "returns a plain number",
        isinstance(fn(3, 1e-2, 2, 10, 0.0), float | int) and math.isfinite(fn(3, 1e-2, 2, 10, 0.0)),
    )
