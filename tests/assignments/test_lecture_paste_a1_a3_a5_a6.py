"""Lecture-paste samples of A1, A3, A5 and A6: the lectures' code pasted into each assignment's answer cells, as a
student who copies the lecture would hand it in (adapted only to the signatures; nothing where the lecture has
nothing). Each must stay below 40 points: the assignments ask for the lectures' ideas applied, not pasted.

The samples are made from the releases, so they follow the assignments; after ``python -m autograder check <AID>
--update`` rewrite them with ``.venv/bin/python -m tests.assignments.test_lecture_paste_a1_a3_a5_a6``.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import Course, is_solution, nbgrader_meta
from tests.fixtures.lecture_paste import MAIN, SAMPLE, grade_pasted, pasted_notebook, write_samples

# assignment -> answer cell -> the lecture's code for it, adapted only to the signature
PASTED = {
    "A1": {
        "two_layer_mse": """
import numpy as np


def two_layer_mse(x, y, w1, w2):
    # lecture 2, section 2: forward and backward of the running example (the sum of squares, as the lecture has it)
    h = x @ w1
    h_relu = np.maximum(h, 0)
    y_pred = h_relu @ w2
    loss = np.sum((y_pred - y) ** 2)
    grad_y_pred = 2.0 * (y_pred - y)
    dw2 = h_relu.T @ grad_y_pred
    grad_h = grad_y_pred @ w2.T
    grad_h[h <= 0] = 0
    dw1 = x.T @ grad_h
    return loss, dw1, dw2
""",
    },
    "A3": {
        "two_layer_net": """
class TwoLayerNet(nn.Module):
    # lecture 5, section 2
    def __init__(self, D_in, H, D_out):
        super().__init__()
        self.linear1 = nn.Linear(D_in, H)
        self.linear2 = nn.Linear(H, D_out)

    def forward(self, x):
        h_relu = self.linear1(x).clamp(min=0)
        return self.linear2(h_relu)
""",
        "deep_net": """
class ParallelBlock(nn.Module):
    # lecture 5, section 3
    def __init__(self, D_in, D_out):
        super().__init__()
        self.linear1 = nn.Linear(D_in, D_out)
        self.linear2 = nn.Linear(D_in, D_out)

    def forward(self, x):
        h1 = self.linear1(x)
        h2 = self.linear2(x)
        return (h1 * h2).clamp(min=0)


def make_deep_net(D_in, H, D_out, depth):
    # lecture 5, section 3: the lecture's two blocks, as a loop over depth
    blocks = [ParallelBlock(D_in, H)] + [ParallelBlock(H, H) for _ in range(depth - 1)]
    return nn.Sequential(*blocks, nn.Linear(H, D_out))
""",
        "digits_dataset": """
from dlcourse.data import load_digits_split


class DigitsDataset(Dataset):
    # lecture 7, section 2 (the lecture has no class selection)
    def __init__(self, split="train", classes=None, transform=None):
        digits = load_digits_split()
        images, labels = (
            (digits.X_train, digits.y_train) if split == "train" else (digits.X_test, digits.y_test)
        )
        self.images = torch.tensor(images)
        self.labels = torch.tensor(labels)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]
""",
        "to_device": """
def to_device(batch, device):
    # lecture 7, training through a DataLoader: xb, yb = xb.to(device, non_blocking=True), yb.to(...)
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return tuple(t.to(device, non_blocking=True) for t in batch)
""",
        "train": """
def train(model, loader, optimizer, loss_fn, device, epochs):
    # lecture 7, training on the digits through a DataLoader (lecture 5: the model moved with .to(device))
    model.to(device)
    losses = []
    for _ in range(epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
    return losses
""",
        "checkpoint": """
def save_checkpoint(model, optimizer, epoch, path):
    # lecture 5, section 3: torch.save of state_dicts (the optimizer's too, and the epoch)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)


def load_checkpoint(path, model, optimizer):
    # lecture 5, section 3: load_state_dict of what torch.load reads back
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"]
""",
        "flop_count": """
def matmul_flop_count(n, m, k):
    # lecture 10, exercise 2: n * m dot products of length k, a multiply and an add each
    return 2 * n * m * k
""",
        "matmul_flops": """
def matmul_flops(n, device="cpu", repeat=3, sync=synchronize, clock=time.perf_counter, matmul=torch.matmul):
    # lecture 3: matmul_timing, timed by time_it (warmed up and synchronised)
    from dlcourse.measure import time_it

    p = torch.randn(n, n, device=device)
    q = torch.randn(n, n, device=device)
    timing = time_it(lambda: matmul(p, q), repeat=repeat, warmup=2, device=device)
    return matmul_flop_count(n, n, n) / timing.median
""",
    },
    "A5": {
        "loss_scaler": '''
class LossScaler:
    """Dynamic loss scaling, with the rules of torch.amp.GradScaler."""

    # lecture 12, exercise 1: skip the step and halve the scale on an inf or a nan
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale = init_scale
        self.good_steps = 0

    def scale_loss(self, loss):
        return loss * self.scale

    def unscale_(self, optimizer):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        for g in grads:
            g.div_(self.scale)
        return not all(torch.isfinite(g).all() for g in grads)

    def update(self, found_inf):
        if found_inf:
            self.scale = self.scale / 2

    def step(self, optimizer):
        found_inf = self.unscale_(optimizer)
        if not found_inf:
            optimizer.step()
        self.update(found_inf)
        return not found_inf
''',
        "autocast_step": """
def amp_dtype(device):
    # lecture 12, section 2
    return torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16


def accumulated_step(model, micro_batches, loss_fn, optimizer, scaler=None, max_norm=None):
    # lecture 12, section 2: "the standard mixed-precision loop, worth copying", one batch at a time
    for x, y in micro_batches:
        with torch.autocast(x.device.type, dtype=amp_dtype(x.device)):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale_loss(loss).backward()
            scaler.step(optimizer)
    return loss.detach(), 0.0
""",
        "median_time": """
def event_times(fn, device="cpu", warmup=2, repeat=5, clock=time.perf_counter):
    # lecture 12, exercise 2: synchronise after the warm-up and after every timed call
    def sync():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        sync()
        times.append(clock() - start)
    return times
""",
        "activation_bytes": """
def mlp_activation_bytes(batch, widths, bytes_per_element, activation="relu"):
    # lecture 12, exercise 3
    return batch * bytes_per_element * (widths[0] + sum(widths[1:-1]))


def largest_batch(budget_bytes, widths, bytes_per_element, activation="relu"):
    return int(budget_bytes // mlp_activation_bytes(1, widths, bytes_per_element, activation))
""",
        "checkpointed_mlp": '''
class CheckpointedMLP(nn.Module):
    """make_block_mlp(width, hidden, depth, d_out) in blocks, each block's inside recomputed in the backward pass."""

    # lecture 12, section 4: deep_mlp.py's blocks and loss_of (residual blocks, as the lecture has them)
    def __init__(self, width, hidden, depth, d_out):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width)) for _ in range(depth)
        )
        self.head = nn.Linear(width, d_out)

    def forward(self, x):
        h = x
        for block in self.blocks:
            h = h + checkpoint(block, h, use_reentrant=False)
        return self.head(h)
''',
    },
    "A6": {
        "conv2d_forward": """
def conv2d_forward(x, weight, bias=None, stride=1, padding=0, dilation=1):
    # lecture 13, exercise 1: square stride and padding, no dilation
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    padded = F.pad(x, (padding, padding, padding, padding))
    patches = F.unfold(padded, (kh, kw), stride=stride)
    out = weight.reshape(out_channels, -1) @ patches + bias[:, None]
    return out.reshape(n, out_channels, out_h, out_w)
""",
        "cnn": """
def make_cnn(n_classes=4):
    # lecture 13, section 6: cnn()
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(32, n_classes),
    )


def train_cnn(model, X_train, y_train, X_val, y_val):
    # lecture 13, section 6: the plain training, 20 epochs at 3e-3
    return train_plain(model, X_train, y_train, epochs=20, lr=3e-3)
""",
    },
}
AIDS = sorted(PASTED)


def lecture_paste(aid: str, course: Course = MAIN) -> str:
    """The release of ``aid`` with the lectures' code in the answer cells it has code for: the sample's file text."""
    return pasted_notebook(aid, PASTED[aid], course)


@pytest.mark.parametrize("aid", AIDS)
def test_every_pasted_cell_is_an_answer_cell_of_the_release(aid):
    release = nbformat.read(str(MAIN.release_notebook(aid)), as_version=4)
    answers = {
        nbgrader_meta(c)["grade_id"] for c in release.cells if is_solution(c) and c.cell_type == "code"
    }
    assert set(PASTED[aid]) <= answers


@pytest.mark.parametrize("aid", AIDS)
def test_committed_lecture_paste_is_current(aid):
    path = MAIN.samples(aid) / f"{SAMPLE}.ipynb"
    assert path.read_text(encoding="utf-8") == lecture_paste(aid), (
        "run `.venv/bin/python -m tests.assignments.test_lecture_paste_a1_a3_a5_a6`"
    )


def grade_lecture_paste(aid, tmp_path):
    return grade_pasted(aid, lecture_paste(aid), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("aid", AIDS)
def test_lecture_paste_earns_well_below_a_pass(aid, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = grade_lecture_paste(aid, tmp_path)
    assert result.status != "error", result.reason
    assert result.score < 40, (aid, result.score, result.reason)


if __name__ == "__main__":
    write_samples({aid: lecture_paste(aid) for aid in AIDS})
