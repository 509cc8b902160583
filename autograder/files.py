"""Safe reads and writes of the grader's own files: a digest or a bounded read of a file that a submission may
have made a link, a FIFO or a device (opened without following a link or blocking), and a JSON file written
atomically (a crash leaves the old file or the new one, never half of one)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:  # in chunks: a 500 MB hand-in is never held in memory whole
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_regular(path: Path) -> str:
    """The sha256 of the regular file at ``path``, opened without following a link or blocking on a FIFO;
    "" for anything else (a link, a FIFO, a device, a folder, a file that cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return ""
        return hashlib.file_digest(fh, "sha256").hexdigest()


def read_bytes_bounded(path: Path, limit: int) -> tuple[bytes | None, str | None]:
    """At most ``limit`` bytes of the regular file at ``path``, read without following a link:
    ``(data, None)``, or ``(None, reason)`` for a link, a FIFO, a device, a folder or a larger file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, "the file is a link, not a notebook"
        return None, f"cannot read the file: {err.strerror}"
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_size > limit:
            return (
                None,
                f"the file is {info.st_size / 2**20:.0f} MB; notebooks over {limit // 2**20} MB are not graded",
            )
        data = fh.read(limit + 1)  # the file may grow after fstat
    if len(data) > limit:
        return None, f"the file is over {limit // 2**20} MB; such notebooks are not graded"
    return data, None


def write_json_atomic(path: Path, data: dict, durable: bool = True) -> None:
    """On one line: with an ``indent``, ``json`` encodes in Python, not in C, four times slower (a regrade
    writes two files per submission); ``python -m json.tool`` shows one indented. Not ``durable``, it is not
    flushed to the disk first (a cache: after a crash it reads as whole, as before, or not at all)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data))
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
