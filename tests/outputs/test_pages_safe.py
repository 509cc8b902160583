"""The pages an instructor opens run and load nothing a student wrote.

A written answer carries five payloads: a ``<script>``, an ``<img onerror=...>``, a ``javascript:`` link, a
remote image (a tracking pixel) and, from a code cell, a ``display(Javascript(...))`` output (with a
``display(HTML(...))`` image beside it). Each payload, if it ran, would set ``window.__pwned_<name>``; each
remote resource points at a tracker on loopback that records every request.

Offline: rendered with formgrader's own exporter, the raw notebook has every payload live (the attack is
real), the sanitised one none. In Chromium: formgrader, served with the course's Jupyter configuration, opens
a graded submission (its ``autograded/`` copy written by the grader) and one whose ``autograded/`` copy is
the raw notebook (as an older grader would have left it): nothing runs, nothing reaches the tracker, and
formgrader itself still works (its own scripts run, a manual score is saved). The feedback page holds no
payload live and, opened in Chromium, runs and loads nothing either.
"""

from __future__ import annotations

import http.server
import re
import shutil
import threading
import time
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from autograder.course import Course
from autograder.grading.record import Recorder
from autograder.intake.release import release
from autograder.intake.sanitize import sanitize_notebook
from autograder.result import Result, WrittenResult
from tests.fixtures.toy_course import make_course, meta, source_notebook

AID = "T1"
PROMPT = "**Written question (5 points).** What did your measurement show?"
ANSWER = """### BEGIN SOLUTION
**Rubric (5 points):**
- (5 points) says what the measurement showed

**Model answer:** It showed the sum depends on the order.
### END SOLUTION"""
PAYLOADS = ("script", "onerror", "javascript_link", "remote_image", "js_output", "html_output")


def written_answer(tracker: str) -> str:
    return f"""My measurement showed the sum depends on the order.

<script>window.__pwned_script = true; new Image().src = "{tracker}/script";</script>

<img src="x" onerror="window.__pwned_onerror = true; new Image().src = '{tracker}/onerror'">

[click-here](javascript:window.__pwned_javascript_link=true;new%20Image().src='{tracker}/javascript_link';void(0))

![pixel]({tracker}/remote_image.png)
"""


def output_cell(tracker: str) -> nbformat.NotebookNode:
    source = f"""from IPython.display import HTML, Javascript, display
display(Javascript("window.__pwned_js_output = true; new Image().src = '{tracker}/js_output';"))
display(HTML("<img src='{tracker}/html_output.png'>"))"""
    cell = new_code_cell(source)
    cell.outputs = [
        new_output(
            "display_data",
            data={
                "application/javascript": f"window.__pwned_js_output = true; new Image().src = '{tracker}/js_output';",
                "text/plain": "<IPython.core.display.Javascript object>",
            },
        ),
        new_output(
            "display_data",
            data={
                "text/html": f"<img src='{tracker}/html_output.png'>",
                "text/plain": "<IPython.core.display.HTML object>",
            },
        ),
    ]
    return cell


def source_with_written_question() -> nbformat.NotebookNode:
    nb = source_notebook()
    nb.cells += [
        new_markdown_cell(PROMPT, metadata=meta("written_prompt", locked=True)),
        new_markdown_cell(ANSWER, metadata=meta("written_order", grade=True, solution=True, points=5)),
    ]
    return nb


def hostile_run(course: Course, tracker: str) -> nbformat.NotebookNode:
    """The notebook as a grader that did not sanitise would leave it in ``autograded/``: the student's
    written answer as it was handed in, and a code cell's HTML and JavaScript outputs."""
    nb = nbformat.read(str(course.source_notebook(AID)), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "written_order":
            cell.source = written_answer(tracker)
    nb.cells.append(output_cell(tracker))
    return nb


def live_payloads(page: str, tracker: str) -> set[str]:
    """Which payloads a browser would run or load from this HTML (parsed as a browser parses it)."""
    soup = BeautifulSoup(page, "html.parser")
    live = set()
    for script in soup.find_all("script"):
        for name in PAYLOADS:
            if f"__pwned_{name}" in (script.string or ""):
                live.add(name)
    for element in soup.find_all(True):
        for attribute, value in element.attrs.items():
            value = " ".join(value) if isinstance(value, list) else str(value)
            if attribute.lower().startswith("on") and "__pwned_" in value:
                live.add("onerror")
            if attribute.lower() in ("href", "src", "srcset", "action", "formaction", "data", "poster"):
                squeezed = re.sub(r"[\s\x00-\x1f]", "", value).lower()
                if squeezed.startswith("javascript:"):
                    live.add("javascript_link")
                if tracker in value and attribute.lower() != "href":
                    live.add("remote_image" if "remote_image" in value else "html_output")
    return live


def formgrader_html(nb: nbformat.NotebookNode) -> str:
    """The notebook as formgrader renders it: its exporter, template and the course's configuration."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config, PyFileConfigLoader

    config = Config()
    config.merge(PyFileConfigLoader("nbgrader_config.py", path=str(Path(__file__).parents[2])).load_config())
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {
        "assignment_id": AID, "notebook_id": AID, "submission_id": "x", "index": 0, "total": 1,
        "base_url": "", "student": "eve", "last_name": "", "first_name": "", "notebook_path": "",
    }  # fmt: skip
    return HTMLExporter(config=config).from_notebook_node(nb, resources=resources)[0]


TRACKER_OFFLINE = "http://127.0.0.1:9/PWN"


def test_the_attack_is_real_the_raw_notebook_has_every_payload_live_in_formgrader(tmp_path):
    course = Course(root=make_course(tmp_path / "course", notebook=source_with_written_question()))
    page = formgrader_html(hostile_run(course, TRACKER_OFFLINE))
    # nbconvert's own sanitize_html (in the course's config) catches the outputs, not the written answer
    assert {"script", "onerror", "javascript_link", "remote_image"} <= live_payloads(page, TRACKER_OFFLINE)


def test_the_sanitised_notebook_has_no_payload_live_and_still_shows_the_answer(tmp_path):
    course = Course(root=make_course(tmp_path / "course", notebook=source_with_written_question()))
    safe = sanitize_notebook(hostile_run(course, TRACKER_OFFLINE))
    nbformat.validate(safe)
    page = formgrader_html(safe)
    assert live_payloads(page, TRACKER_OFFLINE) == set()
    text = BeautifulSoup(page, "html.parser").get_text()
    assert "My measurement showed the sum depends on the order." in text
    assert "<script>window.__pwned_script" in text  # shown as text: evidence for the instructor
    assert "[application/javascript output, shown as text]" in text
    assert "[text/html output, shown as text]" in text
    # and in JupyterLab's own renderer: outputs are only text and images
    outputs = [o for c in safe.cells if c.cell_type == "code" for o in c.outputs]
    assert all(set(o.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"} for o in outputs)


# ------------------------------------------------------------------------------------------ in Chromium


class Tracker(http.server.ThreadingHTTPServer):
    """Records the path of every request that reaches it."""

    def __init__(self):
        self.hits: list[str] = []
        tracker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                tracker.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def tracker():
    server = Tracker()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def chromium_path():
    from tests.jupyter_server import find_chromium

    pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set DLCOURSE_CHROMIUM to one)")
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory, tracker):
    """A course in which eve's written answer and outputs are the raw payloads in ``autograded/`` (what a
    grader that does not sanitise leaves), and mallory's went through the grader."""
    from autograder.grading.batch import grade
    from autograder.outputs.feedback import write_feedback
    from autograder.settings import Settings

    root = make_course(tmp_path_factory.mktemp("pages") / "course", notebook=source_with_written_question())
    shutil.copy(Path(__file__).parents[2] / "jupyter_server_config.py", root)
    course = Course(root=root, db="sqlite:///" + str(root / "gradebook.db"))
    release(course, [AID])

    mallory = nbformat.read(str(course.release_notebook(AID)), as_version=4)
    for cell in mallory.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "written_order":
            cell.source = written_answer(tracker.url)
    mallory.cells.append(new_code_cell(output_cell(tracker.url).source))
    path = course.submission(AID, "mallory")
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(mallory, str(path))
    [result] = grade(course, AID, Settings(workers=1), students=["mallory"])
    assert not result.is_error, result.reason

    eve = course.executed(AID, "eve")
    eve.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(hostile_run(course, tracker.url), str(eve))
    with Recorder(course.db_url) as recorder:
        recorder.record(
            AID, Result("eve", AID, 100, 0, "graded", "", written=[WrittenResult("written_order", 5)])
        )
    write_feedback(course, AID)
    return course


@pytest.fixture(scope="module")
def lab(graded, tmp_path_factory, chromium_path):
    from tests.jupyter_server import JupyterLab

    with JupyterLab(graded.root, tmp_path_factory.mktemp("jupyter")) as server:
        yield server


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    from tests.jupyter_server import CHROMIUM_ARGS

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def pwned(page) -> list[str]:
    return page.evaluate("() => Object.keys(window).filter(k => k.startsWith('__pwned'))")


def submission_notebook_id(course: Course, sid: str) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        return gb.find_submission_notebook(AID, AID, sid).id


def test_the_grader_writes_autograded_notebooks_with_nothing_live(graded, tracker):
    executed = nbformat.read(str(graded.executed(AID, "mallory")), as_version=4)
    assert live_payloads(formgrader_html(executed), tracker.url) == set()
    assert "__pwned_script" in nbformat.writes(executed)  # the answer is there, as text


@pytest.mark.slow
def test_nbgraders_own_autograde_writes_autograded_notebooks_with_nothing_live(graded, tracker):
    from autograder.intake.release import run_nbgrader

    submitted = nbformat.read(str(graded.submission(AID, "mallory")), as_version=4)
    path = graded.submission(AID, "nbg")
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(submitted, str(path))
    run_nbgrader(graded, "autograde", AID, "--student=nbg", "--log-level=WARN")  # the reference grade() built
    executed = nbformat.read(str(graded.executed(AID, "nbg")), as_version=4)
    assert "__pwned_js_output" in nbformat.writes(executed)  # the code cell ran: its outputs are there
    assert live_payloads(formgrader_html(executed), tracker.url) == set()


@pytest.mark.browser
@pytest.mark.parametrize("sid", ["mallory", "eve"])
def test_formgrader_opens_a_hostile_written_answer_and_runs_and_loads_nothing(
    graded, lab, browser, tracker, sid
):
    # the token on every request (formgrader's own API calls too), as a logged-in instructor's cookie would
    headers = {"Authorization": f"token {lab.token}"}
    context = browser.new_context(viewport={"width": 1400, "height": 900}, extra_http_headers=headers)
    context.set_default_timeout(30_000)
    page = context.new_page()
    dialogs, blocked = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    response = page.goto(lab.url(f"formgrader/submissions/{submission_notebook_id(graded, sid)}/"))
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.get_by_text("My measurement showed the sum depends on the order.").first.wait_for()
    links = page.locator("a", has_text="click-here")
    if links.count():
        links.first.click()
    time.sleep(2)  # onerror handlers and image loads happen after the page loaded
    assert pwned(page) == [] and dialogs == []
    assert tracker.hits == []
    # formgrader itself still works under the policy: its own inline script ran, and a score is saved
    assert page.evaluate("() => typeof submission_id") == "string"
    page.locator(".nbgrader_cell", has_text="My measurement").locator("button.full-credit").click()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not manual_score(graded, sid):
        time.sleep(0.3)
    assert manual_score(graded, sid) == 5, blocked
    context.close()


def manual_score(course: Course, sid: str):
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        return gb.find_grade("written_order", AID, AID, sid).manual_score


@pytest.mark.browser
def test_jupyterlab_shows_the_raw_autograded_notebook_and_runs_and_loads_nothing(
    graded, lab, browser, tracker
):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(lab.url(f"lab/tree/autograded/eve/{AID}/{AID}.ipynb?reset"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    page.locator(".jp-RenderedMarkdown", has_text="My measurement showed").first.wait_for(timeout=30_000)
    time.sleep(2)
    assert pwned(page) == [] and tracker.hits == []
    context.close()


@pytest.mark.browser
def test_the_feedback_page_holds_no_payload_live_and_runs_nothing(graded, browser, tracker):
    feedback = graded.feedback_page(AID, "mallory")
    text = feedback.read_text()
    assert "__pwned_script" in text  # the student's own answer is shown, escaped
    assert live_payloads(text, tracker.url) == set()
    page = browser.new_page()
    page.goto(feedback.as_uri())
    time.sleep(1)
    assert pwned(page) == [] and tracker.hits == []
    page.close()


# ----------------------------------------------------------------------------- the policy, without a browser


def transformed(path: str, page: bytes):
    from types import SimpleNamespace

    from tornado.httputil import HTTPHeaders

    from autograder.outputs import jupyter_csp

    headers = HTTPHeaders(
        {"Content-Type": "text/html; charset=UTF-8", "Content-Security-Policy": jupyter_csp.policy()}
    )
    headers["Content-Length"] = str(len(page))
    transform = jupyter_csp.StrictPolicy(SimpleNamespace(path=path))
    return transform.transform_first_chunk(200, headers, page, True)[1:]


def test_only_the_pages_own_inline_scripts_are_allowed_and_mathjax_is_replaced():
    from autograder.outputs.jupyter_csp import MATHJAX_CDN, sha256

    head, body = b"var submission_id = 'x';", b"window.__pwned_script = true;"
    page = (
        b'<html><head><script src="' + MATHJAX_CDN + b'"></script><script type="text/javascript">' + head
        + b'</script><script type="application/json">{}</script></head><body><script>' + body + b"</script></body>"
    )  # fmt: skip
    headers, chunk = transformed("/formgrader/submissions/abc/", page)
    policy = headers["Content-Security-Policy"]
    assert f"'sha256-{sha256(head)}'" in policy and sha256(body) not in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "img-src 'self' data: blob:" in policy and "object-src 'none'" in policy
    assert MATHJAX_CDN not in chunk and b'src="/dlcourse/mathjax-stand-in.js"' in chunk
    assert headers["Content-Length"] == str(len(chunk))
    # JupyterLab's own page: its inline scripts are its own; any other page: none is
    assert sha256(body) in transformed("/lab/tree/x.ipynb", page)[0]["Content-Security-Policy"]
    assert "sha256-" not in transformed("/nbconvert/html/x.ipynb", page)[0]["Content-Security-Policy"]


def test_a_cell_whose_outputs_are_not_nbformat_is_shown_without_them_and_the_others_keep_theirs():
    """The executed notebook checks its cells all at once, and each alone only where that fails: a cell with
    an output nbformat refuses gets a note instead; an id two cells share is no reason to drop outputs."""
    import warnings

    from autograder.grading.pipeline import executed_notebook
    from autograder.intake.sanitize import sanitize_notebook

    cells = [new_code_cell("print(1)"), new_markdown_cell("*text*"), new_code_cell("2"), new_code_cell("3")]
    nb = nbformat.v4.new_notebook(cells=cells)
    cells[3].id = cells[0].id  # (a notebook edited by hand may repeat one)
    outputs = {
        0: [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
        2: [{"output_type": "stream", "name": "stdout", "text": 5}],  # text must be a string
        3: [
            {
                "output_type": "execute_result",
                "data": {"text/plain": "3"},
                "metadata": {},
                "execution_count": 3,
            }
        ],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbformat would warn about (and repair) the repeated id
        executed = executed_notebook(nb, outputs, frozenset())
        safe = sanitize_notebook(executed)
    assert executed.cells[0].outputs[0].text == "1\n"
    assert "not valid notebook outputs" in executed.cells[2].outputs[0].text
    assert executed.cells[3].outputs[0].data == {"text/plain": "3"}
    assert [c.id for c in safe.cells] == [c.id for c in cells]
    assert [len(c.get("outputs", [])) for c in safe.cells] == [1, 0, 1, 1]


def test_a_sanitised_cell_that_nbformat_refuses_is_not_written():
    """The sanitised copy is checked once, whole, in place of a check of each node as it was made."""
    from autograder.intake import sanitize

    nb = nbformat.v4.new_notebook(cells=[new_code_cell("1")])
    real = sanitize.safe_metadata
    try:
        sanitize.safe_metadata = lambda metadata: {"tags": "not a list"}
        with pytest.raises(nbformat.ValidationError):
            sanitize.sanitize_notebook(nb)
    finally:
        sanitize.safe_metadata = real
