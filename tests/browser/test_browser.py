"""The course as people use it in a browser: JupyterLab in headless Chromium, driven by Playwright.

A self-learner runs lecture 6 top to bottom and plays with its learning-rate widget; a student fills in
an answer in assignment 1, saves, and hands the file in to the autograder; an instructor opens
formgrader, and reads the class report of a graded toy assignment. Each step leaves a screenshot in
tests/artifacts/browser/ for a person to look at.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from autograder.course import Course, nbgrader_meta
from autograder.grading.batch import grade
from autograder.intake.collect import collect
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.settings import Settings
from tests.jupyter_server import CHROMIUM_ARGS, JupyterLab, copy_course, find_chromium

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
LECTURE = "lectures/06_optim.ipynb"
KERNEL_IDLE = "Python 3 (ipykernel) | Idle"

# What a student types into assignment 1's ReLU cell: both functions of part 2, graded by two test cells.
RELU_ANSWER = """\
def relu_forward(x):
    return np.maximum(x, 0), x


def relu_backward(dout, cache):
    return dout * (cache > 0)"""
RELU_TESTS = {"test_relu_forward", "test_relu_backward"}


@pytest.fixture(scope="module")
def chromium_path() -> str:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright Python package is not installed"
    )
    path = find_chromium()
    if path is None:  # a browser that `playwright install chromium` downloaded, on a developer's machine
        with sync_api.sync_playwright() as p:
            path = p.chromium.executable_path if Path(p.chromium.executable_path).is_file() else None
    if path is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set DLCOURSE_CHROMIUM to one)")
    return path


@pytest.fixture(scope="module")
def course(tmp_path_factory, chromium_path) -> Course:
    """A copy of the course with assignment 1 released into it (which also creates its gradebook)."""
    course = Course(root=copy_course(tmp_path_factory.mktemp("course")))
    release(course, ["A1"])
    return course


@pytest.fixture(scope="module")
def lab(course, tmp_path_factory):
    with JupyterLab(course.root, tmp_path_factory.mktemp("jupyter")) as server:
        yield server


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # only this run's screenshots
    ARTIFACTS.mkdir(parents=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


def shot(target, name: str) -> None:
    """Save a screenshot of a page, or of one element on it (a locator)."""
    target.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def open_notebook(page, lab: JupyterLab, path: str) -> None:
    """Open a notebook in JupyterLab (a fresh workspace) and wait until its kernel is idle."""
    page.goto(lab.url(f"lab/tree/{path}?reset"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    page.get_by_text(KERNEL_IDLE).wait_for(timeout=60_000)


def run_all_cells(page, timeout: float = 150) -> None:
    """Run > Run All Cells from the menu bar, then wait until every code cell has run (or one failed)."""
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
    prompts_js = (
        "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent)"
    )
    deadline, quiet = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        prompts = page.evaluate(prompts_js)
        if prompts and all(p.strip().strip("[]:").isdigit() for p in prompts):
            return
        busy = any("*" in p for p in prompts) or not page.get_by_text(KERNEL_IDLE).is_visible()
        quiet = 0 if busy else quiet + 1
        if quiet >= 6:  # idle for 3 s with cells left unrun: a cell raised and Run All stopped there
            errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
            detail = "\n".join(errors.all_inner_texts())[-3000:]
            pytest.fail(f"Run All Cells stopped before the end; prompts {prompts}\n{detail}")
        time.sleep(0.5)
    pytest.fail(f"Run All Cells did not finish within {timeout:.0f} s")


def wait_for_new_image(image, before: str, timeout: float = 60) -> str:
    """The widget's output image once its source differs from ``before``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        src = image.get_attribute("src", timeout=5_000)
        if src and src != before:
            return src
        time.sleep(0.25)
    pytest.fail(f"the widget's plot did not change within {timeout:.0f} s of moving the control")


def test_lecture_runs_and_its_widget_redraws_the_plot(lab, page):
    open_notebook(page, lab, LECTURE)
    shot(page, "06_optim-1-opened")
    run_all_cells(page)

    # Plots: PNG images in output areas, decoded by the browser (not a broken image).
    plots = page.locator(".jp-Cell-outputArea .jp-RenderedImage img")
    assert plots.count() >= 2, "expected the loss plot and the widget's plot"
    sizes = plots.evaluate_all("imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert all(w > 100 and h > 100 for w, h in sizes), sizes

    # The ipywidgets control rendered as a widget (not its static PNG fallback): a slider and a menu.
    control = page.locator(".jp-Cell-outputArea .jupyter-widgets.widget-vbox").first
    slider = control.locator(".widget-hslider [role=slider]")
    readout = control.locator(".widget-hslider .widget-readout")
    menu = control.locator(".widget-dropdown select")
    image = control.locator(".widget-output img")
    for part in (slider, menu, image):
        part.wait_for(state="visible")
    shot(page, "06_optim-2-ran-all")
    shot(control, "06_optim-3-widget")
    start_lr, start_png = readout.inner_text(), image.get_attribute("src")
    assert start_png.startswith("data:image/png;base64,")

    # Move the slider one notch with the keyboard: the kernel retrains and the picture changes.
    slider.focus()
    page.keyboard.press("ArrowRight")
    after_slider = wait_for_new_image(image, start_png)
    assert readout.inner_text() != start_lr
    shot(control, "06_optim-4-widget-slider-moved")

    # Pick another optimizer from the menu: the picture changes again.
    values = menu.locator("option").evaluate_all("options => options.map(o => o.value)")
    other = next(v for v in values if v != menu.input_value())
    menu.select_option(other)
    wait_for_new_image(image, after_slider)
    assert menu.input_value() == other
    shot(control, "06_optim-5-widget-optimizer-changed")


def type_like_a_person(page, code: str) -> None:
    """Type ``code`` line by line into the focused editor, which indents each new line by itself."""
    for number, line in enumerate(code.splitlines()):
        if number:
            page.keyboard.press("Enter")
            if line.strip():
                page.keyboard.press("Shift+Home")  # select the editor's automatic indentation ...
        if line.strip():
            page.keyboard.type(line)  # ... and replace it with the line as written


def graded_cells(nb: dict) -> list[tuple[str, dict]]:
    return [(nbgrader_meta(c).get("grade_id"), nbgrader_meta(c)) for c in nb["cells"] if nbgrader_meta(c)]


def test_student_fills_an_answer_saves_and_the_autograder_grades_it(lab, course, page, tmp_path):
    notebook = course.release_notebook("A1")
    released = json.loads(notebook.read_text(encoding="utf-8"))
    open_notebook(page, lab, "assignments/A1/A1.ipynb")

    cell = page.locator(".jp-CodeCell", has_text="def relu_forward(").filter(
        has_text="raise NotImplementedError()"
    )
    assert cell.count() == 1
    editor = cell.locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+a")
    type_like_a_person(page, RELU_ANSWER)
    shot(page, "A1-1-answer-typed")
    page.keyboard.press("Control+s")
    page.locator(".jp-mod-current.jp-mod-dirty").wait_for(state="detached")
    shot(page, "A1-2-saved")

    saved = json.loads(notebook.read_text(encoding="utf-8"))
    answer = [c for c in saved["cells"] if nbgrader_meta(c).get("grade_id") == "relu"]
    assert "".join(answer[0]["source"]).rstrip() == RELU_ANSWER
    # Every nbgrader cell kept its metadata (ids, points, checksums, locks), in the same order.
    assert graded_cells(saved) == graded_cells(released)
    assert [c.get("id") for c in saved["cells"]] == [c.get("id") for c in released["cells"]]
    changed = [
        nbgrader_meta(new).get("grade_id")
        for new, old in zip(saved["cells"], released["cells"])
        if new != old
    ]
    assert changed == ["relu"], "only the answer cell differs from the release"

    # Hand the saved file in, as an instructor would: collect a folder of <student>.ipynb files, grade it.
    handin = tmp_path / "handin"
    handin.mkdir()
    shutil.copy(notebook, handin / "student1.ipynb")
    assert set(collect(course, "A1", handin).students) == {"student1"}
    [result] = grade(course, "A1", Settings(workers=1))
    points = {c.grade_id: (c.passed, c.points, c.max_points) for c in result.cells}
    assert RELU_TESTS < set(points)
    for grade_id, (passed, got, worth) in points.items():
        if grade_id in RELU_TESTS:
            assert passed and got == worth > 0, (grade_id, points[grade_id])
        else:
            assert not passed and got == 0, (grade_id, points[grade_id])
    assert result.score == sum(points[g][2] for g in RELU_TESTS)
    assert result.status == "graded", result.reason


def test_instructor_sees_the_assignments_in_formgrader(lab, course, page):
    from playwright.sync_api import expect

    page.goto(lab.url("formgrader"))
    page.get_by_role("heading", name="Manage Assignments").wait_for()
    rows = page.locator("#main-table tr")
    expect(rows.locator("td.name")).to_have_text(course.assignments())  # filled in by the page's script
    # A1 was released into assignments/: formgrader links its student version for a preview.
    assert rows.filter(has_text="A1").locator("td.preview a").get_attribute("href").endswith("assignments/A1")
    assert page.locator("#warning-exchange").count() == 0, "formgrader says the exchange is not usable"
    shot(page, "formgrader-1-assignments")


def test_instructor_reads_the_class_report_and_follows_a_feedback_link(toy, page):
    from playwright.sync_api import expect

    from autograder.intake.samples import samples
    from autograder.outputs.feedback import write_feedback
    from autograder.outputs.report import page_path, write_report
    from tests.fixtures.toy_course import submit

    # bea's and ben's scale pass the public 1-D case and fail the hidden 2-D one; the cheater is flagged
    ben = filled(toy, "T1")
    for cell in ben.cells:
        if nbgrader_meta(cell).get("grade_id") == "scale":
            cell.source = cell.source.replace("return x * factor", "return x * factor if x.ndim == 1 else x")
    submit(toy, "ada", filled(toy, "T1"))
    submit(toy, "bea", ben)
    submit(toy, "ben", ben)
    submit(toy, "cheat", samples(toy, "T1")["cheater"])
    results = {r.student_id: r for r in grade(toy, "T1", Settings(workers=2), force=True)}
    statuses = {sid: r.status for sid, r in results.items()}
    assert statuses == {"ada": "graded", "bea": "graded", "ben": "graded", "cheat": "flagged"}
    write_feedback(toy, "T1")
    write_report(toy, "T1", toy.root / "reports")

    page.goto(page_path(toy.root / "reports", "T1").resolve().as_uri())
    expect(page.get_by_role("heading", name="T1: class report")).to_be_visible()
    histogram = page.get_by_alt_text("histogram of scores")
    assert histogram.evaluate("img => img.naturalWidth") > 100
    scale = page.locator("tr", has_text="test_scale").first
    # of its three failures, two are the hidden case (bea, ben), shown with the message they got
    message = results["ben"].cells[1].message
    assert message.startswith("t1.scale.random:")
    expect(scale).to_contain_text("t1.scale.random (hidden): 2 of 3 failures")
    expect(scale).to_contain_text(message)
    flagged = page.locator("li", has_text="cheat")
    expect(flagged).to_contain_text("tamper")
    shot(page, "report-1-class-report")

    page.locator("tr", has_text="ben").get_by_role("link", name="feedback").click()
    expect(page.locator("p", has_text="Student:")).to_contain_text("Student: ben")
    expect(page.locator("tr", has_text="test_scale")).to_contain_text("t1.scale.random")
    shot(page, "report-2-feedback-of-ben")


@pytest.fixture
def plain_asserts(tmp_path, chromium_path):
    """An nbgrader course of plain asserts (tests/fixtures/plain_asserts.py), graded by nbgrader and by this
    autograder, with both feedback pages written (once a run: tests/outputs/test_feedback_pages.py reads it too)."""
    from tests.fixtures.plain_asserts import graded

    root, plain, _ = graded(tmp_path)
    return root, plain


def test_student_reads_where_a_plain_assert_failed_as_nbgrader_shows_it(plain_asserts, page):
    """The student's page in Chromium: the notebook's own score, the failing public line that nbgrader's own
    feedback points at, the hidden check's number and message (never its code), the kernel's rule once."""
    from playwright.sync_api import expect

    root, plain = plain_asserts
    page.goto((plain / "feedback" / "public" / "ps1" / "problem1.html").resolve().as_uri())
    theirs = page.locator("body").inner_text()
    line = next(t for t in theirs.splitlines() if t.lstrip().startswith("---->"))
    number, code = line.split("---->", 1)[1].split(None, 1)
    page.goto((root / "feedback" / "public" / "ps1" / "problem1.html").resolve().as_uri())
    row = page.locator("tr", has_text="correct_squares").first
    expect(row).to_contain_text("\u2717 failed")
    expect(row).to_contain_text(f"Failed at line {number} of the test:")
    expect(row.locator("pre")).to_have_text(code.strip())
    expect(page.locator("tr", has_text="squares_invalid_input")).to_contain_text("\u2713 passed")
    expect(page.locator("p.kernel")).to_have_count(1)
    expect(page.locator("h1")).to_have_text(re.compile(r"^ps1, problem1\.ipynb: [\d.]+ / 10$"))
    shot(page, "feedback-1-public-assert")

    page.goto((root / "feedback" / "message" / "ps1" / "problem1.html").resolve().as_uri())
    row = page.locator("tr", has_text="correct_squares").first
    expect(row).to_contain_text("hidden check 1 of 2")
    expect(row).to_contain_text("squares(3) is not [1, 4, 9]")
    assert "squares(4)" not in page.locator("body").inner_text()
    shot(page, "feedback-2-hidden-assert")
    page.goto((root / "feedback" / "message" / "ps1" / "problem2.html").resolve().as_uri())
    expect(page.locator("h1")).to_have_text("ps1, problem2.ipynb: 0 / 3")
    expect(page.get_by_text("None in this notebook.")).to_be_visible()
