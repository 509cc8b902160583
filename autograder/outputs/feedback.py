"""One HTML page per student and notebook with that notebook's own score, its tests' names, points, marks and
messages, the student's own code and output, and the lines of that code the grader flagged for review, with
why. nbgrader's own feedback shows hidden tests, so this page is built from the recorded results instead:
hidden test code never appears. For a test cell of plain asserts (decided in the kernel, as nbgrader
decides it) the page shows where it failed: the failing line of the public tests, read from the source at
the line the traceback names, or for a hidden test only which of its checks failed; with the message the
assert gave (withheld where it spells out a hidden test). Written
answers are graded by hand: the page says which await manual grading and shows the points and comments
given so far (read from the gradebook when the page is written, so writing it again after manual grading
shows them)."""

from __future__ import annotations

import ast
import functools
import html
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course import Course, is_graded_test, is_solution, nbgrader_meta
from autograder.intake.late import Late
from autograder.intake.sanitize import PAGE_CSP_META
from autograder.outputs.gradesheet import gradesheet
from autograder.result import CellResult, Result, shorten

STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;vertical-align:top}
.pass{color:#0a7d20}.fail{color:#b00020}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
td pre{margin:.3rem 0}.note{background:#fff8e1;padding:.5rem;border-left:4px solid #f0b400}
"""
PASSED = '<span class="pass">\u2713 passed</span>'
FAILED = '<span class="fail">\u2717 failed</span>'
# Said once per page, above the tests, where the page has tests decided in the student's kernel: the rule in
# the student's words (the instructor's account of it is the class report's).
KERNEL_SENTENCE = {
    "kernel": "These tests are decided in the kernel that ran your notebook, as nbgrader grades them: a test "
    "passes when its cell runs to the end without an error.",
    "kernel-checks": "Tests marked \u2020 are decided in the kernel that ran your notebook: their checks count as "
    "your notebook reported them.",
}
SCORE_ALONE = (
    "The rest of this page (each test, your answers and their output) could not be made: the grader failed to "
    "make it, not your notebook. Your instructor has been told."
)
MESSAGE_CHARS = 300  # of an error's message as the student's kernel gave it
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class WhereFailed:
    """Where a test cell of plain asserts stopped, as a student may read it: the public line that failed
    (``code``, from the source, at the line the traceback names) or, in the hidden tests, only which of
    their checks it was (``hidden``: its number, ``hidden_of``: how many), and the error it raised."""

    line: int | None
    code: str = ""
    hidden: int | None = None
    hidden_of: int = 0
    error: str = ""


def _run_notebook(course: Course, aid: str, sid: str, nb: str | None) -> nbformat.NotebookNode | None:
    """The notebook as the grader ran it (None where it cannot be read)."""
    try:
        return nbformat.read(str(course.executed(aid, sid, nb)), as_version=4)
    except Exception:  # noqa: BLE001 (not run, or not kept: the page says what it can without it)
        return None


def optional_checks(source: nbformat.NotebookNode) -> dict[str, list[str]]:
    """{grade_id of an optional answer (``metadata.dlcourse.optional`` in the source): the grade_ids of the
    read-only code cells after it, up to the next Markdown, answer or test cell} -- the cells that check and time
    a part worth no points (A8's Triton kernel), whose output is all a student gets back for it. Read from the
    source, never from the hand-in: a test cell's output is never among them."""
    checks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for cell in source.cells:
        meta = nbgrader_meta(cell)
        if is_solution(cell) and cell.metadata.get("dlcourse", {}).get("optional"):
            current = checks.setdefault(str(meta.get("grade_id")), [])
        elif (
            cell.cell_type == "code"
            and meta.get("locked")
            and not is_graded_test(cell)
            and current is not None
        ):
            current.append(str(meta.get("grade_id")))
        else:
            current = None
    return checks


def _text(cell) -> str:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            texts.append(f"{out.get('ename')}: {out.get('evalue')}")
        elif "text/plain" in out.get("data", {}):
            texts.append(out["data"]["text/plain"])
    return "".join(texts)


def _answers(
    run: nbformat.NotebookNode | None, checks: dict[str, list[str]] | None = None
) -> list[tuple[str, str, str]]:
    """(grade_id, the student's code or written answer, its text output) for each answer cell of the run
    notebook; an optional answer's output is followed by that of the cells that check it (``checks``, from
    :func:`optional_checks`)."""
    cells = run.cells if run is not None else []
    by_id = {nbgrader_meta(c).get("grade_id"): c for c in cells if nbgrader_meta(c).get("grade_id")}
    answers = []
    for cell in cells:
        if is_solution(cell):
            gid = nbgrader_meta(cell).get("grade_id")
            text = _text(cell) + "".join(
                _text(by_id[c]) for c in (checks or {}).get(str(gid), []) if c in by_id
            )
            answers.append((gid, cell.source, text[:5000]))
    return answers


def _optional_checks(course: Course, aid: str, nb: str | None) -> dict[str, list[str]]:
    """:func:`optional_checks` of the assignment's source, read once per version of it (not once per page)."""
    try:
        path = course.source_notebook(aid, nb)
        return _checks_of(str(path), path.stat().st_mtime_ns)
    except Exception:  # noqa: BLE001 (a course without the source at hand: its page shows the answers alone)
        return {}


@functools.lru_cache(maxsize=16)
def _checks_of(path: str, _stamp: int) -> dict[str, list[str]]:
    return optional_checks(nbformat.read(path, as_version=4))


def _hidden_lines(course: Course, aid: str, nb: str | None) -> frozenset[str]:
    """The hidden tests' lines no page may spell out (:func:`autograder.grading.pipeline.hidden_test_lines`;
    none where the source is not at hand, as for results copied in)."""
    from autograder.grading.pipeline import hidden_test_lines

    try:
        return hidden_test_lines(course, aid, nb)
    except Exception:  # noqa: BLE001 (no source here: the page shows what the run's own check let through)
        return frozenset()


def _withheld(answers: list[tuple[str, str, str]], hidden: frozenset[str]) -> list[tuple[str, str, str]]:
    """``answers`` (:func:`_answers`) less each output that spells out a hidden test's line, and less every
    output where the page's outputs spell one out together. The run's own check read its outputs in the order
    the cells ran; the page puts an optional answer's output beside its check's, and may read a notebook that
    nbgrader's own Autograde wrote, which withholds nothing: so the page's text is checked again here."""
    from autograder.grading.pipeline import WITHHELD, WITHHELD_ALL
    from autograder.grading.verify import withheld_texts

    alone, together = withheld_texts([out for _, _, out in answers], hidden)
    if together:
        return [(gid, code, WITHHELD_ALL if out else out) for gid, code, out in answers]
    return [(gid, code, WITHHELD if withheld else out) for (gid, code, out), withheld in zip(answers, alone)]


def failing_line(traceback: list) -> int | None:
    """The line of the test cell where it stopped: the arrow of the traceback's first frame (the cell's own;
    IPython marks it ``---->``). The traceback is the kernel's, so this only picks which line of the
    source's own test code to show."""
    for entry in traceback if isinstance(traceback, list) else []:
        found = re.search(r"^-+>\s*(\d+)", ANSI.sub("", str(entry)), re.M)
        if found:
            return int(found.group(1))
    return None


def where_failed(
    test_source: str, outputs: list, hidden: tuple[str, str], withheld=frozenset()
) -> WhereFailed | None:
    """Where the test cell ``test_source`` (the source's, hidden tests included) stopped, from the error
    among the ``outputs`` its run left; None without an error. ``hidden``: nbgrader's delimiters of the
    hidden tests; ``withheld``: the squeezed lines of the hidden tests that no output may spell out
    (:func:`autograder.grading.pipeline.hidden_test_lines`)."""
    from autograder.grading.verify import MESSAGE_WITHHELD, NAME_WITHHELD, spells_out

    error = next((o for o in outputs if isinstance(o, dict) and o.get("output_type") == "error"), None)
    if error is None:
        return None
    ename, evalue = str(error.get("ename") or "an error"), str(error.get("evalue") or "")
    if spells_out(ename, withheld):  # (an exception class named after a hidden line)
        ename = NAME_WITHHELD
    if spells_out(f"{ename}: {evalue}", withheld):
        evalue = f"({MESSAGE_WITHHELD})"
    text = (
        f"{shorten(ename, 100)}: {shorten(evalue, MESSAGE_CHARS)}"
        if evalue
        else f"{shorten(ename, 100)} (no message)"
    )
    number = failing_line(error.get("traceback"))
    lines = test_source.split("\n")
    if number is None or not 1 <= number <= len(lines):
        return WhereFailed(None, error=text)
    inside, checks, which, in_hidden = False, 0, None, False
    for at, line in enumerate(lines, start=1):
        marked = line.strip().startswith("#")
        if marked and hidden[0] in line:
            inside = True
        elif marked and hidden[1] in line:
            inside = False
        elif inside and line.strip().startswith("assert"):
            checks += 1
            which = checks if at == number else which
        in_hidden = in_hidden or (at == number and inside)
    if in_hidden:
        return WhereFailed(number, hidden=which or 0, hidden_of=checks, error=text)
    return WhereFailed(number, code=_statement(test_source, number), error=text)


def _statement(source: str, number: int) -> str:
    """The simple statement of ``source`` that holds line ``number`` (an assert written over several lines
    whole), or that line alone."""
    lines = source.split("\n")
    try:
        tree = ast.parse(source)
    except SyntaxError:  # magics, or code of another Python: the line alone
        return lines[number - 1].strip()
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= number <= (node.end_lineno or node.lineno):
            if not hasattr(node, "body") and (best is None or node.lineno >= best.lineno):
                best = node
    if best is None:
        return lines[number - 1].strip()
    return "\n".join(lines[best.lineno - 1 : best.end_lineno]).strip()


def _failures(
    course: Course, aid: str, nb: str | None, cells: list[CellResult], run, withheld: frozenset[str]
) -> dict[str, WhereFailed]:
    """grade_id -> where each failed test of plain asserts (decided in the kernel) stopped; ``withheld``: the
    hidden tests' lines that no message may spell out (:func:`_hidden_lines`)."""
    failed = {c.grade_id for c in cells if c.decided == "kernel" and not c.passed}
    if not failed or run is None:
        return {}
    from autograder.grading.pipeline import delimiters

    try:
        source = course.read_source(aid, nb)
    except Exception:  # noqa: BLE001 (no source here, e.g. results copied in: messages only)
        return {}
    tests = {nbgrader_meta(c).get("grade_id"): c.source for c in source.cells if is_graded_test(c)}
    hidden = delimiters(course)["hidden"]
    found = {}
    for cell in run.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in failed and gid in tests:
            where = where_failed(tests[gid], cell.get("outputs", []), hidden, withheld)
            if where is not None:
                found[gid] = where
    return found


def _where_html(where: WhereFailed) -> str:
    e = html.escape
    if where.hidden is not None:
        which = (
            f"hidden check {where.hidden} of {where.hidden_of}"
            if where.hidden
            else "a line of the hidden tests"
        )
        return f"Failed at {which} (hidden tests' code is not shown): {e(where.error)}"
    if where.line is None:
        return f"The test cell raised {e(where.error)}"
    return f"Failed at line {where.line} of the test:<pre>{e(where.code)}</pre>{e(where.error)}"


def render(course: Course, aid: str, result: Result, late: Late | None = None, nb: str | None = None) -> str:
    """The page of ``result``; for an assignment of several notebooks, the page of the notebook ``nb``: its
    own score, tests, answers and output, with the assignment's total below its title."""
    e = html.escape
    sid = result.student_id
    several = len(course.notebooks(aid)) > 1 and nb is not None
    cells = [c for c in result.cells if not several or not c.notebook or c.notebook == nb]
    run = _run_notebook(course, aid, sid, nb)
    hidden = _hidden_lines(course, aid, nb)
    rows = _test_rows(cells, _failures(course, aid, nb, cells, run, hidden))
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes if not several or _about(n, nb, course, aid))
    score, written = _score_and_written(result, late, nb if several else None)
    checks = _optional_checks(course, aid, nb)
    answers = "".join(
        f"<h3>{e(str(gid))}{' (optional, not graded)' if gid in checks else ''}</h3><pre>{e(code)}</pre>"
        + (f"<p>{'Output, and the check that runs it' if gid in checks else 'Output'}:</p><pre>{e(out)}</pre>"
           if out else "")
        for gid, code, out in _withheld(_answers(run, checks), hidden)
    )  # fmt: skip
    title = f"{aid}, {nb}.ipynb" if several else aid
    heading, total = score, ""
    if several and not result.is_error:
        heading, parts = _notebook_score(
            cells, [w for w in result.written if not w.notebook or w.notebook == nb]
        )
        total = f"<p>This notebook: {e(parts)}. The whole assignment: {e(score)}.</p>"
    failed = [c for c in cells if not c.passed]
    reason = (
        result.reason
        if not several or result.is_error
        else (
            f"{len(failed)} of {len(cells)} tests failed."
            if failed
            else "All tests passed."
            if cells
            else "This notebook has no autograded tests."
        )
    )
    table = (
        f"<table><tr><th>test</th><th>points</th><th>result</th><th>message</th></tr>{''.join(rows)}</table>"
        if rows
        else "<p>None in this notebook.</p>"
    )
    kinds = {c.decided for c in cells}
    sentence = " ".join(KERNEL_SENTENCE[k] for k in ("kernel", "kernel-checks") if k in kinds)
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">{PAGE_CSP_META}<title>{e(title)}: feedback for {e(sid)}</title>
<style>{STYLE}</style></head><body>
<h1>{e(title)}: {e(heading)}</h1>
{total}<p>Student: <b>{e(sid)}</b>. Status: {e(result.status_words)}. {e(reason)}</p>
{f"<p>{e(late.explain())}</p>" if late and late.explain() else ""}
{f'<div class="note"><p>About your notebook:</p><ul>{notes}</ul></div>' if notes else ""}
{_code_flags(result, nb)}
<h2>Tests</h2>{f'<p class="kernel">{e(sentence)}</p>' if sentence else ""}
{table}
{written}
<h2>Your answers and their output</h2>{answers or "<p>(none could be shown)</p>"}
</body></html>"""


def page_of(course: Course, aid: str, result: Result, late: Late | None = None, nb: str | None = None) -> str:
    """:func:`render`'s page; where it fails (the grader's fault: nothing a hand-in holds should make it fail),
    a page with the score alone that says so, and a line on stderr for the instructor: one student's page never
    costs another's page, nor the service a submission's grade."""
    try:
        return render(course, aid, result, late, nb)
    except Exception as err:  # noqa: BLE001 (the score is known; the details are what failed)
        where = f"{aid}, {nb}.ipynb" if nb and len(course.notebooks(aid)) > 1 else aid
        print(f"feedback: {result.student_id}'s page of {where} shows the score alone: the grader failed to "
              f"make the rest ({type(err).__name__}: {err})", file=sys.stderr)  # fmt: skip
        e = html.escape
        return f"""<!DOCTYPE html><html><head><meta charset="utf-8">{PAGE_CSP_META}<title>{e(where)}: feedback for {e(result.student_id)}</title>
<style>{STYLE}</style></head><body>
<h1>{e(where)}: {e(_total(result, late))}</h1>
<p>Student: <b>{e(result.student_id)}</b>. Status: {e(result.status_words)}. {e(result.reason)}</p>
<p class="note">{e(SCORE_ALONE)}</p>
</body></html>"""


def _notebook_score(cells: list[CellResult], written: list) -> tuple[str, str]:
    """A notebook's own score (its tests', and its written answers' as graded so far) and its parts."""
    tests = (sum(c.points for c in cells), sum(c.max_points for c in cells))
    hand = (sum(w.points or 0.0 for w in written), sum(w.max_points for w in written))
    parts = [f"tests {tests[0]:g} / {tests[1]:g}"] if cells else ["no autograded tests"]
    if written:
        parts.append(f"written answers {hand[0]:g} / {hand[1]:g}")
    return f"{tests[0] + hand[0]:g} / {tests[1] + hand[1]:g}", ", ".join(parts)


def _about(note: str, nb: str, course: Course, aid: str) -> bool:
    """Whether a note of a submission of several notebooks (named ``<nb>.ipynb: ...`` by the grader) is
    about ``nb``; a note that names none is about the whole hand-in."""
    named = [n for n in course.notebooks(aid) if note.startswith(f"{n}.ipynb")]
    return not named or nb in named


CODE_FLAGS_NOTE = (
    "These lines of your code change something you did not define (the course's package, the grader's "
    "checks, Python's or the notebook's own machinery). They do not change your points by themselves: your "
    "instructor will look at them."
)


def _code_flags(result: Result, nb: str | None) -> str:
    """The lines of the student's own code that the reading of the hand-in flagged (of the notebook ``nb``),
    each with its cell, line and why ("" without any)."""
    e = html.escape
    items = "".join(
        f"<li>{e(f.cell)}, line {f.line}: <code>{e(f.text)}</code><br>{e(f.why)}</li>"
        for f in result.code_flags
        if nb is None or not f.notebook or f.notebook == nb
    )
    return f'<div class="note"><p>{e(CODE_FLAGS_NOTE)}</p><ul>{items}</ul></div>' if items else ""


def _test_rows(cells: list[CellResult], failures: dict[str, WhereFailed]) -> list[str]:
    """A row per test cell, and under it a row per part that earned its own share. A cell decided in the
    kernel (plain asserts) says where it failed; one whose checks are declared decided in the kernel is
    marked with a dagger, which the sentence above the table explains."""
    e = html.escape
    rows = []
    for cell in cells:
        mark = PASSED if cell.passed else FAILED
        name = e(cell.grade_id) + (" \u2020" if cell.decided == "kernel-checks" else "")
        message = (
            _where_html(failures[cell.grade_id])
            if cell.grade_id in failures
            else e(shorten(cell.message, 600))
        )
        rows.append(
            f"<tr><td>{name}</td><td>{cell.points:g} / {cell.max_points:g}</td><td>{mark}</td><td>{message}</td></tr>"
        )
        for group in cell.groups:  # partial credit: what each part of the test earned
            mark = PASSED if group.passed else FAILED
            rows.append(
                f'<tr class="part"><td>&nbsp;&nbsp;{e(group.name)}</td><td>{group.points:g} / {group.max_points:g}</td>'
                f"<td>{mark}</td><td>{e(shorten(group.message, 600))}</td></tr>"
            )
    return rows


def _score_and_written(result: Result, late: Late | None, nb: str | None) -> tuple[str, str]:
    """The page's score line (as the gradesheet's line for the student gives it: tests, written answers,
    late penalty, final) and the section of written answers ("" without any)."""
    e = html.escape
    mine = [w for w in result.written if nb is None or not w.notebook or w.notebook == nb]
    if result.is_error or not mine:
        return _total(result, late), ""
    written_rows = "".join(
        f"<tr><td>{e(w.grade_id)}</td><td>{e(w.text())}</td><td>{e(w.comment)}</td></tr>" for w in mine
    )
    waiting = [w for w in mine if w.awaiting]
    status = (
        f"{len(waiting)} written answer(s), {sum(w.max_points for w in waiting):g} points, await manual "
        "grading by your instructor: the score above counts only what has been graded."
        if waiting
        else "Your written answers have received manual grading."
        if any(w.answered for w in mine)
        else "Your written answers were left unanswered: 0 points."
    )
    written = (
        f"<h2>Written answers (graded by hand)</h2><p>{e(status)}</p>"
        f"<table><tr><th>question</th><th>points</th><th>comment</th></tr>{written_rows}</table>"
    )
    return _total(result, late), written


def _total(result: Result, late: Late | None) -> str:
    """The assignment's score as the gradesheet gives it: tests, written answers, late penalty, final."""
    if result.is_error:
        return "not graded"
    if not result.written:
        if late and late.penalty:
            return f"{late.final:g} / {result.max_score:g} (tests {result.score:g}, late penalty {late.penalty:g})"
        return f"{result.score:g} / {result.max_score:g}"
    parts = [
        f"tests {result.score:g} / {result.max_score:g}",
        f"written answers {result.written_score:g} / {result.written_max:g}",
    ]
    if late and late.penalty:
        parts.append(f"late penalty {late.penalty:g}")
    final = late.final if late and late.penalty and late.final is not None else result.total_score
    return f"{final:g} / {result.total_max:g} ({', '.join(parts)})"


def write_feedback(
    course: Course, aid: str, out_dir: Path | None = None, students: list[str] | None = None
) -> list[Path]:
    """Write ``feedback/<student>/<aid>/<aid>.html`` (or into ``out_dir``) for every graded student (or
    only ``students``)."""
    written, sheet = [], gradesheet(course, aid)
    for line in sheet.values():
        result = line.result
        if students is not None and result.student_id not in students:
            continue
        names = course.notebooks(aid) or [aid]
        for nb in names:  # a page per notebook, as nbgrader names them
            if out_dir is None:
                target = course.feedback_page(aid, result.student_id, nb)
            else:
                suffix = "" if len(names) == 1 else f"-{nb}"
                target = Path(out_dir) / f"{result.student_id}{suffix}.html"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(page_of(course, aid, result, line.late, nb), encoding="utf-8")
            written.append(target)
    return written
