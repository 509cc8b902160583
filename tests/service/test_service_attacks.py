"""The grading service attacked by a student who holds a valid token: another's submissions and feedback, another's
name on a hand-in, what the hidden tests hold, the hourly limit, the queue, the received time, the pages, and a
score for a hand-in the grader failed. Each test asserts what the service should do. Written by a tester who did not
write the service; its four findings (requests racing the hourly limit, a JSON body nested past the recursion limit,
a sign-in posted from another site, one sleeping notebook holding up the queue) were fixed, and their tests pass.

One server of its own for the module (its own limits and timeouts, so the ``served`` fixture's tests are
undisturbed); the test that stalls the queue runs last."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.parse
import uuid

import nbformat
import pytest

from autograder.service.store import form_key, parse_stamp, utc_now
from tests.fixtures import service
from tests.fixtures.service import WRONG_SQUARE, notebook_bytes

PER_HOUR = 3
STUDENTS = (
    "alice", "bob", "carol", "dave", "erin", "frank", "gina", "hank", "ivy", "judy", "kim", "leo", "max",
    "nina", "oscar", "ruth", "sam", "tina", "racer", "sleeper", "crasher", "cheater", "snoop", "big",
)  # fmt: skip
ODD_ID = 'eve"><script>alert(1)</script>'
CELL_TIMEOUT = 8  # seconds: the test that stalls the queue waits for this, not for the default three minutes
SUBMIT = "/api/assignments/T1/submissions"


@pytest.fixture(scope="module")
def attack(tmp_path_factory):
    """The toy course with T1 open, ``PER_HOUR`` submissions an hour, 1 MB notebooks, 2 workers, short timeouts."""
    settings = f'open = ["T1"]\nper_hour = {PER_HOUR}\nmax_notebook_mb = 1\n'
    limits = ("--workers", "2", "--cell-timeout", str(CELL_TIMEOUT), "--timeout", "120")
    with service.toy_service(
        tmp_path_factory.mktemp("attack"), settings, (*STUDENTS, ODD_ID), *limits
    ) as made:
        yield made


# helpers --------------------------------------------------------------------------------------------------------


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def raw_call(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """One request as sent (no redirect followed, no header added): (status, headers lower-cased, text)."""
    connection = http.client.HTTPConnection(*address(server), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        got = {k.lower(): v for k, v in answer.getheaders()}
        got["set-cookie-all"] = answer.headers.get_all("set-cookie") or []
        return answer.status, got, answer.read().decode("utf-8", "replace")
    finally:
        connection.close()


def sign_in(server, token: str, **headers) -> str | None:
    """The session id the service sets for ``token``, signed in through the sign-in page as a browser does (its
    cookie and its form's key); None where no session cookie is set."""
    _, page_headers, page = raw_call(server, "GET", "/")
    cookie = next(c.split(";")[0] for c in page_headers["set-cookie-all"] if c.startswith("grader_signin="))
    key = re.search(r'name="form_key" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"token": token, "form_key": key}).encode()
    sent = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie, **headers}
    status, got, _ = raw_call(server, "POST", "/signin", form, sent)
    for cookie in got["set-cookie-all"]:
        if cookie.startswith("grader_session="):
            return cookie.split(";")[0].split("=", 1)[1]
    return None


def cookie_of(session: str) -> dict:
    return {"Cookie": f"grader_session={session}"}


def multipart(fields: dict, files: dict) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for name, (filename, data) in files.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
            + data
            + b"\r\n"
        )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def upload(server, session: str, body: bytes, aid: str = "T1", key: str | None = None, **extra):
    """A hand-in through the page's form, as the signed-in browser sends it."""
    fields = {"form_key": form_key(session) if key is None else key, **extra}
    data, kind = multipart(fields, {"notebook": ("T1.ipynb", body)})
    return raw_call(server, "POST", f"/upload/{aid}", data, {"Content-Type": kind, **cookie_of(session)})


def mine(server, token: str) -> list[dict]:
    return server.call("GET", "/api/submissions", token).body["submissions"]


def submitted(server, token: str, body: bytes, **headers) -> dict:
    sent = server.call("POST", SUBMIT, token, body, **headers)
    assert sent.status == 202, sent.body
    return sent.body


def with_cells(course, extra: list, **answers) -> bytes:
    """T1 with its solutions (``answers`` replaced) and ``extra`` cells added at the end."""
    nb = nbformat.reads(notebook_bytes(course, **answers).decode(), as_version=4)
    nb.cells.extend(extra)
    return nbformat.writes(nb).encode()


def test_a_students_code_in_the_grader_reads_no_hidden_test_no_store_and_reaches_no_network(attack):
    """An oracle: the answer is right only where the kernel could read the hidden tests (or the service's store,
    or reach the service), so the score would say so even where nothing is printed."""
    course, server, tokens, _, store = attack
    host, port = address(server)
    secrets_on_disk = [
        str(course.source_notebook("T1")), str(course.reference_dir / "T1"), str(store.path), str(store.files),
    ]  # fmt: skip
    reads = f"""import os
def _readable(path):
    try:
        return bool(os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1))
    except Exception:
        return False
_leak = any(_readable(p) for p in {secrets_on_disk!r})
def square(x):
    return x**2 if _leak else x * 2"""
    reaches = f"""import socket
try:
    socket.create_connection(({host!r}, {port}), timeout=2).close()
    _net = True
except Exception:
    _net = False
def scale(x, factor):
    return x * factor if _net else x"""
    sid = submitted(server, tokens["snoop"], notebook_bytes(course, square=reads, scale=reaches))["id"]
    parts = {p["grade_id"]: p["points"] for p in server.wait_graded(tokens["snoop"], sid)["parts"]}
    assert parts == {"test_square": 0.0, "test_scale": 0.0}, parts


# reading another student's work ---------------------------------------------------------------------------------


def test_another_students_submission_and_feedback_are_answered_as_missing_by_every_route(attack):
    course, server, tokens, _, _ = attack
    bobs = submitted(server, tokens["bob"], notebook_bytes(course, square=WRONG_SQUARE))["id"]
    server.wait_graded(tokens["bob"], bobs)
    nobody = uuid.uuid4().hex
    missing = server.call("GET", f"/api/submissions/{nobody}", tokens["alice"])
    assert missing.status == 404
    tricks = [
        bobs, bobs.upper(), bobs + "/", bobs + "%00", bobs + "%20", f"%2e%2e/{bobs}", f"..%2F{bobs}",
        bobs[:31] + "%25", "%2A" * 32, "_" * 32, "%25" * 32, bobs + "?student=bob", "%D9%A1" * 32,
    ]  # fmt: skip
    for trick in tricks:
        for path in (f"/api/submissions/{trick}", f"/api/submissions/{trick}/feedback"):
            answer = server.call("GET", path, tokens["alice"])
            assert answer.status == 404, (path, answer.status, answer.body)
            assert "bob" not in json.dumps(answer.body) and "60" not in json.dumps(answer.body)
    # the same answer as for an id that never existed: no oracle of which ids are real
    assert server.call("GET", f"/api/submissions/{bobs}", tokens["alice"]).body == missing.body
    for query in ("", "?assignment=T1", "?assignment=T1&student=bob", "?student=bob", "?assignment=%25"):
        listed = server.call("GET", f"/api/submissions{query}", tokens["alice"]).body["submissions"]
        assert all(s["student"] == "alice" for s in listed), query
    # the pages, from alice's signed-in browser
    session = sign_in(server, tokens["alice"])
    for path in (f"/submissions/{bobs}", f"/submissions/{bobs}/feedback", f"/submissions/{bobs.upper()}"):
        status, _, text = raw_call(server, "GET", path, headers=cookie_of(session))
        assert status == 404 and ">bob<" not in text and "60 / 100" not in text, (path, text)
    status, _, text = raw_call(server, "GET", "/", headers=cookie_of(session))
    assert status == 200 and bobs not in text


# handing in as another student -----------------------------------------------------------------------------------


def test_no_header_field_query_or_cookie_makes_a_hand_in_another_students(attack):
    course, server, tokens, revoked, _ = attack
    frank = sign_in(server, tokens["frank"])
    nb = nbformat.reads(notebook_bytes(course).decode(), as_version=4)
    nb.metadata["student_id"] = "frank"
    nb.metadata["nbgrader"] = {"student": "frank", "student_id": "frank"}
    claims = nbformat.writes(nb).encode()
    forged = {
        "X_Student_Id": "frank", "X_Forwarded_User": "frank", "X_Remote_User": "frank", "Remote_User": "frank",
        "Forwarded": "for=127.0.0.1;user=frank", "From": "frank", "Cookie": f"grader_session={frank}",
    }  # fmt: skip
    first = server.call("POST", SUBMIT + "?student=frank&student_id=frank", tokens["erin"], claims, **forged)
    assert first.status == 202 and first.body["student"] == "erin"
    erin = sign_in(server, tokens["erin"])
    status, _, _ = upload(server, erin, claims, student="frank", student_id="frank")
    assert status == 303
    assert {s["student"] for s in mine(server, tokens["erin"])} == {"erin"} and len(
        mine(server, tokens["erin"])
    ) == 2
    assert mine(server, tokens["frank"]) == []
    # what is not erin's token is no token: a revoked one, one in the URL, a session id, another scheme
    body = notebook_bytes(course)
    for path, headers in [
        (SUBMIT, {"Authorization": f"Bearer {revoked}"}),
        (SUBMIT + f"?token={tokens['erin']}", {}),
        (SUBMIT + f"?access_token={tokens['erin']}", {}),
        (SUBMIT, {"Authorization": f"Bearer {erin}"}),  # the session id is no token
        (SUBMIT, {"Authorization": f"Token {tokens['erin']}"}),
        (SUBMIT, {"Authorization": f"Basic {tokens['erin']}"}),
        (SUBMIT, {"Authorization": f"Bearer {tokens['erin']}x"}),
        (SUBMIT, {"Authorization": "Bearer " + "A" * 100_00}),
        (SUBMIT, cookie_of(frank)),  # a browser's session does not open the API
    ]:
        status, _, text = raw_call(server, "POST", path, body, headers)
        assert status == 401, (path, headers, status, text)
    assert sign_in(server, revoked) is None
    status, _, text = raw_call(server, "GET", "/", headers=cookie_of(tokens["erin"]))  # a token is no session
    assert "Sign in" in text and "Your submissions" not in text
    assert len(mine(server, tokens["erin"])) == 2 and mine(server, tokens["frank"]) == []


def test_revoking_a_token_ends_the_sessions_made_with_it(attack):
    course, server, tokens, _, store = attack
    session = sign_in(server, tokens["ruth"])
    assert "Your submissions, ruth" in raw_call(server, "GET", "/", headers=cookie_of(session))[2]
    store.tokens.revoke("ruth")
    assert "Your submissions" not in raw_call(server, "GET", "/", headers=cookie_of(session))[2]
    status, got, _ = upload(server, session, notebook_bytes(course))
    assert status == 303 and got["location"] == "/"
    assert store.listed("ruth") == []


# what the hidden tests hold --------------------------------------------------------------------------------------


def test_before_the_deadline_a_student_learns_each_parts_score_and_nothing_of_the_hidden_tests(attack):
    course, server, tokens, _, _ = attack
    sid = submitted(server, tokens["gina"], notebook_bytes(course, square=WRONG_SQUARE))["id"]
    shown = server.wait_graded(tokens["gina"], sid)
    assert shown["feedback"] == "parts" and "reason" not in shown and "feedback_page" not in shown
    assert all(set(p) == {"grade_id", "points", "max_points", "failed_cases"} for p in shown["parts"])
    refused = server.call("GET", f"/api/submissions/{sid}/feedback", tokens["gina"])
    assert refused.status == 403 and "expected" not in json.dumps(refused.body)
    session = sign_in(server, tokens["gina"])
    for path in (f"/submissions/{sid}", f"/submissions/{sid}/feedback", "/"):
        text = raw_call(server, "GET", path, headers=cookie_of(session))[2]
        assert "default_rng" not in text and "expected" not in text and "HIDDEN" not in text, path
    assert server.call("GET", "/api/status", tokens["gina"]).status == 403
    doors = json.dumps(server.call("GET", "/api/assignments", tokens["gina"]).body)
    assert "default_rng" not in doors and "check(" not in doors
    # after the deadline (what the instructor sees now): the messages, never the hidden expected values
    import numpy as np

    hidden = np.random.default_rng(7).normal(size=13) ** 2
    seen = json.dumps(server.call("GET", f"/api/submissions/{sid}", tokens["instructor"]).body)
    page = server.call("GET", f"/api/submissions/{sid}/feedback", tokens["instructor"]).body
    for value in hidden:
        for text in (f"{value:.4f}", f"{value:.3g}"):
            assert text not in seen and text not in page, text
    assert "default_rng(7)" not in page and "HIDDEN" not in page


# the hourly limit ------------------------------------------------------------------------------------------------


def test_fresh_idempotency_keys_and_other_spellings_of_the_assignment_do_not_lift_the_hourly_limit(attack):
    course, server, tokens, _, _ = attack
    body = notebook_bytes(course)
    for n in range(PER_HOUR):
        assert server.call("POST", SUBMIT, tokens["kim"], body, Idempotency_Key=f"k{n}").status == 202
    assert server.call("POST", SUBMIT, tokens["kim"], body, Idempotency_Key="k-new").status == 429
    assert server.call("POST", SUBMIT, tokens["kim"], body, Idempotency_Key="k0").status == 200  # the retry
    for aid in ("t1", "T1%20", "T1%2F", "%54%31", "T1.", "./T1", "T1%0A", "%EF%BC%B41"):
        answer = server.call("POST", f"/api/assignments/{aid}/submissions", tokens["kim"], body)
        assert answer.status in (404, 429), (aid, answer.status, answer.body)
    session = sign_in(server, tokens["kim"])
    assert upload(server, session, body)[0] == 429  # the page counts the same
    for key in ("x" * 201, "bad\x01key"):
        status = raw_call(server, "POST", SUBMIT, body, {"Authorization": f"Bearer {tokens['kim']}",
                                                        "Idempotency-Key": key})[0]  # fmt: skip
        assert status in (400, 429)
    assert len(mine(server, tokens["kim"])) == PER_HOUR


def test_requests_racing_the_hourly_limit_make_no_more_than_the_limit(attack):
    course, server, tokens, _, store = attack
    body = notebook_bytes(course)
    head = (
        f"POST {SUBMIT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['racer']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sockets = []
    for _ in range(PER_HOUR + 3):
        raw = socket.create_connection(address(server), timeout=30)
        raw.sendall(head + body[:10])  # the headers and a little: the limit is checked, the body awaited
        sockets.append(raw)
    time.sleep(1.5)
    statuses = []
    for raw in sockets:
        raw.sendall(body[10:])
    for raw in sockets:
        statuses.append(int(raw.recv(64).split()[1]))
        raw.close()
    assert statuses.count(202) <= PER_HOUR and len(store.listed("racer")) <= PER_HOUR, statuses


def test_a_chunked_body_or_a_huge_header_is_bounded_and_answered_without_harm(attack):
    course, server, tokens, _, store = attack
    host, port = address(server)
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(
            f"POST {SUBMIT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['leo']}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        chunk = b"x" * 65536
        try:
            for _ in range(64):  # 4 MB offered, without a Content-Length
                raw.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except OSError:
            pass  # the server stopped reading: fine
        assert raw.recv(64).startswith(b"HTTP/1.1 413")
    # a declared small Content-Length with a chunked body: refused (or framed by one), never over the limit
    session = sign_in(server, tokens["leo"])
    data, kind = multipart({"form_key": form_key(session)}, {"notebook": ("T1.ipynb", b"x" * (3 * 2**20))})
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(
            f"POST /upload/T1 HTTP/1.1\r\nHost: x\r\nCookie: grader_session={session}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        try:
            raw.sendall(b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n")
        except OSError:
            pass
        answer = raw.recv(64)
        assert answer.split()[1] in (b"400", b"403", b"413"), answer
    # huge headers: a block of a megabyte is refused (or hung up on); the server stays up either way
    for headers in ({"X-Pad": "y" * 2**20}, {f"X-H{i}": "z" * 50 for i in range(20_000)}):
        try:
            status = raw_call(server, "GET", "/healthz", headers=headers)[0]
        except ConnectionError:  # the server hung up on it: refused too
            status = 0
        assert status in (0, 400, 413, 431), status
    assert server.call("GET", "/healthz").status == 200 and store.listed("leo") == []


def test_a_deeply_nested_json_body_is_refused_as_no_notebook(attack):
    course, server, tokens, _, store = attack
    deep = b'{"cells": [], "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    answer = server.call("POST", SUBMIT, tokens["max"], deep)
    assert server.call("GET", "/healthz").status == 200
    assert answer.status == 400, (answer.status, answer.body)


# forging the received time ---------------------------------------------------------------------------------------


def test_nothing_a_student_sends_changes_the_received_time(attack):
    course, server, tokens, _, _ = attack
    nb = nbformat.reads(notebook_bytes(course).decode(), as_version=4)
    nb.metadata["received"] = nb.metadata["timestamp"] = "2020-01-01T00:00:00Z"
    nb.metadata["nbgrader"] = {"timestamp": "2020-01-01 00:00:00 UTC"}
    before = utc_now()
    sent = submitted(
        server, tokens["dave"], nbformat.writes(nb).encode(), Date="Wed, 01 Jan 2020 00:00:00 GMT",
        X_Received="2020-01-01T00:00:00Z", X_Timestamp="1577836800", If_Unmodified_Since="Wed, 01 Jan 2020 00:00:00 GMT",
    )  # fmt: skip
    after = utc_now()
    assert before <= parse_stamp(sent["received"]) <= after
    server.wait_graded(tokens["dave"], sent["id"])
    stamp = (course.submission_folder("T1", "dave") / "timestamp.txt").read_text()
    assert stamp.startswith(str(before.year)) and "2020" not in stamp, stamp


# the pages -------------------------------------------------------------------------------------------------------

SCRIPTED = '<script>alert(1)</script><img src=x onerror=alert(2)><meta http-equiv="refresh" content="0;url=https://evil.example/">'


def test_html_in_a_notebook_an_assignment_name_or_a_student_id_is_shown_as_text(attack):
    course, server, tokens, _, _ = attack
    outputs = [nbformat.v4.new_output("display_data", data={"text/html": SCRIPTED, "text/plain": SCRIPTED})]
    extra = [
        nbformat.v4.new_markdown_cell(SCRIPTED),
        nbformat.v4.new_code_cell(f"print({SCRIPTED!r})", outputs=outputs),
    ]
    square = f"# {SCRIPTED}\nprint({SCRIPTED!r})\ndef square(x):\n    return x**2"
    sid = submitted(server, tokens["hank"], with_cells(course, extra, square=square))["id"]
    server.wait_graded(tokens["hank"], sid)
    boss = sign_in(server, tokens["instructor"])
    hank = sign_in(server, tokens["hank"])
    odd = sign_in(server, tokens[ODD_ID])
    pages = [
        server.call("GET", f"/api/submissions/{sid}/feedback", tokens["instructor"]),
        raw_call(server, "GET", f"/submissions/{sid}/feedback", headers=cookie_of(boss)),
        raw_call(server, "GET", f"/submissions/{sid}", headers=cookie_of(hank)),
        raw_call(server, "GET", "/", headers=cookie_of(boss)),
        raw_call(server, "GET", "/", headers=cookie_of(odd)),
        upload(server, hank, notebook_bytes(course), aid="%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
    ]
    for n, answer in enumerate(pages):
        text, headers = (answer.body, answer.headers) if n == 0 else (answer[2], answer[1])
        low = text.lower()
        assert (
            "<script" not in low
            and "<img src=x" not in low
            and 'http-equiv="refresh" content="0;url' not in low
        )
        assert "default-src 'none'" in headers["content-security-policy"], n
        assert headers["x-content-type-options"] == "nosniff"
    assert "eve&quot;&gt;&lt;script&gt;" in pages[4][2]


def test_a_sign_in_posted_from_another_site_is_refused(attack):
    course, server, tokens, _, _ = attack
    assert sign_in(server, tokens["oscar"], Origin="https://evil.example") is None
    # a form another site makes and posts: no Origin header (an older browser), and no sign-in cookie, which a
    # SameSite=Strict cookie never is on a post from elsewhere; its key cannot be known either
    form = urllib.parse.urlencode({"token": tokens["oscar"], "form_key": form_key("guess")}).encode()
    status, got, text = raw_call(
        server, "POST", "/signin", form, {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 403 and not any(c.startswith("grader_session=") for c in got["set-cookie-all"]), text
    assert sign_in(server, tokens["oscar"]) is not None  # through the page itself


def test_forms_posted_from_another_site_or_without_the_sessions_key_are_refused_and_cookies_are_guarded(
    attack,
):
    course, server, tokens, _, store = attack
    session = sign_in(server, tokens["nina"])
    body = notebook_bytes(course)
    evil = {"Origin": "https://evil.example"}
    for key in ("", "stale", form_key("another-session"), form_key(sign_in(server, tokens["oscar"]))):
        status, _, text = upload(server, session, body, key=key)
        assert status == 403 and "stale" in text, key
    data, kind = multipart({"form_key": form_key(session)}, {"notebook": ("T1.ipynb", body)})
    for origin in (
        "https://evil.example",
        "null",
        server.url + ".evil.example",
        server.url.replace("http:", "https:"),
    ):
        headers = {"Content-Type": kind, "Origin": origin, **cookie_of(session)}
        assert raw_call(server, "POST", "/upload/T1", data, headers)[0] == 403, origin
    form = {"Content-Type": "application/x-www-form-urlencoded", **cookie_of(session)}
    assert raw_call(server, "POST", "/signout", b"form_key=x", form)[0] == 403
    signed = f"form_key={form_key(session)}".encode()
    assert raw_call(server, "POST", "/signout", signed, {**form, **evil})[0] == 403
    assert raw_call(server, "GET", "/signout", headers=cookie_of(session))[0] == 405
    assert "Your submissions, nina" in raw_call(server, "GET", "/", headers=cookie_of(session))[2]
    assert store.listed("nina") == []
    # the cookie: HttpOnly, SameSite=Strict, the whole site; Secure behind a TLS proxy; a fresh id each sign-in
    for proto, secure in (("http", False), ("https", True)):
        forwarded = {"X-Forwarded-Proto": proto}
        _, page_headers, page = raw_call(server, "GET", "/", headers=forwarded)
        signin = next(c for c in page_headers["set-cookie-all"] if c.startswith("grader_signin="))
        key = re.search(r'name="form_key" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"token": tokens["nina"], "form_key": key}).encode()
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": signin.split(";")[0],
            **forwarded,
        }
        got = raw_call(server, "POST", "/signin", form, headers)[1]["set-cookie-all"]
        cookie = next(c for c in got if c.startswith("grader_session=")).lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie, cookie
        assert ("; secure" in cookie) == secure, cookie
        assert session.lower() not in cookie and tokens["nina"].lower() not in cookie
        assert "httponly" in signin.lower() and "samesite=strict" in signin.lower()
        assert ("; secure" in signin.lower()) == secure, signin


# what the grader records -----------------------------------------------------------------------------------------


def test_a_notebook_that_kills_its_kernel_or_fakes_the_checks_earns_nothing_and_closes_nothing(attack):
    course, server, tokens, _, store = attack
    crash = notebook_bytes(course, square="import os\nos._exit(1)")
    cheat = "import dlcourse.grading as g\ng.check = lambda *a, **k: None\n" + WRONG_SQUARE
    fake = (
        "import sys, types\nsys.modules['dlcourse.grading'] = types.SimpleNamespace(check=lambda *a, **k: None)\n"
        + WRONG_SQUARE
    )
    ids = {
        "crasher": submitted(server, tokens["crasher"], crash)["id"],
        "cheater": submitted(server, tokens["cheater"], notebook_bytes(course, square=cheat, scale=fake))[
            "id"
        ],
        "carol": submitted(server, tokens["carol"], b'{"cells": [1], "nbformat": 4}')["id"],
    }
    for who, sid in ids.items():
        shown = server.wait_graded(tokens[who], sid)
        assert shown["state"] == "graded" and shown["score"] == 0.0, (who, shown)
    assert (
        server.call("GET", "/api/assignments", tokens["carol"]).body["assignments"]["T1"]["state"] == "open"
    )
    for row in store.listed():
        assert row.state != "error" or row.score is None  # an error never has a score


def test_a_huge_valid_notebook_and_one_of_thousands_of_cells_are_graded_and_one_over_the_limit_is_refused(
    attack,
):
    course, server, tokens, _, store = attack
    padded = with_cells(course, [nbformat.v4.new_markdown_cell("x" * 900_000)])
    assert len(padded) < 2**20
    many = with_cells(course, [nbformat.v4.new_code_cell(f"_{i} = {i}") for i in range(3000)])
    for who, body in (("sam", padded), ("ivy", many)):
        start = time.monotonic()
        shown = server.wait_graded(tokens[who], submitted(server, tokens[who], body)["id"])
        assert shown["score"] == 100.0 and time.monotonic() - start < 180, who
    over = with_cells(course, [nbformat.v4.new_markdown_cell("x" * 1_100_000)])
    assert server.offered(SUBMIT, tokens["sam"], over).startswith(b"HTTP/1.1 413")


# stalling the queue (last: it holds the grader for the cell timeout) ---------------------------------------------


def test_a_sleeping_notebook_does_not_hold_another_students_submission_behind_it(attack):
    course, server, tokens, _, _ = attack
    sleeper = submitted(
        server, tokens["sleeper"], notebook_bytes(course, square="import time\ntime.sleep(10_000)")
    )["id"]
    deadline = time.monotonic() + 30
    while server.call("GET", f"/api/submissions/{sleeper}", tokens["sleeper"]).body["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1.0)  # its batch is under way
    start = time.monotonic()
    tinas = submitted(server, tokens["tina"], notebook_bytes(course))["id"]
    try:  # tina's run starts while the sleeping one still runs (how long hers takes is the machine's load)
        overlapped = None
        while overlapped is None and time.monotonic() - start < CELL_TIMEOUT + 30:
            sleeping = server.call("GET", f"/api/submissions/{sleeper}", tokens["sleeper"]).body["state"]
            if server.call("GET", f"/api/submissions/{tinas}", tokens["tina"]).body["state"] != "queued":
                overlapped = sleeping == "running"
            time.sleep(0.1)
        assert overlapped, "tina's submission waited for the sleeping one's timeout"
    finally:  # either way: the sleeping one ends at its timeout, graded with nothing for its part
        shown = server.wait_graded(tokens["sleeper"], sleeper, seconds=60)
        assert shown["state"] == "graded" and shown["parts"][0]["points"] == 0.0
        assert time.monotonic() - start < CELL_TIMEOUT + 30
        server.wait_graded(tokens["tina"], tinas, seconds=60)
