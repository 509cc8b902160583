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
import json
import os
import resource
import sys
import time
from pathlib import Path

READY = "DLCOURSE-CHILD-READY"
MAX_OUTPUT_CHARS = 20_000  # per cell; the rest is dropped with a note


def drop_privileges(uid: int | None, nproc: int | None, memory_mb: int | None) -> None:
    """Become ``uid`` (when started as root) and set the resource limits every process below inherits."""
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 * 2**20, 512 * 2**20))


def make_client(cell_timeout: float):
    import nbformat
    from nbclient import NotebookClient

    class LimitedClient(NotebookClient):
        """Keeps at most MAX_OUTPUT_CHARS of output per cell, so a flood cannot exhaust memory."""

        def output(self, outs, msg, display_id, cell_index):
            size = sum(len(json.dumps(o.get("data", o.get("text", "")))) for o in outs)
            if size > MAX_OUTPUT_CHARS:
                if not any(o.get("name") == "truncated" for o in outs):
                    outs.append(
                        nbformat.v4.new_output("stream", name="truncated", text="[output truncated]\n")
                    )
                return None
            return super().output(outs, msg, display_id, cell_index)

    nb = nbformat.v4.new_notebook()
    return LimitedClient(
        nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True, interrupt_on_timeout=False
    )


def short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def run_cells(client, nb, results: list[dict]) -> None:
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    client.nb = nb
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        entry = {
            "index": index,
            "grade_id": cell.metadata.get("nbgrader", {}).get("grade_id"),
            "status": "ok",
        }
        results.append(entry)
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
        texts = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
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
    from autograder.isolation import SHARED_TEMP

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--nproc", type=int)
    parser.add_argument("--memory", type=int)
    parser.add_argument("--cell-timeout", type=float, default=120)
    parser.add_argument("--warm", default="numpy")
    parser.add_argument(
        "--threads", type=int, help="torch's intra-op threads (BLAS threads come from the environment)"
    )
    parser.add_argument("--namespaces", action="store_true", help="own network and mount namespace")
    parser.add_argument("--hide", action="append", default=[], help="a folder the kernel must not see")
    parser.add_argument("--reveal", action="append", default=[], help="a path to show again, read-only")
    parser.add_argument("--writable", action="append", default=[], help="a path to show again as it is")
    parser.add_argument("--probe", action="store_true", help="report what the kernel would get, and exit")
    args = parser.parse_args()
    if args.namespaces:
        from autograder.isolation import enter_namespaces

        try:
            enter_namespaces(args.hide, args.reveal, args.writable)
        except OSError as err:
            print(f"isolation failed: could not make the sandbox's namespaces: {err}", flush=True)
            sys.exit(3)
    drop_privileges(args.uid, args.nproc, args.memory)
    if args.probe:
        sys.exit(probe(args.hide, args.reveal))

    import nbformat

    scratch = Path(args.scratch)
    work = scratch / "work"
    client = make_client(args.cell_timeout)
    timings: dict = {}
    started = time.perf_counter()
    with client.setup_kernel(cwd=str(work)):
        timings["kernel_start"] = time.perf_counter() - started
        modules = [name for name in args.warm.split(",") if name]
        code = [f"import {name}" for name in modules]
        if "torch" in modules and args.threads:  # torch caps OMP_NUM_THREADS at the cores; this it keeps
            code.append(f"torch.set_num_threads({args.threads})")
        # loaded, but no name left behind: a notebook that forgot an import fails here as in a forked kernel
        code.append("del " + ", ".join(dict.fromkeys(name.split(".")[0] for name in modules)))
        warm = nbformat.v4.new_code_cell("\n".join(code))
        client.nb.cells = [warm]
        started = time.perf_counter()
        client.execute_cell(warm, 0)
        timings["imports"] = time.perf_counter() - started
        print(READY, flush=True)
        run_notebook(client, scratch, timings)


def run_notebook(client, scratch: Path, timings: dict) -> None:
    """After READY: read the notebook's path from stdin, run it cell by cell in the client's kernel, write
    ``executed.ipynb`` and ``run.json``, kill the kernel and leave at once (never returns)."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbclient.util import run_sync

    summary: dict = {"cells": [], "stopped": None, "timings": timings}
    path = sys.stdin.readline().strip()
    if not path:
        os._exit(0)
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    try:
        run_cells(client, nb, summary["cells"])
    except (CellTimeoutError, DeadKernelError) as err:
        summary["stopped"] = type(err).__name__
    except Exception as err:  # the runner itself failed: say so, never hide it
        summary["stopped"] = f"runner error: {type(err).__name__}: {short(str(err), 500)}"
    timings["notebook"] = time.perf_counter() - started
    try:
        nbformat.write(nb, str(scratch / "executed.ipynb"))
    except Exception:
        pass
    (scratch / "run.json").write_text(json.dumps(summary))
    # Done: kill the kernel at once (a polite shutdown waits seconds) and leave without cleanup.
    run_sync(client.km.shutdown_kernel)(now=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
