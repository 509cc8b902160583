"""The service's pages, for a browser: a student signs in with their token, uploads a notebook and reads their
submissions and what the hidden tests found; the instructor's page shows the queue live (it reloads itself).

No page runs a script (the content-security policy allows none; the live page reloads with a meta refresh). The
token is sent once, in a form's body, never in a URL; the browser then holds a session id in a cookie that is
HttpOnly, SameSite=Strict (and Secure behind TLS), kept by the service as a hash and ended with the token's
revocation. Every form carries a key derived from the session (:func:`~autograder.service.store.form_key`) and
a form post whose Origin is another site is refused, so a page elsewhere cannot submit or sign out for a student.
Everything shown is escaped; a feedback page is the grader's own, made safe when it was written.
"""

from __future__ import annotations

import hmac
import secrets
from html import escape

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from autograder.service.refused import Refused
from autograder.service.status import status_of
from autograder.service.store import form_key

COOKIE = "grader_session"
SIGN_IN_COOKIE = "grader_signin"  # the sign-in page's own: its form must carry a key made from it
PAGE_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
STYLE = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left}"
    ".bad{color:#a00}.ok{color:#070}form{margin:.5rem 0}"
)


def page(title: str, body: str, refresh: int | None = None, status: int = 200) -> HTMLResponse:
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else ""
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}<title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )
    # same-origin: the browser sends this site's Origin with a form post (with no-referrer it sends "null")
    headers = {"content-security-policy": PAGE_CSP, "referrer-policy": "same-origin"}
    return HTMLResponse(text, status_code=status, headers=headers)


class Pages:
    def __init__(self, service):
        self.service, self.store = service, service.store

    def session(self, request: Request) -> str | None:
        return request.cookies.get(COOKIE)

    def signed_in(self, request: Request):
        return self.store.sessions.who(self.session(request))

    def checked_form(self, request: Request, form, cookie: str = COOKIE) -> None:
        """A form post from this site's own page (of this session, or the sign-in page's ``cookie``), or refused."""
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise Refused(403, "a form of another site is refused")
        secret = request.cookies.get(cookie)
        if not secret or not hmac.compare_digest(str(form.get("form_key", "")), form_key(secret)):
            raise Refused(403, "this form is stale or not this site's: open the page again")

    # sign in and out ------------------------------------------------------------------------------------------

    def sign_in_form(self, request: Request, message: str = "", status: int = 200) -> HTMLResponse:
        """The sign-in page, with a key of its own: a form another site makes cannot carry it, so no page
        elsewhere can sign a student's browser in as someone else (and collect what they then hand in)."""
        said = f'<p class="bad">{escape(message)}</p>' if message else ""
        secret = secrets.token_urlsafe(32)
        answer = page(
            "Hand in your notebook",
            f'{said}<form method="post" action="/signin"><input type="hidden" name="form_key" value="{form_key(secret)}">'
            '<label>Your token <input name="token" type="password" autocomplete="off" size="48" required></label> '
            "<button>Sign in</button></form>"
            "<p>The token is in your instructor's message. In a notebook, <code>dlcourse.submit</code> does the same.</p>",
            status=status,
        )
        secure = request.url.scheme == "https"  # behind a TLS proxy that says so (X-Forwarded-Proto)
        answer.set_cookie(
            SIGN_IN_COOKIE, secret, 3600, path="/signin", secure=secure, httponly=True, samesite="strict"
        )
        return answer

    async def sign_in(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4, max_part_size=1024)
        try:
            self.checked_form(request, form, cookie=SIGN_IN_COOKIE)
        except Refused as refused:
            return self.sign_in_form(request, refused.message, refused.status)
        session = await run_in_threadpool(self.store.sessions.start, str(form.get("token", "")).strip())
        if session is None:
            return self.sign_in_form(
                "That token was not accepted: copy it again from your instructor's message.", 401
            )
        answer = RedirectResponse("/", status_code=303, headers={"referrer-policy": "same-origin"})
        answer.set_cookie(
            COOKIE, session, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
        )
        answer.delete_cookie(SIGN_IN_COOKIE, path="/signin")
        return answer

    async def sign_out(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4, max_part_size=1024)
        try:
            self.checked_form(request, form)
        except Refused as refused:
            return page(
                "Not signed out", f'<p class="bad">{escape(refused.message)}</p>', status=refused.status
            )
        await run_in_threadpool(self.store.sessions.end, self.session(request))
        answer = RedirectResponse("/", status_code=303)
        answer.delete_cookie(COOKIE, path="/")
        return answer

    # what a signed-in person sees ------------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        who = self.signed_in(request)
        if who is None:
            return self.sign_in_form(request)
        key = form_key(self.session(request))
        out = f'<form method="post" action="/signout"><input type="hidden" name="form_key" value="{key}"><button>Sign out</button></form>'
        if who.instructor:
            return page(
                "The grading service: live", live(self.store, self.service.worker.doors) + out, refresh=5
            )
        return page(
            f"Your submissions, {who.student_id}", self.uploads(key) + self.listing(who) + out, refresh=None
        )

    def uploads(self, key: str) -> str:
        forms = []
        for aid, door in self.service.worker.doors.items():
            if door.state == "closed":
                forms.append(f"<p>{escape(aid)} is closed: {escape(door.reason)}</p>")
                continue
            forms.append(
                f'<form method="post" action="/upload/{escape(aid)}" enctype="multipart/form-data">'
                f'<input type="hidden" name="form_key" value="{key}"><label>{escape(aid)}: '
                '<input type="file" name="notebook" accept=".ipynb" required></label> <button>Hand in</button></form>'
            )
        return "<h2>Hand in</h2>" + "".join(forms)

    def listing(self, who) -> str:
        rows = []
        for s in self.store.listed(who.student_id, limit=200):
            score = f"{s.score:g} / {s.max_score:g}" if s.state == "graded" else escape(s.state)
            if s.counted:
                score += " (counts)"
            rows.append(
                f"<tr><td>{escape(s.aid)}</td><td>{escape(s.received_utc)}</td><td>{score}</td>"
                f'<td><a href="/submissions/{escape(s.id)}">what was found</a></td></tr>'
            )
        if not rows:
            return "<p>No submissions yet.</p>"
        return (
            "<h2>Submissions</h2><table><tr><th>assignment</th><th>received</th><th>score</th><th></th></tr>"
            + "".join(rows)
            + "</table>"
        )

    async def upload(self, request: Request) -> Response:
        who = await run_in_threadpool(self.signed_in, request)
        if who is None:
            return RedirectResponse("/", status_code=303)
        aid = request.path_params["aid"]
        try:
            await run_in_threadpool(self.service.may_submit, who, aid)
            declared = request.headers.get("content-length")
            if (
                declared is None
                or not declared.isdigit()
                or int(declared) > self.service.config.max_bytes + 4096
            ):
                raise Refused(
                    413, f"a notebook of at most {self.service.config.max_notebook_mb:g} MB is taken"
                )
            form = await request.form(max_files=1, max_fields=4, max_part_size=self.service.config.max_bytes)
            self.checked_form(request, form)
            upload = form.get("notebook")
            if upload is None or isinstance(upload, str):
                raise Refused(400, "choose a notebook file to hand in")
            body = await upload.read(self.service.config.max_bytes + 1)
            if len(body) > self.service.config.max_bytes:
                raise Refused(
                    413, f"a notebook of at most {self.service.config.max_notebook_mb:g} MB is taken"
                )
            submission, _ = await run_in_threadpool(self.service.keep, who, aid, body, None)
        except Refused as refused:
            back = '<p><a href="/">Back</a></p>'
            return page(
                "Not handed in", f'<p class="bad">{escape(refused.message)}</p>{back}', status=refused.status
            )
        return RedirectResponse(f"/submissions/{submission.id}", status_code=303)

    def submission(self, request: Request) -> Response:
        who = self.signed_in(request)
        if who is None:
            return RedirectResponse("/", status_code=303)
        try:
            shown = self.service.shown(who, self.service.visible(who, request.path_params["sid"]))
        except Refused as refused:
            return page("Not found", f"<p>{escape(refused.message)}</p>", status=refused.status)
        title = f"{shown['assignment']}, received {shown['received']}"
        if shown["state"] in ("queued", "running"):
            where = f", number {shown['queue_position']} in the queue" if shown["state"] == "queued" else ""
            waiting = f" ({escape(shown['waiting'])})" if shown.get("waiting") else ""
            return page(
                title,
                f"<p>{escape(shown['state'])}{where}{waiting}; this page reloads itself.</p>",
                refresh=2,
            )
        if shown["state"] == "error":
            return page(title, f'<p class="bad">{escape(shown["error"])}</p>')
        parts = "".join(
            f"<tr><td>{escape(p['grade_id'])}</td><td>{p['points']:g} / {p['max_points']:g}</td>"
            f'<td class="bad">{escape(", ".join(p["failed_cases"]))}</td><td>{escape(p.get("message", ""))}</td></tr>'
            for p in shown.get("parts", [])
        )
        body = f"<p><b>{shown['score']:g} / {shown['max_score']:g}</b> ({escape(shown['status'])})</p>"
        if parts:
            body += f"<table><tr><th>part</th><th>points</th><th>hidden cases failed</th><th></th></tr>{parts}</table>"
        if shown.get("feedback_page"):
            body += (
                f'<p><a href="/submissions/{escape(shown["id"])}/feedback">The whole feedback page</a></p>'
            )
        return page(title, body + '<p><a href="/">Back</a></p>')

    def feedback(self, request: Request) -> Response:
        who = self.signed_in(request)
        if who is None:
            return RedirectResponse("/", status_code=303)
        try:
            return self.service.feedback_page(who, request.path_params["sid"])
        except Refused as refused:
            return page("Not shown", f"<p>{escape(refused.message)}</p>", status=refused.status)


def _score(score: float | None) -> str:
    return "" if score is None else f"{score:g}"


def live(store, doors) -> str:
    """The instructor's live page's body."""
    status = status_of(store, doors)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(status["counts"].items())) or "none yet"
    waits = status["seconds_to_feedback"]
    timing = (
        f"received to graded: median {waits['p50']:.1f} s, 95th percentile {waits['p95']:.1f} s, longest {waits['max']:.1f} s"
        if waits["p50"] is not None
        else "nothing graded yet"
    )
    doors = "".join(
        f"<li>{escape(aid)}: {escape(d['state'])} {escape(d['reason'])}</li>"
        for aid, d in status["assignments"].items()
    )
    errors = "".join(
        f"<li>{escape(e['student'])}: {escape(e['reason'] or '')}</li>" for e in status["errors"]
    )
    rows = "".join(
        f"<tr><td>{escape(r['student'])}</td><td>{escape(r['assignment'])}</td><td>{escape(r['state'])}</td>"
        f"<td>{_score(r['score'])}</td><td>{_score(r.get('counted', {}).get('final'))}</td>"
        f"<td>{escape(r['received'])}</td>"
        f'<td><a href="{escape(r["feedback_page"].replace("/api", ""))}">feedback</a></td></tr>'
        for r in status["latest"]
    )
    return (
        f"<p>Submissions: {escape(counts)}. {escape(timing)}.</p><ul>{doors}</ul>"
        + (f'<h2 class="bad">Errors</h2><ul>{errors}</ul>' if errors else "")
        + "<h2>Each student's latest</h2><table><tr><th>student</th><th>assignment</th><th>state</th>"
        f"<th>score</th><th>in the gradebook</th><th>received</th><th></th></tr>{rows}</table>"
    )
