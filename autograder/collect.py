"""Stage 1, collect: a folder of notebooks or an LMS download (zip) becomes one submission per student,
laid out as nbgrader expects: ``submitted/<student_id>/<AID>/<AID>.ipynb``.

The student id comes from, in order: an LMS file name (Canvas's ``name_12345_67890_file.ipynb`` by default,
configurable), ``<student_id>/<any>.ipynb``, or ``<student_id>.ipynb``. Nothing here parses a notebook:
a broken file is collected as it is, and the next stages report on it.

Each submission's hand-in time goes where nbgrader keeps it, ``submitted/<student_id>/<AID>/timestamp.txt``,
taken from, in order: a ``timestamp.txt`` beside the notebook in the student's folder (as nbgrader's exchange
writes one), else the file's own time (a zip member's, read as UTC). An LMS's own verdict on an LMS file name
(Canvas's ``_LATE_``) then wins over that time: see :func:`hand_in_time`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autograder.course import Course

# Canvas: "lastfirst_12345_6789012_A1.ipynb", late ones "lastfirst_LATE_12345_6789012_A1-1.ipynb".
# A pattern's optional (?P<late>...) group is the LMS saying the file came in after its due date.
CANVAS_PATTERN = r"^(?P<student>[A-Za-z0-9\-]+)_(?P<late>LATE_)?\d+_\d+_.+\.ipynb$"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_ZIP_BYTES = 2 * 2**30
MAX_MEMBER_BYTES = 64 * 2**20


@dataclass
class Collected:
    students: dict[str, Path] = field(default_factory=dict)  # student id -> collected notebook
    # student id -> the LMS's verdict on lateness, where the file's name carries one
    late: dict[str, bool] = field(default_factory=dict)
    # student id -> the hand-in time recorded in its timestamp.txt (naive UTC, as nbgrader reads it)
    times: dict[str, datetime] = field(default_factory=dict)
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
            # the member's own time, not the unpacking's: a zip keeps a local time with no zone; read as UTC
            stamp = datetime(*info.date_time, tzinfo=UTC).timestamp()
            os.utime(destination, (stamp, stamp))
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
        if path.name == "timestamp.txt":  # read beside its notebook by collect
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
        match = regex.match(chosen.name)
        if match and "late" in regex.groupindex:
            found.late[sid] = match.group("late") is not None
    return found


def hand_in_time(path: Path, base: Path, lms_late: bool | None, due: datetime | None) -> tuple[datetime, str]:
    """When ``path`` was handed in (naive UTC) and a note where the LMS's verdict overruled the file's time.

    An LMS knows when a file came in; a zip or a copied file only carries a time with no zone, or the
    copying's. So where the name carries the LMS's verdict, it wins: a ``LATE`` file whose time is not after
    the due date is recorded one second after it, the least lateness the verdict allows (the exact time is
    unknown: the student gets the rule's smallest penalty, none within a grace period); a file the LMS had
    on time is recorded at the due date at the latest. The verdict is against the assignment's due date: an
    extension is applied later, to the time recorded here, so one covers an LMS's ``LATE``."""
    from autograder.late import UNKNOWN_LATENESS, read_timestamp  # imports nbgrader: not at --help

    shipped = read_timestamp(path.parent / "timestamp.txt") if path.parent != base else None
    when = shipped or datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).replace(tzinfo=None)
    if lms_late and due is None:
        return when, "marked LATE, but there is no due date yet: set it (`deadline`), then collect again"
    if lms_late and when <= due:
        return due + UNKNOWN_LATENESS, "marked LATE, time unknown: recorded as 1 s after the due date"
    if lms_late is False and due is not None and when > due:
        return due, "on time by the LMS, though the file's time is later: recorded as the due date"
    return when, ""


def collect(course: Course, aid: str, source: Path, pattern: str = CANVAS_PATTERN) -> Collected:
    """Copy every submission under ``source`` (a folder or a zip) into ``submitted/``, each with its hand-in
    time in ``timestamp.txt``."""
    from autograder.late import deadlines, write_timestamp

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
        due = deadlines(course, aid).due
        collected = {}
        for sid, path in found.students.items():
            target = course.submission(aid, sid)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            found.times[sid], note = hand_in_time(path, base, found.late.get(sid), due)
            write_timestamp(target.parent, found.times[sid])
            if note:
                found.notes.append(f"{sid}: {note}")
            collected[sid] = target
        found.students = collected
    return found
