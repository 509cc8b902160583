"""The process that runs inside the sandbox: start a kernel, warm it up, then run one notebook.

Protocol with the grader: print ``READY`` once the kernel is up and the frameworks are imported (so
the grader can start the next submission's kernel while another one runs); then read one line, the
path of the notebook to run; run it cell by cell with a per-cell timeout, keeping outputs short; write
``run.json`` (plain data: per-cell status, error names and messages, short outputs) and exit.

This is trusted code, but everything it writes lives in the scratch directory that the student's
kernel shares, so the grader treats it as untrusted input.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import time
from pathlib import Path

from autograder.runner.linux import (
    CLONE_NEWIPC,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    memory_rlimit,
)

READY = "DLCOURSE-CHILD-READY"
MAX_OUTPUT_CHARS = 20_000  # per cell; the rest is dropped with a note


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def drop_privileges(uid: int | None, nproc: int | None, memory_mb: int | None, driver: bool = False) -> None:
    """Become the submission: ``uid`` (when started as root), the resource limits every process below
    inherits, no capability left or to regain, and death with the parent.

    The order matters. The capability bounding set can only be emptied while the process still has
    capabilities, so before the uid changes; changing the uid clears the parent-death signal, so it is set
    after the last change. ``driver``: a process that drives or waits for the kernel but runs no student
    code is also made non-dumpable, so the kernel (same uid) can neither trace it nor open its descriptors
    through ``/proc``.
    """
    import signal

    libc = _libc()
    if uid is not None and os.geteuid() == 0:
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(memory_rlimit(), (limit, limit))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 * 2**20, 512 * 2**20))
    drop_capabilities(libc)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if driver:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def drop_capabilities(libc=None) -> None:
    """No capability left, none to regain (the bounding set too, where this process still may): the kernel
    of a user namespace must not undo its mounts."""
    import ctypes

    libc = libc or _libc()

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]  # fmt: skip

    for cap in range(64):  # ignored where the process may not (no CAP_SETPCAP any more)
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"capset: {os.strerror(number)}")
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def own_process_namespace() -> None:
    """Go on as PID 1 of a new PID namespace (with its own ``/proc``), so that everything the kernel starts,
    double-forked into new sessions included, ends when this driver ends, whatever ends it. The process
    that made the namespace may start no threads (the driver needs zmq's), so it only waits here for its
    child, the namespace's first process, which returns and drives the kernel."""
    import signal

    libc = _libc()
    if libc.unshare(CLONE_NEWPID) != 0:
        import ctypes

        number = ctypes.get_errno()
        raise OSError(number, f"unshare(CLONE_NEWPID): {os.strerror(number)}")
    driver = os.fork()
    if driver:  # the outer process: ends with its child, and with the grader (its death signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _, status = os.waitpid(driver, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    from autograder.runner.isolation import MS_NODEV, MS_NOEXEC, MS_NOSUID, _mount

    try:  # this namespace's processes only (refused where /proc is partly covered: the view stays the host's)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass


def own_standard_streams() -> None:
    """Give this process (a kernel about to start) standard streams of its own: nothing it prints, at any
    level, reaches the pipe its driver reports on."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _kernel_preexec() -> None:
    """In a spawned kernel before exec: dead with the driver (it runs no code of the grader's after this)."""
    import signal

    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


HIDDEN_ERROR = "ERROR: an error occurred while the notebook had disabled showing it"


@functools.cache
def ready_client_class():
    """jupyter_client's ``AsyncKernelClient`` whose wait for a new kernel ends when the kernel has answered
    ``kernel_info`` and IOPub has carried a message (so no output of the first cell can be lost), as
    jupyter_client's does; it then does not wait on until IOPub has been silent for 0.2 s. Those messages
    belong to ``kernel_info``, and nbclient reads only those of the cell it runs. Started in the gap between
    two proof steps, a kernel thus costs no idle 0.2 s.

    Its sockets try again to connect every :data:`RECONNECT_MS` (zmq's default is 100 ms). The client
    connects as soon as the kernel is started, before the kernel has bound every socket: its IOPub then
    connected 100 to 180 ms later than it could, and the kernel's answer to the first ``kernel_info`` went
    out on an IOPub nobody listened to yet, so the wait for an IOPub message ran its whole time before
    asking again. It now asks again after :data:`IOPUB_WAIT` s."""
    import time
    from queue import Empty

    import zmq.asyncio
    from jupyter_client.asynchronous import AsyncKernelClient
    from traitlets import Type, default

    class ReadyClient(AsyncKernelClient):
        shell_channel_class = Type(sliced_shell_channel_class())

        @default("context")
        def _reconnecting_context(self) -> zmq.asyncio.Context:
            self._created_context = True
            context = zmq.asyncio.Context()
            context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)  # (the default for its sockets)
            return context

        async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
            deadline = time.time() + (float("inf") if timeout is None else timeout)
            while True:
                self.kernel_info()
                try:
                    msg = await self.shell_channel.get_msg(timeout=1)
                except Empty:
                    msg = None
                if msg is not None and msg["msg_type"] == "kernel_info_reply":
                    try:  # IOPub is connected once a message comes on it
                        await self.iopub_channel.get_msg(timeout=IOPUB_WAIT)
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(msg)
                        return
                if not await self._async_is_alive():
                    raise RuntimeError("Kernel died before replying to kernel_info")
                if time.time() > deadline:
                    raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")

        wait_for_ready = _async_wait_for_ready

    return ReadyClient


@functools.cache
def sliced_shell_channel_class():
    """jupyter_client's shell channel, whose wait for a message looks at the socket again every
    :data:`SHELL_LOOK_S` seconds. zmq tells asyncio of a message by an edge-triggered file descriptor, and a send on
    the same socket can take that edge: nbclient sends on the shell socket while it waits for a cell's reply (its
    stand-in for an ipywidgets ``Output`` answers the widget), and the reply then sat unseen until the wait's
    timeout ran out. Lecture 6's widget cell took the whole 360 s of its limit in about one run in 15 under load,
    then went on as if nothing had happened. A wait in slices sees it within a slice."""
    import time
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    class SlicedShellChannel(AsyncZMQSocketChannel):
        async def get_msg(self, timeout: float | None = None) -> dict:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = SHELL_LOOK_S if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    return await super().get_msg(timeout=min(SHELL_LOOK_S, left))
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise

    return SlicedShellChannel


SHELL_LOOK_S = 0.5  # s: how often a wait for a shell message looks at its socket (what a missed edge costs)
RECONNECT_MS = 5  # how often a driver's socket tries again to reach a kernel that has not bound it yet
IOPUB_WAIT = 0.05  # s: after a kernel_info reply, how long an IOPub message may take before it is asked again


@functools.cache
def ready_kernel_manager_class():
    """jupyter_client's ``AsyncKernelManager`` whose clients are :func:`ready_client_class`'s."""
    from jupyter_client import AsyncKernelManager
    from traitlets import default

    class ReadyKernelManager(AsyncKernelManager):
        @default("client_factory")
        def _ready_client(self):
            return ready_client_class()

    return ReadyKernelManager


def make_client(cell_timeout: float):
    import nbformat
    from nbclient import NotebookClient

    class LimitedClient(NotebookClient):
        """Keeps at most MAX_OUTPUT_CHARS of output per cell, so a flood cannot exhaust memory."""

        def output(self, outs, msg, display_id, cell_index):
            size = sum(
                len(json.dumps(o)) for o in outs
            )  # everything an output holds: data, metadata, traceback
            if size > MAX_OUTPUT_CHARS:
                if not any(o.get("name") == "truncated" for o in outs):
                    outs.append(
                        nbformat.v4.new_output("stream", name="truncated", text="[output truncated]\n")
                    )
                return None
            return super().output(outs, msg, display_id, cell_index)

    def error_from_reply(cell, cell_index, execute_reply, **_):
        """As nbgrader's own Execute does: a cell whose reply says it failed gets an error output even where
        the notebook stopped the kernel from showing one (``showtraceback`` replaced)."""
        content = (execute_reply or {}).get("content", {})
        if content.get("status") != "error":
            return
        ename = content.get("ename")
        if any(o.get("output_type") == "error" and o.get("ename") == ename for o in cell.get("outputs", [])):
            return
        cell.setdefault("outputs", []).append(
            nbformat.v4.new_output(
                "error", ename=str(ename), evalue=str(content.get("evalue", "")),
                traceback=[HIDDEN_ERROR],
            )
        )  # fmt: skip

    nb = nbformat.v4.new_notebook()
    return LimitedClient(
        nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True, interrupt_on_timeout=False,
        on_cell_executed=error_from_reply, kernel_manager_class=ready_kernel_manager_class(),
    )  # fmt: skip


def short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def test_cell_id(cell) -> str | None:
    """The ``grade_id`` of a graded test cell (graded, not an answer), else None. The notebook is the grader's
    (repaired from the source): a test cell's metadata is the source's."""
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade_id") if meta.get("grade") and not meta.get("solution") else None


def _cap(client, caps: dict, since: dict) -> dict:
    """Before a capped cell (a notebook the grader built: :mod:`autograder.grading.measure`): its caps set on the run's
    processes from here, outside the kernel (:func:`autograder.runner.caps.cap`); ``since`` carries what an
    earlier capped cell set (a CPU budget for the run counts from the first cell)."""
    from autograder.runner.caps import cap

    pid = kernel_pid(client.km)
    return {"pid": pid, **cap(pid, caps, since)} if pid is not None else {"pid": None}


def _used(client, capped: dict) -> dict:
    from autograder.runner.caps import used

    pid = capped.pop("pid", None)
    return used(pid, capped) if pid is not None else {"error": "the kernel's process was not found"}


def run_cells(client, nb, results: list[dict], outputs: dict[int, list], harvest=None) -> None:
    """Run the code cells in order; for each, an entry in ``results`` and, in ``outputs``, a copy of its
    outputs as the cell left them when it finished (a later cell's display update changes nothing there).
    ``harvest`` (:class:`autograder.runner.protocol.Harvest`) takes what the checks recorded after each
    cell, tagged with the cell that ran."""
    import copy

    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    client.nb = nb
    since: dict = {}  # the first capped cell's CPU times: a measured cell's CPU is counted from there
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        entry = {
            "index": index,
            "grade_id": cell.metadata.get("nbgrader", {}).get("grade_id"),
            "status": "ok",
        }
        results.append(entry)
        caps = cell.metadata.get("dlcourse", {}).get("caps") if harvest is not None else None
        capped = _cap(client, caps, since) if isinstance(caps, dict) else None
        try:
            client.execute_cell(cell, index)
        except CellTimeoutError:
            entry.update(status="timeout", error="the cell ran longer than the per-cell time limit")
            raise
        except DeadKernelError:
            entry.update(
                status="died", error="the kernel died (the code exited, crashed, or ran out of memory)"
            )
            raise
        finally:
            outputs[index] = copy.deepcopy(list(cell.get("outputs", [])))
            if harvest is not None:
                harvest.take(test_cell_id(cell))
            if capped is not None:
                entry["measure"] = _used(client, capped)
        texts = []
        for out in outputs[index]:
            if out.get("output_type") == "error":
                if out.get("traceback") == [HIDDEN_ERROR]:
                    entry["hidden_error"] = 1  # the report carries plain values: no booleans
                entry.update(
                    status="error",
                    ename=short(str(out.get("ename")), 200),
                    evalue=short(str(out.get("evalue"))),
                )
            elif out.get("output_type") == "stream":
                texts.append(str(out.get("text", "")))
            elif "text/plain" in out.get("data", {}):
                texts.append(str(out["data"]["text/plain"]))
        entry["output"] = short("".join(texts), 4000)


def _shows_more_than(path: str, revealed: list[str]) -> bool:
    """Whether the hidden folder ``path`` lists anything besides the way to the revealed paths in it (and
    to the empty temporary folder a covered /var gets)."""
    from autograder.runner.isolation import SHARED_TEMP

    try:
        entries = set(os.listdir(path))
    except OSError:
        return False
    allowed = {
        Path(r).relative_to(path).parts[0]
        for r in [*revealed, *SHARED_TEMP]
        if Path(r).is_relative_to(path) and r != path
    }
    return bool(entries - allowed)


def probe(hidden: list[str], revealed: list[str]) -> int:
    """What a kernel started here would get: print it as one JSON line; exit 0 if a kernel can start."""
    import socket
    import subprocess

    report = {"uid": os.getuid(), "interfaces": sorted(name for _, name in socket.if_nameindex())}
    report["visible"] = [path for path in hidden if _shows_more_than(path, revealed)]
    # where no namespace covers them: the folders this user may enter, and so read by the names the course's public
    # layout gives (listing them may be refused where entering is not)
    report["enterable"] = [path for path in hidden if os.access(path, os.X_OK)]
    try:
        import nbclient  # noqa: F401  (what this process needs once it has dropped its privileges)

        started = subprocess.run(
            [sys.executable, "-c", "import ipykernel, numpy"], capture_output=True, text=True, timeout=120
        )
        report["python"] = "ok" if started.returncode == 0 else short(started.stderr.strip(), 600)
    except Exception as err:  # the interpreter or its libraries cannot be reached as this user
        report["python"] = f"{type(err).__name__}: {short(str(err), 600)}"
    print(json.dumps(report), flush=True)
    return 0 if report["python"] == "ok" else 4


def prepare_run(request) -> None:
    """Before the kernel starts: the submission's folders (where they are not already its tmpfs mounts). Its
    torch.compile cache starts empty: a copy of the reference run's would hand it the code that inductor
    generated from the instructor's solutions."""
    for folder in ("work", "home", "tmp", "capture"):
        (Path(request.scratch) / folder).mkdir(exist_ok=True)


BLAS_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def single_threaded_imports():
    """Import what the driver needs before its namespaces with BLAS on one thread, then give the environment (which
    the kernel it starts inherits) the run's own thread counts back. numpy (imported through ``dlcourse``) starts
    OpenBLAS's threads at import where more are asked for, and a process with a second thread cannot make a user
    namespace (:func:`autograder.runner.isolation.enter_namespaces`). The driver computes nothing with BLAS."""
    asked = {name: os.environ.get(name) for name in BLAS_THREADS}
    os.environ.update(dict.fromkeys(BLAS_THREADS, "1"))
    try:
        from autograder.runner.isolation import Tmpfs, enter_namespaces
        from autograder.runner.protocol import ChildRequest
    finally:
        for name, value in asked.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return ChildRequest, Tmpfs, enter_namespaces


def main() -> None:
    ChildRequest, Tmpfs, enter_namespaces = single_threaded_imports()
    parser = argparse.ArgumentParser()
    parser.add_argument("--request", required=True, help="the ChildRequest, as JSON")
    args = parser.parse_args()
    request = ChildRequest.from_json(args.request)
    if request.namespaces:
        try:
            enter_namespaces(
                request.hide, request.reveal, request.writable, extra=CLONE_NEWIPC | CLONE_NEWUTS,
                tmpfs=Tmpfs(request.private, request.uid, request.temp_size), links=request.links,
            )  # fmt: skip
            own_process_namespace()
        except OSError as err:
            print(f"isolation failed: could not make the sandbox's namespaces: {err}", flush=True)
            sys.exit(3)
    drop_privileges(request.uid, request.nproc, request.memory, driver=True)
    if not request.namespaces:  # (in its own namespace the driver is PID 1, where orphans go anyway)
        _libc().prctl(
            PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0
        )  # a process that leaves the kernel's tree comes here
    if request.probe:
        sys.exit(probe(list(request.hide), request.shown))
    prepare_run(request)

    import subprocess

    import nbformat

    client = make_client(request.cell_timeout)
    timings: dict = {}
    started = time.perf_counter()
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    with client.setup_kernel(cwd=str(request.work), preexec_fn=_kernel_preexec, **streams):
        timings["kernel_start"] = time.perf_counter() - started
        modules = [name for name in request.warm if name]
        code = [f"import {name}" for name in modules]
        if "torch" in modules and request.threads:  # torch caps OMP_NUM_THREADS at the cores; this it keeps
            code.append(f"torch.set_num_threads({request.threads})")
        if "numpy" in modules and request.threads:  # and so does OpenBLAS: as a forked kernel's (set_threads)
            code.append(f"__import__('threadpoolctl').threadpool_limits({request.threads})")
        # loaded, but no name left behind: a notebook that forgot an import fails here as in a forked kernel
        code.append("del " + ", ".join(dict.fromkeys(name.split(".")[0] for name in modules)))
        warm = nbformat.v4.new_code_cell("\n".join(code))
        client.nb.cells = [warm]
        started = time.perf_counter()
        client.execute_cell(warm, 0)
        timings["imports"] = time.perf_counter() - started
        print(READY, flush=True)
        run_notebook(client, Path(request.scratch), timings)


def kernel_pid(km) -> int | None:
    """The kernel's process id as this driver's ``/proc`` numbers it (a forked run's manager knows it)."""
    return km.kernel_pid() if hasattr(km, "kernel_pid") else getattr(km.provisioner, "pid", None)


def kernel_peak_mb(km) -> float | None:
    """The kernel's resident memory at its largest (its own high-water mark, ``VmHWM``), read before it is
    stopped: a kernel that lived between two of the watchdog's samples (0.2 s apart) has a peak too. A kernel
    can lower its own mark (``/proc/self/clear_refs``), not raise it above what it held: the grader keeps
    the larger of this and its own samples."""
    pid = kernel_pid(km)
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_notebook(client, scratch: Path, timings: dict) -> None:
    """After READY: read the notebook's path from stdin (a grader-owned folder), copy the files beside it
    into the work folder, run it cell by cell in the client's kernel, send the report (the summary, each
    cell's outputs, what the checks captured) on standard output, kill the kernel and leave at once (never
    returns)."""
    import shutil

    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbclient.util import run_sync

    from autograder.runner.protocol import Harvest, encode_report

    summary: dict = {"cells": [], "stopped": None, "timings": timings}
    outputs: dict[int, list] = {}
    path = Path(sys.stdin.readline().strip())
    if not path.name:
        os._exit(0)
    for (
        item
    ) in path.parent.iterdir():  # the assignment's files (data, helpers, folders), chosen by the grader
        if item.is_dir() and not item.is_symlink():
            shutil.copytree(item, scratch / "work" / item.name, symlinks=True, dirs_exist_ok=True)
        elif item.is_file() and item != path:
            shutil.copy(item, scratch / "work" / item.name)
    nb = nbformat.read(path, as_version=4)
    harvest = Harvest(scratch / "capture")
    started = time.perf_counter()
    try:
        run_cells(client, nb, summary["cells"], outputs, harvest)
    except (CellTimeoutError, DeadKernelError) as err:
        summary["stopped"] = type(err).__name__
    except Exception as err:  # the runner itself failed: say so, never hide it
        summary["stopped"] = f"runner error: {type(err).__name__}: {short(str(err), 500)}"
    timings["notebook"] = time.perf_counter() - started
    summary["kernel_peak_mb"] = kernel_peak_mb(client.km)
    # the kernel first: nothing may change the capture while it is read
    started = time.perf_counter()
    run_sync(client.km.shutdown_kernel)(now=True)
    timings["kernel_stop"] = time.perf_counter() - started
    harvest.take(None)  # written after the last cell ran: no test cell's
    files, problems = harvest.result()
    report = encode_report(summary, outputs, files, problems)
    out = sys.stdout.buffer
    out.write(report)
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
