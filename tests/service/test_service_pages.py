"""The service's pages in headless Chromium (Playwright): a student signs in with a token, uploads a notebook and
reads what the hidden tests found; the instructor's live page shows it; a form from another site, a stale form and
another student's submission are refused. Each step leaves a screenshot in tests/artifacts/service/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures.service import WRONG_SQUARE, notebook_bytes
from tests.jupyter_server import CHROMIUM_ARGS, find_chromium

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "service"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright Python package is not installed"
    )
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set DLCOURSE_CHROMIUM to one)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def sign_in(browser, url: str, token: str):
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "/")
    page.fill("input[name=token]", token)
    # the click posts the form: the page is read once the one it leads to has loaded (read at once, a loaded
    # machine showed it empty, mid-navigation)
    with page.expect_navigation(timeout=30_000):
        page.click("button:has-text('Sign in')")
    return context, page


def test_a_student_hands_in_on_the_page_and_the_instructor_sees_it_live(served, browser, tmp_path):
    course, server, tokens, _ = served
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    upload = tmp_path / "T1.ipynb"
    upload.write_bytes(notebook_bytes(course, square=WRONG_SQUARE))
    context, page = sign_in(browser, server.url, tokens["pat"])
    assert "Your submissions, pat" in page.content()
    cookie = next(c for c in context.cookies() if c["name"] == "grader_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and tokens["pat"] not in cookie["value"]
    page.set_input_files("input[name=notebook]", str(upload))
    page.click("button:has-text('Hand in')")
    page.wait_for_selector("text=60 / 100", timeout=120_000)  # the page reloads itself until it is graded
    page.screenshot(path=str(ARTIFACTS / "student-result.png"), full_page=True)
    text = page.inner_text("body")
    assert "t1.square.random" in text and "test_scale" in text
    assert tokens["pat"] not in page.url and "token" not in page.url
    own = page.url
    page.goto(server.url + "/")
    assert re.search(r"T1\s+\S+\s+60 / 100", page.inner_text("body"))
    context.close()

    context, page = sign_in(browser, server.url, tokens["instructor"])
    assert "The grading service: live" in page.content()
    row = page.inner_text("table")
    assert re.search(r"pat\s+T1\s+graded\s+60", row), row
    page.screenshot(path=str(ARTIFACTS / "instructor-live.png"), full_page=True)
    page.click("tr:has-text('pat') >> text=feedback")
    assert "pat" in page.inner_text(
        "body"
    )  # the grader's feedback page, the instructor sees it before the deadline
    context.close()

    context, page = sign_in(browser, server.url, tokens["alice"])
    page.goto(own)  # pat's submission, from alice's session
    assert "no such submission" in page.inner_text("body")
    context.close()


def test_a_form_from_another_site_or_without_the_sessions_key_is_refused(served, browser):
    course, server, tokens, _ = served
    context, page = sign_in(browser, server.url, tokens["alice"])
    request = context.request
    for headers, data in [
        ({"Origin": "https://evil.example"}, {"form_key": "x"}),
        ({}, {"form_key": "not-the-key"}),
    ]:
        answer = request.post(server.url + "/signout", headers=headers, form=data)
        assert answer.status == 403 and "Not signed out" in answer.text(), answer.text()
    answer = request.post(
        server.url + "/upload/T1",
        multipart={"form_key": "stale", "notebook": {"name": "T1.ipynb", "mimeType": "application/json",
                                                     "buffer": notebook_bytes(course)}},
    )  # fmt: skip
    assert answer.status == 403 and "stale" in answer.text()
    assert server.call("GET", "/api/submissions", tokens["alice"]).body["submissions"] == []
    page.click("button:has-text('Sign out')")  # the page's own form carries the key
    # the click posts the form and the browser navigates: read the page once the signed-out one has loaded (read at
    # once, it was seen empty, mid-navigation)
    page.wait_for_selector("text=Sign in", timeout=30_000)
    page.goto(server.url + "/")
    assert "Sign in" in page.content()
    context.close()
