"""Self-checks for lecture 9 (TensorFlow 2): gradients with ``GradientTape``, a Keras 3 model, and a
training step compiled by ``tf.function``.

Every check compares the student's TensorFlow code with an independent computation: torch autograd
for losses, gradients and SGD updates, numpy for a forward pass, and the traced graph itself for
what ``tf.function`` captured. TensorFlow and torch are imported only when a check runs.
"""

from __future__ import annotations

import numpy as np

from dlcourse.selfcheck import Checker


def _small_problem(seed: int = 9):
    """Small random data and weights for a two-layer net: x (5, 7), y (5, 3), w1 (7, 4), w2 (4, 3)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    y = rng.standard_normal((5, 3)).astype(np.float32)
    w1 = rng.standard_normal((7, 4)).astype(np.float32)
    w2 = rng.standard_normal((4, 3)).astype(np.float32)
    return x, y, w1, w2


def two_layer_grads(c: Checker, fn) -> None:
    """``fn(x, y, w1, w2) -> (loss, grad_w1, grad_w2)`` for the lecture's loss
    ``mean over rows of sum over columns of (relu(x @ w1) @ w2 - y) ** 2``, with ``tf.GradientTape``.

    ``x`` and ``y`` arrive as ``tf.Tensor``, ``w1`` and ``w2`` as ``tf.Variable``; the weights must not
    change.
    """
    import tensorflow as tf
    import torch

    x, y, w1, w2 = _small_problem()
    v1, v2 = tf.Variable(w1), tf.Variable(w2)
    result = c.call("two_layer_grads(x, y, w1, w2) runs", fn, tf.constant(x), tf.constant(y), v1, v2)
    if not c.true(
        "it returns three values: (loss, grad_w1, grad_w2)",
        isinstance(result, (tuple, list)) and len(result) == 3,
        f"got {type(result).__name__}",
    ):
        return
    loss, grad_w1, grad_w2 = result

    # The independent answer: torch autograd in float64 on the same numbers.
    tx, ty = torch.from_numpy(x).double(), torch.from_numpy(y).double()
    t1 = torch.from_numpy(w1).double().requires_grad_()
    t2 = torch.from_numpy(w2).double().requires_grad_()
    ref = ((tx @ t1).clamp(min=0) @ t2 - ty).pow(2).sum(dim=1).mean()
    ref.backward()

    c.close(
        "the loss matches torch autograd",
        np.asarray(loss, dtype=np.float64),
        ref.detach(),
        rtol=1e-4,
        atol=1e-4,
        hint="the loss is the mean over the batch of the sum over outputs of the squared difference",
    )
    c.close("grad_w1 matches torch autograd", grad_w1, t1.grad.float(), rtol=1e-4, atol=1e-4)
    c.close("grad_w2 matches torch autograd", grad_w2, t2.grad.float(), rtol=1e-4, atol=1e-4)
    c.true(
        "the weights were left unchanged (compute gradients only, no update)",
        np.array_equal(v1.numpy(), w1) and np.array_equal(v2.numpy(), w2),
        "do not call assign/assign_sub here",
    )


def keras_two_layer(c: Checker, fn) -> None:
    """``fn(D_in, H, D_out) -> keras.Sequential``: input of size D_in, ``Dense(H, activation='relu')``,
    then ``Dense(D_out)``, built from a ``keras.Input`` so that it knows its input shape."""
    import keras

    D_in, H, D_out = 6, 5, 3
    model = c.call("keras_two_layer(6, 5, 3) runs", fn, D_in, H, D_out)
    if not c.true("it returns a Keras model", isinstance(model, keras.Model), f"got {type(model).__name__}"):
        return
    c.true(
        "the model knows its input shape before it is called (keras.Input)",
        model.built and tuple(model.input_shape) == (None, D_in),
        "start the Sequential with keras.Input(shape=(D_in,))",
    )
    shapes = [tuple(v.shape) for v in model.trainable_variables]
    if not c.true(
        "trainable variables: kernel (6, 5), bias (5,), kernel (5, 3), bias (3,)",
        shapes == [(D_in, H), (H,), (H, D_out), (D_out,)],
        f"got shapes {shapes}",
    ):
        return

    # Random weights (Keras's zero initial biases would hide mistakes) and an independent numpy forward pass.
    rng = np.random.default_rng(19)
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for variable, value in zip(model.trainable_variables, values):
        variable.assign(value)
    x = rng.standard_normal((8, D_in)).astype(np.float32)
    k1, b1, k2, b2 = (v.astype(np.float64) for v in values)
    expected = np.maximum(x @ k1 + b1, 0) @ k2 + b2
    out = c.call("model(x) runs on a batch of 8", model, x)
    c.close(
        "model(x) equals relu(x @ W1 + b1) @ W2 + b2 computed in numpy",
        out,
        expected.astype(np.float32),
        rtol=1e-4,
        atol=1e-4,
        hint="is activation='relu' on the first Dense layer, and none on the last?",
    )


def make_train_step(c: Checker, fn) -> None:
    """``fn(model, loss_fn, optimizer) -> step`` where ``step(x, y)`` is a ``tf.function`` that computes the
    loss, its gradients with respect to ``model.trainable_variables`` and applies them with the optimizer,
    all inside the graph, and returns the loss (before the update)."""
    import keras
    import tensorflow as tf
    import torch

    rng = np.random.default_rng(29)
    D_in, H, D_out, n = 6, 5, 3, 8
    model = keras.Sequential(
        [keras.Input(shape=(D_in,)), keras.layers.Dense(H, activation="relu"), keras.layers.Dense(D_out)]
    )
    values = [rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in model.trainable_variables]
    for variable, value in zip(model.trainable_variables, values):
        variable.assign(value)
    x = rng.standard_normal((n, D_in)).astype(np.float32)
    y = rng.standard_normal((n, D_out)).astype(np.float32)
    lr = 0.05

    step = c.call(
        "make_train_step(model, loss_fn, optimizer) runs",
        fn,
        model,
        keras.losses.MeanSquaredError(),
        keras.optimizers.SGD(learning_rate=lr),
    )
    c.true(
        "it returns a tf.function",
        isinstance(step, tf.types.experimental.PolymorphicFunction),
        f"got {type(step).__name__}: decorate the inner function with @tf.function",
    )

    # The independent answer: the same net and the same SGD in torch (Keras stores kernels as (in, out)).
    params = [torch.from_numpy(v.copy()).requires_grad_() for v in values]
    optimizer = torch.optim.SGD(params, lr=lr)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    expected_losses = []
    for _ in range(3):
        k1, b1, k2, b2 = params
        loss = (((tx @ k1 + b1).clamp(min=0) @ k2 + b2 - ty) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        expected_losses.append(loss.item())

    tf_x, tf_y = tf.constant(x), tf.constant(y)
    losses = [c.call(f"step(x, y) runs (call {k + 1} of 3)", step, tf_x, tf_y) for k in range(3)]
    c.close(
        "the three losses match torch's SGD, step by step",
        np.array([float(np.asarray(v)) for v in losses]),
        np.array(expected_losses),
        rtol=1e-4,
        atol=1e-6,
        hint="return the loss computed before the update, and apply the optimizer once per call",
    )
    c.close(
        "the weights after three steps match torch's",
        np.concatenate([v.numpy().ravel() for v in model.trainable_variables]),
        np.concatenate([p.detach().numpy().ravel() for p in params]),
        rtol=1e-4,
        atol=1e-5,
        hint="apply the gradients to model.trainable_variables",
    )
    if isinstance(step, tf.types.experimental.PolymorphicFunction):
        c.true(
            "three calls with the same shapes traced the function once",
            step.experimental_get_tracing_count() == 1,
            f"it was traced {step.experimental_get_tracing_count()} times: pass tensors, not Python numbers",
        )
        graph = step.get_concrete_function(tf_x, tf_y).graph
        updates = [op for op in graph.get_operations() if op.type.startswith(("Assign", "ResourceApply"))]
        c.true(
            "the update is part of the graph (it has variable-update ops)",
            len(updates) >= len(model.trainable_variables),
            "call optimizer.apply_gradients inside the tf.function",
        )
