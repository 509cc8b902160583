"""``python -m benchmarks.colab_check`` (``make colab-check``): the course on the versions Colab runs.

The course is tested on this repository's pins (Python 3.11 here, torch 2.13, TensorFlow 2.21). Students run it
on Colab's GPU runtime: a newer Python, torch 2.11, TensorFlow 2.20, Keras 3.13, numpy 2.1 (``COLAB_PINS``). This
check builds a second environment with those versions, outside the repository and cached
(``$DLCOURSE_COLAB_ENV``, default ``~/.cache/dlcourse-colab``: the downloaded wheels, several GB once, and a
virtual environment per Python), installs the course package from the wheel ``make wheel`` builds (each
notebook's set-up cell installs it, as on Colab, with ``DLCOURSE_PIP`` naming that wheel), and runs in it every
lecture top to bottom and every assignment's source notebook (solutions and public checks; hidden checks record
into a temporary ``DLCOURSE_CAPTURE`` folder, as the grader's reference run does). The same notebooks then run
in this repository's own environment, and for each notebook it records: ran or failed, the first error, the
lines on stderr (warnings, library noise) that only one of the two runs printed, the warnings the lecture
test's no-leaked-warnings rule would reject, and the time.

The Python is ``$COLAB_PYTHON`` when set, else the newest 3.13 or 3.12 found (``python3.13`` on PATH, then a
version manager's ``pyenv prefix``), else this Python (said so in the output). The result goes to
``benchmarks/results/colab-check-<UTC time>.json`` and a section of ``benchmarks/RESULTS.md``. Never part of
``make test``: the download is large and the run takes many minutes. It says what it is doing as it goes: pip's
own lines while the environment is built, a line per notebook with its count ("[3/22] colab: lectures/..."), and
a line with the elapsed seconds whenever a step has been silent for ``HEARTBEAT_S``; the kernels' known
start-up noise (``KERNEL_NOISE``, ``KERNEL_QUIET_ENV``) is left out of that log.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Colab's GPU runtime, as its published image list gives it (August 2026). torch 2.11.0 for Python 3.13 is
# on the registry only as its CUDA build (with the nvidia-* wheels): that is what gets installed, GPU or not.
COLAB_PINS = (
    "torch==2.11.0",
    "tensorflow-cpu==2.20.0",
    "keras==3.13.2",
    "numpy==2.1.3",
    "ipykernel==6.17.1",
    "nbclient==0.10.2",
    "nbformat",
    "scikit-learn",
    "scipy",
    "matplotlib",
    "ipywidgets",
    "tqdm",
)
PREFERRED_PYTHONS = ("3.13", "3.12")  # Colab's, newest first
CELL_TIMEOUT_S = 600
REPORTED_PACKAGES = ("torch", "tensorflow-cpu", "keras", "numpy", "ipykernel", "nbclient", "scikit-learn")
# Log prefixes: glog and torch's logging ("W1125 21:16:42.680000 2329 torch/x.py:140] [0/0] ") and Kineto's
# ("ERROR:2026-11-25 21:12:06 30764:30764 DeviceProperties.cpp:48] "): the level and the file stay.
_GLOG = re.compile(r"^([EWIFDC])\d{4} [\d:.]+\s+\d+ ([\w./]+):\d+\]\s*(?:\[[\d/]+\]\s?)?")
_KINETO = re.compile(r"^([A-Z]+):\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ ([\w./]+):\d+\]\s*")
_SITE = re.compile(r"\S*?[/\\](?:site|dist)-packages[/\\]")
_CELL_FILE = re.compile(r"\S*ipykernel_\d+[/\\]\d+\.py")
_LINE_NO = re.compile(r"(\.py):\d+:")
_WARNING = re.compile(r"(\w+Warning): (.*)")
HEARTBEAT_S = 10.0  # a long step (the download, the install, a notebook's cells) says it is alive this often
# The kernels' known start-up noise, and nothing else. Colab's ipykernel 6 imports debugpy at start (the kernel,
# and jupyter_client's kernelspec look-up in the process that starts it), whose file check prints 4 lines on a
# Python with frozen modules ("Debugger warning: It seems that frozen modules are being used ..."): debugpy's
# own switch turns that check off, in every process of the run. Our pinned ipykernel 7 logs one line per
# kernel on TCP without a CurveZMQ key (nbclient's kernels: loopback, in a temporary folder): that exact line
# is dropped from the log, every other line (any other warning included) is kept.
KERNEL_QUIET_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
KERNEL_NOISE = (re.compile(r"^\[IPKernelApp\] WARNING \| Kernel is running over TCP without encryption\. "),)


# ---------------------------------------------------------------------------------------------------------
# Inside either environment: run notebooks and report plain data. Only the standard library, nbformat and
# nbclient here: this file runs as a script under the second environment's Python, without the repository
# on its path, so the kernels import the course package the wheel installed.


def normalise(line: str, workdir: str) -> str:
    """A stderr line without what differs between two runs of the same code: log prefixes, install paths,
    line numbers in library files, the kernel's cell file names and the temporary folder."""
    line = _GLOG.sub(r"\1 \2: ", line.rstrip())
    line = _KINETO.sub(r"\1 \2: ", line).strip()
    line = line.replace(workdir, "<workdir>")
    line = _CELL_FILE.sub("<cell>", line)
    line = _SITE.sub("", line)
    line = _LINE_NO.sub(r"\1:", line)
    return line.replace(str(Path.home()), "~")


def run_one(path: str, env: dict[str, str], capture: bool) -> dict:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    entry: dict = {"ran": False, "first_error": None, "errors": 0, "stderr": [], "leaked": []}
    taught = nb.metadata.get("dlcourse", {}).get("taught_warnings", [])
    with tempfile.TemporaryDirectory(prefix="colab-check-") as workdir:
        run_env = dict(env)
        if capture:
            run_env["DLCOURSE_CAPTURE"] = os.path.join(workdir, "capture")
        client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": workdir}})  # fmt: skip
        start = time.perf_counter()
        try:
            client.execute(env=run_env, cwd=workdir)
        except Exception as err:  # a timeout or a dead kernel: reported, the next notebook still runs
            entry["first_error"] = {"cell": None, "error": f"{type(err).__name__}: {str(err).strip()[-300:]}"}
        entry["seconds"] = round(time.perf_counter() - start, 1)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    entry["errors"] += 1
                    if entry["first_error"] is None:
                        text = normalise(f"{out.get('ename')}: {out.get('evalue', '')}", workdir)
                        entry["first_error"] = {"cell": index, "error": text[:300]}
                elif out.get("name") == "stderr":
                    previous = ""
                    for line in out.get("text", "").splitlines():
                        echo = line.startswith(" ") and _WARNING.search(
                            previous
                        )  # the source line a warning shows
                        previous = line
                        if line.strip() and not echo:
                            entry["stderr"].append([index, normalise(line, workdir)])
                        found = _WARNING.search(line)
                        if found and not any(t in " ".join(found.groups()) for t in taught):
                            entry["leaked"].append([index, normalise(found.group(0), workdir)[:200]])
                elif out.get("name") == "stdout" and "banner" not in entry:
                    for line in out.get("text", "").splitlines():
                        if line.startswith("Python ") and " torch " in line:
                            entry["banner"] = line.strip()
    entry["ran"] = entry["first_error"] is None
    return entry


def inner(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    env = dict(os.environ)
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    env.update(spec["env"])
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    results = {}
    for number, path in enumerate(spec["notebooks"], 1):
        print(
            f"[{time.strftime('%H:%M:%S')}] [{number}/{len(spec['notebooks'])}] {spec['label']}: "
            f"{os.path.relpath(path, spec['root'])}",
            flush=True,
        )
        results[path] = run_one(path, env, capture=os.sep + "source" + os.sep in path)
    Path(spec["out"]).write_text(json.dumps(results))
    return 0


# ---------------------------------------------------------------------------------------------------------
# Outside, in the repository's environment: build the second environment, run both, compare, record.


def is_noise(line: str) -> bool:
    return any(pattern.match(line) for pattern in KERNEL_NOISE)


def stream(command: list[str], what: str, log, show=print, every: float | None = None, **popen) -> None:
    """Run ``command`` with its output (stdout and stderr) shown line by line as it comes (``show``), less
    the kernels' known noise, and ``log`` a line with the elapsed seconds whenever it has been silent for
    ``every`` seconds (:data:`HEARTBEAT_S`). Raises ``CalledProcessError`` as ``subprocess.run(check=True)``."""
    every = HEARTBEAT_S if every is None else every
    lines: queue.Queue = queue.Queue()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", bufsize=1, **popen) as process:  # fmt: skip

        def read() -> None:
            for line in process.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        start = time.perf_counter()
        while True:
            try:
                line = lines.get(timeout=every)
            except queue.Empty:
                log(f"{what}: {time.perf_counter() - start:.0f} s so far")
                continue
            if line is None:
                break
            if not is_noise(line):
                show(line)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)


def cache_dir() -> Path:
    if os.environ.get("DLCOURSE_COLAB_ENV"):
        return Path(os.environ["DLCOURSE_COLAB_ENV"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dlcourse-colab"


def python_version(python: str) -> str | None:
    try:
        done = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_python() -> tuple[str, str]:
    """(interpreter, how it was found): $COLAB_PYTHON, else python3.13/3.12 on PATH, else a pyenv version."""
    if os.environ.get("COLAB_PYTHON"):
        return os.environ["COLAB_PYTHON"], "COLAB_PYTHON"
    for minor in PREFERRED_PYTHONS:
        found = shutil.which(f"python{minor}")
        if found and python_version(found):
            return found, f"python{minor} on PATH"
    pyenv = shutil.which("pyenv")
    if pyenv:
        bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split()
        for minor in PREFERRED_PYTHONS:
            candidates = [v for v in bare if re.fullmatch(rf"{re.escape(minor)}\.\d+", v)]
            for version in sorted(candidates, key=lambda v: int(v.rsplit(".", 1)[1]), reverse=True):
                prefix = subprocess.run(
                    [pyenv, "prefix", version], capture_output=True, text=True
                ).stdout.strip()
                python = Path(prefix) / "bin" / "python"
                if prefix and python.is_file() and python_version(str(python)):
                    return str(python), f"pyenv {version}"
    return sys.executable, "none newer found: this Python"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build_env(python: str, cache: Path, log) -> tuple[Path, dict]:
    """The virtual environment with Colab's pins, downloaded once into ``cache/wheels`` and installed from
    there offline; rebuilt only when the pins or the Python change."""
    version = python_version(python)
    venv = cache / f"venv-py{version}"
    wheels = cache / "wheels"
    stamp = venv / ".colab-pins"
    wanted = "\n".join([version or "", *COLAB_PINS])
    record = cache / f"build-{venv.name}.json"  # what building it cost, kept beside it
    cost: dict = {"reused": stamp.is_file() and stamp.read_text() == wanted}
    if cost["reused"]:
        log(f"environment: reusing {venv.name} (pins unchanged)")
        if record.is_file():
            cost["build"] = json.loads(record.read_text())
    else:
        wheels.mkdir(parents=True, exist_ok=True)
        before = du(wheels)
        log(
            f"environment: downloading Colab's pins for Python {version} (once; several GB with torch's CUDA libraries)"
        )
        start = time.perf_counter()
        pip = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir", "--dest",
               str(wheels), *COLAB_PINS]  # fmt: skip
        stream(pip, "downloading", log, show=lambda line: print(f"  {line}", flush=True))
        cost["download_seconds"] = round(time.perf_counter() - start, 1)
        cost["downloaded_bytes"] = du(wheels) - before
        shutil.rmtree(venv, ignore_errors=True)
        start = time.perf_counter()
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        log(f"environment: installing them into {venv}")
        install = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-cache-dir", "--no-index", "--find-links", str(wheels), *COLAB_PINS]  # fmt: skip
        stream(install, "installing", log, show=lambda line: print(f"  {line}", flush=True))
        cost["install_seconds"] = round(time.perf_counter() - start, 1)
        stamp.write_text(wanted)
        built = {k: cost[k] for k in ("download_seconds", "downloaded_bytes", "install_seconds")}
        record.write_text(json.dumps({**built, "built": time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())}))
    cost["wheels_bytes"] = du(wheels)
    cost["venv_bytes"] = du(venv)
    return venv, cost


def build_wheel(dist: Path) -> Path:
    subprocess.run(["make", "--no-print-directory", "wheel", f"DIST={dist}"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    (wheel,) = dist.glob("dlcourse-*-py3-none-any.whl")
    return wheel


def env_versions(python: str) -> dict[str, str]:
    code = ("import json, platform; from importlib import metadata as m; d = {'python': platform.python_version()}\n"
            f"for n in {REPORTED_PACKAGES!r}:\n"
            "    try: d[n] = m.version(n)\n    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(d))")  # fmt: skip
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def notebooks(only: list[str] | None) -> list[Path]:
    lectures = sorted((ROOT / "lectures").glob("[0-9][0-9]_*.ipynb"))
    sources = [p for p in sorted((ROOT / "source").glob("*/*.ipynb")) if p.stem == p.parent.name]
    chosen = lectures + sources
    if only:
        chosen = [p for p in chosen if any(o in str(p.relative_to(ROOT)) for o in only)]
    return chosen


def run_in(python: str, label: str, paths: list[Path], env: dict[str, str], scratch: Path, log) -> dict:
    """Run ``paths`` under ``python`` (a line per notebook, with its count; the kernels' noise left out)."""
    spec = scratch / f"{label}.json"
    out = scratch / f"{label}-out.json"
    spec.write_text(json.dumps({"label": label, "root": str(ROOT), "notebooks": [str(p) for p in paths],
                                "env": {**env, **KERNEL_QUIET_ENV}, "out": str(out)}))  # fmt: skip
    stream([python, str(Path(__file__).resolve()), "--inner", str(spec)], f"{label} run", log,
           show=lambda line: print(line, flush=True), cwd=scratch, env={**os.environ, **KERNEL_QUIET_ENV})  # fmt: skip
    return json.loads(out.read_text())


def only_in(a: list, b: list) -> list:
    """Lines (cell, text) of ``a`` whose text ``b`` never printed in that cell, each once."""
    seen = {(cell, text) for cell, text in b}
    out = []
    for cell, text in a:
        if (cell, text) not in seen and [cell, text] not in out:
            out.append([cell, text[:300]])
    return out


def compare(paths: list[Path], colab: dict, reference: dict) -> list[dict]:
    rows = []
    for path in paths:
        c, r = colab[str(path)], reference[str(path)]
        rows.append({
            "notebook": str(path.relative_to(ROOT)),
            "colab": {k: c.get(k) for k in ("ran", "first_error", "errors", "seconds", "banner")},
            "reference": {k: r.get(k) for k in ("ran", "first_error", "errors", "seconds", "banner")},
            "stderr_only_colab": only_in(c["stderr"], r["stderr"]),
            "stderr_only_reference": only_in(r["stderr"], c["stderr"]),
            "leaked_colab": only_in(c["leaked"], []),
            "leaked_reference": only_in(r["leaked"], []),
        })  # fmt: skip
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.colab_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        nargs="*",
        help="run only notebooks whose path contains one of these (printed, not recorded)",
    )
    parser.add_argument("--side-by-side", action="store_true",
                        help="run both environments at the same time (faster; each one's times then include the other's load)")  # fmt: skip
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the run into benchmarks/results/ and rewrite benchmarks/RESULTS.md (by default the checkout "
        "is left as it was: the run is printed)",
    )
    parser.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)  # the default now
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.inner:
        return inner(args.inner)

    from benchmarks.machine import load_average
    from dlcourse._lazy import QUIET_ENV
    from dlcourse.measure import cpu_info

    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    started = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    load_start = load_average()
    python, how = find_python()
    log(f"second environment's Python: {python_version(python)} ({how})")
    if how.startswith("none"):
        log(
            f"no Python {' or '.join(PREFERRED_PYTHONS)} found (set COLAB_PYTHON): using this one, Colab's packages only"
        )
    cache = cache_dir()
    venv, cost = build_env(python, cache, log)
    colab_python = str(venv / "bin" / "python")
    paths = notebooks(args.only)
    with tempfile.TemporaryDirectory(prefix="colab-check-") as scratch:
        scratch = Path(scratch)
        log("building the course's wheel (make wheel)")
        wheel = build_wheel(scratch / "dist")
        # Each set-up cell installs this wheel, as on Colab; remove an older install so the first one does.
        subprocess.run([colab_python, "-m", "pip", "uninstall", "--quiet", "--yes", "dlcourse"],
                       capture_output=True)  # fmt: skip
        colab_env = {**QUIET_ENV, "DLCOURSE_PIP": str(wheel), "PIP_NO_INDEX": "1",
                     "PIP_FIND_LINKS": str(cache / "wheels")}  # fmt: skip
        # One BLAS thread per kernel, as `make test` runs the notebooks: on a shared 2-core machine several
        # OpenMP threads per kernel spin against other people's work and a lecture takes many times its limit.
        threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        colab_env.update(threads)
        runs = {"colab": (colab_python, colab_env), "reference": (sys.executable, {**QUIET_ENV, **threads})}

        def timed(label: str) -> dict:
            start = time.perf_counter()
            found = run_in(*runs[label][:1], label, paths, runs[label][1], scratch, log)
            cost[f"{label}_run_seconds"] = round(time.perf_counter() - start, 1)
            return found

        order = "side by side" if args.side_by_side else "one run after the other"
        log(f"running {len(paths)} notebooks on Colab's versions and on ours ({order}; a line per notebook)")
        with ThreadPoolExecutor(max_workers=2 if args.side_by_side else 1) as pool:
            colab, reference = pool.map(timed, ["colab", "reference"])
        cost["side_by_side"] = args.side_by_side
        cost["omp_num_threads"] = threads["OMP_NUM_THREADS"]
        installed = env_versions(colab_python)
    cost["venv_bytes"] = du(venv)
    rows = compare(paths, colab, reference)
    cpu = cpu_info()
    run = {
        "kind": "colab-check",
        "command": " ".join(["python -m benchmarks.colab_check", *(argv if argv is not None else sys.argv[1:])]),
        "started": started,
        "machine": {"cores": cpu.cores, "cpu_model": cpu.model, "load_average_start": load_start,
                    "load_average_end": load_average()},  # fmt: skip
        "colab": {"python_found_by": how, "versions": installed, "pins": list(COLAB_PINS),
                  "dlcourse_from": f"wheel {wheel.name}, installed by the notebooks' set-up cell (DLCOURSE_PIP)"},
        "reference": {"versions": env_versions(sys.executable)},
        "cost": cost,
        "notebooks": rows,
    }  # fmt: skip
    for row in rows:
        c = row["colab"]
        state = (
            "ran"
            if c["ran"]
            else f"FAILED cell {c['first_error']['cell']}: {c['first_error']['error'][:100]}"
        )
        extra = len(row["stderr_only_colab"])
        log(f"{row['notebook']:<40} {state}; {c['seconds']} s (reference {row['reference']['seconds']} s); "
            f"{extra} stderr line(s) only on Colab's versions, {len(row['leaked_colab'])} leaked warning(s)")  # fmt: skip
    if not args.record or args.no_record or args.only:  # a partial check is never recorded over a full one
        print(json.dumps(run, indent=1))
        log(
            "printed, not recorded (the checkout is unchanged): `make colab-check COLAB_ARGS=--record` records it"
        )
        return 0 if all(r["colab"]["ran"] for r in rows) else 1
    out = ROOT / "benchmarks" / "results" / f"colab-check-{started}.json"
    out.write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    from benchmarks.report import write_report

    write_report(ROOT / "benchmarks")
    log(f"recorded {out.relative_to(ROOT)} and rewrote benchmarks/RESULTS.md")
    return 0 if all(r["colab"]["ran"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
