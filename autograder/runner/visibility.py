"""What a submission's kernel may see of the machine: a pure description, the same for every launcher.

The namespaces (:func:`autograder.runner.isolation.enter_namespaces`) cover every folder in :meth:`Visibility.hidden`
with an empty one and show :meth:`Visibility.revealed` again, read-only; bubblewrap builds the same view from
nothing (:func:`bubblewrap_args`). Either way the kernel sees the operating system, the Python environment,
the course's code and its own scratch folder: not the course, its sources, the gradebook, the reference or
other submissions.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.course import ROOT
from autograder.runner.isolation import SHARED_TEMP

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# What the basic mode leaves in view at /: the operating system (what bubblewrap shows), devices,
# processes, and the package stores whose programs point into one another. Every other folder at / is
# covered: a copy of a course in /srv or /work, a data disk under /mnt, /opt, /var, /run's sockets.
KEPT_AT_ROOT = (*SYSTEM_DIRS, "/dev", "/proc", "/sys", "/nix", "/gnu")


@dataclass(frozen=True)
class Visibility:
    scratch: Path  # the run's folder: shown as it is (the grader's root, the submission's folders below)
    private: tuple[str, ...] = ()  # folders no kernel may see (the course, the grader's workspace)
    separate_uid: bool = False  # the kernel runs as another user, who may not enter every folder
    shown: tuple[str, ...] = ()  # the grader's folders a kernel reads (never writes): a precompiled header

    def covered(self) -> list[Path]:
        """Every folder at / but the operating system's (home and temporary folders among them), shared
        memory, this repository, the course and its workspace wherever they are."""
        top = [
            p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and str(p) not in KEPT_AT_ROOT
        ]
        return [*sorted(top), *map(Path, (*SHARED_TEMP, ROOT, *self.private))]

    def needed(self) -> set[Path]:
        return {
            Path(sys.prefix),
            Path(sys.base_prefix),
            ROOT / "dlcourse",
            ROOT / "autograder",
            self.scratch,
            *map(Path, self.shown),
        }

    def hidden(self) -> list[str]:
        """Folders covered: home folders, this repository, the course and its workspace, and any folder on
        the way to the Python environment that the sandbox's user may not enter (a mode 0700 /root, say),
        so that the user reaches exactly the environment and nothing else in there."""
        hidden = [str(p) for p in self.covered()]
        if self.separate_uid:
            for path in self.needed():
                for folder in path.parents:
                    if folder != Path("/") and not _enterable_by_others(folder):
                        hidden.append(str(folder))
        return list(dict.fromkeys(hidden))

    def revealed(self) -> list[str]:
        """What the kernel needs of the hidden folders: the Python environment and the course's code."""
        needed = self.needed()
        covered = self.covered()
        for entry in sys.path:  # the site-packages of another environment that this one reaches into
            path = Path(entry)
            if path.name in ("site-packages", "dist-packages") and path.is_dir():
                if not any(c == path or c.is_relative_to(path) for c in covered):
                    needed.add(path)
        return sorted(str(p) for p in needed)

    def links(self, executable: str | None = None) -> list[tuple[str, str]]:
        """The links on the way to this grader's Python (``executable``: ``sys.executable``) that lie in a hidden
        folder, as ``(where, what it points to)``. A virtual environment made from a ``python3`` that is a link in
        ``~/bin``, in /tmp or in Linuxbrew's /home names that link; the kernel's view holds each such link again,
        as it is and alone of its folder (:func:`autograder.runner.isolation.enter_namespaces`,
        :func:`bubblewrap_args`), so the kernel can start its own interpreter."""
        hidden = [Path(p) for p in self.hidden()]
        shown = [Path(p) for p in self.revealed()]
        return [
            (str(link), target)
            for link, target in links_on_the_way(Path(executable or sys.executable), mounted=shown)
            if any(link.is_relative_to(h) for h in hidden) and not any(link.is_relative_to(s) for s in shown)
        ]


def links_on_the_way(path: Path, mounted: list[Path] = ()) -> list[tuple[Path, str]]:
    """Each symbolic link that resolving the absolute ``path`` passes, as ``(where it lies, what it points to)``,
    resolved as the kernel resolves it: one name at a time from /, a relative target from the folder its link lies
    in. A path in ``mounted`` is a folder of its own in the kernel's view (what it shows is bound there), not a
    link to follow."""
    todo, current, found = list(path.parts[1:]), Path("/"), []
    while todo:
        name = todo.pop(0)
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        if candidate.is_symlink() and candidate not in mounted and len(found) < 40:  # (40: a loop ends)
            target = os.readlink(candidate)
            found.append((candidate, target))
            current = Path("/") if os.path.isabs(target) else current
            todo = [*Path(target).parts[1 if os.path.isabs(target) else 0 :], *todo]
        else:
            current = candidate
    return found


def bubblewrap_args(visibility: Visibility, bwrap: str, private: dict[str, int], temp_size: int) -> list[str]:
    """bubblewrap's arguments for the same view, up to ``--``: only what a kernel needs is there, read-only
    (the system's programs and libraries, the Python environment, the course's code); everything else (this
    and every other course directory, home folders, other submissions, the gradebook) does not exist inside.
    ``private``: the submission's folders, each a size-limited tmpfs ``{path: bytes}``; ``temp_size``: the size of
    its /tmp and /dev/shm."""
    scratch = visibility.scratch
    args = [
        bwrap, "--die-with-parent", "--new-session",
        "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--dev", "/dev", "--proc", "/proc",
        "--size", str(temp_size), "--tmpfs", "/tmp", "--size", str(temp_size), "--tmpfs", "/dev/shm",
    ]  # fmt: skip
    for node in gpu_device_nodes():  # (bubblewrap's /dev has none: the GPU would be gone, silently)
        args += ["--dev-bind-try", node, node]
    for system in SYSTEM_DIRS:
        if Path(system).exists():
            args += ["--ro-bind", system, system]
    made: set[Path] = {Path("/")} | {Path(d) for d in SYSTEM_DIRS}
    for path in map(Path, visibility.revealed()):
        if path == scratch or not path.exists() or any(path.is_relative_to(d) for d in SYSTEM_DIRS):
            continue
        args += [*_folders_to(path, made), "--ro-bind", str(path), str(path)]
    for where, target in visibility.links():
        args += [*_folders_to(Path(where), made), "--symlink", target, where]
    args += ["--bind", str(scratch), str(scratch)]
    for folder, size in private.items():  # (the submission's own; in its namespace only, gone with it)
        args += ["--perms", "0777", "--size", str(size), "--tmpfs", folder]
    return [*args, "--chdir", str(scratch / "work"), "--"]


def _folders_to(path: Path, made: set[Path]) -> list[str]:
    """bubblewrap's arguments that make the folders above ``path`` not yet in ``made`` (then in it): bwrap makes
    missing parents 0700, and the child's unprivileged user must be able to pass them."""
    args = []
    for parent in reversed(path.parents):
        if parent not in made:
            args += ["--perms", "0755", "--dir", str(parent)]
            made.add(parent)
    return args


def gpu_device_nodes() -> list[str]:
    """An NVIDIA GPU's device nodes (``/dev/nvidia0``, ``nvidiactl``, ``nvidia-uvm``, ... and the folder
    ``nvidia-caps`` of MIG), as a kernel outside bubblewrap sees them: CUDA opens them, and bubblewrap's own
    ``/dev`` holds only the basic ones, so without them a GPU machine's kernels would find no device and grade
    the GPU branches of A3, A5 and A7 as on a CPU. (The namespaces mode keeps the host's ``/dev``: there the
    kernels used the GPU, checked on an H200; under bubblewrap too,
    with this binding, on an H200: ``make gpu-check GPU_CHECK_ARGS='--isolation bubblewrap'``.)"""
    return sorted(str(node) for node in Path("/dev").glob("nvidia*"))


def _enterable_by_others(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & 0o001)
    except OSError:
        return False
