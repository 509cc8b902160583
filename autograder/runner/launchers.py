"""How a child starts, one launcher per mechanism, all from the same :class:`~autograder.runner.protocol.ChildRequest`:

- ``spawn``: a fresh ``python -m autograder.runner.child`` (it makes the namespaces itself, where the request says so);
- ``bubblewrap``: the same program inside bubblewrap, which builds the view from nothing;
- ``fork``: a warm parent (:mod:`autograder.runner.forkserver`) forks the child, which makes the namespaces.

Each returns a process whose standard output is the pipe the child reports on, and whose standard input
takes the notebook's path; :func:`probe` starts one exactly so, up to where the kernel would start.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from autograder.runner.linux import FORK_LOCK, PR_SET_PDEATHSIG
from autograder.runner.protocol import ChildRequest
from autograder.runner.visibility import Visibility, bubblewrap_args


def command(request: ChildRequest, isolation, visibility: Visibility) -> list[str]:
    """The program a spawned child runs (bubblewrap around it where the batch uses bubblewrap)."""
    child = [sys.executable, "-m", "autograder.runner.child", "--request", request.to_json()]
    if isolation.mode != "bubblewrap":
        return child
    private = {} if request.probe else dict(request.private)
    return [*bubblewrap_args(visibility, isolation.bwrap, private, request.temp_size), *child]


def spawn(argv: list[str], request: ChildRequest) -> subprocess.Popen:
    with FORK_LOCK:  # a preexec_fn makes Popen fork()
        return subprocess.Popen(
            argv,
            preexec_fn=die_with_grader,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=request.env,
            cwd=request.scratch,
            start_new_session=True,
        )


def fork(request: ChildRequest, warm: tuple[str, ...], slot: int):
    from autograder.runner.forkserver import server_for

    return server_for(warm, slot).spawn(request)


def prestart(warm: tuple[str, ...], slots: int) -> None:
    """Start the warm parents of grading workers ``0 .. slots - 1`` now, in the background and at the same
    time, so that they are up when the proof and the students' runs need them (a failed start shows there,
    where the parent is asked for)."""
    import threading

    from autograder.runner.forkserver import server_for

    def start(slot: int) -> None:
        try:
            server_for(warm, slot)
        except Exception:  # noqa: BLE001 (raised again, with its reason, when a run asks for this parent)
            pass

    for slot in range(max(1, slots)):
        threading.Thread(target=start, args=(slot,), daemon=True, name=f"warm-parent-{slot}").start()


def probe(argv: list[str] | None, request: ChildRequest, warm: tuple[str, ...], slot: int) -> tuple[str, int]:
    """Start a probing child (``argv``, or forked where ``argv`` is None); its output and exit status."""
    if argv is None:
        child = fork(request, warm, slot)
        child.stdin.close()
        output = child.stdout.read(1 << 20).decode("utf-8", errors="replace")
        child.stdout.close()
        child.wait(180)
        return output, child.returncode
    with FORK_LOCK:  # (the fork only: the child's output is read after)
        child = subprocess.Popen(
            argv, preexec_fn=die_with_grader, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=request.env, cwd=request.scratch,
        )  # fmt: skip
    try:
        output, _ = child.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        child.kill()
        output, _ = child.communicate()
        raise
    return output, child.returncode


def die_with_grader() -> None:
    """In a spawned child before exec: get SIGKILL when the grader dies (the child sets it again after it
    changes user, which clears it; bubblewrap's --die-with-parent does the same inside its sandbox)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
