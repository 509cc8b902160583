"""Offline data: fixed shapes, dtypes and splits; downloads are checksummed and fall back cleanly."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest
import torch

from dlcourse import data


def test_digits_split_is_fixed_stratified_and_read_only():
    split = data.load_digits_split()
    assert split.X_train.shape == (1347, 64) and split.X_test.shape == (450, 64)
    assert split.X_train.dtype == np.float32 and split.y_train.dtype == np.int64
    assert 0.0 <= split.X_train.min() and split.X_train.max() <= 1.0
    full = np.bincount(np.concatenate([split.y_train, split.y_test])) / 1797
    assert np.abs(np.bincount(split.y_test) / 450 - full).max() < 0.003  # stratified: same class mix
    again = data.load_digits_split.__wrapped__()  # recomputed, not the cached object
    np.testing.assert_array_equal(again.y_test, split.y_test)
    with pytest.raises(ValueError):
        split.X_train[0, 0] = 1.0
    other = data.load_digits_split(seed=1)
    assert not np.array_equal(other.y_test, split.y_test)


def test_torch_dataset_items():
    ds = data.digits_dataset("test", images=True)
    x, y = ds[0]
    assert len(ds) == 450 and x.shape == (1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    with pytest.raises(ValueError, match="split"):
        data.digits_dataset("validation")


def test_tf_dataset_batches(tf):
    batches = list(data.digits_tf_dataset("test", batch_size=100, shuffle=False))
    assert [int(b[0].shape[0]) for b in batches] == [100, 100, 100, 100, 50]
    assert batches[0][0].dtype == tf.float32 and batches[0][0].shape[1] == 64


def test_two_layer_data_is_the_running_example():
    x, y, w1, w2 = data.two_layer_data()
    assert (x.shape, y.shape, w1.shape, w2.shape) == ((64, 1000), (64, 10), (1000, 100), (100, 10))
    np.testing.assert_array_equal(x, data.two_layer_data()[0])
    assert data.two_layer_data(dtype=np.float32)[0].dtype == np.float32


def _idx_file(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def test_download_caches_and_verifies_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCOURSE_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "images.gz"
    images = np.arange(2 * 3 * 3).reshape(2, 3, 3)
    _idx_file(source, images)
    md5 = hashlib.md5(source.read_bytes()).hexdigest()
    path = data.download(source.as_uri(), f"md5:{md5}")
    np.testing.assert_array_equal(data.read_idx(path), images)
    source.unlink()  # a second call is served from the cache
    assert data.download(source.as_uri(), f"md5:{md5}") == path
    _idx_file(source, images + 1)
    with pytest.raises(data.DownloadError, match="mismatch"):
        data.download(source.as_uri(), "md5:" + "0" * 32, filename="other.gz")
    assert not (tmp_path / "cache" / "other.gz").exists()


def test_mnist_falls_back_to_digits_offline(monkeypatch, capsys):
    def no_network(*args, **kwargs):
        raise data.DownloadError("no network")

    monkeypatch.setattr(data, "download", no_network)
    images, labels, source = data.load_mnist_test()
    assert source == "digits" and images.shape == (450, 8, 8) and labels.shape == (450,)
    assert "offline 8x8 digits" in capsys.readouterr().out
    with pytest.raises(data.DownloadError):
        data.load_mnist_test(fallback=False)
