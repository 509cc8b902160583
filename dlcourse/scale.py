"""Training on more than one process: DistributedDataParallel in miniature, and TensorBoard logging.

Lecture 11 starts this module twice, as ``torchrun`` would: every process reads ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from its environment, joins a process group on the
``gloo`` backend (CPU, loopback), takes its shard of the running example's batch, runs one forward and
backward pass under ``DistributedDataParallel`` and writes what it saw to ``rank<r>.npz``:

- ``local.<param>``: its own shard's gradient, computed under ``ddp.no_sync()`` (no communication);
- ``synced.<param>``: the gradient after DDP's all-reduce, which is the mean over all processes;
- ``stepped.<param>``: the weights after one SGD step with the synced gradient;
- ``loss``: the mean loss on its shard.

From Python: ``launch(world_size=2, out_dir=...)``. From a shell, on one machine or on a cluster::

    torchrun --nproc_per_node 2 -m dlcourse.scale --out /tmp/ddp
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import types
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlcourse.data import two_layer_data

LEARNING_RATE = 1e-3


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_layer_model(seed: int = 0, dtype: str = "float64"):
    """The running example as a module, ``Linear(D_in, H) -> ReLU -> Linear(H, D_out)`` without biases,
    with the weights ``w1``, ``w2`` of :func:`dlcourse.data.two_layer_data`, and its data, in ``dtype``
    (float64 by default, so that results computed in different orders agree to about 1e-12).

    Returns ``(model, x, y)``; ``model.hidden.weight`` is ``w1.T`` and ``model.out.weight`` is ``w2.T``.
    """
    import torch
    from torch import nn

    x, y, w1, w2 = (torch.from_numpy(a.astype(dtype)) for a in two_layer_data(seed=seed))
    model = nn.Sequential(
        OrderedDict(
            hidden=nn.Linear(w1.shape[0], w1.shape[1], bias=False),
            relu=nn.ReLU(),
            out=nn.Linear(w2.shape[0], w2.shape[1], bias=False),
        )
    ).to(x.dtype)
    with torch.no_grad():
        model.hidden.weight.copy_(w1.T)
        model.out.weight.copy_(w2.T)
    return model, x, y


def shard(n: int, rank: int, world_size: int) -> slice:
    """The contiguous slice of ``n`` examples that process ``rank`` of ``world_size`` trains on."""
    if n % world_size:
        raise ValueError(f"a batch of {n} does not split evenly over {world_size} processes")
    size = n // world_size
    return slice(rank * size, (rank + 1) * size)


def ddp_step(out_dir: str | Path) -> Path:
    """One data-parallel training step of the running example, run inside every process.

    Needs ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` in the environment (``launch`` and
    ``torchrun`` set them). The loss is a *mean* over the shard, so the average of the shards' gradients
    is the gradient of the mean over the whole batch. Returns the file it wrote.
    """
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")  # reads the four variables from the environment
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        model, x, y = two_layer_model(seed=0)
        ddp = DDP(model)  # broadcasts rank 0's weights, then all-reduces gradients in backward()
        part = shard(len(x), rank, world_size)
        record = {}

        with ddp.no_sync():  # gradients stay local: what this process alone would compute
            loss = F.mse_loss(ddp(x[part]), y[part])
            loss.backward()
        record.update({f"local.{name}": p.grad.numpy().copy() for name, p in model.named_parameters()})
        ddp.zero_grad()

        loss = F.mse_loss(ddp(x[part]), y[part])
        loss.backward()  # DDP averages the gradients over all processes while backward runs
        record.update({f"synced.{name}": p.grad.numpy().copy() for name, p in model.named_parameters()})
        torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE).step()
        record.update({f"stepped.{name}": p.detach().numpy().copy() for name, p in model.named_parameters()})
        record["loss"] = np.array(loss.item())

        path = Path(out_dir) / f"rank{rank}.npz"
        np.savez(path, **record)
        print(f"rank {rank} of {world_size}: examples {part.start}..{part.stop - 1}, loss {loss.item():.4g}")
        return path
    finally:
        dist.destroy_process_group()


@dataclass
class Launch:
    """What :func:`launch` gives back: each process's output and the file it wrote, by rank."""

    outputs: list[str]
    files: list[Path]


def launch(world_size: int = 2, out_dir: str | Path = ".", timeout: float = 120.0) -> Launch:
    """Start ``world_size`` processes of ``python -m dlcourse.scale`` on this machine, as ``torchrun``
    does: each gets its ``RANK`` and the same rendezvous address (127.0.0.1 and a free port).

    Waits for all of them and raises ``RuntimeError`` with their output if any fails.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    package_root = str(Path(__file__).resolve().parents[1])
    common = dict(os.environ)
    common.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",  # the processes share the machine's cores: one thread each
        PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
    )
    procs = []
    for rank in range(world_size):
        env = dict(common, RANK=str(rank), LOCAL_RANK=str(rank))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dlcourse.scale", "--out", str(out_dir)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs, failed = [], False
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            out, _ = proc.communicate()
            failed = True
        outputs.append(out)
        failed = failed or proc.returncode != 0
    if failed:
        raise RuntimeError("a DDP process failed:\n" + "\n".join(outputs))
    return Launch(outputs, [out_dir / f"rank{rank}.npz" for rank in range(world_size)])


def summary_writer(log_dir: str | Path):
    """A ``torch.utils.tensorboard.SummaryWriter`` writing to ``log_dir``, without loading TensorFlow.

    TensorBoard's file writer imports TensorFlow when it is installed (seconds, and pages of logs),
    although writing event files needs only its built-in stub. An empty ``tensorboard.compat.notf``
    module is TensorBoard's own switch for the stub; it has to be set before the first import.
    """
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One DistributedDataParallel step of the running example.")
    parser.add_argument("--out", default=".", help="folder for rank<r>.npz")
    args = parser.parse_args(argv)
    ddp_step(args.out)


if __name__ == "__main__":
    main()
