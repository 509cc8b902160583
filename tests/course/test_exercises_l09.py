"""Lecture 9's self-checks reject wrong answers and stubs.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import pytest

from dlcourse import check

tf = keras = None  # imported by the fixture below, when the first test of this file runs, not at collection


@pytest.fixture(autouse=True, scope="module")
def tensorflow_and_keras():
    """TensorFlow and Keras for the wrong answers below (every test here skips where either is missing). Not
    imported at collection: each pytest-xdist worker collects every file, and TensorFlow's import takes 3 s."""
    global tf, keras
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    pytest.importorskip("torch")


def stub(*args):
    raise NotImplementedError


# --- two_layer_grads -------------------------------------------------------------------------


def grads_sum_loss(x, y, w1, w2):
    """Wrong: sums over the batch instead of averaging."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((tf.maximum(x @ w1, 0) @ w2 - y) ** 2)
    return (loss, *tape.gradient(loss, [w1, w2]))


def grads_no_relu(x, y, w1, w2):
    """Wrong: forgets the ReLU."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.reduce_sum(((x @ w1) @ w2 - y) ** 2, axis=1))
    return (loss, *tape.gradient(loss, [w1, w2]))


def grads_and_update(x, y, w1, w2):
    """Wrong: right values, but it also updates the weights."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.reduce_sum((tf.maximum(x @ w1, 0) @ w2 - y) ** 2, axis=1))
    grad_w1, grad_w2 = tape.gradient(loss, [w1, w2])
    w1.assign_sub(0.1 * grad_w1)
    return loss, grad_w1, grad_w2


@pytest.mark.parametrize("wrong", [grads_sum_loss, grads_no_relu, grads_and_update, stub])
def test_two_layer_grads_fails_wrong_answers(wrong):
    report = check("l09.two_layer_grads", wrong, show=False)
    assert not report.passed


# --- keras_two_layer -------------------------------------------------------------------------


def keras_no_relu(D_in, H, D_out):
    return keras.Sequential([keras.Input(shape=(D_in,)), keras.layers.Dense(H), keras.layers.Dense(D_out)])


def keras_relu_on_output(D_in, H, D_out):
    return keras.Sequential(
        [
            keras.Input(shape=(D_in,)),
            keras.layers.Dense(H, activation="relu"),
            keras.layers.Dense(D_out, activation="relu"),
        ]
    )


def keras_no_input(D_in, H, D_out):
    return keras.Sequential([keras.layers.Dense(H, activation="relu"), keras.layers.Dense(D_out)])


@pytest.mark.parametrize("wrong", [keras_no_relu, keras_relu_on_output, keras_no_input, stub])
def test_keras_two_layer_fails_wrong_answers(wrong):
    assert not check("l09.keras_two_layer", wrong, show=False).passed


# --- make_train_step -------------------------------------------------------------------------


def step_eager(model, loss_fn, optimizer):
    """Wrong: right numbers, but a plain Python function, not a graph."""

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def step_no_update(model, loss_fn, optimizer):
    """Wrong: computes the loss but never updates the weights."""
    return tf.function(lambda x, y: loss_fn(y, model(x)))


def step_returns_new_loss(model, loss_fn, optimizer):
    """Wrong: returns the loss after the update instead of the loss that was differentiated."""

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss_fn(y, model(x))

    return step


@pytest.mark.parametrize("wrong", [step_eager, step_no_update, step_returns_new_loss, stub])
def test_make_train_step_fails_wrong_answers(wrong):
    assert not check("l09.make_train_step", wrong, show=False).passed


def test_unknown_exercise_is_a_key_error():
    with pytest.raises(KeyError):
        check("l09.no_such_exercise", stub, show=False)
