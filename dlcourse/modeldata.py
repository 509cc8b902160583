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


def predictions(layers: list[list], parameters: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """The class each input gets from the model, computed here; ValueError when the layers and the parameters
    or the inputs do not fit together."""
    if parameters.size != parameter_count(layers):
        raise ValueError(
            f"the model has {parameters.size} parameters; its layers need {parameter_count(layers)}"
        )
    if not np.all(np.isfinite(parameters)):
        return np.full(len(inputs), -1)
    x, taken = np.asarray(inputs, dtype=np.float64), 0

    def take(*shape: int) -> np.ndarray:
        nonlocal taken
        n = int(np.prod(shape))
        out = parameters[taken : taken + n].reshape(shape)
        taken += n
        return out

    work = 0.0
    try:
        with np.errstate(all="ignore"):
            for name, *s in layers:
                work += _work(name, s, x.shape)
                if work > MAX_WORK:
                    raise ValueError(f"it takes more than {MAX_WORK:.0e} multiply-adds to evaluate")
                x = _apply(name, s, x, take)
    except (ValueError, IndexError) as err:
        raise ValueError(f"the model does not fit its inputs ({err})") from None
    if x.ndim != 2 or x.shape[0] != len(inputs):
        raise ValueError(f"the model's output has shape {x.shape}, not (inputs, classes)")
    return np.where(np.all(np.isfinite(x), axis=1), x.argmax(axis=1), -1)


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


def _apply(name: str, s: list[int], x: np.ndarray, take) -> np.ndarray:
    if name == "affine":
        w, b = take(s[0], s[1]), take(s[1])
        return x @ w + b  # on the last axis, as torch's Linear
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "identity":
        return x
    if name == "flatten":
        return x.reshape(len(x), -1)
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
        return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True) + b.reshape(1, -1, 1, 1)
    if name in ("maxpool2d", "avgpool2d"):
        kh, kw, sh, sw = s
        windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return windows.max(axis=(4, 5)) if name == "maxpool2d" else windows.mean(axis=(4, 5))
    if name in ("globalmax", "globalavg"):
        pooled = x.max(axis=(2, 3)) if name == "globalmax" else x.mean(axis=(2, 3))
        return pooled[:, :, None, None]
    raise ValueError(f"unknown layer {name!r}")
