"""A Gradescope autograder package built from the same tests, and the results.json it writes.

The zip holds ``setup.sh`` and ``run_autograder`` (Gradescope's entry points), this package, the
assignment's source and release, and the pinned requirements. On Gradescope, ``run_autograder`` grades
the uploaded notebook with the same sandboxed pipeline and writes ``/autograder/results/results.json``
with a score per test cell.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

from autograder.course import ROOT, Course
from autograder.files import read_bytes_bounded
from autograder.intake.repair import MAX_NOTEBOOK_BYTES
from autograder.result import Result

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image (Ubuntu, as root).
set -euo pipefail
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv bubblewrap
cd /autograder/source
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet -r requirements.txt
/autograder/venv/bin/pip install --quiet --no-deps -e .
# build the reference now (three sandboxed runs of the source), not at each student's upload
/autograder/venv/bin/python -m autograder reference {aid} || true
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; the student's files are in /autograder/submission.
set -uo pipefail
cd /autograder/source
PATH=/autograder/venv/bin:$PATH /autograder/venv/bin/python -m autograder gradescope-run {aid} \\
    --submission /autograder/submission --results /autograder/results/results.json
"""


def build_package(course: Course, aid: str, target: Path) -> Path:
    """Write the zip that an instructor uploads as the assignment's autograder on Gradescope."""
    course.source_notebook(aid, (course.notebooks(aid) or [None])[0])  # a clear error for an unknown id
    files: dict[str, Path | str] = {
        "setup.sh": SETUP_SH.format(aid=aid),
        "run_autograder": RUN_AUTOGRADER.format(aid=aid),
        # the grader's code and pins come from this project; the assignment from the course
        "requirements.txt": ROOT / "requirements.txt",
        "pyproject.toml": ROOT / "pyproject.toml",
        "README.md": ROOT / "README.md",
        "nbgrader_config.py": course.root / "nbgrader_config.py",
    }
    for package in ("dlcourse", "autograder"):
        for path in sorted((ROOT / package).rglob("*.py")):
            files[path.relative_to(ROOT).as_posix()] = path
    for folder in (course.source / aid, course.release / aid):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not {".ipynb_checkpoints", "samples"} & set(path.relative_to(folder).parts):
                files[path.relative_to(course.root).as_posix()] = path
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name in ("setup.sh", "run_autograder") else 0o644) << 16
            data = content.encode() if isinstance(content, str) else content.read_bytes()
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return target


def results_json(result: Result) -> dict:
    """Gradescope's results format: one test per graded cell; messages visible, test code never sent. The
    score is the autograded points; each written answer is listed, unscored, as awaiting manual grading."""
    tests = [
        {
            "name": cell.grade_id
            if cell.notebook in ("", result.assignment)
            else f"{cell.notebook}: {cell.grade_id}",
            "score": cell.points,
            "max_score": cell.max_points,
            "status": "passed" if cell.passed else "failed",
            "output": "\n".join(
                [cell.message or "passed"]
                + [f"{g.name}: {g.points:g}/{g.max_points:g} {g.message or 'passed'}" for g in cell.groups]
                + ([f"({cell.kernel_note})"] if cell.kernel_note else [])
            ),
            "visibility": "visible",
        }
        for cell in result.cells
    ]
    # Written answers are graded by hand (on Gradescope, as a manually graded question of its own): listed
    # without a score, so the autograder's score stays the autograded points.
    tests += [
        {
            "name": f"{w.grade_id} (written answer, graded by hand)",
            "output": w.text(),
            "visibility": "visible",
        }
        for w in result.written
    ]
    notes = "\n".join(result.notes)
    written = (
        f"\nWritten answers ({result.written_max:g} points) are graded by hand: "
        + ("they await manual grading." if result.awaiting else "they have received manual grading.")
        if result.written
        else ""
    )
    # the lines of the student's own code flagged for review (as the feedback page shows them): no points change
    flagged = "".join(f"\nflagged for review, no points changed: {f.describe()}" for f in result.code_flags)
    return {
        "score": result.score,
        "output": f"{result.status}: {result.reason}" + (f"\n{notes}" if notes else "") + flagged + written,
        "tests": tests,
        "visibility": "visible",
        "stdout_visibility": "hidden",
    }


def uploaded_notebooks(folder: Path, limit: int = 1000) -> tuple[list[Path], list[str]]:
    """The regular ``.ipynb`` files under an upload (a GitHub or Bitbucket upload keeps links: a link,
    to a file or a folder, is never followed), at most ``limit``, and what was skipped and why."""
    found, skipped = [], []
    for parent, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(parent) / name
            if not name.endswith(".ipynb"):
                continue
            if not stat.S_ISREG(path.lstat().st_mode):
                skipped.append(f"{path.relative_to(folder)} is a link or not a regular file: not read")
            elif len(found) < limit:
                found.append(path)
    return found, skipped


def run_on_gradescope(course: Course, aid: str, submission_dir: Path, results_path: Path) -> dict:
    """Grade the notebook(s) in ``submission_dir`` (for an assignment of several, each by its name) and write
    Gradescope's results.json."""
    from autograder.grading.batch import grade
    from autograder.intake.release import release
    from autograder.settings import Settings

    notebooks, skipped = uploaded_notebooks(Path(submission_dir))
    names = course.notebooks(aid)
    if len(names) > 1:  # an assignment of several notebooks: each is taken by its name
        chosen = {n: next((p for p in notebooks if p.name == f"{n}.ipynb"), None) for n in names}
        missing = [f"{n}.ipynb" for n, p in chosen.items() if p is None]
    else:
        preferred = [p for p in notebooks if p.name == f"{aid}.ipynb"] or notebooks
        chosen = {course.notebook(aid): preferred[0] if preferred else None}
        missing = [] if preferred else ["a notebook"]
    read = {n: read_bytes_bounded(p, MAX_NOTEBOOK_BYTES) for n, p in chosen.items() if p is not None}
    unreadable = [f"{n}.ipynb: {why}" for n, (data, why) in read.items() if data is None]
    if not read or unreadable:
        reason = "no .ipynb file was uploaded" if not read else "; ".join(unreadable)
        if skipped:
            reason += f" ({'; '.join(skipped[:5])})"
        result = Result("student", aid, status="unreadable", reason=reason)
    else:
        release(course, [aid])
        folder = course.submission_folder(aid, "student")
        folder.mkdir(parents=True, exist_ok=True)
        for nb, (data, _) in read.items():
            target = folder / f"{nb}.ipynb"
            target.unlink(missing_ok=True)
            target.write_bytes(data)  # the bytes read, never what a link points to
        result = grade(course, aid, Settings(workers=1), students=["student"], force=True)[0]
        if missing:
            result.notes.append(f"not uploaded: {', '.join(missing)} (graded as not handed in)")
        if result.is_error:  # no results.json: Gradescope shows the run failed, not a zero
            raise RuntimeError(f"grader error, the submission was not graded: {result.reason}")
    data = results_json(result)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(data, indent=1))
    return data
