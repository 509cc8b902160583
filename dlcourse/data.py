"""Offline data for lectures, assignments and tests.

- The 8x8 handwritten digits that ship with scikit-learn (1,797 images, 10 classes): arrays, a torch
  ``Dataset`` and a ``tf.data.Dataset``, always the same split.
- The lectures' running example: random inputs and targets for the two-layer net,
  ``N, D_in, H, D_out = 64, 1000, 100, 10``.
- Generated images of four shapes (lecture 13): random position, size, rotation and noise, any number of them,
  the same for the same seed.
- Optional downloads (MNIST on Colab), cached and checked against a SHA-256, that fall back to the
  digits with a clear message when there is no network.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

# The running example's sizes: batch, input, hidden and output dimension.
N, D_IN, H, D_OUT = 64, 1000, 100, 10


@dataclass(frozen=True)
class Split:
    """A fixed train/test split: ``X_train`` (n, 64) float32 in [0, 1], ``y_train`` (n,) int64, ..."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


@lru_cache(maxsize=4)
def load_digits_split(test_fraction: float = 0.25, seed: int = 0) -> Split:
    """The scikit-learn digits, scaled to [0, 1], split by a fixed stratified shuffle.

    The same arguments always give the same split, on every machine: 1,347 training and 450 test images
    with the defaults. Arrays are read-only so that one notebook cell cannot corrupt another's data.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    for arr in (X_train, X_test, y_train, y_test):
        arr.setflags(write=False)
    return Split(X_train, y_train, X_test, y_test)


def digits_dataset(split: str = "train", images: bool = False, test_fraction: float = 0.25, seed: int = 0):
    """A torch ``Dataset`` of ``(x, label)`` pairs: x is a float32 vector of 64, or a 1x8x8 image."""
    import torch
    from torch.utils.data import TensorDataset

    X, y = _pick(load_digits_split(test_fraction, seed), split)
    x = torch.tensor(X)
    if images:
        x = x.reshape(-1, 1, 8, 8)
    return TensorDataset(x, torch.tensor(y))


def digits_tf_dataset(
    split: str = "train",
    batch_size: int = 32,
    shuffle: bool = True,
    seed: int = 0,
    test_fraction: float = 0.25,
):
    """A batched ``tf.data.Dataset`` of ``(x, label)`` with x float32 of shape (batch, 64)."""
    from dlcourse._lazy import optional

    tf = optional("tensorflow")
    if tf is None:
        raise ImportError("TensorFlow is not installed: pip install 'dlcourse[tf]'")
    X, y = _pick(load_digits_split(test_fraction, seed), split)
    ds = tf.data.Dataset.from_tensor_slices((X, y))
    if shuffle:
        ds = ds.shuffle(len(X), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size)


def _pick(split: Split, which: str) -> tuple[np.ndarray, np.ndarray]:
    if which == "train":
        return split.X_train, split.y_train
    if which == "test":
        return split.X_test, split.y_test
    raise ValueError(f"split must be 'train' or 'test', not {which!r}")


def two_layer_data(
    N: int = N, D_in: int = D_IN, H: int = H, D_out: int = D_OUT, seed: int = 0, dtype=np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The running example: random ``x`` (N, D_in), ``y`` (N, D_out) and initial weights
    ``w1`` (D_in, H), ``w2`` (H, D_out), all standard normal, from one seed.

    Every lecture starts from these same numbers, so losses can be compared across frameworks.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D_in)).astype(dtype)
    y = rng.standard_normal((N, D_out)).astype(dtype)
    w1 = rng.standard_normal((D_in, H)).astype(dtype)
    w2 = rng.standard_normal((H, D_out)).astype(dtype)
    return x, y, w1, w2


def two_layer_loss(x, y, w1, w2, reduction: str = "sum"):
    """The running example's loss, the one definition the checks and benchmarks share: squared error of
    ``relu(x @ w1) @ w2`` against ``y``, summed (the lectures' loss) or averaged (``reduction="mean"``,
    ``mse_loss``'s). Works on numpy arrays (returns a numpy float) and on torch tensors (returns a tensor
    that autograd can differentiate)."""
    h = x @ w1
    error = (h * (h > 0)) @ w2 - y
    squared = error * error
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', not {reduction!r}")
    return squared.sum() if reduction == "sum" else squared.mean()


def cache_dir() -> Path:
    """Where downloads are kept: ``$DLCOURSE_CACHE`` or ``~/.cache/dlcourse``."""
    return Path(os.environ.get("DLCOURSE_CACHE", Path.home() / ".cache" / "dlcourse"))


def checksum_of(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class DownloadError(RuntimeError):
    """A download failed or its checksum did not match."""


def download(url: str, checksum: str, filename: str | None = None, timeout: float = 30.0) -> Path:
    """Fetch ``url`` into the cache unless a copy with the right checksum is already there.

    ``checksum`` is ``"sha256:<hex>"`` or ``"md5:<hex>"``. A file whose checksum does not match is
    deleted and reported, never used.
    """
    algorithm, _, expected = checksum.partition(":")
    target = cache_dir() / (filename or url.rsplit("/", 1)[-1])
    if target.exists() and checksum_of(target, algorithm) == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
    except OSError as err:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"could not download {url}: {err}") from err
    actual = checksum_of(partial, algorithm)
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise DownloadError(
            f"{algorithm} mismatch for {url}: expected {expected[:12]}..., got {actual[:12]}..."
        )
    partial.replace(target)
    return target


# MNIST's test set (10,000 images of 28x28) from the mirror and with the MD5 sums that torchvision uses.
MNIST_TEST = {
    "images": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-images-idx3-ubyte.gz",
        "md5:9fb629c4189551a2d022fa330f9573f3",
    ),
    "labels": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz",
        "md5:ec29112dd5afa0611ce80d1b7f02629c",
    ),
}


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (MNIST's format), gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_mnist_test(fallback: bool = True) -> tuple[np.ndarray, np.ndarray, str]:
    """MNIST's test images (float32 in [0, 1], shape (n, 28, 28)) and labels, and the name of the source.

    Without network access (or with a bad checksum) it falls back to the offline 8x8 digits, says so,
    and returns ``"digits"`` as the source, so a notebook keeps running everywhere.
    """
    try:
        images = read_idx(download(*MNIST_TEST["images"]))
        labels = read_idx(download(*MNIST_TEST["labels"]))
        return images.astype(np.float32) / 255.0, labels.astype(np.int64), "mnist"
    except DownloadError as err:
        if not fallback:
            raise
        print(f"MNIST is not available ({err}); using the offline 8x8 digits instead.")
        split = load_digits_split()
        return split.X_test.reshape(-1, 8, 8), split.y_test, "digits"


# The procedurally generated shapes of lecture 13, in label order.
SHAPE_CLASSES = ("circle", "square", "triangle", "cross")


def _shape_distance(label: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Signed distance, in units of the shape's radius, from the point (u, v) of the shape's own frame to
    the edge of shape ``label``: negative inside. The four shapes cover about the same area (~2)."""
    au, av = np.abs(u), np.abs(v)
    if label == 0:  # circle of radius 0.8
        return np.sqrt(u * u + v * v) - 0.8
    if label == 1:  # square of half-side 0.7
        return np.maximum(au, av) - 0.7
    if label == 2:  # equilateral triangle, apex up, inradius 0.6
        return np.maximum(-v - 0.6, (np.float32(np.sqrt(3.0)) * au + v) / 2 - 0.6)
    if label == 3:  # plus sign: two bars of half-length 1 and half-width 0.3
        return np.minimum(np.maximum(au - 1.0, av - 0.3), np.maximum(au - 0.3, av - 1.0))
    raise ValueError(f"no shape with label {label}")


def shapes_dataset(
    n: int, size: int = 32, seed: int = 0, noise: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` grey images of simple shapes, generated: ``images`` float32 (n, 1, size, size) and
    ``labels`` int64 (n,), an index into :data:`SHAPE_CLASSES` (circle, square, triangle, cross).

    Each image holds one shape at a random position, scale (radius 20-40% of the image), rotation and
    brightness (0.6-1.0 on a background of 0), with anti-aliased edges, plus Gaussian pixel noise of
    standard deviation ``noise``. The classes are balanced (their counts differ by at most one) and come in
    random order. The same arguments always give the same images; nothing is downloaded.
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % len(SHAPE_CLASSES)).astype(np.int64)
    radius = rng.uniform(0.2, 0.4, n) * size  # in pixels
    centre_x, centre_y = (radius + rng.uniform(0.0, 1.0, (2, n)) * (size - 2 * radius)).astype(np.float64)
    angle = rng.uniform(0.0, 2 * np.pi, n)
    brightness = rng.uniform(0.6, 1.0, n)
    images = rng.standard_normal((n, size, size), dtype=np.float32)
    images *= noise

    # float32 throughout: half the memory traffic of float64, and precise enough for pixels.
    radius, centre_x, centre_y, angle = (a.astype(np.float32) for a in (radius, centre_x, centre_y, angle))
    pixels = np.arange(size, dtype=np.float32) + 0.5  # pixel centres
    for label in range(len(SHAPE_CLASSES)):
        idx = np.flatnonzero(labels == label)
        if idx.size == 0:
            continue
        r = radius[idx, None, None]
        dx = pixels[None, None, :] - centre_x[idx, None, None]
        dy = pixels[None, :, None] - centre_y[idx, None, None]
        cos, sin = np.cos(angle[idx])[:, None, None], np.sin(angle[idx])[:, None, None]
        u, v = (dx * cos + dy * sin) / r, (dy * cos - dx * sin) / r
        # 1 inside, 0 outside, a ramp one pixel wide across the edge (distance in pixels = distance * r).
        coverage = np.clip(0.5 - _shape_distance(label, u, v) * r, 0.0, 1.0)
        images[idx] += brightness[idx, None, None].astype(np.float32) * coverage
    return images[:, None], labels
