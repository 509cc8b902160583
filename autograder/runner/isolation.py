"""Which isolation a grading run gets, proven before anything is graded, and the namespaces of the basic mode.

Three modes, chosen with ``--isolation``:

``bubblewrap``  every submission in a bubblewrap sandbox: no network, its own PID namespace, and a file
                system in which only the system, the Python environment and the course's code exist.
                Refused, with the command that installs it, where bubblewrap is missing or cannot start.
``basic``       no bubblewrap. Where Linux namespaces can be made (as root, or through an unprivileged user
                namespace) each submission gets its own network namespace (no network) and mount namespace
                (the course directory, the grader's workspace, the home folders and /tmp are covered by
                empty folders; the Python environment, the course code and the submission's own scratch
                folder are shown again, the first two read-only).
                Elsewhere only the resource limits and, as root, a separate user id remain.
``auto``        basic with namespaces where a child can make them (root, or unprivileged user namespaces),
                else bubblewrap where it works, else basic without namespaces.

Two runners start the kernels (``--runner``): ``fork`` (the default wherever the isolation is not
bubblewrap) forks each submission's child from a warm parent that has already imported the frameworks
(:mod:`autograder.runner.forkserver`); the child then makes its own network, mount, PID, IPC and UTS namespaces,
so the basic mode with namespaces gives what bubblewrap gives: no network, no other process in view, and
only the operating system, Python and the course code visible. ``spawn`` starts a fresh interpreter per
submission (bubblewrap always does: it can only start a new program).

Before a batch, :func:`resolve` runs a probe through exactly the command line a submission gets: the
child enters the isolation, drops to the submission's user id and starts the Python that the kernel will
run. If that fails (for instance the interpreter lies behind a directory the unprivileged user cannot
enter, as in ``/root`` of a container), the batch is refused with the reason and the fix, instead of
every submission being recorded as a crash.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from autograder.runner.linux import CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWUSER, nvidia_gpu_here, thread_count
from autograder.settings import Settings

MODES = ("auto", "bubblewrap", "basic")
RUNNERS = ("auto", "fork", "spawn")
INSTALL_BUBBLEWRAP = "apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora)"


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SHARED_TEMP = (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
)  # where other people's (and other graders') files lie readable by all
ST_KEPT = 2 | 4 | 8 | 1024 | 2048 | 4096  # nosuid, nodev, noexec, noatime, nodiratime, relatime


class IsolationError(RuntimeError):
    """The isolation asked for cannot be had here; the message says why and how to get it."""


class OpenCourse(IsolationError):
    """No namespace or bubblewrap covers the course here, and a submission's user may enter it: nothing is graded
    (:func:`autograder.grading.canary.probe_isolation`). Its message starts with :data:`OPEN_COURSE`."""


OPEN_COURSE = "no namespace or bubblewrap covers the course here"


@dataclass(frozen=True)
class Isolation:
    mode: str  # "bubblewrap" or "basic"
    bwrap: str | None = None  # the bubblewrap binary (mode "bubblewrap")
    namespaces: bool = False  # basic mode: own network and mount namespace per submission
    separate_uid: bool = False  # the grader is root: each submission runs as its own unprivileged uid
    runner: str = (
        "spawn"  # "fork": children of a warm parent (autograder.runner.forkserver); "spawn": fresh ones
    )

    @property
    def hides_the_course(self) -> bool:
        """Whether a namespace (its own, or bubblewrap's) covers the course; without one, only file permissions keep
        a submission's user out of it (:class:`OpenCourse`)."""
        return self.mode == "bubblewrap" or self.namespaces

    def describe(self) -> str:
        if self.mode == "bubblewrap":
            parts = [
                "bubblewrap (no network, own PID namespace, only the system, Python and course code visible)"
            ]
        elif self.namespaces and self.runner == "fork":
            parts = [
                "namespaces made per submission (no network; own PID, mount, IPC and UTS namespaces; only the "
                "operating system's folders, Python and course code visible, read-only)"
            ]
        elif self.namespaces:
            parts = [
                "basic with namespaces (no network; only the operating system's folders at /, Python and course "
                "code visible, read-only; other processes visible; install bubblewrap for more)"
            ]
        else:
            parts = [
                "basic WITHOUT namespaces: NO network or file-system isolation "
                f"(install bubblewrap: {INSTALL_BUBBLEWRAP})"
            ]
        parts.append(
            "a separate unprivileged user per submission" if self.separate_uid else "same user as the grader"
        )
        parts.append(
            "rlimits (memory, processes, file size), wall-clock and per-cell timeouts"
            + (
                " (memory: the data segment, as CUDA needs address space beyond any cap)"
                if nvidia_gpu_here()
                else ""
            )
        )
        if self.runner == "fork":
            parts.append("kernels forked from a warm parent")
        return "; ".join(parts)


def bubblewrap() -> tuple[str | None, str]:
    """``(path, "")`` if bubblewrap is installed and can make its namespaces here, else ``(None, why not)``."""
    path = shutil.which("bwrap")
    if not path:
        return None, f"bubblewrap is not installed ({INSTALL_BUBBLEWRAP})"
    probe = subprocess.run(
        [
            path,
            "--ro-bind",
            "/",
            "/",
            "--unshare-net",
            "--unshare-pid",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return None, f"bubblewrap is installed but cannot start a sandbox here: {probe.stderr.strip()[:300]}"
    return path, ""


_CACHE: dict[tuple[str, str], Isolation] = {}


def resolve(mode: str = "auto", runner: str = "auto") -> Isolation:
    """The isolation that ``mode`` gives on this machine, and the runner that starts the kernels (the
    probes run once per process)."""
    if sys.platform != "linux":
        raise IsolationError(
            f"the sandbox needs Linux (namespaces, resource limits); this is {sys.platform}: grade on a Linux "
            "machine, a Linux virtual machine or WSL 2"
        )
    if mode not in MODES:
        raise IsolationError(f"unknown isolation mode {mode!r}; choose one of {', '.join(MODES)}")
    if runner not in RUNNERS:
        raise IsolationError(f"unknown runner {runner!r}; choose one of {', '.join(RUNNERS)}")
    if mode == "bubblewrap" and runner == "fork":
        raise IsolationError(
            "--runner fork cannot use bubblewrap (bubblewrap starts a new program for each submission); "
            "--isolation auto or basic forks children that make the same namespaces themselves"
        )
    if (mode, runner) not in _CACHE:
        _same_code_in_the_kernels()
        separate_uid = os.geteuid() == 0
        fork = "spawn" if runner == "spawn" else "fork"
        namespaces = mode != "bubblewrap" and namespaces_available()
        path, why = (
            bubblewrap() if mode == "bubblewrap" or (mode == "auto" and not namespaces) else (None, "")
        )
        if mode == "auto" and namespaces and fork == "fork":
            found = Isolation("basic", namespaces=True, separate_uid=separate_uid, runner="fork")
        elif path:
            found = Isolation("bubblewrap", bwrap=path, separate_uid=separate_uid)
        elif mode == "bubblewrap":
            raise IsolationError(f"--isolation bubblewrap: {why}")
        else:
            found = Isolation("basic", namespaces=namespaces, separate_uid=separate_uid, runner=fork)
        _CACHE[(mode, runner)] = found
    return _CACHE[(mode, runner)]


_KERNELS_CODE: list[dict] = []  # what a fresh interpreter of this environment imports: asked once a process


def _same_code_in_the_kernels() -> None:
    """Refuse where the kernels would import other code than this grader's. A kernel starts this Python afresh,
    with nothing of the grader's environment, so it imports ``autograder`` and ``dlcourse`` as the environment
    installs them; the grader imports them from the current folder first when started there with ``python -m``
    (a second copy of the course, say). The kernels would then record with one copy while the grader decides
    with another, and see none of their own (the sandbox shows the grader's): a run that fails its reference
    for no reason of the instructor's."""
    if not _KERNELS_CODE:
        _KERNELS_CODE.append(_kernels_code())
    for name, origin in _KERNELS_CODE[0].items():
        mine = Path(sys.modules[name].__file__).resolve() if name in sys.modules else None
        if origin and mine is not None and Path(origin).resolve() != mine:
            raise IsolationError(
                f"this grader runs {name} from {mine.parent}, but its Python environment installs it from "
                f"{Path(origin).resolve().parent}, which is what the kernels would run. Start the grader "
                f"outside {mine.parents[1]} (python -m puts the current folder first; --course names the course), "
                f"or install this copy: pip install -e {mine.parents[1]}"
            )


def _kernels_code() -> dict:
    """Where a fresh interpreter of this environment (as a kernel starts it) finds ``autograder`` and ``dlcourse``:
    name -> file; nothing where it could not say (the check is then not made, as before it existed). Its answer is
    its last line: a ``sitecustomize`` or ``.pth`` of the environment may print before it."""
    try:
        asked = subprocess.run(
            [sys.executable, "-I", "-c", "import importlib.util as u, json; print(json.dumps({n: "
             "(u.find_spec(n) or 0) and u.find_spec(n).origin for n in ('autograder', 'dlcourse')}))"],
            capture_output=True, text=True, cwd="/", timeout=120,
        )  # fmt: skip
        found = json.loads((asked.stdout.strip().splitlines() or ["{}"])[-1]) if asked.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}


def resolved(settings: Settings) -> Settings:
    """``settings`` with its isolation resolved (:func:`resolve` of its mode with its runner), so what follows
    probes, keys and describes one :class:`Isolation`; settings already resolved come back as they are."""
    if isinstance(settings.isolation, Isolation):
        return settings
    return replace(settings, isolation=resolve(settings.isolation, settings.runner))


def namespaces_available() -> bool:
    """Whether a child can make its own network and mount namespaces here (root, or user namespaces)."""
    probe = subprocess.run(
        [sys.executable, "-m", "autograder.runner.isolation"], capture_output=True, text=True
    )
    return probe.returncode == 0


# ----------------------------------------------------------------------------- inside the child

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(
        _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}"
    )


def _loopback_up() -> None:
    """A new network namespace has only a loopback device, down; the kernel talks to its client over it."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def _inside(path: Path, folders: list[Path]) -> bool:
    return any(path == f or path.is_relative_to(f) for f in folders)


@dataclass(frozen=True)
class Tmpfs:
    """The tmpfs folders :func:`enter_namespaces` mounts besides its empty covers: ``private``, folders (under a
    writable one) that get a tmpfs of their own, ``{path: bytes}``, owned by ``owner`` (else this user), the
    submission's disk quota; and ``temp_size``, the bytes of each shared temporary folder's (/tmp, ...)."""

    private: dict | None = None
    owner: int | None = None
    temp_size: int = 256 * 2**20


def _single_threaded() -> None:
    """Raise OSError (EINVAL, as unshare would) unless this process has one thread."""
    threads = thread_count()
    if threads != 1:
        raise OSError(
            errno.EINVAL,
            f"this process has {threads} threads: its namespaces are made by one thread (unshare(CLONE_NEWUSER) "
            "refuses any other)",
        )


def enter_namespaces(hide, reveal, writable=(), extra: int = 0, tmpfs: Tmpfs = Tmpfs(), links=()) -> None:
    """Give this process (and all it starts) its own network and mount namespace.

    Every folder in ``hide`` is covered by a small empty tmpfs (a file by ``/dev/null``); every path in
    ``reveal`` that lies under a hidden folder is shown again at its own place, read-only (those in
    ``writable``: as they are); each ``(where, target)`` in ``links`` that lies in a hidden folder is made there
    again, a link alone of its folder (:meth:`autograder.runner.visibility.Visibility.links`). As root the
    namespaces are made directly; otherwise inside a new user namespace that maps the user to itself.
    ``extra``: more namespace flags (the forked runner's PID, IPC and UTS namespaces). ``tmpfs``: the
    submission's own folders and the size of the temporary ones (:class:`Tmpfs`), gone with the namespace.
    Raises OSError when the kernel refuses, and when this process has more than one thread: a user namespace
    cannot be made by one (EINVAL), so it is refused as root too, where none is needed, so that a change that
    starts a thread too early fails wherever the grader runs, not only where it is a normal user.
    """
    _single_threaded()
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | extra | (0 if uid == 0 else CLONE_NEWUSER)
    _check(_libc.unshare(flags), "unshare")
    if uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _loopback_up()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hidden = [Path(p) for p in sorted(set(hide), key=len) if os.path.lexists(p)]
    # outermost only, but a temporary folder inside a covered one (/var/tmp) gets its own again
    hidden = [p for i, p in enumerate(hidden) if not _inside(p, hidden[:i]) or str(p) in SHARED_TEMP]
    shown = [Path(p) for p in sorted({*reveal, *writable}) if os.path.exists(p) and _inside(Path(p), hidden)]
    handles = {p: os.open(p, os.O_PATH) for p in shown}  # still reachable once their parents are covered
    for path in hidden:
        if str(path) in SHARED_TEMP:  # an empty temporary folder of its own, writable as /tmp always is
            path.mkdir(parents=True, exist_ok=True)  # (in the tmpfs that now covers its parent)
            _mount(
                "tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={int(tmpfs.temp_size)}"
            )
        elif path.is_dir():
            _mount("tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        else:
            _mount("/dev/null", str(path), None, MS_BIND)
    old_umask = os.umask(0o022)
    try:
        for path, handle in handles.items():
            if path.is_dir() or not path.exists():
                path.mkdir(parents=True, exist_ok=True)
            _mount(f"/proc/self/fd/{handle}", str(path), None, MS_BIND | MS_REC)
            if str(path) not in writable:
                kept = os.statvfs(path).f_flag & ST_KEPT  # flags a user namespace may not drop
                _mount(None, str(path), None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)
            os.close(handle)
        _make_links(links, hidden)
    finally:
        os.umask(old_umask)
    who = os.getuid() if tmpfs.owner is None else tmpfs.owner
    for path, size in (tmpfs.private or {}).items():
        Path(path).mkdir(parents=True, exist_ok=True)
        options = f"mode=0700,uid={who},gid={who},size={int(size)},nr_inodes=100k"
        _mount("tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, options)


def _make_links(links, hidden: list[Path]) -> None:
    """Each ``(where, target)`` link of ``links`` made again, where it lies in a hidden folder's empty cover, and
    never over what is there."""
    for where, target in links:
        link = Path(where)
        if _inside(link, hidden) and not os.path.lexists(link):
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)


def _probe() -> int:
    """``python -m autograder.runner.isolation``: exit 0 when this process can make its namespaces."""
    pid = os.fork()
    if pid == 0:  # in a child, so the probing process itself stays as it was
        try:
            enter_namespaces([], [])
            os._exit(0)
        except OSError as err:
            print(f"namespaces: {err}", file=sys.stderr)
            os._exit(1 if err.errno != errno.ENOSYS else 2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def probe_report(text: str) -> dict:
    """The child's probe line (``--probe`` mode), or {} when there is none."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return {}
    return {}


if __name__ == "__main__":
    sys.exit(_probe())
