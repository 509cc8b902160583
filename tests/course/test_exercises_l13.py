"""Lecture 13's self-checks reject wrong answers and stubs, and accept right answers in other forms (a numpy
convolution, scikit-learn's split).

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dlcourse import check


def stub(*_args):
    raise NotImplementedError


# conv2d


def conv2d_loops(x, weight, bias, stride=1, padding=0):
    """A right answer by loops over the output positions, in numpy: float64 arrays, not tensors."""
    x = np.pad(x.numpy(), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    w, b = weight.numpy(), bias.numpy()
    kh, kw = w.shape[2:]
    out_h, out_w = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.empty((x.shape[0], w.shape[0], out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            patch = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    return out


def test_conv2d_accepts_a_numpy_answer():
    assert check("l13.conv2d", conv2d_loops, show=False).passed


def flipped_kernel(x, weight, bias, stride=1, padding=0):  # a textbook convolution, not conv2d's
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    patches = F.unfold(F.pad(x, (padding,) * 4), (kh, kw), stride=stride)
    out = weight.flip(2, 3).reshape(out_channels, -1) @ patches + bias[:, None]
    return out.reshape(n, out_channels, out_h, out_w)


def no_bias(x, weight, bias, stride=1, padding=0):
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    patches = F.unfold(F.pad(x, (padding,) * 4), (kh, kw), stride=stride)
    return (weight.reshape(out_channels, -1) @ patches).reshape(n, out_channels, out_h, out_w)


def ignores_the_stride(x, weight, bias, stride=1, padding=0):
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = h + 2 * padding - kh + 1, w + 2 * padding - kw + 1
    patches = F.unfold(F.pad(x, (padding,) * 4), (kh, kw))
    out = weight.reshape(out_channels, -1) @ patches + bias[:, None]
    return out.reshape(n, out_channels, out_h, out_w)


def ignores_the_padding(x, weight, bias, stride=1, padding=0):
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = (h - kh) // stride + 1, (w - kw) // stride + 1
    patches = F.unfold(x, (kh, kw), stride=stride)
    out = weight.reshape(out_channels, -1) @ patches + bias[:, None]
    return out.reshape(n, out_channels, out_h, out_w)


def one_position_short(x, weight, bias, stride=1, padding=0):  # forgets the + 1: a row and a column short
    x = F.pad(x, (padding,) * 4)
    kh, kw = weight.shape[2:]
    out_h, out_w = (x.shape[2] - kh) // stride, (x.shape[3] - kw) // stride
    out = torch.empty(x.shape[0], weight.shape[0], out_h, out_w, dtype=x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            patch = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = torch.einsum("nchw,ochw->no", patch, weight) + bias
    return out


def in_place_padding(x, weight, bias, stride=1, padding=0):  # right numbers, but x's border zeroed after
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    patches = F.unfold(F.pad(x, (padding,) * 4), (kh, kw), stride=stride)
    out = weight.reshape(out_channels, -1) @ patches + bias[:, None]
    x[..., :padding, :] = 0
    x[..., : min(padding, 1)] = 0
    return out.reshape(n, out_channels, out_h, out_w)


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        flipped_kernel,
        no_bias,
        ignores_the_stride,
        ignores_the_padding,
        one_position_short,
        in_place_padding,
    ],
    ids=["stub", "flipped-kernel", "no-bias", "no-stride", "no-padding", "too-small", "in-place"],
)
def test_conv2d_fails_wrong_answers(wrong):
    assert not check("l13.conv2d", wrong, show=False).passed


# early_stopping


def last_of_ties(val_losses, patience):
    best = len(val_losses) - 1 - int(np.argmin(val_losses[::-1]))
    return best, len(val_losses) - 1 - best >= patience


def against_previous_epoch(val_losses, patience):  # stops after `patience` epochs that each got worse
    worse = 0
    for previous, loss in zip(val_losses, val_losses[1:]):
        worse = worse + 1 if loss >= previous else 0
    return int(np.argmin(val_losses)), worse >= patience


def sorts_in_place(val_losses, patience):
    best = int(np.argmin(val_losses))
    val_losses.sort()
    return best, len(val_losses) - 1 - best >= patience


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        last_of_ties,
        against_previous_epoch,
        sorts_in_place,
        lambda v, p: (int(np.argmin(v)), len(v) - 1 - int(np.argmin(v)) > p),  # one epoch late
        lambda v, p: (int(np.argmax(v)), len(v) - 1 - int(np.argmax(v)) >= p),  # the worst epoch
        lambda v, p: (int(np.argmin(v)), int(len(v) - 1 - int(np.argmin(v)) >= p)),  # 0 or 1, not a bool
        lambda v, p: int(np.argmin(v)),  # forgets whether to stop
    ],
    ids=["stub", "last-of-ties", "previous-epoch", "sorts", "one-late", "argmax", "int-flag", "one-value"],
)
def test_early_stopping_fails_wrong_answers(wrong):
    assert not check("l13.early_stopping", wrong, show=False).passed


# stratified_split


def stratified_split_sklearn(labels, fractions, seed):
    """A right answer with scikit-learn, which rounds the parts' sizes its own way."""
    from sklearn.model_selection import train_test_split

    everything = np.arange(len(labels))
    train, rest = train_test_split(everything, train_size=fractions[0], stratify=labels, random_state=seed)
    val_share = fractions[1] / (fractions[1] + fractions[2])
    val, test = train_test_split(rest, train_size=val_share, stratify=labels[rest], random_state=seed)
    return train, val, test


def test_stratified_split_accepts_scikit_learns_split():
    assert check("l13.stratified_split", stratified_split_sklearn, show=False).passed


def not_stratified(labels, fractions, seed):
    order = np.random.default_rng(seed).permutation(len(labels))
    n_train, n_val = round(fractions[0] * len(labels)), round(fractions[1] * len(labels))
    return np.split(order, [n_train, n_val + n_train])


def overlapping(labels, fractions, seed):  # validation and test drawn independently of each other
    rng = np.random.default_rng(seed)
    train, rest = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_train = round(fractions[0] * len(members))
        train.append(members[:n_train])
        rest.append(members[n_train:])
    rest = np.concatenate(rest)
    n_val = round(fractions[1] * len(labels))
    val = rng.choice(rest, n_val, replace=False)
    return np.concatenate(train), val, rng.choice(rest, len(rest) - n_val, replace=False)


def drops_leftovers(labels, fractions, seed):  # int() rounds each part down: the remainder is in no part
    rng = np.random.default_rng(seed)
    parts = ([], [], [])
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_train, n_val, n_test = (int(f * len(members)) for f in fractions)
        cuts = np.split(members, [n_train, n_train + n_val, n_train + n_val + n_test])[:3]
        for part, chunk in zip(parts, cuts):
            part.append(chunk)
    return tuple(np.concatenate(part) for part in parts)


def seed_ignored(labels, fractions, seed):
    rng = np.random.default_rng(0)
    parts = ([], [], [])
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_train, n_val = round(fractions[0] * len(members)), round(fractions[1] * len(members))
        for part, chunk in zip(parts, np.split(members, [n_train, n_train + n_val])):
            part.append(chunk)
    return tuple(np.concatenate(part) for part in parts)


def unseeded(labels, fractions, seed):
    rng = np.random.default_rng()
    parts = ([], [], [])
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_train, n_val = round(fractions[0] * len(members)), round(fractions[1] * len(members))
        for part, chunk in zip(parts, np.split(members, [n_train, n_train + n_val])):
            part.append(chunk)
    return tuple(np.concatenate(part) for part in parts)


def shuffles_the_labels(labels, fractions, seed):  # a right split, then the caller's labels shuffled
    rng = np.random.default_rng(seed)
    parts = ([], [], [])
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_train, n_val = round(fractions[0] * len(members)), round(fractions[1] * len(members))
        for part, chunk in zip(parts, np.split(members, [n_train, n_train + n_val])):
            part.append(chunk)
    rng.shuffle(labels)
    return tuple(np.concatenate(part) for part in parts)


@pytest.mark.parametrize(
    "wrong",
    [stub, not_stratified, overlapping, drops_leftovers, seed_ignored, unseeded, shuffles_the_labels],
    ids=[
        "stub",
        "not-stratified",
        "overlapping",
        "drops-leftovers",
        "seed-ignored",
        "unseeded",
        "shuffles-labels",
    ],
)
def test_stratified_split_fails_wrong_answers(wrong):
    assert not check("l13.stratified_split", wrong, show=False).passed
