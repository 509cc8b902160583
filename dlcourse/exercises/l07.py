"""Self-checks for lecture 7 (data: ``Dataset``, ``DataLoader``, shuffling, workers), and the lecture's
slow dataset.

The checks compare the student's datasets and loaders with direct indexing of the same tensors and
with statistics computed by torch on all the data at once.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlcourse.selfcheck import Checker


class SlowDataset(Dataset):
    """Wraps a map-style dataset and waits ``delay`` seconds in every ``__getitem__``: a stand-in for a
    dataset that reads and decodes one file per example.

    It lives in a module rather than in the lecture's notebook because ``DataLoader`` workers started
    with ``spawn`` (the default on macOS and Windows) import the dataset's class by name in a fresh
    interpreter, where classes defined in a notebook do not exist. With ``fork`` (Linux, Colab) the
    workers inherit everything, and a class from the notebook would do.
    """

    def __init__(self, base, delay: float = 0.002):
        self.base = base
        self.delay = delay

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index):
        time.sleep(self.delay)
        return self.base[index]


def window_dataset(c: Checker, dataset_class) -> None:
    """``dataset_class(series, window)`` is a ``Dataset`` over a 1-D tensor ``series``: item ``i`` is
    ``(series[i : i + window], series[i + window])``, the window and the value that follows it, for every
    ``i`` whose target exists."""
    series = torch.arange(100, 120, dtype=torch.float32) / 4
    for window in (3, 5):
        dataset = c.call(
            f"dataset_class(series, window={window}) builds a dataset", dataset_class, series, window
        )
        size = c.call(f"len(dataset) runs (window={window})", len, dataset)
        expected_size = len(series) - window
        if not c.true(
            f"len(dataset) == {expected_size} for a series of {len(series)} and window {window}",
            size == expected_size,
            hint=f"got {size}: the last window must still have a value after it",
        ):
            return
        for index in (0, 7, expected_size - 1):
            item = c.call(f"dataset[{index}] runs (window={window})", dataset.__getitem__, index)
            if not c.true(
                f"dataset[{index}] is a pair (inputs, target)",
                isinstance(item, tuple | list) and len(item) == 2,
                hint="return window, target",
            ):
                return
            got_window, got_target = item
            c.close(
                f"dataset[{index}]'s inputs (window={window})", got_window, series[index : index + window]
            )
            c.close(
                f"dataset[{index}]'s target (window={window})",
                np.atleast_1d(np.asarray(got_target, dtype=np.float64)),
                np.atleast_1d(series[index + window].item()),
            )
    loader = DataLoader(dataset, batch_size=4)
    batches = c.call("a DataLoader batches it", lambda: list(loader))
    inputs, targets = batches[0]
    c.true(
        "a batch of 4 has inputs of shape (4, window) and targets of shape (4,)",
        tuple(inputs.shape) == (4, 5) and tuple(targets.shape) == (4,),
        hint=f"got {tuple(inputs.shape)} and {tuple(targets.shape)}: return tensors, the target a 0-d one",
    )


def _epochs(loader, epochs: int = 2) -> list[list[list[int]]]:
    """The items of each batch of each of ``epochs`` passes over a loader of ``TensorDataset(indices)``."""
    return [[[int(i) for i in batch[0]] for batch in loader] for _ in range(epochs)]


def seeded_loader(c: Checker, fn) -> None:
    """``fn(dataset, batch_size, seed)`` returns a ``DataLoader`` that shuffles the dataset in a new order
    every epoch, and in the same sequence of orders every time it is built with the same seed, without
    touching torch's global random state."""
    dataset = TensorDataset(torch.arange(40))
    first = c.call("fn(dataset, batch_size=8, seed=1) runs", fn, dataset, 8, 1)
    again = c.call("building it a second time with seed=1 runs", fn, dataset, 8, 1)
    other = c.call("building it with seed=2 runs", fn, dataset, 8, 2)
    torch.manual_seed(123)  # the global generator moves on between the loaders' epochs
    epochs = c.call("iterating over it runs", _epochs, first)
    torch.rand(5)
    epochs_again, epochs_other = _epochs(again), _epochs(other)
    sizes = [len(batch) for batch in epochs[0]]
    if not c.true("it gives batches of 8", sizes == [8] * 5, hint=f"got batch sizes {sizes}"):
        return
    orders, orders_again, orders_other = (
        [sum(epoch, []) for epoch in run] for run in (epochs, epochs_again, epochs_other)
    )
    c.true(
        "every epoch contains each item exactly once",
        all(sorted(order) == list(range(40)) for order in orders),
    )
    c.true(
        "it shuffles",
        orders[0] != list(range(40)),
        hint="shuffle=True",
    )
    c.true("two epochs come in different orders", orders[0] != orders[1], hint="a new permutation per epoch")
    c.true(
        "the same seed gives the same sequence of epochs",
        orders == orders_again,
        hint="give the DataLoader its own generator: torch.Generator().manual_seed(seed)",
    )
    c.true("another seed gives other orders", orders != orders_other)


def streaming_mean_std(c: Checker, fn) -> None:
    """``fn(loader)`` returns ``(mean, std)`` of the inputs over every example, per feature, computed batch
    by batch from a loader of ``(x, label)`` batches: tensors of the shape of one example. ``std`` divides
    by the number of examples (``correction=0``)."""
    rng = np.random.default_rng(70)
    x = torch.tensor(rng.normal(3.0, 2.0, size=(50, 4)) * np.arange(1, 5), dtype=torch.float64)
    x[-2:] += 40.0  # the last, short batch differs from the rest: averaging batch statistics shows
    dataset = TensorDataset(x, torch.zeros(50, dtype=torch.int64))
    loader = DataLoader(dataset, batch_size=16)  # batches of 16, 16, 16 and 2
    result = c.call("fn(loader) runs", fn, loader)
    if not c.true(
        "it returns two values",
        isinstance(result, tuple | list) and len(result) == 2,
        hint="return mean, std",
    ):
        return
    mean, std = result
    c.close(
        "the mean agrees with x.mean(dim=0) over all 50 examples",
        mean,
        x.mean(dim=0),
        1e-6,
        1e-9,
        hint="per feature: sum over the examples of every batch, then divide by the number of examples "
        "(batches need not be equal in size)",
    )
    c.close(
        "the std agrees with x.std(dim=0, correction=0)",
        std,
        x.std(dim=0, correction=0),
        1e-6,
        1e-9,
        hint="accumulate the sum and the sum of squares; var = E[x^2] - E[x]^2",
    )
