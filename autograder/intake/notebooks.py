"""Executing notebooks in a fresh kernel: the one routine that tests, benchmarks and the reference run share."""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

# (matplotlib keeps the kernel's inline backend, so figures are recorded as images as in JupyterLab.)
from dlcourse._lazy import QUIET_ENV


@dataclass
class Execution:
    notebook: nbformat.NotebookNode
    seconds: float
    workdir: Path
    cpu_seconds: float = 0.0  # the kernel's own CPU time (user and system), whatever the machine's load


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def kernel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a kernel: this one, quieted, with this Python's bin/ first on PATH."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def execute_notebook(
    path: str | Path,
    timeout: float = 120,
    workdir: str | Path | None = None,
    env: dict[str, str] | None = None,
    allow_errors: bool = False,
) -> Execution:
    """Run a notebook top to bottom in a fresh kernel, in ``workdir`` (a new temporary folder by
    default, so runs leave nothing in the repository), and return the executed notebook.

    ``timeout`` bounds each cell. Raises nbclient's ``CellExecutionError`` on the first error unless
    ``allow_errors``.
    """
    from nbclient import NotebookClient

    from autograder.runner.child import ready_kernel_manager_class

    nb = nbformat.read(str(path), as_version=4)
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="nbrun-"))
    workdir.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(workdir)}},
        kernel_manager_class=ready_kernel_manager_class(),  # (its shell channel sees a reply a send hid)
    )
    start, cpu = time.perf_counter(), _children_cpu()
    client.execute(
        env=kernel_env(env), cwd=str(workdir)
    )  # (the kernel is waited for, so its time is counted)
    return Execution(nb, time.perf_counter() - start, workdir, _children_cpu() - cpu)
