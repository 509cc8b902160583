"""The generated shapes of lecture 13: fixed by their seed, the right shapes and types, balanced, fast."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dlcourse.data import SHAPE_CLASSES, shapes_dataset


def test_shapes_are_deterministic_by_seed():
    images, labels = shapes_dataset(200, size=16, seed=3)
    again_images, again_labels = shapes_dataset(200, size=16, seed=3)
    np.testing.assert_array_equal(images, again_images)
    np.testing.assert_array_equal(labels, again_labels)
    other_images, other_labels = shapes_dataset(200, size=16, seed=4)
    assert not np.array_equal(other_labels, labels)
    assert np.abs(other_images - images).mean() > 0.1


@pytest.mark.parametrize("n, size", [(1, 8), (7, 16), (400, 32), (101, 24)])
def test_shapes_dtypes_and_balance(n, size):
    images, labels = shapes_dataset(n, size=size, seed=0)
    assert images.shape == (n, 1, size, size) and images.dtype == np.float32
    assert labels.shape == (n,) and labels.dtype == np.int64
    assert set(labels.tolist()) <= set(range(len(SHAPE_CLASSES)))
    counts = np.bincount(labels, minlength=len(SHAPE_CLASSES))
    assert counts.max() - counts.min() <= 1
    assert np.isfinite(images).all()


def test_shapes_are_shapes_not_noise():
    """Without noise, each image has a bright shape of about the same area whatever its class, on a dark
    background; the classes differ in what the pixels look like, not in how many are lit."""
    images, labels = shapes_dataset(400, size=32, seed=1, noise=0.0)
    assert images.min() >= 0.0 and images.max() <= 1.0
    lit = (images[:, 0] > 0.3).sum(axis=(1, 2))
    assert lit.min() > 0.03 * 32 * 32 and lit.max() < 0.7 * 32 * 32
    mean_area = [lit[labels == k].mean() for k in range(len(SHAPE_CLASSES))]
    assert max(mean_area) < 1.5 * min(mean_area)  # area alone does not give the class away
    noisy, _ = shapes_dataset(400, size=32, seed=1, noise=0.3)
    assert abs(np.std(noisy - images) - 0.3) < 0.01


def test_shapes_are_in_random_order_and_positions():
    images, labels = shapes_dataset(400, size=32, seed=2, noise=0.0)
    assert not np.array_equal(labels, np.sort(labels))
    rows = np.arange(32)
    weight = images[:, 0].sum(axis=(1, 2))
    centre_row = (images[:, 0].sum(axis=2) * rows).sum(axis=1) / weight
    assert centre_row.std() > 2  # pixels: the shapes move around


def test_generation_is_fast():
    shapes_dataset(100, size=32)  # warm-up
    seconds = []
    for seed in range(3):  # the best of three: another program may take the CPU for a moment
        start = time.perf_counter()
        shapes_dataset(3000, size=32, seed=seed)
        seconds.append(time.perf_counter() - start)
    assert min(seconds) < 1.0
