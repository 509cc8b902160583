"""Student code runs in a child process, never in the grader's.

Each submission gets a fresh child (``autograder.runner.child``) with its own scratch directory, a wall-clock
limit for the whole notebook, a per-cell limit, a memory limit and a process limit, inside the isolation
that :mod:`autograder.runner.isolation` resolved for the batch (bubblewrap, or the basic mode's namespaces).
When the grader runs as root, each live child runs as its own unprivileged user id, so process limits
apply and one submission cannot signal another.

Children are started ahead of time (:class:`Sandbox` prints READY once its kernel has imported the
frameworks), so kernel start and imports overlap with the previous submission's run.

The run is split by role, each piece short enough to review on its own: one request in
(:class:`autograder.runner.protocol.ChildRequest`) and one report out (:class:`autograder.runner.protocol.ChildReport`);
what the kernel may see (:mod:`autograder.runner.visibility`); how the child starts (:mod:`autograder.runner.launchers`:
spawn, bubblewrap, fork); the limits enforced while it runs (:mod:`autograder.runner.watchdog`). :class:`Sandbox`
only wires them together for one run and cleans up after it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.result import STOPPED
from autograder.runner import forkserver, launchers
from autograder.runner.child import READY
from autograder.runner.isolation import SHARED_TEMP, Isolation, probe_report, resolve
from autograder.runner.linux import FORK_LOCK
from autograder.runner.protocol import ChildReport, ChildRequest, ReportReader, kernel_env
from autograder.runner.visibility import Visibility
from autograder.runner.watchdog import Watchdog
from autograder.settings import Limits  # here too: a course's nbgrader_config.py imports it from here

PRIVATE = (
    "work",
    "home",
    "tmp",
    "capture",
)  # the submission's folders in its scratch; the rest is the grader's
BASE_UID = 61000  # when the grader is root, each live child gets its own uid from BASE_UID up
UID_LOCKS = Path(tempfile.gettempdir()) / "dlcourse-uid-locks"


def set_uid_base(base: int) -> None:
    """Number this process's sandbox users from ``base``: for a grader that shares the machine with another
    whose lock folder it cannot see (another temporary folder), so neither kills the other's kernels."""
    global BASE_UID
    BASE_UID = base


ROTATION = 256  # this process takes these uids in turn (a uid comes back once its last run is long gone)
_NEXT_UID = [0]


def _uid_candidates():
    first = _NEXT_UID[0]
    yield from (BASE_UID + (first + i) % ROTATION for i in range(ROTATION))
    yield from range(BASE_UID + ROTATION, BASE_UID + 10_000)


def allocate_uid() -> tuple[int, int]:
    """A uid that no other live sandbox uses, in this process or any other (Dask workers are processes):
    held by an flock on a lock file, which the kernel releases even if the grader dies. ``(uid, fd)``. The
    uids are taken in turn, not the lowest free one: the run that last had a uid has ended, but its last
    processes may still be exiting, and a uid still showing them would be swept first (a fork of the
    grader) and looked at again."""
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in _uid_candidates():
        fd = os.open(UID_LOCKS / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _uid_has_processes(uid):  # left behind by a grader that was killed (no live grader holds the lock)
            kill_all_of_uid(uid)
            if _uid_has_processes(uid):
                os.close(fd)
                continue
        if uid < BASE_UID + ROTATION:
            _NEXT_UID[0] = (uid - BASE_UID + 1) % ROTATION
        return uid, fd
    raise RuntimeError("no free sandbox uid")


@dataclass
class Outcome:
    """What came back from one run: plain data only, all of it untrusted, held in the grader's memory
    (``capture``: the captured files by name, as the report carried them; nothing the submission wrote on
    disk is ever read)."""

    STATUSES = ("finished", *STOPPED)

    status: str  # one of STATUSES; "error" is the grader's failure (no student code ran)
    seconds: float
    capture: dict  # name -> bytes: cases.jsonl and the .npy files of the captured values
    summary: dict = field(default_factory=dict)
    detail: str = ""
    peak_memory_mb: float | None = None  # the process tree (sampled every 0.2 s) or the kernel at its largest
    outputs: dict = field(default_factory=dict)  # code cell index -> its outputs as the cell left them
    kernel_outputs: dict | None = None  # grade_id -> outputs of the test cells decided in the kernel


def _kernel_env(scratch: Path, limits: Limits) -> dict[str, str]:
    return kernel_env(scratch, limits.threads)


class Sandbox:
    """One pre-started child: ``start()``, ``wait_ready()``, then ``run(notebook)`` exactly once."""

    def __init__(
        self,
        limits: Limits,
        slot: int = 0,
        warm: tuple[str, ...] = ("numpy",),
        isolation: Isolation | None = None,
        private: tuple[str, ...] = (),
    ):
        self.limits, self.slot, self.warm = limits, slot, warm
        self.isolation = isolation or resolve("auto")
        self.private = private  # folders no kernel may see (the course, the grader's workspace)
        # grader-owned, readable by all: the child's folders below it are the submission's
        self.scratch = Path(tempfile.mkdtemp(prefix="dlcourse-run-"))
        self.scratch.chmod(0o755)
        self.uid, self._uid_lock = allocate_uid() if os.geteuid() == 0 else (None, None)
        self.process: subprocess.Popen | None = None
        self._killed = False
        self._signalled = False  # kill() has sent its signals (the child may still be ending)
        self._ready = threading.Event()
        self._over = threading.Event()  # the child's report came whole, or its output ended
        self._reader_state = ReportReader(READY.encode())
        self._log = self._reader_state.log

    @property
    def visibility(self) -> Visibility:
        shown: tuple[str, ...] = ()
        if self.forked and forkserver.COMPILES in self.warm:
            shown = (str(forkserver.header_folder()),)  # the warm parent's precompiled header, read-only
        return Visibility(self.scratch, tuple(self.private), self.uid is not None, shown)

    @property
    def forked(self) -> bool:
        return self.isolation.runner == "fork"

    def request(self, probe: bool = False) -> ChildRequest:
        """What the child gets, whichever launcher starts it (see :class:`autograder.runner.protocol.ChildRequest`)."""
        namespaces = self.isolation.namespaces and self.isolation.mode != "bubblewrap"
        sandboxed = namespaces or self.isolation.mode == "bubblewrap"
        view = self.visibility
        return ChildRequest(
            scratch=str(self.scratch), env=_kernel_env(self.scratch, self.limits), memory=self.limits.memory_mb,
            cell_timeout=self.limits.cell_timeout, threads=self.limits.threads, warm=tuple(self.warm),
            uid=self.uid, nproc=self.limits.nproc if self.uid is not None else None, namespaces=namespaces,
            hide=tuple(view.hidden()), reveal=tuple(view.revealed()), writable=(str(self.scratch),), links=tuple(view.links()),
            private={str(self.scratch / f): self.folder_bytes() for f in PRIVATE} if sandboxed else {},
            temp_size=self.folder_bytes(),
            probe=probe,
        )  # fmt: skip

    def folder_bytes(self) -> int:
        """The size of each of the run's in-memory folders (its four own, and its /tmp, /var/tmp, /dev/shm):
        all seven together hold at most half its memory limit, and none more than ``disk_mb``."""
        return min(self.limits.disk_mb * 2**20, self.limits.memory_mb * 2**20 // 2 // 7)

    def command(self, probe: bool = False) -> list[str]:
        """A spawned child's program (see :mod:`autograder.runner.launchers`)."""
        return launchers.command(self.request(probe), self.isolation, self.visibility)

    def probe(self) -> dict:
        """Start the child exactly as a submission's, up to the point where the kernel would start;
        return its report (user id, network interfaces, hidden folders it can still see, whether Python
        runs), with ``error`` set when it failed."""
        self.prepare()
        argv = None if self.forked else self.command(probe=True)
        output, code = launchers.probe(argv, self.request(probe=True), self.warm, self.slot)
        report = probe_report(output)
        if code != 0:
            report["error"] = output.strip()[-1500:] or f"exit status {code}"
        return report

    def prepare(self) -> None:
        """The run's folders: the submission's own (work, home, tmp, capture: private tmpfs mounts inside the
        namespaces), and the grader's (input), which the submission can read but not change."""
        for sub in PRIVATE:
            (self.scratch / sub).mkdir(exist_ok=True)
            if self.uid is not None:
                os.chown(self.scratch / sub, self.uid, self.uid)

    def start(self) -> Sandbox:
        self.prepare()
        if self.forked:
            self.process = launchers.fork(self.request(), self.warm, self.slot)
        else:
            self.process = launchers.spawn(self.command(), self.request())
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        return self

    def _read_output(self) -> None:
        assert self.process and self.process.stdout
        try:
            self._reader_state.feed_from(self.process.stdout, self._ready.set, self._over.set)
        finally:
            self._over.set()

    def wait_ready(self, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.1):
                return True
            if self.process and self.process.poll() is not None:
                return False
        return False

    def run(self, notebook: nbformat.NotebookNode, files: Path | None = None) -> Outcome:
        """Run ``notebook`` in this (ready) child, with copies of the files in the folder ``files`` beside
        it; enforce the limits; return what came back.

        A child that never reported its kernel ready is the grader's failure (status ``error``): no
        student code has run in it yet. Whatever happens after READY happened to the student's code, and
        what comes back of it is only the report on the child's pipe (:mod:`autograder.runner.protocol`).
        """
        assert self.process is not None
        path = stage_input(self.scratch / "input", notebook, files)
        start = time.monotonic()
        if not self.wait_ready(timeout=self.limits.timeout):
            self.kill()
            why = "the sandbox's kernel did not start (no student code ran)"
            return Outcome("error", time.monotonic() - start, {}, detail=self._tail(why))
        sandboxed = self.isolation.namespaces or self.isolation.mode == "bubblewrap"
        folders = (*(str(self.scratch / f) for f in PRIVATE), *SHARED_TEMP) if sandboxed else ()
        try:  # the notebook starts now; the watchdog's first sample is taken while it runs
            self.process.stdin.write(f"{path}\n".encode())
            self.process.stdin.flush()
        except OSError:
            pass
        watchdog = Watchdog(self.process, self.limits, self.forked, self.uid, folders)
        status = watchdog.watch(start, self._over)
        seconds = time.monotonic() - start
        if status != "finished":
            # Stop the kernel and all it started, not the driver: the driver sees its kernel die and sends
            # the report of what ran before (what the checks captured so far), then ends.
            watchdog.stop_kernel()
        # The driver's report is its last act (it has stopped the kernel): with it whole, the run is over.
        # Its processes are killed now, and end (the kernel's memory torn down, 20 to 30 ms) while the grader
        # decides the points; cleanup() waits for them. Without one, they are dead before anything is read.
        reported = status == "finished" and self._reader_state.header is not None
        self.kill(wait=not reported)
        if not reported and getattr(self.process, "lost", False):
            why = "the warm parent that forked this run died (the grader's failure)"
            return Outcome("error", seconds, {}, detail=self._tail(why))
        return self._outcome(status, seconds, watchdog)

    def _outcome(self, status: str, seconds: float, watchdog: Watchdog) -> Outcome:
        """What came back of a run that ended (``status`` as the watchdog saw it): the child's report on its
        pipe, or none (then the student's run crashed, never a grader error)."""
        reader = getattr(self, "_reader", None)
        whole = self._reader_state.header is not None  # (read before the report: no later frame replaces it)
        if reader is not None and not whole:  # every process holding the pipe is dead: its end comes at once
            reader.join(timeout=10)
        report = None if reader is None or (reader.is_alive() and not whole) else self._reader_state.report()
        detail = self._tail("")
        if report is None:
            # no report: the run ended before the driver could send one (killed, crashed, or the student's
            # code killed it), or what came was not a report. The student's run, never a grader error.
            if status == "finished":
                status = "crashed"
            if self._reader_state.broken:
                detail = self._tail(f"the run's report was refused: {self._reader_state.broken}")
            report = ChildReport()
        summary = report.summary
        capture = report.capture()
        if report.problems:
            summary = {**summary, "problems": report.problems}
        if status == "finished" and summary.get("stopped") == "DeadKernelError":
            status = "crashed"
        # the larger of the watchdog's samples and the kernel's own high-water mark (a run too short to be
        # sampled has one too; a kernel can lower its mark, not the samples)
        peak_rss = max(watchdog.peak_rss, (summary.get("kernel_peak_mb") or 0) * 2**20)
        peak = round(peak_rss / 2**20, 1) if peak_rss else None
        return Outcome(status, seconds, capture, summary, detail, peak, report.outputs)

    def _tail(self, prefix: str) -> str:
        return (prefix + "\n" if prefix else "") + "\n".join(self._log[-20:])

    def kill(self, wait: bool = True) -> None:
        """Kill the child and everything it started (its session, its PID namespace, its user id), and wait
        (``wait``) for it to end. Done once the child has ended: every process of the user id has had its
        SIGKILL by then, and a process with one pending starts no other, so a second sweep would find
        nothing to kill."""
        if self.process is None or self._killed:
            return
        if self._signalled and self.process.poll() is not None:
            self._killed = True  # it had its signals and has ended: its process id may be another's by now
            return
        kill_child(self.process, self.forked, None if contained(self.isolation) else self.uid, wait)
        self._signalled = True
        self._killed = self.process.poll() is not None

    def cleanup(self) -> None:
        self.kill()
        if self.process is not None:  # a long batch must not run out of file descriptors
            close_streams(self.process, getattr(self, "_reader", None))
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self._uid_lock is not None:
            os.close(self._uid_lock)  # frees the uid (its processes are dead: kill() above)
            self.uid = self._uid_lock = None


def close_streams(process, reader: threading.Thread | None) -> None:
    """Close a child's pipes; its output only once the thread reading it has ended (closing under a blocked
    reader would wait for it)."""
    streams = [process.stdin]
    if reader is not None:
        reader.join(timeout=2)
        streams += [] if reader.is_alive() else [process.stdout]
    for stream in streams:
        try:
            stream.close()
        except (OSError, ValueError, AttributeError):
            pass


def stage_input(given: Path, notebook: nbformat.NotebookNode, files: Path | None) -> Path:
    """The run's input folder (the grader's; readable, not writable, by the submission): copies of the files
    in ``files`` (a folder the grader made: :func:`autograder.intake.handin.assignment_files`) and the notebook."""
    given.mkdir(mode=0o755)
    if files is not None:
        for item in files.iterdir():
            if item.is_symlink():
                continue
            if item.is_dir():
                shutil.copytree(item, given / item.name, symlinks=True)
            elif item.is_file() and item.suffix != ".ipynb":
                shutil.copy(item, given / item.name)
    path = given / "submission.ipynb"
    nbformat.write(notebook, str(path))
    for item in given.rglob("*"):
        if not item.is_symlink():
            item.chmod(0o755 if item.is_dir() else 0o644)
    return path


def contained(isolation: Isolation) -> bool:
    """Whether everything a run starts lives in a PID namespace of its own, whose first process is in the
    child's session (a forked kernel's init; a spawned driver that made the namespace): killing the session
    ends that process, and the kernel then kills every process of the namespace, double-forked or not, so
    the run's uid needs no sweep (a fork of the grader: 3 to 8 ms of each run). Without one, the sweep
    catches what left the session; :func:`allocate_uid` still looks before a uid is used again."""
    return isolation.namespaces and isolation.mode != "bubblewrap"


def kill_child(process: subprocess.Popen, forked: bool, uid: int | None, wait: bool = True) -> None:
    """Kill a child and everything it started (its session, its PID namespace, and every process of ``uid``
    where it is given); wait up to 10 s for the child to end (``wait``)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if forked and process.poll() is None:  # not yet a session of its own when just forked;
        try:  # what it started dies with it (parent-death signals down the chain)
            os.kill(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if uid is not None:
        kill_all_of_uid(uid)
    try:
        if wait:
            process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _uid_has_processes(uid: int) -> bool:
    """Whether a live process of ``uid`` exists (a zombie has ended: only its parent has not looked yet)."""
    import psutil

    return any(
        p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
        for p in psutil.process_iter(["uids", "status"])
    )


def kill_all_of_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (what escaped the session, e.g. a double-forked bomb)."""
    with FORK_LOCK:
        pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
