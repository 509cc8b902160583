"""One closeness check for numpy, torch and TF values, with messages that name shapes, dtypes and devices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcourse import assert_close, to_numpy
from dlcourse.closeness import close_report, describe


def test_equal_values_pass_across_frameworks():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(torch.tensor(a), a)
    assert_close(a, torch.tensor(a, dtype=torch.float64))
    assert_close(torch.tensor(a, requires_grad=True) * 1, a)


def test_tensorflow_values_compare(tf):
    a = np.linspace(0, 1, 5)
    assert_close(tf.constant(a), torch.tensor(a))
    assert "TF tensor" in describe(tf.constant(a))


def test_shape_mismatch_names_shapes_and_suggests_transpose():
    with pytest.raises(AssertionError) as err:
        assert_close(torch.zeros(3, 2), np.zeros((2, 3)), name="dw")
    message = str(err.value)
    assert "dw" in message and "(3, 2)" in message and "(2, 3)" in message and "transposed" in message
    assert "torch.float32" in message and "cpu" in message


def test_value_mismatch_reports_worst_entry():
    expected = np.zeros((2, 2))
    actual = expected.copy()
    actual[1, 0] = 0.5
    message = close_report(actual, expected)
    assert "1 of 4 entries" in message and "(1, 0)" in message


def test_nan_is_reported():
    assert "NaN" in close_report(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))


def test_meta_tensor_has_no_values():
    assert "meta" in close_report(torch.zeros(2, device="meta"), np.zeros(2))


def test_bfloat16_converts():
    np.testing.assert_allclose(to_numpy(torch.ones(2, dtype=torch.bfloat16)), [1.0, 1.0])
