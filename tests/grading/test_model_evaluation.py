"""A recorded model is evaluated in a limited child of its own, a batch at a time: whatever model a submission
records, the grader's own memory stays as it was, and a model that needs more than the child may take fails
with a reason that names the limit (:mod:`autograder.grading.evaluate`, :mod:`dlcourse.modeldata`)."""

from __future__ import annotations

import time
import tracemalloc
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from autograder.grading import evaluate, verify
from dlcourse.grading import Case, compare
from dlcourse.modeldata import MAX_ARRAY_BYTES, decode, encode, model_as_data, parameter_count, predictions

# the attacker's model: one 15x15 convolution with the most padding, over A6's 1000 test images of 16x16. The
# code before this change copied its windows whole for the product: 1000 images x 32 x 32 output pixels x
# 15 x 15 weights x 8 bytes, 1.8 GB, and took the grader from 298 MB to 3.7 GB, at an eighth of the work budget
ATTACK = [["conv2d", 1, 1, 15, 15, 1, 1, 15, 15], ["relu"], ["globalmax"], ["flatten"], ["affine", 1, 3]]
WINDOWS_COPIED_BEFORE = 1000 * 32 * 32 * 15 * 15 * 8


@pytest.fixture(autouse=True)
def no_verdicts_kept(monkeypatch):
    """Each test starts with no verdict kept by this process (the cache is the grader's, per process)."""
    monkeypatch.setattr(evaluate, "_verdicts", OrderedDict())


@pytest.fixture(scope="module")
def a6_images():
    rng = np.random.default_rng(0)
    return rng.normal(size=(1000, 1, 16, 16)).tolist(), rng.integers(0, 3, size=1000).tolist()


def a6_case(a6_images, architecture: str = "any") -> Case:
    inputs, labels = a6_images
    params = {"inputs": inputs, "labels": labels, "at_least": 0.85, "architecture": architecture,
              "max_parameters": 2_500}  # fmt: skip
    return Case("a6.cnn.test_accuracy", "model_accuracy", params, "test_cnn", public=True)


def model(layers: list[list], seed: int = 0) -> np.ndarray:
    return encode(layers, [np.random.default_rng(seed).normal(size=parameter_count(layers))])


def reset_peak_memory() -> float:
    """Start the grader's peak resident memory afresh (``clear_refs``); the peak now, in MB."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as err:
        pytest.skip(f"this system cannot reset a process's peak memory ({err})")
    return peak_memory()


def peak_memory() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    line = next(
        line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM")
    )
    return int(line.split()[1]) / 1024


# ----------------------------------------------------------------------------- the attack


def test_the_attackers_model_over_the_childs_memory_is_refused_naming_the_limit(a6_images, monkeypatch):
    assert WINDOWS_COPIED_BEFORE > 1.5 * 2**30
    monkeypatch.setattr(evaluate, "MEMORY_MB", 200)  # (more than a child's start needs; less than this model)
    case, got = a6_case(a6_images), model(ATTACK)
    before = reset_peak_memory()
    started = time.monotonic()
    problem = verify.safe_compare(case, None, got)
    seconds = time.monotonic() - started
    assert problem == "a6.cnn.test_accuracy: the recorded model needed more than 200 MB to evaluate"
    assert peak_memory() - before < 64, "the grader's own memory grew"
    assert seconds < evaluate.SECONDS


def test_within_the_limits_the_attackers_model_is_evaluated_in_the_child_a_batch_at_a_time(a6_images):
    case, got = a6_case(a6_images), model(ATTACK)
    before = reset_peak_memory()
    started = time.monotonic()
    problem = verify.safe_compare(case, None, got)
    seconds = time.monotonic() - started
    assert problem.startswith("a6.cnn.test_accuracy: the trained model's accuracy is "), problem
    assert peak_memory() - before < 64, "the grader's own memory grew"
    assert seconds < evaluate.SECONDS


def test_a_model_that_needs_more_time_than_the_child_has_is_refused_naming_the_limit(a6_images, monkeypatch):
    monkeypatch.setattr(evaluate, "SECONDS", 1)
    # 58 batch norms over 8 x 46 x 46 activations: half the work budget, but passes over memory: 3.6 s where a
    # convolution of 1.8e9 multiply-adds took 1.3 s (and under 1 s once, on a quiet machine: a flaky premise)
    widened = [["conv2d", 1, 8, 1, 1, 1, 1, 15, 15]]
    slow = [*widened, *[["batchnorm", 8, 10]] * 58, ["globalmax"], ["flatten"], ["affine", 8, 3]]
    started = time.monotonic()
    problem = verify.safe_compare(
        a6_case(a6_images), None, model(slow)
    )  # 1,899 parameters: within the case's
    assert problem == "a6.cnn.test_accuracy: the recorded model needed more than 1 s to evaluate"
    assert time.monotonic() - started < 10


def test_a_model_over_the_work_budget_is_refused_in_the_child_before_it_runs(a6_images):
    wide = [["conv2d", 1, 9, 15, 15, 1, 1, 15, 15], ["globalmax"], ["flatten"], ["affine", 9, 3]]  # 2,064
    problem = verify.safe_compare(a6_case(a6_images), None, model(wide))
    assert problem.endswith("it takes more than 2e+09 multiply-adds to evaluate)"), problem


# ----------------------------------------------------------------------------- the same verdicts


class TwoLayerNet:
    params = {"W1": np.array([[1.0, -1.0], [0.0, 0.0]]), "b1": np.zeros(2),
              "W2": np.array([[0.0, 1.0], [1.0, 0.0]]), "b2": np.zeros(2)}  # fmt: skip


def test_a_small_model_gets_in_the_child_the_verdict_compare_gives_in_process():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 2))
    labels = (x[:, 0] > 0).astype(int)
    good = encode(*model_as_data(TwoLayerNet()))
    untrained = good.copy()
    untrained[-6:] = 0.0  # the second layer zeroed: every input gets class 0
    wider = encode(
        [["affine", 2, 3], ["relu"], ["affine", 3, 2]],
        [np.ones((2, 3)), np.ones(3), np.ones((3, 2)), np.ones(2)],
    )
    fixed = Case("m", "model_accuracy", {"inputs": x.tolist(), "labels": labels.tolist(), "at_least": 0.95,
                                         "architecture": "fixed", "max_parameters": None})  # fmt: skip
    small = Case("m", "model_accuracy", {**fixed.params, "architecture": "any", "max_parameters": 8})
    for case, got in [
        (fixed, good),
        (fixed, untrained),
        (fixed, wider),
        (small, good),
        (fixed, labels * 1.0),
    ]:
        assert verify.safe_compare(case, good, got) == compare(case, good, got)
    assert verify.safe_compare(fixed, good, good) is None
    assert "not built as the test builds it" in verify.safe_compare(fixed, good, wider)


def test_a_trained_cnn_passes_in_the_child_as_torch_classifies():
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3),
    ).eval()  # fmt: skip
    images = torch.randn(300, 1, 16, 16)
    with torch.no_grad():
        logits = cnn(images).double()
    top2 = logits.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1] > 1e-4).numpy()
    params = {"inputs": images.numpy()[clear].astype(np.float64).tolist(),
              "labels": logits.argmax(1).numpy()[clear].tolist(), "at_least": 1.0, "architecture": "fixed"}  # fmt: skip
    case = Case("a6.cnn", "model_accuracy", params)
    got = encode(*model_as_data(cnn))
    assert verify.safe_compare(case, got, got) is None


def test_a_fixed_architecture_case_without_the_reference_is_refused_not_run(monkeypatch):
    """A public case re-checked without the reference's value (as the kernel's verdict once was) would skip
    the check that the model is built as the test builds it: it is refused instead, and nothing runs."""
    x = np.random.default_rng(1).normal(size=(50, 2))
    fixed = Case("m", "model_accuracy", {"inputs": x.tolist(), "labels": [0] * 50, "at_least": 0.5})
    other = encode([["affine", 2, 2]], [np.zeros((2, 2)), np.array([1.0, 0.0])])  # not the test's model
    assert compare(fixed, None, other) is None  # in process, the check was skipped
    monkeypatch.setattr(evaluate, "run_child", lambda request, name: pytest.fail("a child was started"))
    problem = verify.safe_compare(fixed, None, other)
    assert problem == (
        "m: the grader has no reference model to check that this model is built as the test builds it; "
        "not evaluated"
    )
    # and the child, asked all the same, refuses too
    assert evaluate.verdict_of(evaluate.request_bytes(fixed, None, other)) == {"verdict": problem}


def test_each_model_is_evaluated_once_per_grader_process(monkeypatch):
    """The re-check of a public case's kernel verdict and the trusted check ask for the same evaluation: one
    child. Another model, or another reference, is another evaluation."""
    started = []
    launch = evaluate.run_child
    monkeypatch.setattr(
        evaluate, "run_child", lambda request, name: started.append(name) or launch(request, name)
    )
    x = np.random.default_rng(1).normal(size=(50, 2))
    case = Case("m", "model_accuracy", {"inputs": x.tolist(), "labels": [0] * 50, "at_least": 0.5})
    good = encode(*model_as_data(TwoLayerNet()))
    first = verify.safe_compare(case, good, good)
    assert verify.safe_compare(case, good, good) == first
    assert verify.safe_compare(Case("m", "model_accuracy", dict(case.params)), good, good) == first
    assert len(started) == 1
    other = good.copy()
    other[-1] += 1.0
    verify.safe_compare(case, good, other)
    verify.safe_compare(case, other, other)
    assert len(started) == 3


def test_worker_threads_evaluate_models_at_once_each_in_a_child_of_its_own():
    """Worker threads verify at once: no grader lock is held while a child evaluates, and each thread gets
    the verdict of its own model (numpy's products run in the children, never in the grader)."""
    import threading

    x = np.random.default_rng(1).normal(size=(100, 2))
    labels = (x[:, 0] > 0).astype(int)
    case = Case("m", "model_accuracy", {"inputs": x.tolist(), "labels": labels.tolist(), "at_least": 0.9})
    good = encode(*model_as_data(TwoLayerNet()))
    models = [np.concatenate([good[:-6], good[-6:] * scale]) for scale in (1.0, -1.0, 2.0, 0.0)]  # layer 2
    found = {}
    threads = [
        threading.Thread(target=lambda i=i: found.setdefault(i, verify.safe_compare(case, good, models[i])))
        for i in range(len(models))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(evaluate.SECONDS)
    assert found == {i: compare(case, good, got) for i, got in enumerate(models)}
    assert found[0] is None and "accuracy" in found[1]


def test_the_childs_reply_is_plain_and_bounded():
    assert evaluate._reply(b'{"verdict": null}\n') == {"verdict": None}
    assert evaluate._reply(b'{"limit": "memory"}') == {"limit": "memory"}
    assert evaluate._reply(b'{"verdict": "' + b"x" * evaluate.MAX_REPLY_BYTES + b'"}') is None
    for reply in (b"", b"[]", b'{"verdict": 3}', b'{"verdict": null, "more": 1}', b'{"limit": "disk"}'):
        assert evaluate._reply(reply) is None


# ----------------------------------------------------------------------------- a batch at a time


@settings(max_examples=20, deadline=None)
@given(
    channels=st.integers(1, 6),
    kernel=st.integers(1, 5),
    stride=st.integers(1, 2),
    padding=st.integers(0, 2),
    pool=st.sampled_from(["max", "avg", "none"]),
    max_bytes=st.sampled_from([16 * 2**10, 64 * 2**10, MAX_ARRAY_BYTES]),
    seed=st.integers(0, 10_000),
)
def test_a_batch_at_a_time_the_predictions_are_torchs(
    channels, kernel, stride, padding, pool, max_bytes, seed
):
    """Inputs in batches and a convolution's windows in blocks (a few pixels at a time, with the smallest
    bounds): the same classes as torch's own forward of the ``nn.Sequential``."""
    torch.manual_seed(seed)
    layers = [
        nn.Conv2d(2, channels, kernel, stride=stride, padding=padding),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
    ]
    layers += {"max": [nn.MaxPool2d(2)], "avg": [nn.AvgPool2d(2, stride=1)], "none": []}[pool]
    with torch.no_grad():
        width = nn.Sequential(*layers)(torch.zeros(1, 2, 12, 12)).numel()
    layers += [nn.Flatten(), nn.Linear(width, 5)]
    net = nn.Sequential(*layers).train()
    with torch.no_grad():
        net(torch.randn(32, 2, 12, 12))  # batch norm's running statistics away from their start
    net.eval()
    x = torch.randn(60, 2, 12, 12)
    with torch.no_grad():
        expected = net(x).double()
    ours = predictions(*decode(encode(*model_as_data(net))), x.numpy(), max_bytes=max_bytes)
    top2 = expected.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1] > 1e-4).numpy()
    assert np.array_equal(ours[clear], expected.argmax(1).numpy()[clear])


def test_the_largest_array_of_an_evaluation_is_bounded_not_only_its_work():
    images = np.random.default_rng(0).normal(size=(200, 1, 16, 16))
    parameters = decode(model(ATTACK))[1]
    bound = 4 * 2**20
    tracemalloc.start()
    try:
        predictions(ATTACK, parameters, images, max_bytes=bound)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * bound < 200 * 32 * 32 * 15 * 15 * 8  # the windows the code before copied whole: 369 MB


def test_a_model_whose_one_input_needs_more_than_the_bound_is_refused_naming_it():
    wide = [["conv2d", 1, 64, 1, 1, 1, 1, 15, 15], ["globalmax"], ["flatten"], ["affine", 64, 2]]
    parameters = np.zeros(parameter_count(wide))
    with pytest.raises(ValueError, match="one input takes an array of more than 1 MB"):
        predictions(wide, parameters, np.zeros((3, 1, 16, 16)), max_bytes=2**20)  # 64 x 46 x 46 doubles
    assert predictions(wide, parameters, np.zeros((3, 1, 16, 16))).shape == (
        3,
    )  # within the 64 MB of the grader
