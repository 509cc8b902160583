"""Lecture 7's self-checks reject wrong answers and stubs; its slow dataset works in DataLoader worker
processes.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlcourse import check
from dlcourse.exercises.l07 import SlowDataset


def stub(*_args, **_kwargs):
    raise NotImplementedError


# A dataset of sliding windows


class OneTooMany(Dataset):
    def __init__(self, series, window):
        self.series, self.window = series, window

    def __len__(self):
        return len(self.series) - self.window + 1

    def __getitem__(self, i):
        return self.series[i : i + self.window], self.series[i + self.window]


class TargetInsideTheWindow(Dataset):
    def __init__(self, series, window):
        self.series, self.window = series, window

    def __len__(self):
        return len(self.series) - self.window

    def __getitem__(self, i):
        return self.series[i : i + self.window], self.series[i + self.window - 1]


class TargetAsOneElementTensor(Dataset):
    def __init__(self, series, window):
        self.series, self.window = series, window

    def __len__(self):
        return len(self.series) - self.window

    def __getitem__(self, i):
        return self.series[i : i + self.window], self.series[i + self.window : i + self.window + 1]


class StubDataset(Dataset):
    def __init__(self, series, window):
        pass

    def __len__(self):
        raise NotImplementedError

    def __getitem__(self, i):
        raise NotImplementedError


@pytest.mark.parametrize(
    "wrong", [stub, StubDataset, OneTooMany, TargetInsideTheWindow, TargetAsOneElementTensor]
)
def test_window_dataset_fails_a_wrong_answer(wrong):
    assert not check("l07.window_dataset", wrong, show=False).passed


# A reproducibly shuffled loader


def does_not_shuffle(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size)


def seeds_the_global_generator(dataset, batch_size, seed):
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def one_permutation_for_every_epoch(dataset, batch_size, seed):
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    return DataLoader(dataset, batch_size=batch_size, sampler=order)


def ignores_the_batch_size(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "wrong",
    [
        stub,
        does_not_shuffle,
        seeds_the_global_generator,
        one_permutation_for_every_epoch,
        ignores_the_batch_size,
    ],
)
def test_seeded_loader_fails_a_wrong_answer(wrong):
    assert not check("l07.seeded_loader", wrong, show=False).passed


# Mean and standard deviation, batch by batch


def averages_batch_statistics(loader):
    means, stds = zip(*[(x.mean(dim=0), x.std(dim=0, correction=0)) for x, _ in loader])
    return torch.stack(means).mean(dim=0), torch.stack(stds).mean(dim=0)


def unbiased_std(loader):
    x = torch.cat([x for x, _ in loader])
    return x.mean(dim=0), x.std(dim=0)


def over_all_features(loader):
    x = torch.cat([x for x, _ in loader])
    return x.mean(), x.std(correction=0)


@pytest.mark.parametrize("wrong", [stub, averages_batch_statistics, unbiased_std, over_all_features])
def test_streaming_mean_std_fails_a_wrong_answer(wrong):
    assert not check("l07.streaming_mean_std", wrong, show=False).passed


# The lecture's slow dataset


def test_slow_dataset_waits_and_passes_items_through():
    base = TensorDataset(torch.arange(10.0), torch.arange(10))
    slow = SlowDataset(base, delay=0.01)
    assert len(slow) == 10
    x, label = slow[3]
    assert x.item() == 3.0 and label.item() == 3


# spawn (macOS, Windows) imports the class in fresh interpreters: seconds, hence slow.
@pytest.mark.parametrize("start_method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_slow_dataset_works_in_worker_processes(start_method):
    base = TensorDataset(torch.arange(12.0), torch.arange(12))
    loader = DataLoader(
        SlowDataset(base, delay=0.0), batch_size=4, num_workers=2, multiprocessing_context=start_method
    )
    labels = torch.cat([labels for _, labels in loader])
    assert labels.tolist() == list(range(12))
