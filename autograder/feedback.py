"""One HTML page per student with test names, points, messages and the student's own code and output, and
the lines of that code the grader flagged for review, with why. Test code, hidden or public, never appears:
nbgrader's own feedback shows hidden tests, so this page is built from the recorded results instead. Written
answers are graded by hand: the page says which await manual grading and shows the points and comments
given so far (read from the gradebook when the page is written, so writing it again after manual grading
shows them)."""

from __future__ import annotations

import html
from pathlib import Path

import nbformat

from autograder.course import Course, is_solution, nbgrader_meta
from autograder.gradesheet import gradesheet
from autograder.late import Late
from autograder.result import Result
from autograder.sanitize import PAGE_CSP_META

STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;vertical-align:top}
.pass{color:#0a7d20}.fail{color:#b00020}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
.note{background:#fff8e1;padding:.5rem;border-left:4px solid #f0b400}
"""


def _answers(course: Course, aid: str, sid: str, nb: str | None = None) -> list[tuple[str, str, str]]:
    """(grade_id, the student's code or written answer, its text output) for each answer cell of the run
    notebook."""
    path = course.executed(aid, sid, nb)
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:
        return []
    answers = []
    for cell in nb.cells:
        if is_solution(cell):
            texts = []
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    texts.append(out.get("text", ""))
                elif out.get("output_type") == "error":
                    texts.append(f"{out.get('ename')}: {out.get('evalue')}")
                elif "text/plain" in out.get("data", {}):
                    texts.append(out["data"]["text/plain"])
            answers.append((nbgrader_meta(cell).get("grade_id"), cell.source, "".join(texts)[:5000]))
    return answers


def render(course: Course, aid: str, result: Result, late: Late | None = None, nb: str | None = None) -> str:
    """The page of ``result``; for an assignment of several notebooks, the page of the notebook ``nb``
    (its tests, answers and output) under the assignment's score."""
    e = html.escape
    sid = result.student_id
    rows = _test_rows(result, nb)
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes)
    score, written = _score_and_written(result, late, nb)
    answers = "".join(
        f"<h3>{e(str(gid))}</h3><pre>{e(code)}</pre>" + (f"<p>Output:</p><pre>{e(out)}</pre>" if out else "")
        for gid, code, out in _answers(course, aid, sid, nb)
    )
    title = aid if nb is None or nb == aid else f"{aid}, {nb}.ipynb"
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">{PAGE_CSP_META}<title>{e(title)}: feedback for {e(sid)}</title>
<style>{STYLE}</style></head><body>
<h1>{e(title)}: {e(score)}</h1>
<p>Student: <b>{e(sid)}</b>. Status: {e(result.status_words)}. {e(result.reason)}</p>
{f"<p>{e(late.explain())}</p>" if late and late.explain() else ""}
{f'<div class="note"><p>About your notebook:</p><ul>{notes}</ul></div>' if notes else ""}
{_code_flags(result, nb)}
<h2>Tests</h2><table><tr><th>test</th><th>points</th><th>result</th><th>message</th></tr>{"".join(rows)}</table>
{written}
<h2>Your answers and their output</h2>{answers or "<p>(none could be shown)</p>"}
</body></html>"""


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


def _test_rows(result: Result, nb: str | None) -> list[str]:
    """A row per test cell (of the notebook ``nb``), and under it a row per part that earned its own share."""
    e = html.escape
    rows = []
    for cell in result.cells:
        if nb is not None and cell.notebook and cell.notebook != nb:
            continue
        mark = '<span class="pass">passed</span>' if cell.passed else '<span class="fail">failed</span>'
        message = cell.message + (f" ({cell.kernel_note})" if cell.kernel_note else "")
        rows.append(
            f"<tr><td>{e(cell.grade_id)}</td><td>{cell.points:g} / {cell.max_points:g}</td>"
            f"<td>{mark}</td><td>{e(message.strip())}</td></tr>"
        )
        for group in cell.groups:  # partial credit: what each part of the test earned
            mark = '<span class="pass">passed</span>' if group.passed else '<span class="fail">failed</span>'
            rows.append(
                f'<tr class="part"><td>&nbsp;&nbsp;{e(group.name)}</td><td>{group.points:g} / {group.max_points:g}</td>'
                f"<td>{mark}</td><td>{e(group.message)}</td></tr>"
            )
    return rows


def _score_and_written(result: Result, late: Late | None, nb: str | None) -> tuple[str, str]:
    """The page's score line (as the gradesheet's line for the student gives it: tests, written answers,
    late penalty, final) and the section of written answers ("" without any)."""
    e = html.escape
    score = "not graded" if result.is_error else f"{result.score:g} / {result.max_score:g}"
    if late and late.penalty:
        score = (
            f"{late.final:g} / {result.max_score:g} (tests {result.score:g}, late penalty {late.penalty:g})"
        )
    if not result.written or result.is_error:
        return score, ""
    written_rows = "".join(
        f"<tr><td>{e(w.grade_id)}</td><td>{e(w.text())}</td><td>{e(w.comment)}</td></tr>"
        for w in result.written
        if nb is None or not w.notebook or w.notebook == nb
    )
    parts = [
        f"tests {result.score:g} / {result.max_score:g}",
        f"written answers {result.written_score:g} / {result.written_max:g}",
    ]
    if late and late.penalty:
        parts.append(f"late penalty {late.penalty:g}")
    final = late.final if late and late.penalty and late.final is not None else result.total_score
    score = f"{final:g} / {result.total_max:g} ({', '.join(parts)})"
    awaiting = sum(w.max_points for w in result.awaiting)
    status = (
        f"{len(result.awaiting)} written answer(s), {awaiting:g} points, await manual grading by your "
        "instructor: the score above counts only what has been graded."
        if result.awaiting
        else "Your written answers have received manual grading."
        if any(w.answered for w in result.written)
        else "Your written answers were left unanswered: 0 points."
    )
    written = (
        f"<h2>Written answers (graded by hand)</h2><p>{e(status)}</p>"
        f"<table><tr><th>question</th><th>points</th><th>comment</th></tr>{written_rows}</table>"
    )
    return score, written


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
            target.write_text(render(course, aid, result, line.late, nb), encoding="utf-8")
            written.append(target)
    return written
