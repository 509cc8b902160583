"""Material for assignment A6 (training that generalises): its data, generated offline and fixed by a seed.

- :func:`grouped_shapes`: several noisy photographs of each of a number of objects (lecture 13's shapes), with
  the object each image shows, for a split that must keep an object's photographs together;
- :func:`shapes_splits`: lecture 13's shapes as fixed training, validation and test tensors, standardised with the
  training split's statistics, for training models.

No solutions live here: the data are inputs that the assignment reads.
"""

from __future__ import annotations

import numpy as np

from dlcourse.data import SHAPE_CLASSES, shapes_dataset

__all__ = ["SHAPE_CLASSES", "grouped_shapes", "shapes_splits"]


def grouped_shapes(
    n_objects: int, photos: int = 4, size: int = 16, seed: int = 0, noise: float = 0.15
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``photos`` images of each of ``n_objects`` shapes: ``(images, labels, groups)``.

    Each object is one shape of :func:`dlcourse.data.shapes_dataset` (its position, size, rotation and brightness);
    its photographs differ only in their pixel noise (standard deviation ``noise``), as several photos of one
    object, or several scans of one patient, do. ``images`` float32 (n, 1, size, size), ``labels`` int64 (n,),
    ``groups`` int64 (n,): the object each image shows, 0 .. n_objects - 1, with n = n_objects * photos, in random
    order. All photographs of an object share its label. The same arguments always give the same arrays.
    """
    clean, object_labels = shapes_dataset(n_objects, size=size, seed=seed, noise=0.0)
    rng = np.random.default_rng([seed, 6])
    groups = np.repeat(np.arange(n_objects, dtype=np.int64), photos)
    images = clean[groups] + noise * rng.standard_normal(clean[groups].shape, dtype=np.float32)
    order = rng.permutation(len(groups))
    return images[order], object_labels[groups][order], groups[order]


def shapes_splits(
    seed: int = 0,
    n_train: int = 1000,
    n_val: int = 500,
    n_test: int = 1000,
    size: int = 16,
    noise: float = 0.15,
):
    """Lecture 13's shapes, split once: ``{"train": (X, y), "val": (X, y), "test": (X, y)}`` as torch tensors.

    ``X`` float32 (n, 1, size, size), standardised with the mean and standard deviation of the *training* images
    only; ``y`` int64 (n,). The splits are consecutive runs of the generated images, which come in random order, so
    each holds every class in about equal numbers. The same arguments always give the same tensors.
    """
    import torch

    images, labels = shapes_dataset(n_train + n_val + n_test, size=size, seed=seed, noise=noise)
    cuts = {
        "train": slice(0, n_train),
        "val": slice(n_train, n_train + n_val),
        "test": slice(n_train + n_val, None),
    }
    parts = {name: (images[cut], labels[cut]) for name, cut in cuts.items()}
    mean, std = parts["train"][0].mean(), parts["train"][0].std()
    return {
        name: (torch.from_numpy((X - mean) / std), torch.from_numpy(y.copy()))
        for name, (X, y) in parts.items()
    }
