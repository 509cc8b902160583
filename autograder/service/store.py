"""What the service keeps: the tokens it issued (as hashes) and every submission it acknowledged. By default in one
SQLite file in the grader's folder (``.grading/service/service.sqlite``), beside each submission's bytes and
feedback page; for a real course in PostgreSQL (``database`` in ``service.toml``), the bytes and pages in the same
database, so that backing up the database backs up the service.

A submission is durable before it is acknowledged: with SQLite its bytes are written to a file of their own and
flushed to disk, then its row is committed; with PostgreSQL the bytes and the row are committed in one transaction;
only then does the service answer with its id. A row goes ``queued`` -> ``running``
-> ``graded`` (or ``error``: the grader failed it three times; never a score); a service that restarts puts the rows
it was running back in the queue, so every acknowledged submission is graded, and its result recorded, once. The
received time is the server's clock. A client's retry with the same idempotency key finds the row it made and
makes none.

Tokens are random (32 bytes from :mod:`secrets`), shown once when issued, and kept only as their SHA-256; a
request's token is hashed, looked up, and compared in constant time. Each is bound to a student id (and the LMS
user id ``collect`` binds to it, where known) or is the instructor's; issuing a new one for a student revokes the
old.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    digest TEXT PRIMARY KEY,
    student_id TEXT NOT NULL,
    lms_id TEXT NOT NULL DEFAULT '',
    role TEXT NOT NULL CHECK (role IN ('student', 'instructor')),
    issued_utc TEXT NOT NULL,
    revoked_utc TEXT
);
CREATE TABLE IF NOT EXISTS sessions (
    digest TEXT PRIMARY KEY,
    token_digest TEXT NOT NULL REFERENCES tokens (digest),
    expires_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    seq {serial},
    id TEXT UNIQUE NOT NULL,
    student_id TEXT NOT NULL,
    aid TEXT NOT NULL,
    received_utc TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    idempotency_key TEXT,
    state TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'graded', 'error')),
    attempts INTEGER NOT NULL DEFAULT 0,
    started_utc TEXT,
    finished_utc TEXT,
    score {real},
    max_score {real},
    status TEXT,
    reason TEXT,
    cells TEXT,
    final {real},
    counted INTEGER NOT NULL DEFAULT 0,
    UNIQUE (student_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS submissions_by_student ON submissions (student_id, aid, received_utc);
CREATE INDEX IF NOT EXISTS submissions_by_state ON submissions (state, seq);
"""
BLOBS = """
CREATE TABLE IF NOT EXISTS blobs (
    id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('notebook', 'feedback')),
    body BYTEA NOT NULL,
    PRIMARY KEY (id, kind)
);
"""  # PostgreSQL's: a submission's bytes committed with its row; its feedback page
SQLITE_TYPES = {"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL"}
POSTGRES_TYPES = {"serial": "BIGSERIAL PRIMARY KEY", "real": "DOUBLE PRECISION"}
SCHEMA_LOCK = 74110045  # PostgreSQL: one service makes the tables at a time
ADDED = {"final": "REAL", "counted": "INTEGER NOT NULL DEFAULT 0"}  # columns a store made before them lacks
MAX_ATTEMPTS = 3  # the grader's failures on one submission before it is shown as an error
SESSION_HOURS = 12  # a browser's sign-in lasts this long


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Who:
    """The holder of a valid token."""

    student_id: str
    role: str  # "student" or "instructor"
    lms_id: str = ""

    @property
    def instructor(self) -> bool:
        return self.role == "instructor"


@dataclass(frozen=True)
class Submission:
    seq: int
    id: str
    student_id: str
    aid: str
    received_utc: str
    sha256: str
    size: int
    state: str
    attempts: int
    started_utc: str | None
    finished_utc: str | None
    score: float | None
    max_score: float | None
    status: str | None
    reason: str | None
    cells: list | None
    final: float | None = None  # the score after the late penalty
    counted: bool = False  # the one the gradebook holds (service.toml's counts)

    @classmethod
    def of(cls, row: dict) -> Submission:
        values = {k: row[k] for k in row.keys() if k in cls.__dataclass_fields__}
        values["cells"] = json.loads(row["cells"]) if row["cells"] else None
        values["counted"] = bool(row["counted"])
        return cls(**values)


def _dict_row(cursor: sqlite3.Cursor, row: tuple) -> dict:
    return {d[0]: value for d, value in zip(cursor.description, row)}


class Connection:
    """One connection to either database, as the store uses it: SQLite's placeholders (``?``), rows as dicts,
    transactions begun explicitly (each statement outside one commits alone)."""

    def __init__(self, raw, postgres: bool):
        self.raw, self.postgres = raw, postgres

    def execute(self, sql: str, args: tuple = ()):
        if not self.postgres:
            return self.raw.execute(sql, args)
        import psycopg2.extras

        cursor = self.raw.cursor(cursor_factory=psycopg2.extras.RealDictCursor)
        cursor.execute(sql.replace("?", "%s"), args)
        return cursor

    def write(self) -> None:
        """Begin a transaction that no other writer of the submissions runs beside (a count and the row it
        allows, a claim): SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's table lock that readers pass."""
        if self.postgres:
            self.execute("BEGIN")
            self.execute("LOCK TABLE submissions IN SHARE ROW EXCLUSIVE MODE")
        else:
            self.execute("BEGIN IMMEDIATE")


class Database:
    """Where the service keeps its rows: a SQLite file (``path``) or a PostgreSQL server (``url``, as
    ``postgresql://user@host:port/database``; nbgrader's ``postgresql+psycopg2://`` is taken too)."""

    def __init__(self, path: Path | None = None, url: str | None = None):
        self.path, self.url = path, url
        self.postgres = bool(url)
        self._pool = None
        if self.postgres:
            import psycopg2.pool

            dsn = url.replace("postgresql+psycopg2://", "postgresql://", 1)
            # no call waits on the database for ever: a lock or a statement gives up (and is made again, or
            # answered 503), and a server gone silent is found dead by TCP keepalives
            self._pool = psycopg2.pool.ThreadedConnectionPool(
                0, 64, dsn, connect_timeout=10, options="-c lock_timeout=10s -c statement_timeout=30s",
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            )  # fmt: skip

    @property
    def backend(self) -> Database:
        """The one database behind this view (tokens, sessions, submissions share it and its connections)."""
        return self

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for one use (each thread takes its own), always given back outside a transaction."""
        if not self.backend.postgres:
            db = sqlite3.connect(self.backend.path, timeout=5.0, isolation_level=None)
            try:
                db.row_factory = _dict_row
                db.execute("PRAGMA synchronous=FULL")  # a committed row survives the machine's crash too
                db.execute("PRAGMA foreign_keys=ON")
                yield Connection(db, postgres=False)
            finally:
                db.close()
            return
        import psycopg2.extensions

        pool = self.backend._pool
        raw = self._live(pool)
        broken = False
        try:
            raw.autocommit = True  # as SQLite's isolation_level=None: BEGIN where a transaction is meant
            yield Connection(raw, postgres=True)
        except psycopg2.Error:
            broken = raw.closed != 0
            raise
        finally:
            if not broken and raw.closed == 0:
                try:
                    if raw.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                        raw.cursor().execute("ROLLBACK")  # a transaction left by an error ends here
                except psycopg2.Error:  # the connection went with it: not given to anyone again
                    broken = True
            pool.putconn(raw, close=broken or raw.closed != 0)

    def close(self) -> None:
        """PostgreSQL: close the pooled connections (a process that opens a store for a while, as a test)."""
        if self._pool is not None:
            self._pool.closeall()

    @staticmethod
    def _live(pool):
        """A pooled connection that answers: one the server dropped (a restart) is closed and another taken; a
        server that is away raises psycopg2's OperationalError (the service answers 503)."""
        import psycopg2

        for _ in range(pool.maxconn + 1):
            raw = pool.getconn()
            try:
                raw.autocommit = True
                raw.cursor().execute("SELECT 1")
                return raw
            except psycopg2.Error:
                pool.putconn(raw, close=True)
        raise psycopg2.OperationalError("no connection to the database answers")


class View(Database):
    """A part of the store (its tokens, sessions, submissions) over the same :class:`Database`."""

    def __init__(self, database: Database):
        self._backend = database
        self.path, self.url, self.postgres = database.path, database.url, database.postgres

    @property
    def backend(self) -> Database:
        return self._backend


def integrity_errors() -> tuple[type[Exception], ...]:
    """A unique key taken (the same idempotency key at the same moment), in either database."""
    try:
        import psycopg2
    except ImportError:
        return (sqlite3.IntegrityError,)
    return (sqlite3.IntegrityError, psycopg2.IntegrityError)


def unavailable_errors() -> tuple[type[Exception], ...]:
    """The database is busy or away: nothing was written, the client may come back."""
    try:
        import psycopg2
    except ImportError:
        return (sqlite3.OperationalError,)
    return (
        sqlite3.OperationalError,
        psycopg2.OperationalError,
        psycopg2.InterfaceError,
    )  # (a connection lost)


class Tokens(View):
    """The tokens the service issued, kept as their hashes."""

    # tokens -----------------------------------------------------------------------------------------------------

    def issue(self, student_id: str, role: str = "student", lms_id: str = "") -> str:
        """A new token for ``student_id`` (its earlier ones revoked); returned once, kept as its hash."""
        token = secrets.token_urlsafe(32)
        now = stamp(utc_now())
        with self.connect() as db:
            db.execute("BEGIN")
            db.execute(
                "UPDATE tokens SET revoked_utc = ? WHERE student_id = ? AND role = ? AND revoked_utc IS NULL",
                (now, student_id, role),
            )
            db.execute(
                "INSERT INTO tokens (digest, student_id, lms_id, role, issued_utc) VALUES (?, ?, ?, ?, ?)",
                (token_digest(token), student_id, lms_id, role, now),
            )
            db.execute("COMMIT")
        return token

    def revoke(self, student_id: str) -> int:
        """Revoke every token of ``student_id``; how many were live."""
        with self.connect() as db:
            cursor = db.execute(
                "UPDATE tokens SET revoked_utc = ? WHERE student_id = ? AND revoked_utc IS NULL",
                (stamp(utc_now()), student_id),
            )
            return cursor.rowcount

    def who(self, token: str | None) -> Who | None:
        """The holder of ``token``, or None where it is missing, unknown or revoked."""
        if not token or len(token) > 200:
            return None
        digest = token_digest(token)
        with self.connect() as db:
            row = db.execute(
                "SELECT digest, student_id, lms_id, role FROM tokens WHERE digest = ? AND revoked_utc IS NULL",
                (digest,),
            ).fetchone()
        if row is None or not hmac.compare_digest(row["digest"], digest):
            return None
        return Who(row["student_id"], row["role"], row["lms_id"])


class Sessions(View):
    """A browser's sign-in: a random id in an HttpOnly cookie, kept as its hash and bound to the token it was
    made with, so that revoking the token ends it; it lasts :data:`SESSION_HOURS`."""

    def start(self, token: str) -> str | None:
        """A new session for ``token`` (None where the token is not valid)."""
        if Tokens(self.backend).who(token) is None:
            return None
        session = secrets.token_urlsafe(32)
        with self.connect() as db:
            db.execute(
                "INSERT INTO sessions (digest, token_digest, expires_utc) VALUES (?, ?, ?)",
                (
                    token_digest(session),
                    token_digest(token),
                    stamp(utc_now() + timedelta(hours=SESSION_HOURS)),
                ),
            )
        return session

    def who(self, session: str | None) -> Who | None:
        if not session or len(session) > 200:
            return None
        with self.connect() as db:
            row = db.execute(
                "SELECT t.student_id, t.role, t.lms_id FROM sessions s JOIN tokens t ON t.digest = s.token_digest "
                "WHERE s.digest = ? AND s.expires_utc > ? AND t.revoked_utc IS NULL",
                (token_digest(session), stamp(utc_now())),
            ).fetchone()
        return Who(row["student_id"], row["role"], row["lms_id"]) if row else None

    def end(self, session: str) -> None:
        with self.connect() as db:
            db.execute("DELETE FROM sessions WHERE digest = ?", (token_digest(session),))


def form_key(session: str) -> str:
    """The value a session's forms carry, that a page of another site cannot know (HMAC of the session)."""
    return hmac.new(session.encode(), b"form", hashlib.sha256).hexdigest()


class Queue(Database):
    """The store's submissions as the grader takes them: in order, one per student at a time, marked running,
    graded (or failed, or back in the queue), and which one the gradebook holds."""

    def get(self, sid: str) -> Submission | None:
        with self.connect() as db:
            row = db.execute("SELECT * FROM submissions WHERE id = ?", (sid,)).fetchone()
        return Submission.of(row) if row else None

    def position(self, submission: Submission) -> int | None:
        """How many will be graded before it, and it: every earlier one not done, and every later one already
        being graded (another student's, taken while this one waited for its student's earlier one). 1 for the
        next to be graded or one being graded; None once it is done."""
        if submission.state not in ("queued", "running"):
            return None
        if submission.state == "running":
            return 1
        with self.connect() as db:
            ahead = db.execute(
                "SELECT COUNT(*) AS n FROM submissions WHERE (state IN ('queued', 'running') AND seq < ?) "
                "OR (state = 'running' AND seq > ?)",  # a later one already being graded is ahead of it too
                (submission.seq, submission.seq),
            ).fetchone()["n"]
        return ahead + 1

    def resume(self) -> int:
        """At start: the rows a stopped service was grading go back to the queue; how many."""
        with self.connect() as db:
            return db.execute("UPDATE submissions SET state = 'queued' WHERE state = 'running'").rowcount

    def claim(self, aids: set[str], limit: int) -> list[Submission]:
        """Up to ``limit`` queued submissions to grade now, oldest first, at most one per student and assignment
        (a student's next waits for the one before it: the gradebook holds one hand-in each), of ``aids`` only;
        marked running."""
        if not aids:
            return []
        marks = ",".join("?" * len(aids))
        with self.connect() as db:
            db.write()
            rows = db.execute(
                f"SELECT * FROM submissions WHERE state = 'queued' AND aid IN ({marks}) ORDER BY seq",
                tuple(sorted(aids)),
            ).fetchall()
            running = db.execute("SELECT student_id, aid FROM submissions WHERE state = 'running'").fetchall()
            chosen, seen = [], {(r["student_id"], r["aid"]) for r in running}  # one at a time per student
            for row in rows:
                if (row["student_id"], row["aid"]) in seen:
                    continue
                seen.add((row["student_id"], row["aid"]))
                chosen.append(row)
                if len(chosen) >= limit:
                    break
            now = stamp(utc_now())
            for row in chosen:
                db.execute(
                    "UPDATE submissions SET state = 'running', attempts = attempts + 1, started_utc = ? WHERE seq = ?",
                    (now, row["seq"]),
                )
            db.execute("COMMIT")
        # made from the transaction's own rows: a read after the commit could fail, and lose a row marked running
        return [
            replace(Submission.of(row), state="running", attempts=row["attempts"] + 1, started_utc=now)
            for row in chosen
        ]

    def requeue_orphans(self, held: set[str]) -> int:
        """Rows marked running that none of ``held`` (what this service's slots are grading) is: a claim committed
        whose answer was lost (the database went away at that moment) left them; back to the queue. How many."""
        with self.connect() as db:
            db.write()
            rows = db.execute("SELECT id FROM submissions WHERE state = 'running'").fetchall()
            lost = [r["id"] for r in rows if r["id"] not in held]
            for sid in lost:
                db.execute(
                    "UPDATE submissions SET state = 'queued' WHERE id = ? AND state = 'running'", (sid,)
                )
            db.execute("COMMIT")
        return len(lost)

    def finish(self, sid: str, graded: dict, cells: list, counted: bool) -> None:
        """``sid`` graded: ``graded`` holds its score, max_score, status, reason and final (after the late
        penalty); ``counted``: it is the one the gradebook holds now (and none other of its student's is)."""
        with self.connect() as db:
            db.write()
            if counted:
                db.execute(
                    "UPDATE submissions SET counted = 0 WHERE (student_id, aid) = "
                    "(SELECT student_id, aid FROM submissions WHERE id = ?)",
                    (sid,),
                )
            db.execute(
                "UPDATE submissions SET state = 'graded', finished_utc = ?, score = ?, max_score = ?, status = ?, "
                "reason = ?, cells = ?, final = ?, counted = ? WHERE id = ? AND state = 'running'",
                (
                    stamp(utc_now()), graded["score"], graded["max_score"], graded["status"], graded["reason"],
                    json.dumps(cells), graded["final"], int(counted), sid,
                ),
            )  # fmt: skip
            db.execute("COMMIT")

    def count(self, sid: str) -> None:
        """``sid`` is the one its student's gradebook entry holds now, and none other of theirs."""
        with self.connect() as db:
            db.write()
            db.execute(
                "UPDATE submissions SET counted = CASE WHEN id = ? THEN 1 ELSE 0 END WHERE (student_id, aid) = "
                "(SELECT student_id, aid FROM submissions WHERE id = ?)",
                (sid, sid),
            )
            db.execute("COMMIT")

    def best(self, student_id: str, aid: str, besides: str) -> Submission | None:
        """``student_id``'s graded submission of ``aid`` with the highest final score (the latest of equals),
        ``besides`` left out."""
        with self.connect() as db:
            row = db.execute(
                "SELECT * FROM submissions WHERE student_id = ? AND aid = ? AND state = 'graded' AND id != ? "
                "AND final IS NOT NULL ORDER BY final DESC, seq DESC LIMIT 1",
                (student_id, aid, besides),
            ).fetchone()
        return Submission.of(row) if row else None

    def failed(self, sid: str, reason: str) -> str:
        """The grader failed ``sid``: back to the queue, or after :data:`MAX_ATTEMPTS` an error (no score). Its
        new state."""
        with self.connect() as db:
            db.execute(
                "UPDATE submissions SET state = CASE WHEN attempts >= ? THEN 'error' ELSE 'queued' END, "
                "reason = ?, finished_utc = CASE WHEN attempts >= ? THEN ? END WHERE id = ? AND state = 'running'",
                (MAX_ATTEMPTS, reason, MAX_ATTEMPTS, stamp(utc_now()), sid),
            )
            return db.execute("SELECT state FROM submissions WHERE id = ?", (sid,)).fetchone()["state"]

    def requeue(self, sid: str, reason: str) -> None:
        """Back to the queue without counting an attempt (the assignment closed while it waited)."""
        with self.connect() as db:
            db.execute(
                "UPDATE submissions SET state = 'queued', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, "
                "reason = ? "
                "WHERE id = ? AND state = 'running'",
                (reason, sid),
            )

    def counts(self) -> dict[str, int]:
        with self.connect() as db:
            rows = db.execute("SELECT state, COUNT(*) AS n FROM submissions GROUP BY state").fetchall()
        return {r["state"]: r["n"] for r in rows}


class Store(Queue):
    """The service's database and, with SQLite, its submissions' and pages' folders, under ``folder``;
    :attr:`tokens` and :attr:`sessions` in the same database. ``url``: a PostgreSQL database instead of the
    SQLite file."""

    def __init__(self, folder: Path, url: str | None = None):
        self.folder = Path(folder)
        self.files = self.folder / "submissions"
        self.feedback = self.folder / "feedback"
        for path in (self.folder, self.files, self.feedback):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        super().__init__(self.folder / "service.sqlite", url or None)
        with self.connect() as db:
            if self.postgres:
                db.execute("BEGIN")
                db.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))  # two services starting at once
                db.execute(SCHEMA.format(**POSTGRES_TYPES) + BLOBS)
                db.execute("COMMIT")
            else:
                db.execute("PRAGMA journal_mode=WAL")  # kept in the file: readers never wait for the writer
                db.raw.executescript(SCHEMA.format(**SQLITE_TYPES))
                have = {row["name"] for row in db.execute("PRAGMA table_info(submissions)")}
                for name, kind in ADDED.items():
                    if name not in have:
                        db.execute(f"ALTER TABLE submissions ADD COLUMN {name} {kind}")
        self.tokens = Tokens(self)
        self.sessions = Sessions(self)

    def put_page(self, sid: str, page: str) -> None:
        """``sid``'s feedback page, kept with it."""
        if not self.postgres:
            _write_durably(self.feedback / f"{sid}.html", page.encode("utf-8"), replace=True)
            return
        with self.connect() as db:
            db.execute(
                "INSERT INTO blobs (id, kind, body) VALUES (?, 'feedback', ?) "
                "ON CONFLICT (id, kind) DO UPDATE SET body = EXCLUDED.body",
                (sid, page.encode("utf-8")),
            )

    def page(self, sid: str) -> str | None:
        """``sid``'s feedback page (None: none kept)."""
        if not self.postgres:
            path = self.feedback / f"{sid}.html"
            return path.read_text(encoding="utf-8") if path.exists() else None
        with self.connect() as db:
            row = db.execute("SELECT body FROM blobs WHERE id = ? AND kind = 'feedback'", (sid,)).fetchone()
        return bytes(row["body"]).decode("utf-8") if row else None

    # submissions ------------------------------------------------------------------------------------------------

    def add(
        self,
        student_id: str,
        aid: str,
        body: bytes,
        key: str | None = None,
        limit: tuple[int, timedelta] | None = None,
    ) -> tuple[Submission, bool]:
        """Keep ``body`` as a new submission of ``student_id`` to ``aid``: its bytes on disk and flushed, then its
        row committed. With an idempotency ``key`` this student used before, the earlier submission and no new
        one. ``limit`` (how many in what window): counted and the row written in one transaction, so requests at
        once cannot all pass it; over it, :class:`RateLimited`. Returns (the submission, whether it is new)."""
        if key is not None:
            earlier = self.by_key(student_id, key)
            if earlier is not None:
                return earlier, False
        sid = uuid.uuid4().hex
        target = self.files / f"{sid}.ipynb"
        if not self.postgres:
            _write_durably(target, body)  # on disk before the row: a row never names missing bytes
        now = utc_now()
        received, digest = stamp(now), hashlib.sha256(body).hexdigest()
        try:
            with self.connect() as db:
                db.write()  # the count and the row together: no other writer in between
                if limit is not None:
                    most, window = limit
                    recent = [r["received_utc"] for r in db.execute(
                        "SELECT received_utc FROM submissions WHERE student_id = ? AND aid = ? AND received_utc > ? "
                        "ORDER BY received_utc", (student_id, aid, stamp(now - window)),
                    )]  # fmt: skip
                    if len(recent) >= most:
                        db.execute("ROLLBACK")
                        raise RateLimited(parse_stamp(recent[-most]) + window - now)
                seq = db.execute(
                    "INSERT INTO submissions (id, student_id, aid, received_utc, sha256, size, idempotency_key) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                    (sid, student_id, aid, received, digest, len(body), key),
                ).fetchone()["seq"]
                if self.postgres:  # the bytes in the same transaction as the row
                    db.execute("INSERT INTO blobs (id, kind, body) VALUES (?, 'notebook', ?)", (sid, body))
                db.execute("COMMIT")
        except integrity_errors():  # the same key at the same moment: the other request's row stands
            target.unlink(missing_ok=True)
            earlier = self.by_key(student_id, key) if key is not None else None
            if earlier is None:
                raise
            return earlier, False
        except BaseException:
            target.unlink(missing_ok=True)  # no row: the bytes are no submission
            raise
        # committed: what is sent back is made here, so that no read after the commit can fail the answer
        return Submission(
            seq, sid, student_id, aid, received, digest, len(body), "queued", 0, *[None] * 7
        ), True

    def by_key(self, student_id: str, key: str) -> Submission | None:
        with self.connect() as db:
            row = db.execute(
                "SELECT * FROM submissions WHERE student_id = ? AND idempotency_key = ?", (student_id, key)
            ).fetchone()
        return Submission.of(row) if row else None

    def body(self, submission: Submission) -> bytes:
        if not self.postgres:
            return (self.files / f"{submission.id}.ipynb").read_bytes()
        with self.connect() as db:
            row = db.execute(
                "SELECT body FROM blobs WHERE id = ? AND kind = 'notebook'", (submission.id,)
            ).fetchone()
        return bytes(row["body"])

    def listed(
        self, student_id: str | None = None, aid: str | None = None, limit: int = 1000
    ) -> list[Submission]:
        """Submissions, newest first: one student's (None: everyone's), of one assignment (None: all)."""
        query, args = "SELECT * FROM submissions WHERE 1 = 1", []
        if student_id is not None:
            query, args = query + " AND student_id = ?", [*args, student_id]
        if aid is not None:
            query, args = query + " AND aid = ?", [*args, aid]
        with self.connect() as db:
            rows = db.execute(query + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
        return [Submission.of(r) for r in rows]

    def recent(self, student_id: str, aid: str, window: timedelta, now: datetime) -> list[str]:
        """The received times of ``student_id``'s submissions to ``aid`` within ``window`` before ``now``."""
        with self.connect() as db:
            rows = db.execute(
                "SELECT received_utc FROM submissions WHERE student_id = ? AND aid = ? AND received_utc > ? "
                "ORDER BY received_utc",
                (student_id, aid, stamp(now - window)),
            ).fetchall()
        return [r["received_utc"] for r in rows]


class RateLimited(Exception):
    """Over the hourly limit: ``wait`` is how long until the oldest counted submission leaves the window."""

    def __init__(self, wait: timedelta):
        super().__init__(f"over the limit for {wait}")
        self.wait = wait


def _write_durably(target: Path, body: bytes, replace: bool = False) -> None:
    """``body`` at ``target``, on disk before this returns (the file and its folder's entry flushed)."""
    part = target.with_name(target.name + ".part")
    if replace:
        part.unlink(missing_ok=True)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
