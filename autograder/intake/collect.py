"""A folder of notebooks or an LMS download (zip) becomes one submission per student,
laid out as nbgrader expects: ``submitted/<student_id>/<AID>/<AID>.ipynb``.

Who handed in what, and when, comes from the LMS or the instructor, never from a name, a file time or a file a
student chose:

- **Who.** Only an entry at the top of the download names a student: a file or folder whose name the LMS wrote
  (Canvas's ``lastfirst[_LATE]_<user id>_<attachment id>_<the student's file name>``; ``--pattern`` for another
  LMS), else ``<student>.ipynb`` or a folder ``<student>/`` as the instructor's export laid them out. Nothing
  inside a student's folder, and no part of a name a student chose, is read for identity or time. The LMS's own
  user id is kept (in nbgrader's gradebook, ``Student.lms_user_id``, where the Canvas export finds it), and a
  student keeps the id the gradebook already holds for that LMS id. An LMS user id joins a student already
  there (in the gradebook or ``submitted/``) only by the roster or such an earlier LMS hand-in, never by a name,
  which any LMS user can give themselves: an LMS user named as a student already there is collected under an
  id of its own. Ids are normalised (Unicode NFC; letters and digits of any script, ``_ . -``; no control
  characters) and unique (ignoring case). Two LMS users with one name each keep it with their user id appended
  (``smithjohn_1001``, ``smithjohn_1002``), as does an LMS user named as a student already there; an LMS name
  that is no usable id becomes ``lms_<user id>``; a folder or file name that is no usable id, or that clashes
  with another, is not collected. Each of these is listed to resolve, and an instructor's roster (``--roster``:
  ``lms_id,student_id,name``) decides them on the next run.
- **When.** In order: the instructor's ``--received STUDENT=TIME``; the LMS's verdict in the name it wrote
  (``LATE``: one second after the due date, the least lateness the verdict allows; on time: no time recorded,
  so on time whatever the due date); nbgrader's exchange ``timestamp.txt`` beside the notebook, only with
  ``--exchange-timestamps`` (the student's machine wrote it); the instructor's ``--received TIME`` for the
  rest. A hand-in with none of these has no known time and counts as on time (no ``timestamp.txt``, as
  :mod:`autograder.intake.late` reads it); the summary says so for each. File times are never read.
- **What.** Every member is handled on its own, read in a stream with a hard cap, and copied under a path
  made from the student id alone: a bad member (an unsafe or over-long name, a link, a damaged or oversized
  file) costs at most its own student, with a reason, never the batch. Names are printed escaped
  (:func:`shown`).

Nothing here parses a notebook: a broken file is collected as it is, and the next stages report on it.
"""

from __future__ import annotations

import csv
import io
import lzma
import os
import re
import stat
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from autograder.course import Course

# Canvas writes ``sanitize(sortable name [+ "_LATE"] + "_" + user id) + "_" + attachment id + "_" + the file's
# own name``, the first part lower-cased and stripped to word characters, with any "_<digits>_" taken out of
# the name. The student's own file name (``file``) comes last and is never read for identity or time.
CANVAS_PATTERN = r"(?P<student>.+?)_(?:(?P<late>(?i:late))_)?(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.*)"
MAX_MEMBER_BYTES = 64 * 2**20  # one notebook
MAX_TOTAL_BYTES = 2 * 2**30  # everything collected from one source
MAX_ENTRIES = 50_000  # files and folders looked at in one source
MAX_DEPTH = 16  # folders inside a student's folder
MAX_ID_CHARS = 64
STAMP_BYTES = 256  # an exchange timestamp.txt is one short line
SKIPPED_FOLDERS = {".ipynb_checkpoints", "__MACOSX"}
ROSTER_BYTES = 16 * 2**20


class SourceError(ValueError):
    """The source as a whole cannot be read (not a zip, not a folder): nothing was collected."""


def shown(text: str) -> str:
    """``text`` safe to print to a terminal: backslashes and every character that is not printable (control
    characters, escape sequences, line breaks, bidirectional overrides, lone surrogates) as escapes, as
    ``repr`` writes them; letters of every script as they are."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def student_id(raw: str) -> str | None:
    """``raw`` as a student id (NFC), or None where it is none: 1 to 64 characters, each a letter, mark or digit
    of any script or one of ``_ . -``, beginning with a letter or digit, at most 255 bytes in UTF-8."""
    text = unicodedata.normalize("NFC", raw)
    if not 0 < len(text) <= MAX_ID_CHARS or len(text.encode("utf-8", "surrogatepass")) > 255:
        return None
    if unicodedata.category(text[0])[0] not in "LN":
        return None
    if not all(unicodedata.category(ch)[0] in "LMN" or ch in "_.-" for ch in text):
        return None
    return text


def same_id(sid: str) -> str:
    """The key under which two ids are one student (case and compatibility forms ignored, as a
    case-insensitive file system or a spreadsheet would)."""
    return unicodedata.normalize("NFKC", sid).casefold()


# ------------------------------------------------------------------------------------------ the source


@dataclass(frozen=True)
class Member:
    """One regular file of the source: its path inside the source (``/``-separated) and how to open it."""

    parts: tuple[str, ...]
    size: int
    opener: Callable[[], BinaryIO]

    @property
    def name(self) -> str:
        return "/".join(self.parts)


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


def clean_parts(name: str) -> tuple[str, ...] | str:
    """A member name's path parts, or the reason it is unsafe."""
    if not name.strip("/\\"):
        return "an empty name"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an unsafe path (absolute)"
    parts = tuple(p for p in re.split(r"[/\\]", name) if p not in ("", "."))
    if ".." in parts:
        return "an unsafe path (..)"
    if not parts:
        return "an empty name"
    return parts


def member_name(info: zipfile.ZipInfo) -> str:
    """A zip member's name. A zip that does not flag its names as UTF-8 is read as code page 437, as the
    format says; but many writers (Canvas's among them) store UTF-8 without the flag, so a name that is valid
    UTF-8 is read as UTF-8."""
    if info.flag_bits & 0x800:
        return info.filename
    try:
        return info.filename.encode("cp437").decode("utf-8")
    except UnicodeError:
        return info.filename


def zip_members(zf: zipfile.ZipFile) -> Iterator[Member | Skipped]:
    """The regular files of a zip; links, devices, encrypted and unsafe members skipped with a reason."""
    for count, info in enumerate(zf.infolist()):
        if count >= MAX_ENTRIES:
            yield Skipped("(the rest of the zip)", f"more than {MAX_ENTRIES} members")
            return
        if info.filename.endswith("/"):  # a folder (ZipInfo.is_dir fails on an empty name)
            continue
        kind = stat.S_IFMT(info.external_attr >> 16)
        name = member_name(info)
        parts = clean_parts(name)
        if isinstance(parts, str):
            yield Skipped(name, parts)
        elif kind == stat.S_IFLNK:
            yield Skipped(name, "a link")
        elif kind not in (0, stat.S_IFREG):
            yield Skipped(name, "not a regular file")
        elif info.flag_bits & 0x1:
            yield Skipped(name, "encrypted")
        else:
            yield Member(parts, info.file_size, lambda info=info: zf.open(info))


def folder_members(base: Path) -> Iterator[Member | Skipped]:
    """The regular files under ``base``, links not followed, at most :data:`MAX_DEPTH` folders deep."""
    seen = 0

    def walk(folder: Path, parts: tuple[str, ...]) -> Iterator[Member | Skipped]:
        nonlocal seen
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            yield Skipped("/".join(parts) or ".", f"cannot be listed ({err.strerror})")
            return
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                yield Skipped("(the rest of the folder)", f"more than {MAX_ENTRIES} entries")
                return
            here = (*parts, entry.name)
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as err:
                yield Skipped("/".join(here), f"cannot be read ({err.strerror})")
                continue
            if stat.S_ISLNK(info.st_mode):
                yield Skipped("/".join(here), "a link")
            elif stat.S_ISDIR(info.st_mode):
                if entry.name in SKIPPED_FOLDERS:
                    continue
                if len(here) > MAX_DEPTH:
                    yield Skipped("/".join(here), f"more than {MAX_DEPTH} folders deep")
                    continue
                yield from walk(Path(entry.path), here)
            elif not stat.S_ISREG(info.st_mode):
                yield Skipped("/".join(here), "not a regular file")
            else:
                yield Member(here, info.st_size, lambda path=entry.path: open_no_follow(path))

    yield from walk(base, ())


def open_no_follow(path: str) -> BinaryIO:
    """A file opened for reading that is not a link now (it may have been swapped since it was listed)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{shown(path)} is not a regular file")
    return os.fdopen(fd, "rb")


# What reading one member of a damaged or hostile zip can raise: each costs that member only.
READ_ERRORS = (OSError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile, zlib.error, lzma.LZMAError)


def read_capped(member: Member, cap: int) -> bytes:
    """The member's bytes, read in a stream and refused past ``cap`` whatever its declared size."""
    if member.size > cap:
        raise ValueError(f"{member.size} bytes is over the limit of {cap}")
    with member.opener() as stream:
        data = stream.read(cap + 1)  # to its end, where a zip member's checksum is checked
    if len(data) > cap:
        raise ValueError(f"more than {cap} bytes (its declared size says {member.size})")
    return data


# ------------------------------------------------------------------------------------------ who


@dataclass(frozen=True)
class Claim:
    """One notebook of the source and the student the LMS or the instructor's layout gives it to."""

    member: Member
    lms_id: str  # the LMS's user id, or the top-level name the instructor's export made
    name: str  # the name the LMS wrote (Canvas's "lastfirst"), or that top-level name
    is_lms_user: bool  # lms_id is an LMS user id (kept in the gradebook), not a folder or file name
    late: bool | None  # the LMS's verdict, where the name it wrote carries one
    attachment: int  # the LMS's upload number (later uploads have larger ones), -1 where there is none
    own_name: str  # the name the student gave the file

    @property
    def key(self) -> tuple[bool, str]:
        """One student of the source: an LMS user id and a folder of the same name are two."""
        return self.is_lms_user, self.lms_id


def claims_of(members: list[Member], pattern: re.Pattern) -> tuple[list[Claim], list[str]]:
    """Which notebook is whose, from the top-level entries' names alone; and notes on what was ignored."""
    claims, ignored = [], []
    for member in members:
        top, rest = member.parts[0], member.parts[1:]
        if member.parts[-1] == "timestamp.txt":
            continue  # read beside its notebook, where the instructor asks for it
        if not member.name.endswith(".ipynb"):
            ignored.append(member.name)
            continue
        match = pattern.fullmatch(top)
        if match:
            groups = match.groupdict()
            user = groups.get("user")
            late = None if "late" not in pattern.groupindex else groups.get("late") is not None
            attachment = int(groups["attachment"]) if groups.get("attachment") else -1
            own = groups.get("file") if not rest else rest[-1]
            name = unicodedata.normalize("NFC", groups.get("student") or "")
            lms = user if user else name
            claims.append(Claim(member, lms, name, bool(user), late, attachment, own or member.parts[-1]))
        else:
            lms = unicodedata.normalize("NFC", top[: -len(".ipynb")] if not rest else top)
            claims.append(Claim(member, lms, lms, False, None, -1, member.parts[-1]))
    if not ignored:
        return claims, []
    more = f" and {len(ignored) - 10} more" if len(ignored) > 10 else ""
    return claims, [f"ignored {len(ignored)} file(s) that are not notebooks: {', '.join(ignored[:10])}{more}"]


def preference(claim: Claim, aid: str) -> tuple:
    """Among one student's notebooks: one named as the assignment (Canvas adds ``-1`` to a re-upload's name),
    then the LMS's latest upload, then the shallowest, then by name; never a file's time."""
    named = re.fullmatch(rf"{re.escape(aid)}(-\d+)?\.ipynb", claim.own_name) is not None
    return (not named, -claim.attachment, len(claim.member.parts), claim.member.name)


@dataclass(frozen=True)
class Roster:
    """The instructor's word on who is who: LMS id (a Canvas user id, or a top-level folder or file name) ->
    student id and name."""

    ids: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


ROSTER_COLUMNS = {"lms_id": ("lms_id", "lms_user_id", "canvas_user_id"), "student_id": ("student_id", "id")}


def read_roster(path: Path) -> Roster:
    """A CSV with a header ``lms_id,student_id,name`` (``name`` optional); every student id must be usable and
    each given once."""
    raw = Path(path).read_bytes()[: ROSTER_BYTES + 1]
    if len(raw) > ROSTER_BYTES:
        raise ValueError(f"roster {path} is larger than {ROSTER_BYTES} bytes")
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    header = {h.strip().lower(): h for h in (rows[0].keys() if rows else [])}
    columns = {}
    for key, spellings in ROSTER_COLUMNS.items():
        found = next((header[s] for s in spellings if s in header), None)
        if found is None:
            raise ValueError(f"roster {path} has no {key} column (header: lms_id,student_id,name)")
        columns[key] = found
    name_column = header.get("name")
    roster, owners = Roster(), {}
    for line, row in enumerate(rows, start=2):
        lms = unicodedata.normalize("NFC", (row.get(columns["lms_id"]) or "").strip())
        sid = student_id((row.get(columns["student_id"]) or "").strip())
        if not lms:
            continue
        if sid is None:
            raise ValueError(
                f"roster line {line}: {shown(row.get(columns['student_id']) or '')!r} is no usable id"
            )
        if owners.setdefault(same_id(sid), lms) != lms:
            raise ValueError(f"roster line {line}: {sid} is given to two LMS ids")
        roster.ids[lms] = sid
        if name_column and row.get(name_column):
            roster.names[lms] = row[name_column].strip()
    return roster


@dataclass(frozen=True)
class Problem:
    """Something the instructor resolves: a student collected under an id of the grader's choosing, or not
    collected at all. Names as the download spells them (escaped when printed)."""

    entry: str  # the download's own name for it
    lms_id: str
    collected_as: str  # "" where nothing was collected
    reason: str


def assign_ids(
    chosen: dict[tuple[bool, str], Claim], roster: Roster, known: dict[str, str], taken: dict[str, str]
) -> tuple[dict[tuple[bool, str], str], list[Problem]]:
    """Student id for each student of this source (keyed by :attr:`Claim.key`), and what is left to resolve.
    ``known``: LMS user id -> the id the gradebook gave it; ``taken``: the students already there (gradebook
    and ``submitted/``), same-id key -> their LMS user id ("" for none).

    An LMS user id joins a student already there only by the roster (the instructor's word) or the gradebook
    (an earlier LMS hand-in): never by a name, which any LMS user can give themselves. An LMS user whose name
    is such a student's is collected under an id of its own and listed, for the roster to decide."""
    ids: dict[tuple[bool, str], str] = {}
    owner: dict[str, tuple[bool, str]] = {}  # same-id key -> the student holding it in this run
    problems: list[Problem] = []

    def give(key: tuple[bool, str], sid: str) -> bool:
        if owner.get(same_id(sid), key) != key:
            return False
        ids[key], owner[same_id(sid)] = sid, key
        return True

    def free(claim: Claim, sid: str) -> bool:
        """Whether ``claim`` may have ``sid`` by name: a folder or file name is the instructor's own and means
        the student of that id; an LMS user may have only an id no one holds yet, or one that holds it."""
        return not claim.is_lms_user or taken.get(same_id(sid), claim.lms_id) == claim.lms_id

    for key, claim in chosen.items():  # the instructor's word first, then what the gradebook already knows
        if claim.lms_id in roster.ids:
            give(key, roster.ids[claim.lms_id])
    for key, claim in chosen.items():
        if key not in ids and claim.is_lms_user and claim.lms_id in known:
            give(key, known[claim.lms_id])
    by_name: dict[str, list[tuple[bool, str]]] = {}
    for key, claim in chosen.items():
        if key not in ids:
            sid = student_id(claim.name)
            by_name.setdefault(same_id(sid) if sid else "", []).append(key)
    for name_key, group in by_name.items():
        for key in group:
            claim, sid = chosen[key], student_id(chosen[key].name)
            held = sid is not None and not free(claim, sid)
            if sid is not None and len(group) == 1 and not held and give(key, sid):
                continue
            why = _why_not(claim, sid, len(group), held, taken.get(name_key))
            fallbacks = [student_id(f"{sid}_{claim.lms_id}") if sid else None, f"lms_{claim.lms_id}"]
            fallback = next((f for f in fallbacks if f and free(claim, f)), None)
            if claim.is_lms_user and fallback and give(key, fallback):
                why, collected_as = why + "; collected with its LMS user id", fallback
            else:
                why, collected_as = why + ": not collected", ""
            if held:  # the roster's to decide: say how
                why += (
                    f"; if LMS user {claim.lms_id} is {sid}, give --roster the line {claim.lms_id},{sid},NAME"
                )
            problems.append(Problem(claim.member.parts[0], claim.lms_id, collected_as, why))
    return ids, problems


def _why_not(claim: Claim, sid: str | None, named: int, held: bool, holder: str | None) -> str:
    """Why ``claim`` does not get ``sid``, its name as an id: ``named`` students of the download share it, or
    (``held``) a student already there has it, with LMS user id ``holder`` ("" for none)."""
    if sid is None:
        return f"'{claim.name}' is no usable student id"
    if named > 1:
        return f"{sid} is the name of {named} students in this download"
    if not held:
        return f"{sid} is the id of another student in this download"
    if holder:
        return f"{sid} is the id of LMS user {holder} in the gradebook"
    return f"{sid} is a student already, with no LMS user id, and a name alone binds none"


# ------------------------------------------------------------------------------------------ when


@dataclass(frozen=True)
class TimeRules:
    """The instructor's rules for hand-in times: per student, for everyone without one, and whether to read
    nbgrader's exchange ``timestamp.txt`` (written on the student's machine)."""

    per_student: dict[str, datetime] = field(default_factory=dict)
    everyone: datetime | None = None
    exchange_timestamps: bool = False


SOURCE_UNKNOWN = "unknown: counts as on time"


def hand_in_time(
    sid: str, claim: Claim, stamp: datetime | None, due: datetime | None, rules: TimeRules
) -> tuple[datetime | None, str]:
    """When ``sid`` handed ``claim`` in (naive UTC; None where not known) and where that came from."""
    from autograder.intake.late import UNKNOWN_LATENESS

    if sid in rules.per_student:
        return rules.per_student[sid], "instructor (--received)"
    if claim.late is True:
        if due is None:
            return None, "LMS: LATE, no due date to be late against"
        return due + UNKNOWN_LATENESS, "LMS: LATE, time unknown: 1 s after the due date"
    if claim.late is False:
        return None, "LMS: on time"
    if stamp is not None:
        return stamp, "exchange timestamp.txt (--exchange-timestamps)"
    if rules.everyone is not None:
        return rules.everyone, "instructor (--received for everyone)"
    return None, SOURCE_UNKNOWN


def exchange_stamp(claim: Claim, members: dict[tuple[str, ...], Member]) -> datetime | None:
    """nbgrader's exchange ``timestamp.txt`` beside the notebook, inside the same student's folder."""
    from nbgrader.utils import parse_utc

    if len(claim.member.parts) < 2:
        return None
    beside = members.get((*claim.member.parts[:-1], "timestamp.txt"))
    if beside is None:
        return None
    try:
        text = read_capped(beside, STAMP_BYTES).decode("utf-8").strip()
        return parse_utc(text) if text else None
    except (*READ_ERRORS, OverflowError, UnicodeDecodeError):
        return None


# ------------------------------------------------------------------------------------------ collect


@dataclass(frozen=True)
class Handin:
    student_id: str
    lms_id: str
    entry: str  # the download's own name for it
    time: datetime | None
    source: str


@dataclass
class Collected:
    students: dict[str, Path] = field(default_factory=dict)  # student id -> collected notebook
    late: dict[str, bool] = field(default_factory=dict)  # student id -> the LMS's verdict, where it gives one
    times: dict[str, datetime] = field(default_factory=dict)  # student id -> the recorded hand-in time
    handins: list[Handin] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """Everything to tell the instructor, one line each, names escaped."""
        lines = self.info + [
            f"to resolve: {p.entry}" + (f" (LMS id {p.lms_id})" if p.lms_id else "") + f": {p.reason}"
            for p in self.problems
        ]
        return [shown(line) for line in lines]

    def sources(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for h in self.handins:
            counts[h.source] = counts.get(h.source, 0) + 1
        return counts


def open_source(source: Path, stack) -> Iterator[Member | Skipped]:
    if source.is_dir():
        return folder_members(source)
    if source.is_file():
        try:
            zf = stack.enter_context(zipfile.ZipFile(source))
        except READ_ERRORS as err:
            raise SourceError(f"{shown(str(source))} is not a readable zip file ({err})") from None
        return zip_members(zf)
    raise FileNotFoundError(f"{shown(str(source))} is neither a folder nor a zip file")


def gradebook_students(course: Course) -> tuple[dict[str, str], dict[str, str]]:
    """From the gradebook: LMS user id -> student id, and same-id key -> LMS user id ("" for none)."""
    from autograder.gradebook import open_gradebook

    book = open_gradebook(course)
    if book is None:
        return {}, {}
    with book as gb:
        students = [(s.id, s.lms_user_id or "") for s in gb.students]
    return {lms: sid for sid, lms in students if lms}, {same_id(sid): lms for sid, lms in students}


def submitted_students(course: Course, aid: str) -> dict[str, str]:
    """Same-id key -> "" (no LMS user id known) for each student with a hand-in of any assignment in
    ``submitted/``: one collected from a folder is a student before grading puts them in the gradebook."""
    base = course.submission_folder(aid, "_").parent.parent  # submitted/, where nbgrader's config puts it
    if not base.is_dir():
        return {}
    return {same_id(path.parent.parent.name): "" for path in base.glob("*/*/*.ipynb")}


def remember_lms_ids(course: Course, lms_of: dict[str, str], roster: Roster) -> None:
    """Keep each student's LMS user id (and the roster's name) in nbgrader's gradebook; an LMS id the roster
    moved to another student is taken from the one that held it. Only the roster binds an LMS id to a student
    the gradebook holds without it (:func:`assign_ids` gives such a hand-in an id of its own): anything else
    here is the grader's error, refused before the gradebook changes, never a grade sent to the wrong row."""
    from autograder.gradebook import gradebook

    if not lms_of:
        return
    with gradebook(course) as gb:
        students = {s.id: s for s in gb.students}
        for sid, lms in lms_of.items():
            held = (students[sid].lms_user_id or "") if sid in students else lms
            if held != lms and roster.ids.get(lms) != sid:
                raise RuntimeError(
                    f"grader error: LMS user {shown(lms)} is not {shown(sid)}'s, and no roster says so"
                )
        holders = {s.lms_user_id: s for s in students.values() if s.lms_user_id}
        for sid, lms in lms_of.items():
            if lms in holders and holders[lms].id != sid:
                holders[lms].lms_user_id = None
        gb.db.commit()
        for sid, lms in lms_of.items():
            extra = {"last_name": roster.names[lms]} if lms in roster.names else {}
            gb.update_or_create_student(sid, lms_user_id=lms, **extra)


def store(member: Member, target: Path, budget: int) -> int:
    """Copy ``member`` to ``target`` (a path of the grader's making); returns the bytes written."""
    data = read_capped(member, min(MAX_MEMBER_BYTES, budget))
    target.parent.mkdir(parents=True, exist_ok=True)
    stale = target.parent / "timestamp.txt"
    stale.unlink(missing_ok=True)
    target.unlink(missing_ok=True)
    target.write_bytes(data)
    return len(data)


def collect(
    course: Course,
    aid: str,
    source: Path,
    pattern: str = CANVAS_PATTERN,
    *,
    roster: Roster | None = None,
    rules: TimeRules | None = None,
) -> Collected:
    """Copy every submission under ``source`` (a folder or a zip) into ``submitted/``, each with its hand-in
    time in ``timestamp.txt`` where one is known (see the module's docstring)."""
    from contextlib import ExitStack

    from autograder.intake.late import deadlines

    if len(course.notebooks(aid)) > 1:
        raise ValueError(
            f"{aid} has {len(course.notebooks(aid))} notebooks: collect takes one notebook per student. Hand-ins of "
            "several notebooks go where nbgrader keeps them, submitted/<student>/"
            + aid
            + "/ with each notebook "
            "under its name (nbgrader's own `nbgrader collect` puts them there), then `grade " + aid + "`"
        )
    regex = re.compile(pattern, re.DOTALL)
    if not {"student", "user"} & set(regex.groupindex):
        raise ValueError("--pattern needs a (?P<student>...) or (?P<user>...) group")
    roster, rules = roster or Roster(), rules or TimeRules()
    found = Collected()
    with ExitStack() as stack:
        members = _members(open_source(Path(source), stack), found)
        chosen = _one_claim_each(members, regex, aid, found)
        known, taken = gradebook_students(course)
        ids, unresolved = assign_ids(chosen, roster, known, submitted_students(course, aid) | taken)
        found.problems += unresolved
        due = deadlines(course, aid).due
        taken = Taken(chosen, ids, {m.parts: m for m in members})
        lms_of = _store_all(course, aid, taken, due, rules, found)
        remember_lms_ids(course, lms_of, roster)
    unknown = [h.student_id for h in found.handins if h.source == SOURCE_UNKNOWN]
    if unknown and due is not None:
        found.info.append(
            f"{len(unknown)} hand-in(s) have no time from the LMS or you and count as on time: give "
            "--received TIME (everyone) or --received STUDENT=TIME"
            + (", or --exchange-timestamps for nbgrader's exchange" if not rules.exchange_timestamps else "")
        )
    return found


def _members(items, found: Collected) -> list[Member]:
    """The files of the source that may be hand-ins; what was skipped is said (a notebook as a problem)."""
    members: list[Member] = []
    for item in items:
        if isinstance(item, Member) and SKIPPED_FOLDERS & set(item.parts):
            continue
        if isinstance(item, Skipped) and (item.name.endswith(".ipynb") or item.reason.startswith("more")):
            found.problems.append(Problem(item.name, "", "", f"skipped, {item.reason}"))
        elif isinstance(item, Skipped):
            found.info.append(f"skipped {item.name}: {item.reason}")
        else:
            members.append(item)
    return members


def _one_claim_each(
    members: list[Member], regex, aid: str, found: Collected
) -> dict[tuple[bool, str], Claim]:
    """Student key -> the one notebook taken for them (by :func:`preference`); the others are said."""
    claims, notes = claims_of(members, regex)
    found.info += notes
    per_student: dict[tuple[bool, str], list[Claim]] = {}
    for claim in claims:
        per_student.setdefault(claim.key, []).append(claim)
    chosen: dict[tuple[bool, str], Claim] = {}
    for key, group in per_student.items():
        group.sort(key=lambda c: preference(c, aid))
        chosen[key] = group[0]
        if len(group) > 1:
            others = ", ".join(c.member.name for c in group[1:])
            found.info.append(f"{key[1]}: several notebooks; took {group[0].member.name}, ignored {others}")
    return chosen


@dataclass(frozen=True)
class Taken:
    """What collect took from the source, to be stored: the one claim of each student (by the student's key),
    the id given to each key (a key without one is not stored), and every member of the source by its path
    (where nbgrader's exchange ``timestamp.txt`` beside a notebook is looked up)."""

    claims: dict[tuple[bool, str], Claim]
    ids: dict[tuple[bool, str], str]
    members: dict[tuple[str, ...], Member]


def _store_all(
    course: Course, aid: str, taken: Taken, due, rules: TimeRules, found: Collected
) -> dict[str, str]:
    """Each chosen notebook into ``submitted/`` under its student's id, with its hand-in time; the LMS user
    ids of those the LMS named by id."""
    from autograder.intake.late import write_timestamp

    budget, lms_of, ids = MAX_TOTAL_BYTES, {}, taken.ids
    for key, claim in sorted(taken.claims.items(), key=lambda kv: ids.get(kv[0], "")):
        sid, lms = ids.get(key), claim.lms_id
        if sid is None:
            continue
        target = course.submission(aid, sid)
        try:
            budget -= store(claim.member, target, budget)
        except READ_ERRORS as err:
            target.unlink(missing_ok=True)
            (target.parent / "timestamp.txt").unlink(missing_ok=True)
            reason = f"its notebook {claim.member.name} could not be read ({err})"
            found.problems.append(Problem(claim.member.parts[0], lms, "", reason + ": not collected"))
            continue
        stamp = exchange_stamp(claim, taken.members) if rules.exchange_timestamps else None
        when, origin = hand_in_time(sid, claim, stamp, due, rules)
        if claim.late and when is None:
            why = (
                f"marked LATE by the LMS, but {aid} has no due date: set it (`deadline`), then collect again"
            )
            found.problems.append(Problem(claim.member.parts[0], lms, sid, why))
        if when is not None:
            write_timestamp(target.parent, when)
            found.times[sid] = when
        if claim.late is not None:
            found.late[sid] = claim.late
        if claim.is_lms_user:
            lms_of[sid] = lms
        found.students[sid] = target
        found.handins.append(Handin(sid, lms, claim.member.parts[0], when, origin))
    return lms_of


def handin_table(found: Collected) -> list[str]:
    """One line per collected student: id, LMS id, recorded time and where it came from."""
    from autograder.intake.late import format_utc

    rows = [("student", "LMS id", "hand-in time (UTC)", "source")]
    rows += [(h.student_id, h.lms_id, format_utc(h.time) or "-", h.source) for h in found.handins]
    return table_lines(rows)


def problem_table(found: Collected) -> list[str]:
    rows = [("in the download", "LMS id", "collected as", "why")]
    rows += [
        (p.entry, p.lms_id or "-", p.collected_as or "(not collected)", p.reason) for p in found.problems
    ]
    return table_lines(rows)


def table_lines(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [min(48, max(len(shown(r[i])) for r in rows)) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(shown(c).ljust(w) for c, w in zip(r, widths, strict=False)), shown(r[-1])]).rstrip()
        for r in rows
    ]


def received_rules(values: list[str], exchange_timestamps: bool = False) -> TimeRules:
    """``--received`` values, ``TIME`` (everyone without a time from the LMS) or ``STUDENT=TIME``, as rules."""
    from autograder.intake.late import parse_time

    per_student, everyone = {}, None
    for value in values:
        sid, sep, when = value.partition("=")
        if sep:
            if student_id(sid.strip()) is None:
                raise ValueError(f"--received {shown(value)}: {shown(sid)!r} is no student id")
            per_student[student_id(sid.strip())] = parse_time(when.strip())
        elif everyone is not None:
            raise ValueError("--received TIME is given twice")
        else:
            everyone = parse_time(value.strip())
    return TimeRules(per_student, everyone, exchange_timestamps)


def summary(found: Collected, aid: str) -> list[str]:
    """What ``collect`` prints: notes, where each hand-in time came from, and what is left to resolve; every
    name escaped."""
    lines = [f"note: {shown(line)}" for line in found.info]
    counts = ", ".join(f"{n} {source}" for source, n in sorted(found.sources().items()))
    lines.append(f"collected {len(found.students)} submission(s) of {aid}; hand-in times: {counts or 'none'}")
    if found.handins:
        lines += ["  " + line for line in handin_table(found)]
    if found.problems:
        lines.append(
            f"{len(found.problems)} to resolve (the rest were collected as usual); to choose ids, collect again with "
            "--roster FILE, a CSV with the header lms_id,student_id,name:"
        )
        lines += ["  " + line for line in problem_table(found)]
    return lines
