"""The service's door: an ASGI application (Starlette, served by uvicorn) through which a student hands in a notebook
and reads what the hidden tests found, and the instructor watches the queue.

Every route but ``/healthz`` wants a token in the ``Authorization: Bearer`` header (never in a URL, so never in a
log): a student's sees and submits only that student's work, the instructor's sees everything. A submission is
checked before its body is read (the token, the assignment's door, the size the client declares, the student's
rate), read up to the size limit and no further, and kept durably before its id is sent back
(:mod:`autograder.service.store`). Another student's submission is answered as one that does not exist. Every
answer is JSON or a feedback page made safe by the grader (no script runs in it), with a content-security policy
that lets nothing load, no caching and no referrer. TLS is a reverse proxy's job (the README shows one).
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import traceback
from datetime import UTC, timedelta

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from autograder.course import Course
from autograder.intake.late import deadlines
from autograder.service.config import ServiceConfig
from autograder.service.refused import Refused
from autograder.service.status import status_of
from autograder.service.store import (
    RateLimited,
    Store,
    Submission,
    Who,
    parse_stamp,
    unavailable_errors,
    utc_now,
)
from autograder.service.worker import Worker

HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "cross-origin-resource-policy": "same-origin",
}
WINDOW = timedelta(hours=1)
IDEMPOTENCY_KEY_CHARS = 200
LIST_LIMIT = 5000  # submissions in one listing at most (newest first; 200 unless asked)


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class Service:
    """The routes, over one course, its store and its grader thread."""

    def __init__(self, course: Course, store: Store, worker: Worker, config: ServiceConfig):
        self.course, self.store, self.worker, self.config = course, store, worker, config

    # who and what ---------------------------------------------------------------------------------------------

    def who(self, request: Request) -> Who:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        who = self.store.tokens.who(token.strip()) if scheme.lower() == "bearer" else None
        if who is None:
            raise Refused(
                401, "a valid token is needed (Authorization: Bearer <token>)", {"www-authenticate": "Bearer"}
            )
        return who

    def visible(self, who: Who, sid: str) -> Submission:
        submission = self.store.get(sid) if len(sid) == 32 and sid.isalnum() else None
        if submission is None or not (who.instructor or submission.student_id == who.student_id):
            raise Refused(404, "no such submission")  # another's is answered as one that does not exist
        return submission

    def before_deadline(self, submission: Submission) -> bool:
        due = deadlines(self.course, submission.aid).due_for(submission.student_id)
        return due is None or utc_now() < due.replace(tzinfo=UTC)

    def shown(self, who: Who, submission: Submission) -> dict:
        """What ``who`` may see of ``submission``: as the course's feedback rule says before the deadline."""
        view = {
            "id": submission.id,
            "assignment": submission.aid,
            "student": submission.student_id,
            "received": submission.received_utc,
            "state": submission.state,
            "queue_position": self.store.position(submission),
        }
        door = self.worker.door(submission.aid)
        if submission.state == "queued" and door is not None and door.state != "open":
            view["waiting"] = door.reason or "the grader is proving itself on this assignment"
        if submission.state == "error":
            view["error"] = "the grader could not grade this submission; your instructor has been told"
        if submission.state != "graded":
            return view
        rule = (
            "all" if who.instructor or not self.before_deadline(submission) else self.config.before_deadline
        )
        view.update(
            score=submission.score,
            max_score=submission.max_score,
            status=submission.status,
            feedback=rule,
            counted=submission.counted,  # the one the gradebook holds
        )
        if rule in ("parts", "all"):
            view["parts"] = [
                {k: c[k] for k in ("grade_id", "points", "max_points", "failed_cases")}
                | ({"message": c["message"]} if rule == "all" else {})
                for c in submission.cells or []
            ]
        if rule == "all":
            view["reason"] = submission.reason
            view["feedback_page"] = f"/api/submissions/{submission.id}/feedback"
        return view

    # routes ---------------------------------------------------------------------------------------------------

    def may_submit(self, who: Who, aid: str) -> None:
        """Whether ``who`` may hand in ``aid`` now, asked before a byte of the body is read."""
        door = self.worker.door(aid)
        if door is None:
            raise Refused(404, f"{aid[:40]!r} takes no submissions here")
        if door.state == "closed":
            raise Refused(409, f"{aid} is closed: {door.reason}")
        if who.instructor:
            raise Refused(403, "the instructor's token submits for no student")
        self.rate(who.student_id, aid)

    def keep(self, who: Who, aid: str, body: bytes, key: str | None) -> tuple[Submission, bool]:
        """Check ``body`` is a notebook and keep it durably; the submission, and whether it is new."""
        try:
            notebook = json.loads(body)
        except (
            ValueError,
            UnicodeDecodeError,
            RecursionError,
        ) as err:  # (nested past Python's recursion limit)
            raise Refused(
                400, f"not a notebook: the body is not JSON a notebook can be ({str(err)[:100]})"
            ) from None
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise Refused(400, "not a notebook: a notebook is a JSON object with a list of cells")
        try:
            made = self.store.add(who.student_id, aid, body, key, limit=(self.config.per_hour, WINDOW))
        except RateLimited as over:  # requests that passed the first check together: the store counts again
            raise self.over_limit(aid, over.wait) from None
        except OSError as err:
            raise Refused(
                507, f"the server cannot keep the submission now ({err.strerror}); nothing was kept"
            ) from None
        self.worker.wake.set()
        return made

    async def submit(self, request: Request) -> Response:
        who = await run_in_threadpool(self.who, request)
        aid = request.path_params["aid"]
        key = request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= IDEMPOTENCY_KEY_CHARS and key.isprintable()):
            raise Refused(400, f"an Idempotency-Key is 1 to {IDEMPOTENCY_KEY_CHARS} printable characters")
        if key is not None:
            earlier = await run_in_threadpool(self.store.by_key, who.student_id, key)
            if earlier is not None:  # a retry: the first request's submission, nothing new
                return JSONResponse(self.shown(who, earlier), status_code=200)
        await run_in_threadpool(self.may_submit, who, aid)
        body = await self.read_body(request)
        submission, new = await run_in_threadpool(self.keep, who, aid, body, key)
        return JSONResponse(self.shown(who, submission), status_code=202 if new else 200)

    def rate(self, student_id: str, aid: str) -> None:
        """A first, cheap refusal before the body is read (the store counts again as it keeps the submission)."""
        now = utc_now()
        recent = self.store.recent(student_id, aid, WINDOW, now)
        if len(recent) >= self.config.per_hour:
            raise self.over_limit(aid, parse_stamp(recent[-self.config.per_hour]) + WINDOW - now)

    def over_limit(self, aid: str, wait: timedelta) -> Refused:
        seconds = max(1, math.ceil(wait.total_seconds()))
        return Refused(
            429,
            f"{self.config.per_hour} submissions of {aid} an hour at most: the next one in {seconds} s",
            {"retry-after": str(seconds)},
        )

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.max_bytes
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise Refused(413, f"a notebook of at most {self.config.max_notebook_mb:g} MB is taken")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise Refused(413, f"a notebook of at most {self.config.max_notebook_mb:g} MB is taken")
        return bytes(body)

    def submission(self, request: Request) -> Response:
        who = self.who(request)
        return JSONResponse(self.shown(who, self.visible(who, request.path_params["sid"])))

    def feedback(self, request: Request) -> Response:
        return self.feedback_page(self.who(request), request.path_params["sid"])

    def feedback_page(self, who: Who, sid: str) -> Response:
        submission = self.visible(who, sid)
        if submission.state != "graded":
            raise Refused(409, f"not graded yet ({submission.state})")
        if not who.instructor and self.before_deadline(submission) and self.config.before_deadline != "all":
            raise Refused(
                403, "the feedback page opens after the deadline; until then you see each part's score"
            )
        page = self.store.page(submission.id)
        if page is None:
            raise Refused(404, "no feedback page was kept for this submission")
        return HTMLResponse(page)

    def submissions(self, request: Request) -> Response:
        who = self.who(request)
        aid = request.query_params.get("assignment")
        asked = request.query_params.get("limit", "200")
        if not asked.isdigit() or not 1 <= int(asked) <= LIST_LIMIT:
            raise Refused(400, f"limit is a whole number from 1 to {LIST_LIMIT}")
        listed = self.store.listed(None if who.instructor else who.student_id, aid, limit=int(asked))
        return JSONResponse({"submissions": [self.shown(who, s) for s in listed]})

    def assignments(self, request: Request) -> Response:
        self.who(request)
        return JSONResponse({
            "assignments": {aid: {"state": d.state, "reason": d.reason} for aid, d in self.worker.doors.items()},
            "per_hour": self.config.per_hour,
            "max_notebook_bytes": self.config.max_bytes,
        })  # fmt: skip

    def status(self, request: Request) -> Response:
        """The instructor's view: the queue, time to feedback, errors, each student's latest score."""
        who = self.who(request)
        if not who.instructor:
            raise Refused(403, "the instructor's token only")
        return JSONResponse(status_of(self.store, self.worker.doors))

    def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})


def application(service: Service) -> Starlette:
    def guarded(handler):
        async def endpoint(request: Request) -> Response:
            try:
                if inspect.iscoroutinefunction(handler):
                    return await handler(request)
                return await run_in_threadpool(handler, request)
            except Refused as refused:
                return error(refused.status, refused.message, refused.headers)
            except unavailable_errors():  # the store is busy or away: nothing half-written, try again
                return error(503, "the service is busy; try again shortly", {"retry-after": "2"})
            except Exception:  # the service's own failure: said as one, and logged for the instructor
                print(
                    f"service: {request.method} {request.url.path} failed:\n{traceback.format_exc()}",
                    file=sys.stderr,
                )
                return error(
                    500, "the service failed on this request; your instructor can see why in its log"
                )

        return endpoint

    from autograder.service.pages import Pages

    pages = Pages(service)
    routes = [
        Route("/", guarded(pages.home)),
        Route("/signin", guarded(pages.sign_in), methods=["POST"]),
        Route("/signout", guarded(pages.sign_out), methods=["POST"]),
        Route("/upload/{aid}", guarded(pages.upload), methods=["POST"]),
        Route("/submissions/{sid}", guarded(pages.submission)),
        Route("/submissions/{sid}/feedback", guarded(pages.feedback)),
        Route("/healthz", guarded(service.health)),
        Route("/api/assignments", guarded(service.assignments)),
        Route("/api/assignments/{aid}/submissions", guarded(service.submit), methods=["POST"]),
        Route("/api/submissions", guarded(service.submissions)),
        Route("/api/submissions/{sid}", guarded(service.submission)),
        Route("/api/submissions/{sid}/feedback", guarded(service.feedback)),
        Route("/api/status", guarded(service.status)),
    ]
    return SecurityHeaders(Starlette(routes=routes))


class SecurityHeaders:
    """Adds :data:`HEADERS` to every response (pure ASGI: the body streams through untouched)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                own = {k.decode("latin-1").lower() for k, _ in headers}  # a page's own policy stands
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items() if k not in own]
                message = {**message, "headers": headers}
            await send(message)

        return await self.app(scope, receive, sending)


def serve(course: Course, config: ServiceConfig, settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the service until it is stopped (Ctrl-C, SIGTERM): the grader thread, then uvicorn in this thread.
    ``kill -USR1`` prints every thread's stack to the log (where a stuck queue waits), and the service goes on."""
    import faulthandler
    import signal

    import uvicorn

    from autograder.runner.isolation import resolved

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = resolved(settings)
    if config.gpu and not settings.scheduler:
        raise SystemExit(
            "service.toml names gpu assignments: they are graded on a Dask cluster's GPU workers; start the "
            "service with --scheduler ADDRESS"
        )
    store = Store(course.work / "service", config.database)
    worker = Worker(course, store, config, settings)
    worker.start()
    app = application(Service(course, store, worker, config))
    print(
        f"autograder service for {course.root} on http://{host}:{port} "
        f"(open once proved: {', '.join(worker.doors) or 'nothing'}; "
        f"{settings.workers} workers, {settings.isolation.mode} isolation)",
        flush=True,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False)
    finally:
        worker.stop()
