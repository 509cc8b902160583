"""A6's data: fixed by their seed, groups that share a label and differ only in noise, and splits standardised
with the training images alone."""

from __future__ import annotations

import numpy as np
import torch

from dlcourse.a6 import grouped_shapes, shapes_splits


def test_grouped_shapes_are_deterministic_and_shaped():
    images, labels, groups = grouped_shapes(30, photos=3, size=12, seed=5)
    again = grouped_shapes(30, photos=3, size=12, seed=5)
    for a, b in zip((images, labels, groups), again):
        np.testing.assert_array_equal(a, b)
    assert images.shape == (90, 1, 12, 12) and images.dtype == np.float32
    assert labels.dtype == np.int64 and groups.dtype == np.int64
    assert np.bincount(groups).tolist() == [3] * 30
    other = grouped_shapes(30, photos=3, size=12, seed=6)
    assert not np.array_equal(other[0], images)


def test_photos_of_one_object_share_its_label_and_differ_only_in_noise():
    images, labels, groups = grouped_shapes(20, photos=4, seed=1, noise=0.15)
    for group in range(20):
        members = np.flatnonzero(groups == group)
        assert len(set(labels[members].tolist())) == 1
        photos = images[members]
        differences = photos[1:] - photos[0]
        assert 0.15 < differences.std() < 0.3  # two independent noises of 0.15: about 0.21
    clean, _, clean_groups = grouped_shapes(20, photos=4, seed=1, noise=0.0)
    for group in range(20):
        members = clean[clean_groups == group]
        assert np.array_equal(members[0], members[-1])
    assert not np.array_equal(groups, np.sort(groups))  # in random order


def test_shapes_splits_are_fixed_and_standardised_on_the_training_images():
    splits = shapes_splits(seed=2, n_train=300, n_val=100, n_test=200)
    again = shapes_splits(seed=2, n_train=300, n_val=100, n_test=200)
    for name, (X, y) in splits.items():
        assert torch.equal(X, again[name][0]) and torch.equal(y, again[name][1])
        assert X.dtype == torch.float32 and y.dtype == torch.int64 and X.shape[1:] == (1, 16, 16)
    X_train = splits["train"][0]
    assert abs(X_train.mean().item()) < 1e-5 and abs(X_train.std(correction=0).item() - 1) < 1e-4
    assert [len(y) for _, y in splits.values()] == [300, 100, 200]
    for _, y in splits.values():
        assert np.bincount(y.numpy(), minlength=4).min() > 0.15 * len(y)
