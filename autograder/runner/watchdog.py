"""The watchdog of one run: it samples the run's whole process tree every 0.2 s and says why it must stop
(wall clock, memory, processes); then it stops the kernel and all it started, but not the driver, so the
driver still sends the report of what ran before."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import psutil

# how long the watchdog goes on killing what a stopped kernel left before it waits for the driver's report
KILL_SECONDS = 5.0


class Watchdog:
    """``folders``: the run's own in-memory file systems (its tmpfs mounts, seen through its driver's root):
    what they hold is memory too, and counts against the memory limit with the processes' own."""

    def __init__(self, process, limits, forked: bool, uid: int | None, folders: tuple[str, ...] = ()):
        self.process, self.limits, self.forked, self.uid = process, limits, forked, uid
        self.folders = folders
        self.peak_rss = 0
        self._scans = 0
        self._runner: set[int] | None = None
        self._inside = None  # a process inside the run's mount namespace, once found (it stays)
        try:
            self.root = psutil.Process(process.pid)
        except psutil.NoSuchProcess:
            self.root = None

    def watch(self, start: float, over: threading.Event | None = None) -> str:
        """Wait for the child, or for ``over`` (its report came whole, or its output ended); say why it must
        stop past the wall-clock, memory or process limit."""
        while True:
            if self.process.poll() is not None or (over is not None and over.is_set()):
                return "finished"
            if time.monotonic() - start > self.limits.timeout:
                return "timeout"
            if self.root is not None:  # (the first at once: a short run has one too)
                count, rss = self.tree_usage()
                self.peak_rss = max(self.peak_rss, rss)
                if count > self.limits.processes:
                    return "processes"
                if rss > self.limits.memory_mb * 2**20 * 1.5:
                    return "memory"
            if over is not None:  # the next sample in 0.2 s, unless the run ends first
                over.wait(0.2)
                continue
            try:
                self.process.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass

    def stop_kernel(self, grace: float = 15) -> None:
        """Kill everything below the driver, then give the driver ``grace`` seconds to report and end."""
        deadline = time.monotonic() + KILL_SECONDS
        driver = self._driver()
        while driver is None and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # a process of its tree ended while it was looked at: looked at again
            driver = self._driver()
        if driver is None:
            return
        # again while any is left: a fork bomb makes new ones between a listing and its kills (those reparent
        # to the driver, the PID namespace's init, or its subreaper, so the next listing finds them)
        while True:
            try:
                below = [p for p in driver.children(recursive=True) if _alive(p)]
            except psutil.Error:
                return
            if not below or time.monotonic() > deadline:
                break
            for proc in below:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass

    def _driver(self):
        """The process that drives the kernel (no student code runs in it): the forked child itself, or
        the spawned ``autograder.runner.child`` (under bubblewrap, below its two processes)."""
        if self.root is None or self.forked:
            return self.root
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return None
        found = [p for p in tree if _runs_the_driver(p)]  # (bubblewrap's own names it later)
        try:  # (a driver that ends while it is looked at: the next sample looks again)
            # with namespaces, the child forks itself once (the outer process waits, the inner one drives)
            inner = [p for p in found if p.ppid() in {q.pid for q in found}]
        except psutil.Error:
            return None
        return (inner or found or [None])[0]

    def tree_usage(self) -> tuple[int, int]:
        """Processes and total resident memory of everything the child started, escaped ones included."""
        pids = [self.root.pid, *descendants(self.root)]
        self._scans += 1
        if self.uid is not None and self._scans % 5 == 0:  # double-forked ones leave the tree, keep the uid
            known = set(pids)
            pids += [
                p.pid
                for p in psutil.process_iter(["uids"])
                if p.pid not in known and p.info["uids"] and p.info["uids"].real == self.uid
            ]
        rss = self.held_in_folders()
        runner = self._runner_pids()
        for pid in pids:
            if pid not in runner:  # (the forked runner's own hold the warm parent's pages; no student code
                rss += resident_bytes(pid)  # runs in them)
        return len(pids), rss

    def held_in_folders(self) -> int:
        """Bytes the run's tmpfs mounts hold, read through ``/proc/<driver>/root`` (its mount namespace)."""
        if not self.folders:
            return 0
        if self._inside is None:  # any driver process will do: they all share the run's mounts
            self._inside = self._driver()
        if self._inside is None:
            return 0
        held = 0
        for folder in self.folders:
            try:
                stats = os.statvfs(f"/proc/{self._inside.pid}/root{folder}")
            except OSError:
                continue
            held += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        return held

    def _runner_pids(self) -> set[int]:
        """For a forked child: the child, its PID namespace's outer process and init (the chain down to
        the kernel); once found, kept."""
        if not self.forked:
            return set()
        if self._runner is None:
            chain = [self.root.pid]
            while len(chain) < 3 and len(below := children(chain[-1])) == 1:
                chain.append(below[0])
            if len(chain) < 3:
                return set(chain)  # not all started yet: ask again next time
            self._runner = set(chain)
        return self._runner


PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(root: psutil.Process) -> list[int]:
    """Every process below ``root``, read from the kernel's list of each thread's children
    (``/proc/PID/task/TID/children``): a read per process of the tree, where psutil's
    ``children(recursive=True)`` reads every process of the machine, 4 ms of the grader's CPU per sample with
    a class running. Where the kernel has no such lists (built without CONFIG_PROC_CHILDREN): psutil's."""
    found, stack = [], [root.pid]
    while stack:
        below = _listed_children(stack.pop())
        if below is None:
            return _descendants_from_psutil(root)
        found += below
        stack += below
    return found


def children(pid: int) -> list[int]:
    """The processes ``pid`` forked, from any of its threads, as :func:`descendants` reads them ([] once it
    ended); psutil's where the kernel keeps no children lists."""
    below = _listed_children(pid)
    if below is None:
        try:
            return [p.pid for p in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    return below


def _listed_children(pid: int) -> list[int] | None:
    """The kernel's children lists of every thread of ``pid`` ([] once it ended), or None where the kernel
    keeps none."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # (ended while it was looked at)
        return []
    found = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found += [int(child) for child in fh.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # (a thread that ended)
            return None
        except OSError:
            continue
    return found


def _descendants_from_psutil(root: psutil.Process) -> list[int]:
    try:
        return [p.pid for p in root.children(recursive=True)]
    except psutil.Error:
        return []


def resident_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (0 once it ended): the second field of ``/proc/PID/statm``."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _alive(process: psutil.Process) -> bool:
    """Whether ``process`` still runs (a zombie has ended: only its parent's wait is left)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _runs_the_driver(process) -> bool:
    """Whether ``process`` runs ``python -m autograder.runner.child`` (one that ended as it was read does not: under a
    fork bomb, processes end by the hundred while the tree is looked at, and they must not hide the driver)."""
    try:
        return process.cmdline()[1:3] == ["-m", "autograder.runner.child"]
    except psutil.Error:
        return False
