"""Stage 3, run: student code runs in a child process, never in the grader's.

Each submission gets a fresh child (``autograder.child``) with its own scratch directory, a wall-clock
limit for the whole notebook, a per-cell limit, a memory limit and a process limit, inside the isolation
that :mod:`autograder.isolation` resolved for the batch (bubblewrap, or the basic mode's namespaces).
When the grader runs as root, each live child runs as its own unprivileged user id, so process limits
apply and one submission cannot signal another.

Children are started ahead of time (:class:`Sandbox` prints READY once its kernel has imported the
frameworks), so kernel start and imports overlap with the previous submission's run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.child import READY
from autograder.course import ROOT
from autograder.isolation import SHARED_TEMP, Isolation, probe_report, resolve
from autograder.notebooks import QUIET_ENV
from autograder.protocol import COMPILE_CACHE, ChildReport, ChildRequest, ReportReader

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# What the basic mode leaves in view at /: the operating system (what bubblewrap shows), devices,
# processes, and the package stores whose programs point into one another. Every other folder at / is
# covered: a copy of a course in /srv or /work, a data disk under /mnt, /opt, /var, /run's sockets.
KEPT_AT_ROOT = (*SYSTEM_DIRS, "/dev", "/proc", "/sys", "/nix", "/gnu")
PRIVATE = (
    "work",
    "home",
    "tmp",
    "capture",
)  # the submission's folders in its scratch; the rest is the grader's
BASE_UID = 61000  # when the grader is root, each live child gets its own uid from BASE_UID up
UID_LOCKS = Path(tempfile.gettempdir()) / "dlcourse-uid-locks"


def allocate_uid() -> tuple[int, int]:
    """A uid that no other live sandbox uses, in this process or any other (Dask workers are processes):
    held by an flock on a lock file, which the kernel releases even if the grader dies. ``(uid, fd)``."""
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in range(BASE_UID, BASE_UID + 10_000):
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
        return uid, fd
    raise RuntimeError("no free sandbox uid")


@dataclass(frozen=True)
class Limits:
    timeout: float = 600.0  # whole notebook, seconds
    cell_timeout: float = 180.0
    memory_mb: int = 4096
    nproc: int = 512  # threads and processes (RLIMIT_NPROC, when the child has its own uid)
    processes: int = 48  # processes in the sandbox's tree before it is stopped as a fork bomb
    threads: int = 1  # BLAS/OpenMP threads per kernel, so parallel workers do not oversubscribe
    disk_mb: int = 512  # each of the submission's folders (a size-limited tmpfs where namespaces are made)


@dataclass
class Outcome:
    """What came back from one run: plain data only, all of it untrusted, in a folder of the grader's own
    (``folder/capture``: the captured cases, as the report carried them; nothing the submission wrote on
    disk is ever read)."""

    STATUSES = ("finished", "timeout", "memory", "processes", "crashed", "error")

    status: str  # one of STATUSES; "error" is the grader's failure (no student code ran)
    seconds: float
    folder: Path
    summary: dict = field(default_factory=dict)
    detail: str = ""
    peak_memory_mb: float | None = None  # the sandbox's whole process tree, sampled every 0.2 s
    outputs: dict = field(default_factory=dict)  # code cell index -> its outputs as the cell left them


def _kernel_env(scratch: Path, limits: Limits) -> dict[str, str]:
    return kernel_env(scratch, limits.threads)


def kernel_env(scratch: Path, threads: int) -> dict[str, str]:
    """The whole environment of a kernel whose run folder is ``scratch`` (nothing of the grader's own)."""
    home = scratch / "home"
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(scratch / "tmp"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"),
        "MPLCONFIGDIR": str(home / "mpl"),
        "MPLBACKEND": "Agg",
        # torch.compile's caches: the run's own, seeded with a copy of the reference run's (Sandbox.prepare)
        "TORCHINDUCTOR_CACHE_DIR": str(home / COMPILE_CACHE),
        "TRITON_CACHE_DIR": str(home / COMPILE_CACHE / "triton"),
        **QUIET_ENV,
        "PYTHONDONTWRITEBYTECODE": "1",
        "DLCOURSE_CAPTURE": str(scratch / "capture"),
        "DLCOURSE_CACHE": str(home / "cache"),
        "LANG": "C.UTF-8",
    }
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # machine quirks the grader itself runs with
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class Sandbox:
    """One pre-started child: ``start()``, ``wait_ready()``, then ``run(notebook)`` exactly once."""

    def __init__(
        self,
        limits: Limits,
        slot: int = 0,
        warm: tuple[str, ...] = ("numpy",),
        isolation: Isolation | None = None,
        private: tuple[str, ...] = (),
        compile_cache: str = "",
        trusted: bool = False,
    ):
        self.limits, self.slot, self.warm = limits, slot, warm
        # the source's own run (the reference): its home stays on disk, for the grader to keep its
        # torch.compile caches; a submission's home is a private tmpfs like its other folders
        self.trusted = trusted
        self.compile_cache = compile_cache  # the reference run's torch.compile caches, copied in (trusted)
        self.isolation = isolation or resolve("auto")
        self.private = private  # folders no kernel may see (the course, the grader's workspace)
        # grader-owned, readable by all: the child's folders below it are the submission's
        self.scratch = Path(tempfile.mkdtemp(prefix="dlcourse-run-"))
        self.scratch.chmod(0o755)
        self.results = Path(tempfile.mkdtemp(prefix="dlcourse-results-"))  # the grader's alone (0700)
        self.uid, self._uid_lock = allocate_uid() if os.geteuid() == 0 else (None, None)
        self.process: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._reader_state = ReportReader(READY.encode())
        self._log = self._reader_state.log
        self._peak_rss = 0

    def request(self, probe: bool = False) -> ChildRequest:
        """What the child gets, whichever launcher starts it (see :class:`autograder.protocol.ChildRequest`)."""
        namespaces = self.isolation.namespaces and self.isolation.mode != "bubblewrap"
        return ChildRequest(
            scratch=str(self.scratch), env=_kernel_env(self.scratch, self.limits), memory=self.limits.memory_mb,
            cell_timeout=self.limits.cell_timeout, threads=self.limits.threads, warm=tuple(self.warm),
            uid=self.uid, nproc=self.limits.nproc if self.uid is not None else None, namespaces=namespaces,
            hide=tuple(self.hidden()), reveal=tuple(self.revealed()),
            writable=(str(self.scratch),),
            private={str(self.scratch / f): self.limits.disk_mb * 2**20 for f in self.private_folders()}
            if namespaces else {},
            compile_seed=str(self.scratch / "seed") if (self.scratch / "seed").is_dir() else "", probe=probe,
        )  # fmt: skip

    def command(self, probe: bool = False) -> list[str]:
        child = [sys.executable, "-m", "autograder.child", "--request", self.request(probe).to_json()]
        if self.isolation.mode != "bubblewrap":
            return child
        bwrap = [
            self.isolation.bwrap, "--die-with-parent", "--new-session",
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
        ]  # fmt: skip
        # Only what a kernel needs is visible, read-only: the system's programs and libraries, the
        # Python environment, and the course's code. Everything else (this and every other course
        # directory, home folders, other submissions, the gradebook) simply does not exist inside.
        for system in SYSTEM_DIRS:
            if Path(system).exists():
                bwrap += ["--ro-bind", system, system]
        made: set[Path] = {Path("/")} | {Path(d) for d in SYSTEM_DIRS}
        for path in map(Path, self.revealed()):
            if path == self.scratch or not path.exists() or any(path.is_relative_to(d) for d in SYSTEM_DIRS):
                continue
            # bwrap makes missing parents 0700; the child's unprivileged user must be able to pass them.
            for parent in reversed(path.parents):
                if parent not in made:
                    bwrap += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            bwrap += ["--ro-bind", str(path), str(path)]
        bwrap += ["--bind", str(self.scratch), str(self.scratch)]
        if not probe:  # the submission's disk quota: a tmpfs for each folder it writes, gone with the run
            size = str(self.limits.disk_mb * 2**20)
            for folder in self.private_folders():
                bwrap += ["--perms", "0777", "--size", size, "--tmpfs", str(self.scratch / folder)]
        return [*bwrap, "--chdir", str(self.scratch / "work"), "--", *child]

    def private_folders(self) -> tuple[str, ...]:
        return tuple(f for f in PRIVATE if not (self.trusted and f == "home"))

    def hidden(self) -> list[str]:
        """Folders the basic mode covers: home folders, this repository, the course and its workspace, and
        any folder on the way to the Python environment that the sandbox's user may not enter (a mode 0700
        /root, say), so that the user reaches exactly the environment and nothing else in there."""
        hidden = [str(p) for p in self._covered()]
        if self.uid is not None:
            for path in self._needed():
                for folder in path.parents:
                    if folder != Path("/") and not _enterable_by_others(folder):
                        hidden.append(str(folder))
        return list(dict.fromkeys(hidden))

    def _covered(self) -> list[Path]:
        """Every folder at / but the operating system's (home and temporary folders among them), shared
        memory, this repository, the course and its workspace wherever they are."""
        top = [
            p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and str(p) not in KEPT_AT_ROOT
        ]
        return [*sorted(top), *map(Path, (*SHARED_TEMP, ROOT, *self.private))]

    def _needed(self) -> set[Path]:
        return {Path(sys.prefix), Path(sys.base_prefix), ROOT / "dlcourse", ROOT / "autograder", self.scratch}

    def revealed(self) -> list[str]:
        """What the kernel needs of the hidden folders: the Python environment and the course's code."""
        needed = self._needed()
        covered = self._covered()
        for entry in sys.path:  # the site-packages of another environment that this one reaches into
            path = Path(entry)
            if path.name in ("site-packages", "dist-packages") and path.is_dir():
                if not any(c == path or c.is_relative_to(path) for c in covered):
                    needed.add(path)
        return sorted(str(p) for p in needed)

    @property
    def forked(self) -> bool:
        return self.isolation.runner == "fork"

    def _server(self):
        from autograder.forkserver import server_for

        return server_for(self.warm, self.slot)

    def probe(self) -> dict:
        """Start the child exactly as a submission's, up to the point where the kernel would start;
        return its report (user id, network interfaces, hidden folders it can still see, whether Python
        runs), with ``error`` set when it failed."""
        self.prepare()
        if self.forked:
            child = self._server().spawn(self.request(probe=True))
            child.stdin.close()
            output = child.stdout.read(1 << 20).decode("utf-8", errors="replace")
            child.stdout.close()
            child.wait(180)
            report = probe_report(output)
            if child.returncode != 0:
                report["error"] = output.strip()[-1500:] or f"exit status {child.returncode}"
            return report
        done = subprocess.run(
            self.command(probe=True),
            preexec_fn=_die_with_grader,
            capture_output=True,
            text=True,
            env=_kernel_env(self.scratch, self.limits),
            cwd=str(self.scratch / "work"),
            timeout=180,
        )
        report = probe_report(done.stdout)
        if done.returncode != 0:
            report["error"] = (done.stdout + done.stderr).strip()[-1500:] or f"exit status {done.returncode}"
        return report

    def prepare(self) -> None:
        """The run's folders: the submission's own (work, home, tmp, capture: private tmpfs mounts inside the
        namespaces), and the grader's (input, seed), which the submission can read but not change."""
        for sub in PRIVATE:
            (self.scratch / sub).mkdir(exist_ok=True)
            if self.uid is not None:
                os.chown(self.scratch / sub, self.uid, self.uid)
        # A private copy for this run: a correct solution compiles from the reference's cache, and nothing a
        # student's code writes there reaches anyone else's run.
        seed = self.scratch / "seed"
        if self.compile_cache and Path(self.compile_cache).is_dir() and not seed.exists():
            shutil.copytree(self.compile_cache, seed, symlinks=True)

    def start(self) -> Sandbox:
        self.prepare()
        if self.forked:
            self.process = self._server().spawn(self.request())
            self._reader = threading.Thread(target=self._read_output, daemon=True)
            self._reader.start()
            return self
        self.process = subprocess.Popen(
            self.command(),
            preexec_fn=_die_with_grader,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_kernel_env(self.scratch, self.limits),
            cwd=str(self.scratch),
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        return self

    def _read_output(self) -> None:
        assert self.process and self.process.stdout
        self._reader_state.feed_from(self.process.stdout, self._ready.set)

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
        what comes back of it is only the report on the child's pipe (:mod:`autograder.protocol`).
        """
        assert self.process is not None
        given = self.scratch / "input"
        given.mkdir(mode=0o755)
        if files is not None:
            for item in files.iterdir():
                if item.is_file() and not item.is_symlink() and item.suffix != ".ipynb":
                    shutil.copy(item, given / item.name)
        path = given / "submission.ipynb"
        nbformat.write(notebook, str(path))
        for item in given.iterdir():
            item.chmod(0o644)
        start = time.monotonic()
        if not self.wait_ready(timeout=self.limits.timeout):
            self.kill()
            why = "the sandbox's kernel did not start (no student code ran)"
            return Outcome("error", time.monotonic() - start, self.results, detail=self._tail(why))
        root = self._root()
        if root is not None:  # the kernel's memory before the notebook: a run too short to sample has this
            self._peak_rss = self._tree_usage(root)[1]
        try:
            self.process.stdin.write(f"{path}\n".encode())
            self.process.stdin.flush()
        except OSError:
            pass
        status = self._watch(start, root)
        seconds = time.monotonic() - start
        if status != "finished" and root is not None:
            # Stop the kernel and all it started, not the driver: the driver sees its kernel die and sends
            # the report of what ran before (what the checks captured so far), then ends.
            self._stop_kernel(root)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        if getattr(self.process, "lost", False):
            why = "the warm parent that forked this run died (the grader's failure)"
            return Outcome("error", seconds, self.results, detail=self._tail(why))
        reader = getattr(self, "_reader", None)
        if reader is not None:  # every process holding the pipe is dead: its end comes at once
            reader.join(timeout=10)
        report = None if reader is None or reader.is_alive() else self._reader_state.report()
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
        report.materialise(self.results)
        if report.problems:
            summary = {**summary, "problems": report.problems}
        if status == "finished" and summary.get("stopped") == "DeadKernelError":
            status = "crashed"
        peak = round(self._peak_rss / 2**20, 1) if self._peak_rss else None
        return Outcome(status, seconds, self.results, summary, detail, peak, report.outputs)

    def _root(self):
        import psutil

        try:
            return psutil.Process(self.process.pid)
        except psutil.NoSuchProcess:
            return None

    def _driver(self, root):
        """The process that drives the kernel (no student code runs in it): the forked child itself, or
        the spawned ``autograder.child`` (under bubblewrap, below its two processes)."""
        import psutil

        if self.forked:
            return root
        try:
            for proc in [root, *root.children(recursive=True)]:
                if proc.cmdline()[1:3] == ["-m", "autograder.child"]:  # (bubblewrap's own names it later)
                    return proc
        except psutil.Error:
            pass
        return None

    def _stop_kernel(self, root) -> None:
        import psutil

        driver = self._driver(root)
        if driver is None:
            return
        try:
            below = driver.children(recursive=True)
        except psutil.Error:
            return
        for proc in below:
            try:
                proc.kill()
            except psutil.Error:
                pass

    def _watch(self, start: float, root) -> str:
        """Wait for the child; kill it past the wall-clock limit or the memory limit (whole process tree)."""
        while True:
            if self.process.poll() is not None:
                return "finished"
            if time.monotonic() - start > self.limits.timeout:
                return "timeout"
            if root is not None:
                count, rss = self._tree_usage(root)
                self._peak_rss = max(self._peak_rss, rss)
                if count > self.limits.processes:
                    return "processes"
                if rss > self.limits.memory_mb * 2**20 * 1.5:
                    return "memory"
            try:  # the next sample in 0.2 s, unless the child ends first
                self.process.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass

    def _tree_usage(self, root) -> tuple[int, int]:
        """Processes and total resident memory of everything the child started, escaped ones included."""
        import psutil

        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = [root]
        self._scans = getattr(self, "_scans", 0) + 1
        if (
            self.uid is not None and self._scans % 5 == 0
        ):  # double-forked processes leave the tree but keep the uid
            known = {p.pid for p in procs}
            procs += [
                p
                for p in psutil.process_iter(["uids"])
                if p.pid not in known and p.info["uids"] and p.info["uids"].real == self.uid
            ]
        rss = 0
        for proc in procs:
            if proc.pid in self._runner_pids(root):  # the forked runner's own: they hold the warm
                continue  # parent's pages, and no student code runs in them
            try:
                rss += proc.memory_info().rss
            except psutil.Error:
                pass
        return len(procs), rss

    def _runner_pids(self, root) -> set[int]:
        """For a forked child: the child, its PID namespace's outer process and init (the chain down to
        the kernel); once found, kept."""
        if not self.forked:
            return set()
        if getattr(self, "_runner", None) is None:
            import psutil

            chain, proc = [root.pid], root
            try:
                while len(chain) < 3 and len(kids := proc.children()) == 1:
                    proc = kids[0]
                    chain.append(proc.pid)
            except psutil.Error:
                pass
            if len(chain) < 3:
                return set(chain)  # not all started yet: ask again next time
            self._runner = set(chain)
        return self._runner

    def _tail(self, prefix: str) -> str:
        return (prefix + "\n" if prefix else "") + "\n".join(self._log[-20:])

    def kill(self) -> None:
        """Kill the child and everything it started (its session, its PID namespace, its user id)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.forked and self.process.poll() is None:  # not yet a session of its own when just forked;
            try:  # what it started dies with it (parent-death signals down the chain)
                os.kill(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.uid is not None:
            kill_all_of_uid(self.uid)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def cleanup(self) -> None:
        self.kill()
        if self.process is not None:  # a long batch must not run out of file descriptors
            streams = [self.process.stdin]
            reader = getattr(self, "_reader", None)
            if reader is not None:  # closing under a blocked reader would wait for it: only once it ended
                reader.join(timeout=2)
                streams += [] if reader.is_alive() else [self.process.stdout]
            for stream in streams:
                try:
                    stream.close()
                except (OSError, ValueError, AttributeError):
                    pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.results, ignore_errors=True)
        if self._uid_lock is not None:
            os.close(self._uid_lock)  # frees the uid (its processes are dead: kill() above)
            self.uid = self._uid_lock = None


def _enterable_by_others(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & 0o001)
    except OSError:
        return False


def _uid_has_processes(uid: int) -> bool:
    import psutil

    return any(p.info["uids"] and p.info["uids"].real == uid for p in psutil.process_iter(["uids"]))


def _die_with_grader() -> None:
    """In the child before exec: get SIGKILL when the grader dies, so a killed grader leaves no runs
    behind (bubblewrap's --die-with-parent does the same for everything inside its sandbox)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def kill_all_of_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (what escaped the session, e.g. a double-forked bomb)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def read_summary_data(data) -> dict:
    """A run summary as the report carried it, validated: a dict with a list of cell entries of plain
    values, or {}."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return {}
    cells = []
    for entry in data["cells"][:100_000]:
        if isinstance(entry, dict) and type(entry.get("index")) is int:
            clean = {
                str(k)[:50]: v[:4000] if isinstance(v, str) else v
                for k, v in entry.items()
                if isinstance(v, str | int | type(None)) and not isinstance(v, bool)
            }
            cells.append(clean)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    timings = {
        str(k)[:30]: float(v)
        for k, v in timings.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return {
        "cells": cells,
        "stopped": data.get("stopped")[:600] if isinstance(data.get("stopped"), str) else None,
        "timings": timings,
    }
