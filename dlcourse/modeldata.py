"""A trained model as plain data, and its predictions worked out from that data alone.

A ``model_accuracy`` case (:func:`dlcourse.grading.check_model_accuracy`) records a model, not its predictions:
the grader evaluates it on inputs whose labels stay outside the kernel, so a notebook cannot pass by writing
the labels down as its answer. What can be recorded is a torch ``nn.Sequential`` built from the layers in
:data:`LAYERS` (or a two-layer net whose ``params`` hold ``W1, b1, W2, b2``), all evaluated here in numpy,
float64, in eval mode (batch norm with its running statistics, dropout off).

The data is one float64 vector: ``[S, spec (S numbers), parameters...]``, the spec being each layer's code
and its integer settings (:func:`encode`, :func:`decode`).
"""

from __future__ import annotations

import numpy as np

# code -> (name, how many numbers follow the code in the spec)
LAYERS = {
    1: ("affine", 2),  # inputs, outputs; parameters W (inputs, outputs), b (outputs)
    2: ("relu", 0),
    3: ("conv2d", 8),  # in, out, kh, kw, stride h, w, padding h, w; parameters W (out, in, kh, kw), b (out)
    4: ("batchnorm", 2),  # channels, eps * 1e9; parameters weight, bias, running mean, running var
    5: ("maxpool2d", 4),  # kh, kw, stride h, w
    6: ("avgpool2d", 4),
    7: ("globalmax", 0),  # AdaptiveMaxPool2d(1)
    8: ("globalavg", 0),  # AdaptiveAvgPool2d(1)
    9: ("flatten", 0),
    10: ("identity", 0),  # Dropout in eval mode
}
CODES = {name: code for code, (name, _) in LAYERS.items()}
MAX_LAYERS = 64
MAX_SETTING = {"conv2d": (4096, 4096, 15, 15, 15, 15, 15, 15), "maxpool2d": (64,) * 4, "avgpool2d": (64,) * 4}
MAX_WORK = 2e9  # multiply-adds the grader spends on one evaluation; a model that needs more is refused
# the largest array the grader makes while evaluating (a batch's activations, a convolution's copied windows):
# inputs go through a batch at a time within it; a model whose one input needs more is refused
MAX_ARRAY_BYTES = 64 * 2**20


def _numpy(tensor) -> np.ndarray:
    return np.asarray(
        tensor.detach().cpu().double().numpy() if hasattr(tensor, "detach") else tensor, np.float64
    )


def _pair(value) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def model_as_data(model) -> tuple[list[list], list[np.ndarray]]:
    """``(layers, parameters)`` of a model; TypeError for one that cannot be described here."""
    params = getattr(model, "params", None)
    if isinstance(params, dict) and {"W1", "b1", "W2", "b2"} <= set(params):
        w1, b1, w2, b2 = (_numpy(params[k]) for k in ("W1", "b1", "W2", "b2"))
        return [["affine", *w1.shape], ["relu"], ["affine", *w2.shape]], [w1, b1, w2, b2]
    if not (type(model).__name__ == "Sequential" and type(model).__module__.startswith("torch")):
        raise TypeError(
            "the grader evaluates an nn.Sequential (or a two-layer net with .params), not this model"
        )
    layers, parts = [], []
    for layer in model:
        layers.append(_layer(layer, parts))
    return layers, parts


def _layer(layer, parts: list) -> list:
    kind = type(layer).__name__
    if kind == "Linear" and layer.bias is not None:
        weight = _numpy(layer.weight)
        parts += [weight.T, _numpy(layer.bias)]
        return ["affine", weight.shape[1], weight.shape[0]]
    if kind == "Conv2d" and layer.bias is not None and layer.groups == 1 and _pair(layer.dilation) == (1, 1):
        if layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            raise TypeError("the grader evaluates Conv2d with numeric zero padding")
        parts += [_numpy(layer.weight), _numpy(layer.bias)]
        return [
            "conv2d",
            layer.in_channels,
            layer.out_channels,
            *layer.kernel_size,
            *layer.stride,
            *layer.padding,
        ]
    if kind in ("BatchNorm1d", "BatchNorm2d") and layer.affine and layer.track_running_stats:
        parts += [_numpy(t) for t in (layer.weight, layer.bias, layer.running_mean, layer.running_var)]
        return ["batchnorm", layer.num_features, round(layer.eps * 1e9)]
    if kind in ("MaxPool2d", "AvgPool2d") and _pair(layer.padding) == (0, 0) and not layer.ceil_mode:
        if kind == "MaxPool2d" and _pair(layer.dilation) != (1, 1):
            raise TypeError("the grader evaluates MaxPool2d without dilation")
        stride = layer.stride if layer.stride is not None else layer.kernel_size
        return [kind.lower(), *_pair(layer.kernel_size), *_pair(stride)]
    if kind in ("AdaptiveMaxPool2d", "AdaptiveAvgPool2d") and _pair(layer.output_size) == (1, 1):
        return ["globalmax" if "Max" in kind else "globalavg"]
    if kind == "Flatten" and layer.start_dim == 1 and layer.end_dim == -1:
        return ["flatten"]
    if kind == "ReLU":
        return ["relu"]
    if kind in ("Dropout", "Dropout2d", "Identity"):
        return ["identity"]
    raise TypeError(
        f"the grader cannot evaluate a {kind} layer as configured; build the model from Linear, Conv2d, "
        "BatchNorm1d/2d, ReLU, MaxPool2d, AvgPool2d, AdaptiveMax/AvgPool2d(1), Flatten and Dropout"
    )


def encode(layers: list[list], parts: list[np.ndarray]) -> np.ndarray:
    spec = [float(n) for name, *settings in layers for n in (CODES[name], *settings)]
    flat = [np.ravel(p).astype(np.float64) for p in parts]
    return np.concatenate([[float(len(spec))], spec, *flat]) if flat else np.array([float(len(spec)), *spec])


def decode(value) -> tuple[list[list], np.ndarray]:
    """``(layers, parameters)`` from a recorded vector; ValueError when it is not one."""
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind != "f" or value.size < 1 or not np.isfinite(value[0]):
        raise ValueError("not a model: expected one vector of numbers")
    size = int(value[0])
    if not (0 < size <= 9 * MAX_LAYERS and size < value.size) or value[0] != size:
        raise ValueError("not a model: the description is malformed")
    spec, layers, at = value[1 : 1 + size], [], 0
    while at < size:
        code = spec[at]
        if code not in LAYERS or len(layers) >= MAX_LAYERS:
            raise ValueError("not a model: an unknown layer")
        name, count = LAYERS[int(code)]
        settings = spec[at + 1 : at + 1 + count]
        if len(settings) != count or not all(float(s).is_integer() and 0 <= s <= 1e6 for s in settings):
            raise ValueError("not a model: a layer's settings are malformed")
        bounds = MAX_SETTING.get(name, (10**6,) * count)
        if any(s > bound for s, bound in zip(settings, bounds)) or (
            name in MAX_SETTING and 0 in settings[2:6]
        ):
            raise ValueError(f"not a model: a {name} layer's settings are out of range")
        layers.append([name, *(int(s) for s in settings)])
        at += 1 + count
    return layers, value[1 + size :]


def parameter_count(layers: list[list], trainable: bool = False) -> int:
    """How many numbers the layers' parameters take (``trainable``: less batch norm's running statistics)."""
    total = 0
    for name, *s in layers:
        if name == "affine":
            total += s[0] * s[1] + s[1]
        elif name == "conv2d":
            total += s[1] * s[0] * s[2] * s[3] + s[1]
        elif name == "batchnorm":
            total += (2 if trainable else 4) * s[0]
    return total


def predictions(
    layers: list[list], parameters: np.ndarray, inputs: np.ndarray, max_bytes: int = MAX_ARRAY_BYTES
) -> np.ndarray:
    """The class each input gets from the model, computed here; ValueError when the layers and the parameters
    or the inputs do not fit together, or when evaluating them would take more than :data:`MAX_WORK`
    multiply-adds or an array of more than ``max_bytes`` for one input.

    The inputs go through the layers a batch at a time, as many as keep every array a layer makes within
    ``max_bytes`` (a convolution's windows, copied for the product, a few output pixels at a time): the
    memory the evaluation takes is bounded as its work is, whatever the layers' settings."""
    if parameters.size != parameter_count(layers):
        raise ValueError(
            f"the model has {parameters.size} parameters; its layers need {parameter_count(layers)}"
        )
    if not np.all(np.isfinite(parameters)):
        return np.full(len(inputs), -1)
    x = np.asarray(inputs, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"the inputs have shape {x.shape}, not (inputs, features...)")
    try:
        with np.errstate(all="ignore"):
            batch = _batch_size(layers, parameters, x, max_bytes)
            found = []
            for start in range(0, len(x), batch):
                logits = _forward(layers, parameters, x[start : start + batch], max_bytes)
                found.append(np.where(np.all(np.isfinite(logits), axis=1), logits.argmax(axis=1), -1))
    except (ValueError, IndexError) as err:
        raise ValueError(f"the model does not fit its inputs ({err})") from None
    return np.concatenate(found) if found else np.full(0, -1)


def _batch_size(layers: list[list], parameters: np.ndarray, x: np.ndarray, max_bytes: int) -> int:
    """How many inputs go through the layers at a time, found by running them on no input at all (shapes
    only): the work and memory of the whole evaluation are known, and refused, before anything is computed."""
    probe, work, per_input = x[:0], 0.0, _input_bytes(x)
    take = _taker(parameters)
    for name, *s in layers:
        work += _work(name, s, (len(x), *probe.shape[1:]))
        if work > MAX_WORK:
            raise ValueError(f"it takes more than {MAX_WORK:.0e} multiply-adds to evaluate")
        if name == "conv2d" and probe.ndim == 4:  # its zero-padded input
            padded = probe.shape[1] * (probe.shape[2] + 2 * s[6]) * (probe.shape[3] + 2 * s[7])
            per_input = max(per_input, 8 * padded)
        probe = _apply(name, s, probe, take, max_bytes)
        per_input = max(per_input, _input_bytes(probe))
    if probe.ndim != 2:
        raise ValueError(f"the model's output has shape {(len(x), *probe.shape[1:])}, not (inputs, classes)")
    if per_input > max_bytes:
        raise ValueError(f"one input takes an array of more than {max_bytes / 2**20:g} MB in a layer")
    return max(1, max_bytes // max(per_input, 1))


def _input_bytes(x: np.ndarray) -> int:
    """The bytes of one input's part of ``x`` (float64)."""
    return 8 * int(np.prod(x.shape[1:]))


def _taker(parameters: np.ndarray):
    """``take(*shape)``: the next parameters, in the order the layers hold them."""
    taken = 0

    def take(*shape: int) -> np.ndarray:
        nonlocal taken
        n = int(np.prod(shape))
        out = parameters[taken : taken + n].reshape(shape)
        taken += n
        return out

    return take


def _forward(layers: list[list], parameters: np.ndarray, x: np.ndarray, max_bytes: int) -> np.ndarray:
    take = _taker(parameters)
    for name, *s in layers:
        x = _apply(name, s, x, take, max_bytes)
    return x


def _work(name: str, s: list[int], shape: tuple) -> float:
    """About the multiply-adds of one layer on an input of ``shape`` (before it is run)."""
    size = float(np.prod(shape))
    if name == "affine":
        return size / max(s[0], 1) * s[0] * s[1]
    if name == "conv2d" and len(shape) == 4:
        cin, cout, kh, kw, sh, sw, ph, pw = s
        out_h, out_w = (shape[2] + 2 * ph - kh) // sh + 1, (shape[3] + 2 * pw - kw) // sw + 1
        return float(shape[0]) * cout * max(out_h, 0) * max(out_w, 0) * cin * kh * kw + size
    if name in ("maxpool2d", "avgpool2d"):
        return size * s[0] * s[1]
    return size


def _apply(name: str, s: list[int], x: np.ndarray, take, max_bytes: int) -> np.ndarray:
    if name == "affine":
        w, b = take(s[0], s[1]), take(s[1])
        return x @ w + b  # on the last axis, as torch's Linear
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "identity":
        return x
    if name == "flatten":
        return x.reshape(len(x), int(np.prod(x.shape[1:])))  # (-1 cannot size a batch of none)
    if name == "batchnorm":
        weight, bias, mean, var = take(s[0]), take(s[0]), take(s[0]), take(s[0])
        shape = (1, s[0]) + (1,) * (x.ndim - 2)
        scale = weight / np.sqrt(var + s[1] / 1e9)
        return (x - mean.reshape(shape)) * scale.reshape(shape) + bias.reshape(shape)
    if name == "conv2d":
        cin, cout, kh, kw, sh, sw, ph, pw = s
        w, b = take(cout, cin, kh, kw), take(cout)
        if x.ndim != 4 or x.shape[1] != cin:
            raise ValueError(f"conv2d expects {cin} channels, got shape {x.shape}")
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return _convolve(windows, w, max_bytes) + b.reshape(1, -1, 1, 1)
    if name in ("maxpool2d", "avgpool2d"):
        kh, kw, sh, sw = s
        windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return windows.max(axis=(4, 5)) if name == "maxpool2d" else windows.mean(axis=(4, 5))
    if name in ("globalmax", "globalavg"):
        pooled = x.max(axis=(2, 3)) if name == "globalmax" else x.mean(axis=(2, 3))
        return pooled[:, :, None, None]
    raise ValueError(f"unknown layer {name!r}")


def _convolve(windows: np.ndarray, w: np.ndarray, max_bytes: int) -> np.ndarray:
    """``einsum("nchwij,ocij->nohw")`` of a convolution's windows (a view, ``(n, in, out_h, out_w, kh, kw)``)
    and its weights, a block of output pixels at a time: the product copies the windows it is given, ``kh *
    kw`` times the input's size, so each block is as many pixels (whole inputs, else rows of one input, else
    part of a row) as keep that copy, and the block's output, within ``max_bytes``."""
    n, cin, out_h, out_w, kh, kw = windows.shape
    pixels = max(1, max_bytes // (8 * max(cin * kh * kw, w.shape[0])))
    images = max(1, pixels // max(out_h * out_w, 1))
    rows = min(out_h, max(1, pixels // max(out_w, 1)))
    columns = min(out_w, pixels)
    out = np.empty((n, w.shape[0], out_h, out_w))
    for i in range(0, n, images):
        for r in range(0, out_h, rows):
            for c in range(0, out_w, columns):
                block = windows[i : i + images, :, r : r + rows, c : c + columns]
                out[i : i + images, :, r : r + rows, c : c + columns] = np.einsum(
                    "nchwij,ocij->nohw", block, w, optimize=True
                )
    return out
