"""The one way in and the one way back between the grader and a submission's child.

In: a :class:`ChildRequest`, one description of what a child gets (its folders, what it may see, its user,
limits and environment), the same for a spawned child (as one JSON argument) and a forked one (as one
packet to the warm parent).

Back: a :class:`ChildReport`, written by the driver (the process that runs the notebook through nbclient;
no student code runs in it) to its standard output, the pipe the grader holds, as one frame::

    DLCOURSE-REPORT <header bytes> <data bytes>\\n<header JSON><data>

The header holds the run summary, each code cell's outputs as the cell left them, and the list of captured
files; the data their bytes, one after another. The driver reads the capture folder without following
links and without blocking (regular files only, bounded); the grader reads nothing the submission could
have named: it parses this frame, bounded in size, and keeps what it accepts in its own memory
(:meth:`ChildReport.capture`), where it decides the points. The kernel has its own standard streams
(``/dev/null``), so nothing the student's code prints can reach this pipe.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlcourse._lazy import QUIET_ENV

REPORT_TAG = b"DLCOURSE-REPORT"
MAX_HEADER_BYTES = 32 * 2**20  # the summary and the outputs (the driver keeps 20,000 characters a cell)
MAX_DATA_BYTES = 256 * 2**20  # the captured cases' values
MAX_FILES = 20_000
# what a capture folder may hold: the index the checks append to, and one .npy per value (and expected value)
CAPTURE_NAME = re.compile(r"cases\.jsonl|\d{4,6}e?\.npy")
CASES_FILE = "cases.jsonl"
PROTOCOL_VERSION = 2
COMPILE_CACHE = "compile-cache"  # under a run's home, and in the reference: torch.compile's caches


@dataclass(frozen=True)
class ChildRequest:
    """Everything a child needs to start, in one place for every launcher."""

    scratch: str  # grader-owned; the child's folders are below it
    env: dict
    memory: int  # MB (RLIMIT_AS)
    cell_timeout: float
    threads: int
    warm: tuple[str, ...] = ("numpy",)
    uid: int | None = None
    nproc: int | None = None
    namespaces: bool = False
    hide: tuple[str, ...] = ()
    reveal: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    # links made again in the hidden folders, (where, target): on the way to the interpreter (Visibility.links)
    links: tuple[tuple[str, str], ...] = ()
    # folders given a size-limited tmpfs of their own inside the namespaces: {path: bytes}
    private: dict = field(default_factory=dict)
    temp_size: int = 256 * 2**20  # bytes each of its own /tmp, /var/tmp and /dev/shm may hold
    probe: bool = False

    @property
    def shown(self) -> list[str]:
        """What of the hidden folders the kernel sees: the revealed paths and the links made again."""
        return [*self.reveal, *(where for where, _ in self.links)]

    @property
    def work(self) -> Path:
        return Path(self.scratch) / "work"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ChildRequest:
        data = json.loads(text)
        for name in ("warm", "hide", "reveal", "writable"):
            data[name] = tuple(data.get(name) or ())
        data["links"] = tuple(tuple(pair) for pair in data.get("links") or ())
        return cls(**data)


# ----------------------------------------------------------------------------- the driver's side


def read_capture(folder: Path) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The capture folder's files as ``[(name, bytes)]``, read as the untrusted data they are: the folder
    and each file opened without following a link and without blocking, regular files only, named as the
    checks name them, bounded in count and size. Returns the files and a list of problems."""
    problems: list[str] = []
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        return [], ([] if err.errno == 2 else [f"the capture folder could not be opened ({err.strerror})"])
    files: list[tuple[str, bytes]] = []
    total = 0
    try:
        names = sorted(os.listdir(directory))
        for name in names[:MAX_FILES]:
            if not CAPTURE_NAME.fullmatch(name):
                problems.append(f"unexpected entry in the capture folder: {name[:60]!r}")
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
            except OSError as err:
                problems.append(f"{name}: not readable ({err.strerror})")
                continue
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    problems.append(f"{name}: not a regular file")
                    continue
                if total + info.st_size > MAX_DATA_BYTES:
                    problems.append("the captured results exceed the size limit; the rest were left out")
                    break
                data = _read_at_most(fd, info.st_size)
                total += len(data)
                files.append((name, data))
            finally:
                os.close(fd)
        if len(names) > MAX_FILES:
            problems.append(f"the capture folder holds more than {MAX_FILES} entries; the rest were left out")
    finally:
        os.close(directory)
    return files, problems


class Harvest:
    """What the checks recorded, taken from the capture folder by the driver after every code cell, each
    entry tagged with the cell that was running: the graded test cell's ``grade_id``, or None for any other
    cell (an answer, a cell the student added, or anything written after the last cell). The tag is the
    driver's, never the kernel's: whatever ``cell`` a line claims is replaced, so a value recorded from
    another cell (or by a hook or thread while an answer cell ran) cannot pass for a test cell's own.

    Each harvest empties the folder and renames what it took (``000001.npy``, ...), so an index line can only
    name a value written in the same cell: a line pointing at an earlier cell's file is dropped. Bounded in
    count and bytes over the whole run, as :func:`read_capture` bounds one folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files: list[tuple[str, bytes]] = []
        self.index: list[str] = []
        self.problems: list[str] = []
        self.total = 0

    def take(self, cell: str | None) -> None:
        """Take what is in the folder now, as recorded while ``cell`` ran."""
        found, problems = read_capture(self.folder)
        self.problems += problems
        _remove(self.folder, [name for name, _ in found])
        data = dict(found)
        lines = data.pop(CASES_FILE, b"").decode("utf-8", errors="replace").splitlines()
        for line in lines:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                entry = None
            if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                if line.strip():
                    self.problems.append("a malformed line in the results index was dropped")
                continue
            renamed = {}
            for key in ("file", "expected"):
                name = entry.get(key)
                if name is None and key == "expected":
                    continue
                if not isinstance(name, str) or name not in data:
                    renamed = None
                    break
                renamed[key] = self._keep(data.pop(name), "e" if key == "expected" else "")
                if renamed[key] is None:
                    return
            if renamed is None:
                self.problems.append(
                    f"a recording names a value not written in the same cell ({str(entry.get('name'))[:60]!r}); dropped"
                )
                continue
            entry.update(renamed, cell=cell)
            self.index.append(json.dumps(entry))

    def _keep(self, data: bytes, suffix: str) -> str | None:
        if len(self.files) >= MAX_FILES or self.total + len(data) > MAX_DATA_BYTES:
            if not any("size limit" in p for p in self.problems):
                self.problems.append("the captured results exceed the size limit; the rest were left out")
            return None
        self.total += len(data)
        name = f"{len(self.files) + 1:06d}{suffix}.npy"
        self.files.append((name, data))
        return name

    def result(self) -> tuple[list[tuple[str, bytes]], list[str]]:
        """The run's files as :func:`read_capture` returns one folder's, with the driver's index."""
        index = "".join(line + "\n" for line in self.index).encode()
        return ([(CASES_FILE, index)] if self.index else []) + self.files, self.problems


def _remove(folder: Path, names: list[str]) -> None:
    """Unlink ``names`` in ``folder`` without following a link on the way."""
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        for name in names:
            try:
                os.unlink(name, dir_fd=directory)
            except OSError:
                pass
    finally:
        os.close(directory)


def _read_at_most(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def encode_report(summary: dict, outputs: dict[int, list], files: list[tuple[str, bytes]], problems) -> bytes:
    header = json.dumps(
        {
            "version": PROTOCOL_VERSION,
            "summary": summary,
            "outputs": {str(index): cell_outputs for index, cell_outputs in outputs.items()},
            "files": [[name, len(data)] for name, data in files],
            "problems": list(problems),
        }
    ).encode()
    data = b"".join(data for _, data in files)
    return REPORT_TAG + f" {len(header)} {len(data)}\n".encode() + header + data


# ----------------------------------------------------------------------------- the grader's side


@dataclass
class ChildReport:
    """What came back from one run, parsed and bounded; every field is still the submission's word."""

    summary: dict = field(default_factory=dict)
    outputs: dict[int, list] = field(default_factory=dict)
    files: list[tuple[str, bytes]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, header: bytes, data: bytes) -> ChildReport:
        """Decode a frame's two parts; raise ValueError when it is not a report."""
        try:
            raw = _text_that_encodes(json.loads(header.decode("utf-8", errors="replace")))
        except RecursionError:
            raise ValueError("the report is nested too deeply") from None
        if not isinstance(raw, dict) or raw.get("version") != PROTOCOL_VERSION:
            raise ValueError("not a report of this grader")
        report = cls(summary=read_summary_data(raw.get("summary")))
        outputs = raw.get("outputs")
        if isinstance(outputs, dict):
            for key, value in outputs.items():
                if isinstance(key, str) and key.isdigit() and isinstance(value, list):
                    report.outputs[int(key)] = [o for o in value if isinstance(o, dict)]
        listed = raw.get("files") if isinstance(raw.get("files"), list) else []
        offset = 0
        for item in listed[:MAX_FILES]:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int)):
                report.problems.append("a malformed entry in the report's list of files")
                break
            name, size = str(item[0]), item[1]
            if size < 0 or offset + size > len(data):
                report.problems.append("the report's files do not add up to its data")
                break
            if CAPTURE_NAME.fullmatch(name) and name not in {n for n, _ in report.files}:
                report.files.append((name, data[offset : offset + size]))
            offset += size
        problems = raw.get("problems") if isinstance(raw.get("problems"), list) else []
        report.problems += [str(p)[:300] for p in problems[:50]]
        return report

    def capture(self) -> dict[str, bytes]:
        """The captured files as ``{name: bytes}``, held in memory (where verify reads them and from which a
        run is kept). ``.npy`` files are checked to load without pickle (as ``np.load`` reads them); what does
        not is left out."""
        from dlcourse.grading import npy_array

        held = {}
        for name, data in self.files:
            if name.endswith(".npy"):
                try:
                    npy_array(data)
                except Exception as err:
                    self.problems.append(f"{name}: unreadable data ({type(err).__name__})")
                    continue
            held[name] = data
        return held


def _text_that_encodes(value):
    """``value`` with every string made encodable as UTF-8 (a lone surrogate, which JSON can carry, becomes
    "?"), so that no page or notebook the grader writes from it can fail to be written."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_text_that_encodes(v) for v in value]
    if isinstance(value, dict):
        return {_text_that_encodes(k): _text_that_encodes(v) for k, v in value.items()}
    return value


class ReportReader:
    """Reads a child's standard output (binary): log lines, the READY line, and at most one report frame,
    keeping at most ``MAX_HEADER_BYTES + MAX_DATA_BYTES`` of it; everything else is dropped."""

    def __init__(self, ready_line: bytes):
        self.ready_line = ready_line
        self.log: list[str] = []
        self.header: bytes | None = None
        self.data: bytes | None = None
        self.broken = ""

    def feed_from(self, stream, on_ready, on_report=None) -> None:
        """Read ``stream`` to its end; ``on_ready()`` at the READY line, ``on_report()`` once a whole report
        frame has come (the driver's last act: the run is over, though its processes may still be ending)."""
        try:
            while True:
                line = stream.readline(64 * 1024)
                if not line:
                    return
                if line.strip() == self.ready_line:
                    on_ready()
                elif line.startswith(REPORT_TAG + b" ") and self.header is None:
                    self._read_frame(stream, line)
                    if self.header is not None and on_report is not None:
                        on_report()
                elif len(self.log) < 200:
                    self.log.append(line.decode("utf-8", errors="replace").rstrip()[:500])
        except (OSError, ValueError):  # closed by cleanup()
            return

    def _read_frame(self, stream, line: bytes) -> None:
        try:
            header_size, data_size = (int(x) for x in line.split()[1:3])
        except ValueError:
            self.broken = "a malformed report header"
            return
        if not (0 <= header_size <= MAX_HEADER_BYTES and 0 <= data_size <= MAX_DATA_BYTES):
            self.broken = "the report is larger than the limit"
            return
        header = stream.read(header_size)
        data = stream.read(data_size)
        if len(header) != header_size or len(data) != data_size:
            self.broken = "the report was cut off"
            return
        self.header, self.data = header, data

    def report(self) -> ChildReport | None:
        if self.header is None:
            return None
        try:
            return ChildReport.parse(self.header, self.data or b"")
        except ValueError as err:
            self.broken = str(err)
            return None


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
        # torch.compile's caches: the run's own and empty (another run's would hold code generated from its notebook)
        "TORCHINDUCTOR_CACHE_DIR": str(home / COMPILE_CACHE),
        "TRITON_CACHE_DIR": str(home / COMPILE_CACHE / "triton"),
        # no precompiled header of the run's own: it would cost 150 MB of its memory-limited tmpfs and 3.7 s; a
        # kernel forked from a warm parent uses the parent's, read-only (forkserver.use_precompiled_header)
        "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
        **QUIET_ENV,
        "PYTHONDONTWRITEBYTECODE": "1",
        "DLCOURSE_CAPTURE": str(scratch / "capture"),
        "DLCOURSE_CACHE": str(home / "cache"),
        "LANG": "C.UTF-8",
        # where pandas and pyarrow are installed (Colab), scikit-learn's import loads pyarrow, whose jemalloc
        # starts a background thread: a warm parent with it cannot fork safely, and refused to start (seen on a
        # GPU host's image); without the thread, jemalloc returns memory as it frees it
        "JE_ARROW_MALLOC_CONF": "background_thread:false",
        # OpenBLAS's threads spin 2**28 cycles (0.1 s) after each product before they sleep: CPU that another
        # run needs wherever every core is given to a kernel (the reference's runs at 2 and 4 threads lost 0.4 s
        # of 2 s to it on 2 cores). The partition of a product, and so its result, is the same either way
        "OPENBLAS_THREAD_TIMEOUT": "4",
    }
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # machine quirks the grader itself runs with
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _numbers(data: dict) -> dict[str, float]:
    """The finite numbers of a small dict, keyed by short names."""
    return {
        str(k)[:40]: float(v)
        for k, v in list(data.items())[:20]
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


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
            if isinstance(entry.get("measure"), dict):  # what a measured cell used, as its driver read it
                clean["measure"] = _numbers(entry["measure"])
            cells.append(clean)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    timings = {
        str(k)[:30]: float(v)
        for k, v in timings.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    summary = {
        "cells": cells,
        "stopped": data.get("stopped")[:600] if isinstance(data.get("stopped"), str) else None,
        "timings": timings,
    }
    peak = data.get("kernel_peak_mb")  # the kernel's own high-water mark, MB, where the driver could read it
    if isinstance(peak, int | float) and not isinstance(peak, bool) and math.isfinite(peak) and peak >= 0:
        summary["kernel_peak_mb"] = float(peak)
    return summary
