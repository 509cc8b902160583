"""The lectures' speed claims, measured outside the notebooks with warm-up and synchronisation.

Every timing uses ``dlcourse.measure.time_it`` (untimed warm-up calls, then repeats, the device
synchronised around each), except where the lecture's own claim is about first calls (``tf.function``'s
tracing, ``torch.compile``'s compile), which are timed as the lecture times them. Each claim records the
median and the best repeat; on a shared machine the best is the figure least disturbed by other programs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import timeit
import warnings
from pathlib import Path

import numpy as np

from dlcourse import measure
from dlcourse.data import D_IN, D_OUT, H, N, two_layer_data, two_layer_loss
from dlcourse.measure import Timing, time_it


def timing(t: Timing) -> dict:
    return {"median_s": t.median, "best_s": t.best, "repeats": len(t.times)}


def claim(name: str, title: str, rows: list[dict], ratios: dict | None = None, **extra) -> dict:
    return {"name": name, "title": title, "rows": rows, "ratios": ratios or {}, "skipped": None, **extra}


def skipped(name: str, title: str, reason: str) -> dict:
    return {"name": name, "title": title, "rows": [], "ratios": {}, "skipped": reason}


def running_example(dtype=np.float32) -> tuple[np.ndarray, ...]:
    return two_layer_data(dtype=dtype)


def numpy_vs_torch(quick: bool) -> dict:
    """Lectures 2-4: one training step of the running example in numpy, torch by hand, torch autograd."""
    import torch

    repeat = 10 if quick else 50
    lr = 1e-6

    def numpy_step(x, y, w1, w2):
        def step():
            h = x @ w1
            h_relu = np.maximum(h, 0)
            grad_y_pred = 2.0 * (h_relu @ w2 - y)
            grad_w2 = h_relu.T @ grad_y_pred
            grad_h = (grad_y_pred @ w2.T) * (h > 0)
            w1[...] -= lr * (x.T @ grad_h)  # in place: the arrays belong to the enclosing call
            w2[...] -= lr * grad_w2

        return step

    x, y, w1, w2 = (torch.from_numpy(a) for a in running_example())

    def torch_step():
        h = x.mm(w1)
        h_relu = h.clamp(min=0)
        grad_y_pred = 2.0 * (h_relu.mm(w2) - y)
        grad_w2 = h_relu.t().mm(grad_y_pred)
        grad_h = grad_y_pred.mm(w2.t()) * (h > 0)
        w1.sub_(lr * x.t().mm(grad_h))
        w2.sub_(lr * grad_w2)

    aw1, aw2 = w1.clone().requires_grad_(), w2.clone().requires_grad_()

    def autograd_step():
        loss = two_layer_loss(x, y, aw1, aw2)
        loss.backward()
        with torch.no_grad():
            for w in (aw1, aw2):
                w -= lr * w.grad
                w.grad = None

    results = {
        "numpy float64 (lecture 2)": time_it(
            numpy_step(*running_example(np.float64)), repeat=repeat, warmup=5
        ),
        "numpy float32": time_it(numpy_step(*running_example()), repeat=repeat, warmup=5),
        "torch float32, gradients by hand (lecture 3)": time_it(torch_step, repeat=repeat, warmup=5),
        "torch float32, autograd (lecture 4)": time_it(autograd_step, repeat=repeat, warmup=5),
    }
    rows = [{"label": label, **timing(t)} for label, t in results.items()]
    ratios = {
        f"{base} / {label}": results[base].median / t.median
        for base in ("numpy float64 (lecture 2)", "numpy float32")
        for label, t in results.items()
        if "torch" in label
    }
    return claim("numpy_vs_torch", f"one training step, N, D_in, H, D_out = {N}, {D_IN}, {H}, {D_OUT}, on the CPU",
                 rows, ratios, torch_threads=torch.get_num_threads())  # fmt: skip


def loops_vs_vectorised(quick: bool) -> dict:
    """Lecture 2: Python loops against numpy for the running example's second layer and its ReLU."""
    rng = np.random.default_rng(0)
    h = rng.standard_normal((N, H))
    w2 = rng.standard_normal((H, D_OUT))
    h_relu = np.maximum(h, 0)
    h_list, w2_list, h_relu_list = h.tolist(), w2.tolist(), h_relu.tolist()

    def matmul_loops():
        return [[sum(row[k] * w2_list[k][j] for k in range(H)) for j in range(D_OUT)] for row in h_relu_list]

    results = {
        "h_relu @ w2, Python loops": time_it(matmul_loops, repeat=3, warmup=1),
        "h_relu @ w2, numpy": time_it(lambda: h_relu @ w2, repeat=50, warmup=5),
        "ReLU, Python loops": time_it(
            lambda: [[v if v > 0 else 0.0 for v in r] for r in h_list], repeat=5, warmup=1
        ),
        "ReLU, np.maximum": time_it(lambda: np.maximum(h, 0), repeat=50, warmup=5),
    }
    rows = [{"label": label, **timing(t)} for label, t in results.items()]
    ratios = {
        "matmul: loops / numpy": results["h_relu @ w2, Python loops"].median
        / results["h_relu @ w2, numpy"].median,
        "ReLU: loops / numpy": results["ReLU, Python loops"].median / results["ReLU, np.maximum"].median,
    }
    return claim("loops_vs_vectorised", "Python loops against vectorised numpy (float64, as in lecture 2)", rows,
                 ratios, published="lecture 2: loops hundreds to thousands of times slower")  # fmt: skip


def script(fn):
    """``torch.jit.script`` with its deprecation warning silenced, and only that warning."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.script` is deprecated", category=DeprecationWarning
        )
        return torch.jit.script(fn)


def static_graphs(quick: bool) -> dict:
    """Lecture 8: eager against TorchScript against torch.compile, on the running example's loss and on an
    elementwise sin + cos that compile fuses into one kernel. torch.compile's first call is timed too."""
    import torch

    x, y, w1, w2 = (torch.from_numpy(a) for a in running_example())
    n = 2**16 if quick else 2**22
    a, b = torch.randn(n), torch.randn(n)

    def sin_cos(a, b):
        return torch.sin(a) + torch.cos(b)

    def scriptable_loss(x, y, w1, w2):  # dlcourse.data.two_layer_loss, in the subset TorchScript compiles
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()

    workloads = {
        "two-layer loss": (scriptable_loss, (x, y, w1, w2)),
        f"sin(a) + cos(b), n = 2**{n.bit_length() - 1}": (sin_cos, (a, b)),
    }
    rows, ratios, first_calls = [], {}, {}
    repeat = 5 if quick else 20
    for name, (fn, args) in workloads.items():
        variants = {"eager": fn, "torch.jit.script": script(fn)}
        if not quick:
            compiled = torch.compile(fn)
            start = time.perf_counter()
            compiled(*args)
            first_calls[f"{name}: torch.compile first call"] = time.perf_counter() - start
            variants["torch.compile"] = compiled
        measured = {
            label: time_it(lambda f=f, args=args: f(*args), repeat=repeat, warmup=3, number=5)
            for label, f in variants.items()
        }
        rows += [{"label": f"{name}: {label}", **timing(t)} for label, t in measured.items()]
        for label, t in measured.items():
            if label != "eager":
                ratios[f"{name}: eager / {label} (best repeats)"] = measured["eager"].best / t.best
    notes = "--quick: torch.compile skipped (its first call costs 12-15 s cold)" if quick else None
    return claim("static_graphs", "eager against TorchScript and torch.compile, CPU, float32", rows, ratios,
                 first_call_seconds=first_calls, note=notes)  # fmt: skip


def tf_function(quick: bool) -> dict:
    """Lecture 9: a small Keras model's forward pass, eager against tf.function, 10 and 1000 calls each with
    a new tf.function (so its first call traces), next to the figures published from Colab in 2020."""
    title = "Keras forward pass (Dense(100, relu), Dense(1000) on 64 x 1000, the source's shape), eager against tf.function"
    if quick:
        return skipped(
            "tf_function", title, "--quick: TensorFlow not imported (its import alone takes seconds)"
        )
    from dlcourse._lazy import quiet

    quiet()
    import keras
    import tensorflow as tf

    model = keras.Sequential(  # lecture 9's model, the shape of the source lectures' example
        [keras.Input(shape=(1000,)), keras.layers.Dense(100, activation="relu"), keras.layers.Dense(1000)]
    )
    inputs = tf.random.normal((64, 1000))
    model(inputs)  # a first eager call, so that no timing includes the model's set-up
    rows, ratios = [], {}
    for calls in (10, 1000):
        graph = tf.function(model)
        eager_s = timeit.timeit(lambda: model(inputs), number=calls)
        graph_s = timeit.timeit(lambda g=graph: g(inputs), number=calls)
        rows += [
            {"label": f"{calls} calls, eager", "total_s": eager_s},
            {"label": f"{calls} calls, tf.function", "total_s": graph_s},
        ]
        ratios[f"{calls} calls: eager / tf.function"] = eager_s / graph_s
    published = {"1000 calls, eager": 2.36, "1000 calls, tf.function": 1.17}
    for row in rows:
        row["published_s"] = published.get(row["label"])
    return claim("tf_function", title, rows, ratios, published="Colab, April 2020: 1000 calls 2.36 s eager, 1.17 s "
                 "tf.function (2.0x); 10 calls: tf.function slower (tracing)")  # fmt: skip


def dataloader_workers(quick: bool) -> dict:
    """Lecture 10: an epoch of the running example's net fed from one file per example, the DataLoader with
    0 against 2 worker processes (and, for scale, the data already in RAM). Training on one thread."""
    import torch
    from torch import nn

    examples = 256 if quick else 1024
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((examples, D_IN)).astype(np.float32)
    targets = torch.from_numpy(rng.standard_normal((examples, D_OUT)).astype(np.float32))
    folder = Path(tempfile.mkdtemp(prefix="bench-files-"))
    for i, row in enumerate(inputs):
        np.save(folder / f"{i:05d}.npy", row)

    class FileDataset(torch.utils.data.Dataset):
        def __init__(self):
            self.files = sorted(folder.glob("*.npy"))

        def __len__(self):
            return len(self.files)

        def __getitem__(self, i):
            return torch.from_numpy(np.load(self.files[i])), targets[i]

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, H), nn.ReLU(), nn.Linear(H, D_OUT))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def epoch(loader):
        def run():
            for xb, yb in loader:
                loss = nn.functional.mse_loss(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        return run

    def loader(dataset, workers=0, persistent=False):
        return torch.utils.data.DataLoader(
            dataset, batch_size=64, num_workers=workers, persistent_workers=persistent
        )

    in_ram = torch.utils.data.TensorDataset(torch.from_numpy(inputs), targets)
    loaders = {
        "data in RAM, 0 workers": loader(in_ram),
        "one file per example, 0 workers": loader(FileDataset()),
        "one file per example, 2 workers (started each epoch)": loader(FileDataset(), 2),
        "one file per example, 2 persistent workers": loader(FileDataset(), 2, persistent=True),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        repeat = 2 if quick else 5
        results = {label: time_it(epoch(ld), repeat=repeat, warmup=1) for label, ld in loaders.items()}
    finally:
        torch.set_num_threads(threads)
        loaders.clear()  # the persistent workers stop with their loader
        shutil.rmtree(folder, ignore_errors=True)
    rows = [{"label": label, **timing(t)} for label, t in results.items()]
    zero = results["one file per example, 0 workers"].median
    ratios = {f"0 workers / {label}": zero / t.median for label, t in results.items() if "2 " in label}
    return claim(
        "dataloader_workers",
        f"an epoch of {examples} examples in batches of 64, DataLoader workers",
        rows,
        ratios,
    )


def matmul_cpu(quick: bool) -> dict:
    """Lecture 10: float32 n x n matrix products on the CPU against the estimated peak. Both the median and
    the best repeat are kept: on a busy machine a multi-threaded product whose threads do not all get a
    core waits for the slowest one, and the median can fall far below the best."""
    import torch

    cpu = measure.cpu_info()
    peak = cpu.peak_fp32()
    sizes = [64, 128] if quick else [64, 128, 256, 512, 1024]
    rows = []
    # One library at a time, as lecture 10 does: numpy's and torch's thread pools would otherwise compete for
    # the same cores (a pool's threads keep spinning for a while after each call).
    for library in ("numpy", "torch"):
        for n in sizes:
            repeat = 20 if n <= 256 else 5
            a, b = (np.random.default_rng(i).standard_normal((n, n)).astype(np.float32) for i in range(2))
            if library == "torch":
                a, b = torch.from_numpy(a), torch.from_numpy(b)
            t = time_it(lambda a=a, b=b: a @ b, repeat=repeat, warmup=2)
            rate, best = measure.matmul_flop_count(n) / t.median, measure.matmul_flop_count(n) / t.best
            rows.append({"label": f"n = {n}, {library}", "n": n, "library": library, "flops": rate, "flops_best": best,
                         "fraction_of_peak": rate / peak if peak else None})  # fmt: skip
    best = max(r["flops_best"] for r in rows)
    return claim("matmul_cpu", f"float32 matmul on {cpu.cores} CPU cores ({cpu.model}, {cpu.vector_isa})", rows,
                 {"best repeat / estimated peak": best / peak} if peak else {}, peak_flops=peak,
                 peak_formula=f"{cpu.cores} cores x {cpu.ghz} GHz x {cpu.fp32_flops_per_cycle} FLOP/cycle",
                 torch_threads=torch.get_num_threads())  # fmt: skip


def gpu_rows(quick: bool) -> dict:
    """Lecture 10 on a GPU: matmul FLOP/s per format against the published peak; pinned against pageable copies."""
    import torch

    title = "GPU: matmul in fp32, tf32, fp16, bf16 against the published peak; host-to-device copies"
    if not torch.cuda.is_available():
        return skipped("gpu", title, "no CUDA GPU on this machine: the GPU rows were not measured")
    props = torch.cuda.get_device_properties(0)
    peak = measure.gpu_peak(props.name)
    n = 1024 if quick else (8192 if props.total_memory > 20 * 2**30 else 4096)
    formats = [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("fp16", torch.float16, None),
               ("bf16", torch.bfloat16, None)]  # fmt: skip
    rows = []
    for label, dtype, tf32 in formats:
        if label in ("tf32", "bf16") and props.major < 8:
            rows.append(
                {
                    "label": label,
                    "skipped": f"needs compute capability 8.0, this GPU has {props.major}.{props.minor}",
                }
            )
            continue
        rate = measure.matmul_flops(n, "cuda", dtype=dtype, repeat=10, allow_tf32=tf32)
        published = getattr(peak, label, None) if peak else None
        rows.append({"label": f"{label}, n = {n}", "flops": rate, "published_tflops": published,
                     "fraction_of_peak": rate / (published * 1e12) if published else None})  # fmt: skip
    for pinned in (False, True):
        rate = measure.transfer_bandwidth(64 * 2**20, pinned=pinned, device="cuda")
        rows.append({"label": f"host to device, {'pinned' if pinned else 'pageable'}", "bytes_per_s": rate})
    return claim("gpu", f"{title} ({props.name})", rows, published=peak.source if peak else None)


CLAIMS = (
    numpy_vs_torch,
    loops_vs_vectorised,
    static_graphs,
    tf_function,
    dataloader_workers,
    matmul_cpu,
    gpu_rows,
)


def run_claims(quick: bool = False) -> dict:
    """The claims section of a run: one entry per claim; a claim that fails is recorded with its error."""
    out = []
    for measure_claim in CLAIMS:
        print(f"[{time.strftime('%H:%M:%S')}] claims: {measure_claim.__name__}", flush=True)
        try:
            out.append(measure_claim(quick))
        except Exception as err:
            name = measure_claim.__name__
            out.append({"name": name, "title": name, "rows": [], "ratios": {}, "skipped": None,
                        "error": f"{type(err).__name__}: {str(err)[:300]}"})  # fmt: skip
    return {"claims": out}
