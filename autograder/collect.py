"""Stage 1, collect: a folder of notebooks or an LMS download (zip) becomes one submission per student,
laid out as nbgrader expects: ``submitted/<student_id>/<AID>/<AID>.ipynb``.

The student id comes from, in order: an LMS file name (Canvas's ``name_12345_67890_file.ipynb`` by default,
configurable), ``<student_id>/<any>.ipynb``, or ``<student_id>.ipynb``. Nothing here parses a notebook:
a broken file is collected as it is, and the next stages report on it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autograder.course import Course

# Canvas: "lastfirst_12345_6789012_A1.ipynb", late ones "lastfirst_LATE_12345_6789012_A1-1.ipynb".
CANVAS_PATTERN = r"^(?P<student>[A-Za-z0-9\-]+)_(?:LATE_)?\d+_\d+_.+\.ipynb$"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_ZIP_BYTES = 2 * 2**30
MAX_MEMBER_BYTES = 64 * 2**20


@dataclass
class Collected:
    students: dict[str, Path] = field(default_factory=dict)  # student id -> collected notebook
    notes: list[str] = field(default_factory=list)


def student_id_for(path: Path, base: Path, pattern: re.Pattern) -> str | None:
    match = pattern.match(path.name)
    if match:
        return match.group("student")
    relative = path.relative_to(base)
    if len(relative.parts) >= 2:
        return relative.parts[0]
    return path.stem


def unpack_zip(archive: Path, target: Path) -> list[str]:
    """Extract a zip safely: no paths outside ``target``, no links, bounded sizes. Returns notes."""
    notes = []
    with zipfile.ZipFile(archive) as zf:
        total = 0
        for info in zf.infolist():
            name = Path(info.filename)
            if info.is_dir():
                continue
            if name.is_absolute() or ".." in name.parts:
                notes.append(f"skipped unsafe path in zip: {info.filename}")
                continue
            if info.file_size > MAX_MEMBER_BYTES:
                notes.append(f"skipped {info.filename}: {info.file_size} bytes is over the limit")
                continue
            total += info.file_size
            if total > MAX_ZIP_BYTES:
                notes.append("zip is larger than the limit; the rest was skipped")
                break
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(destination, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    return notes


def find_submissions(base: Path, aid: str, pattern: str = CANVAS_PATTERN) -> Collected:
    """Map student ids to notebook files under ``base``; several files for one student keep the newest."""
    regex = re.compile(pattern)
    found = Collected()
    candidates: dict[str, list[Path]] = {}
    for path in sorted(base.rglob("*")):
        if (
            not path.is_file()
            or path.is_symlink()
            or ".ipynb_checkpoints" in path.parts
            or "__MACOSX" in path.parts
        ):
            continue
        if path.suffix != ".ipynb":
            found.notes.append(f"ignored {path.relative_to(base)}: not a notebook")
            continue
        sid = student_id_for(path, base, regex)
        if not sid or not STUDENT_ID.match(sid):
            found.notes.append(f"ignored {path.relative_to(base)}: no usable student id in its name")
            continue
        candidates.setdefault(sid, []).append(path)
    for sid, paths in candidates.items():
        preferred = [p for p in paths if p.name == f"{aid}.ipynb"] or paths
        chosen = max(preferred, key=lambda p: (p.stat().st_mtime, p.name))
        if len(paths) > 1:
            others = ", ".join(p.name for p in paths if p != chosen)
            found.notes.append(f"{sid}: several notebooks; took {chosen.name}, ignored {others}")
        found.students[sid] = chosen
    return found


def collect(course: Course, aid: str, source: Path, pattern: str = CANVAS_PATTERN) -> Collected:
    """Copy every submission under ``source`` (a folder or a zip) into ``submitted/``."""
    source = Path(source)
    with tempfile.TemporaryDirectory(prefix="collect-") as scratch:
        notes: list[str] = []
        base = source
        if source.is_file() and zipfile.is_zipfile(source):
            base = Path(scratch)
            notes = unpack_zip(source, base)
        elif not source.is_dir():
            raise FileNotFoundError(f"{source} is neither a folder nor a zip file")
        found = find_submissions(base, aid, pattern)
        found.notes[:0] = notes
        collected = {}
        for sid, path in found.students.items():
            target = course.submission(aid, sid)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
            (target.parent / "timestamp.txt").write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
            collected[sid] = target
        found.students = collected
    return found
