"""Measured test cells: what the code of a cell may use, enforced from outside the kernel, and what it used.

A course grades how code runs: the working memory of a tiled kernel, the bytes an autograd function keeps, the
work a cached decoder does per token. Measured in the student's kernel (by a helper the notebook can replace, or
by a clock it can stop), that is the kernel's word. Here the driver (the grader's process beside the kernel, which
runs no student code) sets hard resource limits on every process of the run before a *measured* test cell runs
(``metadata.dlcourse.measure`` of a cell in a notebook the grader built; see :mod:`autograder.grading.measure`):

- memory: the kernel's address space (or data segment, beside a GPU: :func:`memory_rlimit`) may grow by at most
  ``memory_mb`` over what it holds when the cell starts, and never past ``ceiling_mb`` (a notebook that made room
  beforehand, to reuse freed memory unseen, meets the ceiling instead);
- time: each process may use at most ``cpu_seconds`` more CPU (CPU time, not the wall clock: a loaded grading
  machine does not move it);
- under a memory cap, no new process or thread (``RLIMIT_NPROC``): the work cannot be handed to a fresh process
  with room of its own; under a CPU cap, each process is stopped at its limit and the grader holds the run to the
  CPU of all its processes together (reaped children included), read after the cell (:func:`over_cpu`).

Hard limits can only be lowered by the process they bind, never raised, so a cell cannot undo them; processes
started earlier (a pool made by an answer cell) are capped alike: every process below the kernel's parent, which
in the sandbox's namespaces is the namespace's first process, so a process that left the kernel's tree is still
found. Code that needs more than its cap fails in that cell (an allocation or a thread refused, or the kernel
killed at its CPU limit), so the values the cell would record are never recorded and its cases fail, decided
outside as every case is. Nothing the kernel says is read: the limits are set and the usage read from ``/proc``.
"""

from __future__ import annotations

import os
import resource

from autograder.runner.linux import memory_rlimit
from autograder.runner.watchdog import children, descendants

MEASURE_KEY = (
    "measure"  # metadata.dlcourse.measure of a test cell: {"memory_mb", "ceiling_mb", "cpu_seconds"}
)
TICKS = os.sysconf("SC_CLK_TCK")


def status_kb(pid: int, field: str) -> int | None:
    """A ``kB`` field of ``/proc/PID/status`` (``VmSize``, ``VmData``, ``VmHWM``), or None."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid``, all its threads, user and system, and that of the children it has reaped
    (0 once it ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def run_processes(kernel: int) -> list[int]:
    """The kernel and every other process of the run: all below the kernel's parent (the driver, or the
    namespace's first process), but not the driver itself."""
    import psutil

    top = parent_of(kernel)
    found = {kernel}
    if top is not None and top > 0:
        try:
            found.update(descendants(psutil.Process(top)))
        except psutil.Error:
            pass
    found.update(children(kernel))
    found.discard(os.getpid())
    return sorted(found)


def memory_field() -> str:
    return "VmData" if memory_rlimit() == resource.RLIMIT_DATA else "VmSize"


def cap(kernel: int, spec: dict, since: dict) -> dict:
    """Set the limits of ``spec`` on every process of the run; what was set, and the usage they count from.

    ``spec``: ``memory_mb`` and ``ceiling_mb``, ``cpu_seconds``; with ``"scope": "run"`` (on the notebook's first
    cell) the CPU seconds are a budget for the rest of the run; without it (the measured cell) a budget set earlier
    is applied again, less what was spent, to every process (one started since included). Under a memory cap no
    new process or thread may start (a fresh process would have room of its own); a CPU limit binds each process
    alone, so the grader also holds the run to the total of all its processes (:func:`over_cpu`). ``since`` carries the first
    capped cell's CPU times from one call to the next."""
    field = memory_field()
    start_kb = status_kb(kernel, field) or 0
    pids = run_processes(kernel)
    now = {pid: cpu_seconds(pid) for pid in pids}
    since.setdefault("cpu_start", dict(now))
    whole_run = spec.get("scope") == "run"
    seconds = spec.get("cpu_seconds")
    if whole_run and seconds is not None:
        since["budget"] = float(seconds)
    elif seconds is None and "budget" in since:
        spent = sum(max(0.0, now[pid] - since["cpu_start"].get(pid, 0.0)) for pid in pids)
        seconds = max(0.0, since["budget"] - spent)
    memory_mb, ceiling_mb = spec.get("memory_mb"), spec.get("ceiling_mb")
    for pid in pids:
        try:
            if memory_mb is not None:
                here = (status_kb(pid, field) or start_kb) * 1024
                limit = here + int(memory_mb * 2**20)
                if ceiling_mb is not None and pid == kernel:
                    limit = min(limit, int(ceiling_mb * 2**20))
                resource.prlimit(pid, memory_rlimit(), (limit, limit))
            if seconds is not None:
                limit_s = int(now[pid] + seconds) + 1
                resource.prlimit(pid, resource.RLIMIT_CPU, (limit_s, limit_s))
            if memory_mb is not None and not whole_run:  # a fresh process would have room of its own
                resource.prlimit(pid, resource.RLIMIT_NPROC, (1, 1))
        except (ProcessLookupError, PermissionError):
            continue  # (ended; or not the run's: nothing of the student's runs there)
    facts: dict = {"memory_start_mb": round(start_kb / 1024, 1), "cpu_start": since["cpu_start"]}
    if memory_mb is not None:
        limit = start_kb / 1024 + memory_mb
        facts["memory_limit_mb"] = round(min(limit, ceiling_mb) if ceiling_mb is not None else limit, 1)
    return facts


def used(kernel: int, facts: dict) -> dict:
    """What the run used during the measured cell: CPU seconds of its processes, and the kernel's peak."""
    start = facts.get("cpu_start", {})
    cpu = sum(max(0.0, cpu_seconds(pid) - start.get(pid, 0.0)) for pid in run_processes(kernel))
    peak = status_kb(kernel, "VmHWM")
    report = {k: v for k, v in facts.items() if k != "cpu_start"}
    report["cpu_seconds"] = round(cpu, 3)
    if peak is not None:
        report["peak_resident_mb"] = round(peak / 1024, 1)
    return report


def over_cpu(report: dict, seconds: float | None) -> str | None:
    """Why a measured cell's run went past its CPU seconds, all its processes together, or None."""
    used_s = report.get("cpu_seconds")
    if seconds is None or used_s is None or used_s <= seconds + 1.0:  # (limits are set in whole seconds)
        return None
    return f"its processes used {used_s:.1f} s of CPU together, more than the {seconds:.1f} s it may"
