"""A class report, from the recorded results: pass rate per test and a histogram of scores (text and PNG),
and one HTML page per assignment for the instructor: the histogram, which case failed most in each test
and with what message, time per submission, the isolation in force, grader errors, flagged submissions
with their reasons (the lines of their code that were flagged among them), and a link to each student's
feedback page. Scores are the autograded points; written answers (graded by hand) are reported apart: what
has been graded and which submissions still await manual grading, as the gradebook holds them now."""

from __future__ import annotations

import base64
import csv
import html
import os
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from autograder.course import Course
from autograder.grading.record import load_results, with_manual_grades
from autograder.intake.sanitize import PAGE_CSP_META
from autograder.result import Result


def pass_rates(rows: list[Result]) -> dict[str, tuple[int, int]]:
    rates: dict[str, list[int]] = {}
    for r in rows:
        for cell in r.cells:
            counts = rates.setdefault(cell.grade_id, [0, 0])
            counts[0] += bool(cell.passed)
            counts[1] += 1
    return {k: (v[0], v[1]) for k, v in rates.items()}


def kernel_decided(rows: list[Result]) -> set[str]:
    """The tests decided in the students' kernels (no checks: nbgrader's rule; or checks the course declares
    without outside evidence), by grade_id."""
    return {c.grade_id for r in rows for c in r.cells if c.kernel_note}


def write_report(course: Course, aid: str, out_dir: Path) -> tuple[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = with_manual_grades(course, aid, load_results(course, aid))
    rows = [r for r in everything if not r.is_error]  # a grader error is no score at all
    if not rows:
        raise RuntimeError(f"no graded results for {aid} yet: run `python -m autograder grade {aid}`")
    rates = pass_rates(rows)
    width = max((len(k) for k in rates), default=len("test"))
    lines = [f"{aid}: {len(rows)} submissions", f"{'test':<{width}}  passed"]
    in_kernel = kernel_decided(rows)
    lines += [
        f"{k:<{width}}  {p:>3}/{n:<3} {p / n:6.0%}" + ("  decided in the kernel" if k in in_kernel else "")
        for k, (p, n) in rates.items()
    ]
    if in_kernel:
        lines.append(
            f"{len(in_kernel)} test(s) are decided in the kernel (no checks, as nbgrader decides them, or checks "
            "the course declares without outside evidence): a notebook can fake their pass"
        )
    scores = [r.score for r in rows]
    lines.append(f"mean score {sum(scores) / len(scores):.1f} / {rows[0].max_score:g}")
    written = written_summary(rows)
    if written:
        lines.append(written)
    if len(everything) > len(rows):
        lines.append(f"{len(everything) - len(rows)} submission(s) not graded (grader error): grade again")
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(scores, bins=10, range=(0, rows[0].max_score), color="#4a78b5", edgecolor="white")
    ax.set_xlabel("score")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{aid}: scores of {len(rows)} submissions")
    fig.tight_layout()
    png = out_dir / f"{aid}-scores.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    text = "\n".join(lines)
    (out_dir / f"{aid}-report.txt").write_text(text + "\n")
    page = render(course, aid, everything, png.read_bytes(), out_dir.resolve())
    page_path(out_dir, aid).write_text(page, encoding="utf-8")
    return text, png


def written_summary(rows: list[Result]) -> str:
    """The written answers (graded by hand) in one line: "" when the assignment has none."""
    having = [r for r in rows if r.written]
    if not having:
        return ""
    waiting = [r.student_id for r in having if r.awaiting]
    graded = [r.written_score for r in having if not r.awaiting]
    mean = f", mean {sum(graded) / len(graded):.1f} / {having[0].written_max:g}" if graded else ""
    return (
        f"written answers (graded by hand, {having[0].written_max:g} points, not in the scores above): "
        f"{len(having) - len(waiting)} of {len(having)} submission(s) graded{mean}; "
        + (f"awaiting manual grading: {', '.join(waiting)}" if waiting else "none awaits manual grading")
    )


def page_path(out_dir: Path, aid: str) -> Path:
    return out_dir / f"{aid}-report.html"


def case_names(course: Course, aid: str) -> dict[str, bool]:
    """Case name -> whether it is public, from the reference the results were decided against (empty
    when there is none to read)."""
    from dlcourse.grading import load_cases

    try:
        cases, _, _ = load_cases(course.reference_dir / aid)
    except Exception:  # no reference built here (results copied in from elsewhere): names only
        return {}
    return {name: case.public for name, case in cases.items()}


def failed_cases(rows: list[Result], known: dict[str, bool]) -> dict[str, list[tuple[str, int, str]]]:
    """Test -> [(case, failures, a message it failed with)], most failures first. A failed test records
    the first case that failed, and its message starts with that case's name."""
    found: dict[str, Counter] = {}
    messages: dict[tuple[str, str], Counter] = {}
    for r in rows:
        for cell in r.cells:
            if cell.passed:
                continue
            name = cell.message.split(":", 1)[0] if ":" in cell.message else ""
            if (known and name not in known) or " " in name:
                name = ""
            found.setdefault(cell.grade_id, Counter())[name] += 1
            messages.setdefault((cell.grade_id, name), Counter())[cell.message] += 1
    return {
        gid: [(name, n, messages[gid, name].most_common(1)[0][0]) for name, n in counts.most_common()]
        for gid, counts in found.items()
    }


def flagged_pairs(course: Course, aid: str) -> list[dict]:
    """The pairs that ``python -m autograder similarity`` flagged (in every notebook), when it has been run."""
    found = []
    for table in sorted((course.root / "reports" / aid).glob("similarity*.csv")):  # one per notebook
        with open(table, newline="", encoding="utf-8") as fh:
            found += [row for row in csv.DictReader(fh) if row.get("flagged") == "1"]
    return found


def relative(target: Path, out_dir: Path) -> str:
    """A link from a page in ``out_dir`` to ``target``, which stays valid when both move together."""
    return quote(Path(os.path.relpath(target.resolve(), out_dir)).as_posix())


STYLE = """
body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.35rem;text-align:left;vertical-align:top}
.fail{color:#b00020}.num{text-align:right;white-space:nowrap}.note{background:#fff8e1;padding:.5rem;border-left:4px solid #f0b400}
"""


def render(course: Course, aid: str, everything: list[Result], png: bytes, out_dir: Path) -> str:
    """The instructor's page for ``aid``; links to feedback pages are relative to ``out_dir``."""
    e = html.escape
    rows = [r for r in everything if not r.is_error]
    errors = [r for r in everything if r.is_error]
    tests = _test_rows(course, aid, rows)
    students = _student_rows(course, aid, everything, out_dir)
    isolation = "".join(
        f"<li>{e(mode or 'not recorded')}: {n} submission(s)</li>"
        for mode, n in Counter(r.isolation for r in everything).most_common()
    )
    flagged, similar = _flagged_items(course, aid, rows, out_dir)
    grader_errors = "".join(f"<li><b>{e(r.student_id)}</b>: {e(r.reason)}</li>" for r in errors)
    scores = [r.score for r in rows]
    mean = f"{sum(scores) / len(scores):.1f} / {rows[0].max_score:g}" if rows else "none"
    image = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">{PAGE_CSP_META}<title>{e(aid)}: class report</title>
<style>{STYLE}</style></head><body>
<h1>{e(aid)}: class report</h1>
<p>{len(rows)} submission(s) graded, mean score {mean}; {len(errors)} not graded because of a grader error.</p>
{f"<p>{e(written_summary(rows))}</p>" if written_summary(rows) else ""}
<img alt="histogram of scores" src="data:image/png;base64,{image}">
<h2>Tests</h2>
<table><tr><th>test</th><th>passed</th><th>rate</th><th>the case that failed most, and its message</th></tr>{"".join(tests)}</table>
<h2>Flagged for review</h2>
{f"<ul>{flagged}{similar}</ul>" if flagged or similar else "<p>Nothing flagged.</p>"}
<h2>Grader errors</h2>
{f'<div class="note"><p>Not graded, no score recorded: grade again.</p><ul>{grader_errors}</ul></div>' if errors else "<p>None.</p>"}
<h2>Isolation in force</h2><ul>{isolation}</ul>
<h2>Submissions</h2>
<p>Seconds: the whole grading of a submission, and its notebook's run in the sandbox. Memory: the sandbox's processes
(kernel and runner) at their largest, sampled every 0.2 s, in MB; the limit stops a notebook past it, with the status
saying so.</p>
<table><tr><th>student</th><th>score</th><th>status</th><th>reason</th><th>written answers</th><th>seconds</th><th>in sandbox</th><th>peak MB</th><th></th></tr>{"".join(students)}</table>
</body></html>"""


def _test_rows(course: Course, aid: str, rows: list[Result]) -> list[str]:
    """One table row per test cell: its pass rate and the case that failed most, with its message."""
    e = html.escape
    known = case_names(course, aid)
    failures = failed_cases(rows, known)
    tests = []
    for gid, (passed, n) in pass_rates(rows).items():
        worst = failures.get(gid, [])
        if worst:
            name, count, message = worst[0]
            kind = "" if name not in known else (" (public)" if known[name] else " (hidden)")
            case = f"<b>{e(name or 'the test cell')}</b>{kind}: {count} of {n - passed} failures<br><span class=fail>{e(message)}</span>"
        else:
            case = ""
        if gid in kernel_decided(rows):
            case = "<i>decided in the kernel: a notebook can fake its pass</i><br>" + case
        tests.append(
            f"<tr><td>{e(gid)}</td><td class=num>{passed} / {n}</td><td class=num>{passed / n:.0%}</td><td>{case}</td></tr>"
        )
    return tests


def _student_rows(course: Course, aid: str, everything: list[Result], out_dir: Path) -> list[str]:
    """One table row per student: score, status, reason, written answers, times, memory, feedback link."""
    e = html.escape
    students = []
    for r in sorted(everything, key=lambda r: r.student_id):
        feedback = course.feedback_page(aid, r.student_id, (course.notebooks(aid) or [aid])[0])
        if feedback.is_file():
            link = f'<a href="{relative(feedback, out_dir)}">feedback</a>'
        else:
            link = "not written yet"
        sandbox = "" if r.seconds_in_sandbox is None else f"{r.seconds_in_sandbox:.1f}"
        memory = "" if r.peak_memory_mb is None else f"{r.peak_memory_mb:.0f}"
        students.append(
            f"<tr><td>{e(r.student_id)}</td><td class=num>{e(r.score_text())}</td><td>{e(r.status_words)}</td>"
            f"<td>{e(r.reason)}</td><td>{e(r.manual_grading())}</td><td class=num>{r.seconds:.1f}</td><td class=num>{sandbox}</td><td class=num>{memory}</td><td>{link}</td></tr>"
        )
    return students


def _flagged_items(course: Course, aid: str, rows: list[Result], out_dir: Path) -> tuple[str, str]:
    """The list items of flagged submissions and of alike pairs (with the similarity report's link)."""
    e = html.escape
    several = len(course.notebooks(aid)) > 1
    flagged = "".join(
        f"<li><b>{e(r.student_id)}</b>: {'; '.join(e(f) for f in r.flags) or ('' if r.code_flags else e(r.reason))}"
        + code_flag_list(r, several)
        + "</li>"
        for r in rows
        if r.status == "flagged" or r.code_flags
    )
    similar = "".join(
        f"<li><b>{e(p['student_a'])}</b> &amp; <b>{e(p['student_b'])}</b>: answers alike (similarity {e(p['similarity'])})</li>"
        if p.get("kind", "students") == "students"
        else f"<li><b>{e(p['student_a'])}</b>: {e(p.get('reason') or p['student_b'])}</li>"
        for p in flagged_pairs(course, aid)
    )
    if similar:
        href = relative(course.root / "reports" / aid / "similarity.html", out_dir)
        similar += f'<li><a href="{href}">the similarity report</a></li>'
    return flagged, similar


def code_flag_list(result: Result, several_notebooks: bool = False) -> str:
    """The lines of a result's answer cells that the reading of its code flagged (:mod:`autograder.grading.tamper`),
    each with its cell, line, code and why, as a list ("" without any)."""
    e = html.escape
    items = "".join(
        f"<li>{e(f.notebook + '.ipynb, ' if several_notebooks and f.notebook else '')}{e(f.cell)}, line {f.line}: "
        f"<code>{e(f.text)}</code>: {e(f.why)}</li>"
        for f in result.code_flags
    )
    note = "lines of its code flagged (read as text, nothing run; the points are as the tests decided them)"
    return f"<br>{note}:<ul>{items}</ul>" if items else ""
