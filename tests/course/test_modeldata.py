"""A trained model as plain data: the grader's own evaluation agrees with torch's, and what is not a model
is refused, never evaluated."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dlcourse.grading import Case, compare
from dlcourse.modeldata import decode, encode, model_as_data, parameter_count, predictions


def trained_like(model: nn.Module, shape) -> nn.Module:
    """Batch norm's running statistics moved away from their start, then eval mode."""
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(32, *shape))
    return model.eval()


@settings(max_examples=25, deadline=None)
@given(
    channels=st.integers(1, 6),
    kernel=st.integers(1, 4),
    stride=st.integers(1, 2),
    padding=st.integers(0, 2),
    pool=st.sampled_from(["max", "avg", "none"]),
    head=st.sampled_from(["globalmax", "globalavg", "flatten"]),
    norm=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_the_graders_predictions_are_torchs(channels, kernel, stride, padding, pool, head, norm, seed):
    torch.manual_seed(seed)
    layers = [nn.Conv2d(2, channels, kernel, stride=stride, padding=padding)]
    layers += [nn.BatchNorm2d(channels)] if norm else []
    layers += [nn.ReLU(), nn.Dropout(0.3)]
    layers += {"max": [nn.MaxPool2d(2)], "avg": [nn.AvgPool2d(2, stride=1)], "none": []}[pool]
    if head == "flatten":
        with torch.no_grad():
            width = nn.Sequential(*layers)(torch.zeros(1, 2, 9, 9)).numel()
        layers += [nn.Flatten(), nn.Linear(width, 5)]
    else:
        layers += [nn.AdaptiveMaxPool2d(1) if head == "globalmax" else nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        layers += [nn.Linear(channels, 7), nn.ReLU(), nn.Linear(7, 5)]
    model = trained_like(nn.Sequential(*layers), (2, 9, 9))
    x = torch.randn(40, 2, 9, 9)
    described, parameters = decode(encode(*model_as_data(model)))
    assert (
        parameters.size
        == parameter_count(described)
        == sum(p.numel() for p in model.parameters()) + (2 * channels if norm else 0)
    )
    with torch.no_grad():
        expected = model(x).double()
    ours = predictions(described, parameters, x.numpy())
    # equal wherever torch's top class is clear of the runner-up (float32 against float64)
    top2 = expected.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1] > 1e-4).numpy()
    assert np.array_equal(ours[clear], expected.argmax(1).numpy()[clear])


def test_a_two_layer_net_with_params_is_a_model_too():
    rng = np.random.default_rng(0)

    class Net:
        params = {"W1": rng.normal(size=(6, 4)), "b1": rng.normal(size=4), "W2": rng.normal(size=(4, 3)),
                  "b2": rng.normal(size=3)}  # fmt: skip

    x = rng.normal(size=(10, 6))
    layers, parameters = decode(encode(*model_as_data(Net())))
    p = Net.params
    expected = (np.maximum(x @ p["W1"] + p["b1"], 0) @ p["W2"] + p["b2"]).argmax(1)
    assert layers == [["affine", 6, 4], ["relu"], ["affine", 4, 3]]
    assert np.array_equal(predictions(layers, parameters, x), expected)


@pytest.mark.parametrize(
    "value",
    [
        np.array([1.0, 2.0, 3.0]),  # labels written down as the 'model'
        np.arange(450) % 10,  # integers
        np.array([np.nan, 1.0]),
        np.array([3.0, 99.0, 1.0, 2.0, 0.5]),  # an unknown layer
        np.array([3.0, 1.0, 4.5, 2.0, 0.0]),  # a layer's settings are not integers
        np.array([1e9, 1.0]),
        np.zeros((2, 2)),
    ],
)
def test_what_is_not_a_model_is_refused(value):
    with pytest.raises(ValueError):
        layers, parameters = decode(value)
        predictions(layers, parameters, np.zeros((5, 2)))


def test_a_model_accuracy_case_judges_the_recorded_model_on_the_references_inputs_and_labels():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 2))
    labels = (x[:, 0] > 0).astype(int)

    class Net:
        params = {"W1": np.array([[1.0, -1.0], [0.0, 0.0]]), "b1": np.zeros(2), "W2": np.array([[0.0, 1.0], [1.0, 0.0]]),
                  "b2": np.zeros(2)}  # fmt: skip

    good = encode(*model_as_data(Net()))
    case = Case("m", "model_accuracy", {"inputs": x.tolist(), "labels": labels.tolist(), "at_least": 0.95,
                                        "architecture": "fixed", "max_parameters": None})  # fmt: skip
    assert compare(case, good, good) is None
    untrained = good.copy()
    untrained[-10:] = 0.0  # the second layer zeroed: every input gets class 0
    assert "accuracy" in compare(case, good, untrained)
    assert compare(case, good, labels.astype(float)) is not None  # the labels as the answer
    wider = encode(
        [["affine", 2, 3], ["relu"], ["affine", 3, 2]],
        [np.ones((2, 3)), np.ones(3), np.ones((3, 2)), np.ones(2)],
    )
    assert "not built as the test builds it" in compare(case, good, wider)  # another architecture
    any_arch = Case("m", "model_accuracy", {**case.params, "architecture": "any", "max_parameters": 8})
    assert "parameters" in compare(any_arch, good, good)  # 12 parameters: over the budget


def test_a_model_too_costly_to_evaluate_is_refused_before_it_runs():
    layers = [["conv2d", 1, 4096, 15, 15, 1, 1, 15, 15], ["globalmax"], ["flatten"], ["affine", 4096, 2]]
    parameters = np.zeros(parameter_count(layers))
    with pytest.raises(ValueError, match="multiply-adds"):
        predictions(layers, parameters, np.zeros((400, 1, 16, 16)))
    with pytest.raises(ValueError, match="out of range"):
        decode(np.array([9.0, 3, 1, 4, 3, 3, 1, 1, 10**6, 1]))  # a padding that would fill the memory
