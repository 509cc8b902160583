"""Before a batch is graded, the grader grades itself.

1. **Probe** the isolation: start one child exactly as a submission's (same sandbox, user id, limits) up
   to where its kernel would start, and check that Python runs there, that it has no network and that the
   course's private folders are out of its sight (where the mode promises that).
2. **Reference**: built in that sandbox and calibrated across thread counts (:mod:`autograder.reference`).
3. **Canary**: grade the source's own solutions (the release with every answer filled in from the
   source) and the untouched release through the students' path: same sandbox, limits, workers, thread
   settings and reference. The solutions must get full marks, unflagged, and the release 0.

Unless all three hold, nothing is graded or recorded: :class:`CanaryFailed` (or ``IsolationError``, or
``ReferenceError``) says in a few lines what differed and how to fix it. A canary that passed is cached
per source digest (which covers the machine's software and device), limits, isolation and workers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.pipeline import Job, decide_kept, make_batch, run_jobs
from autograder.record import sha256_regular, write_json_atomic
from autograder.reference import Reference, build_reference
from autograder.result import STOPPED, Result
from autograder.runner.isolation import INSTALL_BUBBLEWRAP, Isolation, IsolationError
from autograder.runner.sandbox import Limits, Sandbox
from autograder.samples import filled, untouched

_PROBED: dict[tuple, dict] = {}


class CanaryFailed(RuntimeError):
    """The source's solutions or release did not grade as they must: the grader is not fit to grade."""


def probe_isolation(course: Course, limits: Limits, isolation: Isolation) -> dict:
    """Start one child as a submission's and check what it got; raise IsolationError with the fix."""
    key = (limits, isolation, course.private_folders())
    if key in _PROBED:
        return _PROBED[key]
    sandbox = Sandbox(limits, isolation=isolation, private=course.private_folders())
    try:
        report = sandbox.probe()
    finally:
        sandbox.cleanup()
    user = f"as uid {report.get('uid')}" if isolation.separate_uid else "as the grader's user"
    if report.get("error") or report.get("python") != "ok":
        cause = report.get("python") or report.get("error", "")
        cause = "\n  ".join([line for line in cause.strip().splitlines() if line.strip()][-2:])  # a few lines
        hints = []
        if limits.memory_mb < 1024:
            hints.append(
                f"the memory limit ({limits.memory_mb} MB) may be too small to start Python: raise --memory"
            )
        if isolation.separate_uid and isolation.mode == "basic" and not isolation.namespaces:
            hints.append(
                "the unprivileged sandbox user cannot reach this Python (is it under a directory only root can "
                f"enter, such as /root?): install bubblewrap ({INSTALL_BUBBLEWRAP}), or put the Python "
                "environment where other users can read it"
            )
        hints = hints or ["run `python -m autograder doctor` for what is in force and what is missing"]
        raise IsolationError(
            f"the sandbox could not start Python {user} ({isolation.describe()}):\n  {cause[-900:]}\n"
            + "\n".join(f"  fix: {hint}" for hint in hints)
        )
    if isolation.mode == "bubblewrap" or isolation.namespaces:
        if report.get("interfaces") != ["lo"]:
            raise IsolationError(
                f"the sandbox was meant to have no network, but sees {report.get('interfaces')}"
            )
        if report.get("visible"):
            raise IsolationError(
                f"the sandbox was meant to hide the course, but can read {report['visible']}"
            )
    _PROBED[key] = report
    return report


def canary_key(
    reference: Reference, limits: Limits, isolation: Isolation, workers: int, strict: bool = True
) -> str:
    text = json.dumps([reference.digest, asdict(limits), asdict(isolation), workers, strict], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def canary_path(course: Course, aid: str, key: str) -> Path:
    return course.cache / "canary" / f"{aid}-{key[:20]}.json"


def cached_canary(course: Course, aid: str, key: str) -> dict | None:
    try:
        return json.loads(canary_path(course, aid, key).read_text())
    except (OSError, ValueError):
        return None


def canary_runs(
    course: Course, aid: str, reference: Reference, limits: Limits, isolation: Isolation, workers: int
) -> Path:
    """Where the canary's runs are kept: one folder per (what the reference's values depend on, the release's
    notebooks, limits, isolation, workers), so an edit of decisions only is decided again from them on this
    very machine."""
    releases = [sha256_regular(course.release_notebook(aid, nb)) for nb in course.notebooks(aid)]
    text = json.dumps(
        [reference.run_key, releases, asdict(limits), asdict(isolation), workers], sort_keys=True
    )
    return course.cache / "canary-runs" / f"{aid}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def run_canary(
    course: Course, aid: str, reference: Reference, limits: Limits, isolation: Isolation, workers: int,
    keep: Path | None = None,
):  # fmt: skip
    """Grade the solutions and the untouched release through the students' path: ``{name: result}``; their
    runs are kept under ``keep`` when given."""
    (course.work / "canary").mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{aid}-", dir=course.work / "canary"))  # graders may run at once
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
    jobs = []
    for name, make in (("solutions", filled), ("release", untouched)):
        path = folder / name
        path.mkdir()
        for nb in course.notebooks(aid):
            nbformat.write(make(course, aid, nb=nb), str(path / f"{nb}.ipynb"))
        jobs.append(Job(name, str(path), str(keep / name) if keep is not None and reference.run_key else ""))
    batch = make_batch(course, aid, reference, limits, isolation)
    results: dict[str, Result] = {}
    try:
        run_jobs(batch, jobs, workers, lambda r: results.__setitem__(r.student_id, r))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def redecide_canary(
    course: Course, aid: str, reference: Reference, limits: Limits, isolation: Isolation, keep: Path
) -> dict[str, Result] | None:
    """The canary's two results decided again from its kept runs (no run), or None where they were not kept."""
    if not reference.run_key or not keep.is_dir():
        return None
    batch = make_batch(course, aid, reference, limits, isolation)
    results = {
        name: decide_kept(batch, Job(name, keep=str(keep / name))) for name in ("solutions", "release")
    }
    return None if None in results.values() else results


def canary_problems(results: dict[str, Result], limits: Limits, strict: bool = True) -> list[str]:
    """What the canary's two runs show is wrong, in plain words with the fix; [] when it passed. Not
    ``strict``, an untouched release that scores is not a problem (see :func:`release_warnings`)."""
    lines = []
    solutions, release = results["solutions"], results["release"]
    if solutions.status != "graded" or solutions.score != solutions.max_score:
        lines.append(
            f"the source's own solutions got {solutions.score:g}/{solutions.max_score:g} "
            f"(status {solutions.status}): {solutions.reason}"
        )
        lines += [f"  {c.grade_id}: {c.message}" for c in solutions.cells if not c.passed][:5]
        lines += [f"  flagged: {flag}" for flag in solutions.flags][:3]
        if solutions.status in STOPPED:
            fix = f"the solutions {limits.stopped(solutions.status)}: {limits.fix(solutions.status)}"
        elif solutions.status == "flagged":
            fix = "a public check passes in the kernel but not when redone outside it: see the flags"
        else:
            fix = "a case depends on the machine or the isolation: fix its tolerance in the source"
        lines.append(f"  fix: {fix}")
        if solutions.detail:
            lines.append("  detail: " + solutions.detail.strip().replace("\n", "\n    ")[-800:])
    if release.is_error:
        lines.append(f"the untouched release could not be graded: {release.reason}")
    elif release.score != 0 and strict:
        passing = [c.grade_id for c in release.cells if c.points > 0]
        lines.append(
            f"the untouched release got {release.score:g} points: the tests of {', '.join(passing)} pass "
            "without an answer (fix: make their hidden cases test the student's code)"
        )
    return lines


def release_warnings(results: dict[str, Result]) -> list[str]:
    """The cells an untouched release earns points in, where the canary is not strict: reported, not refused."""
    release = results["release"]
    if release.is_error or release.score == 0:
        return []
    passing = [
        f"{c.notebook + '.ipynb: ' if c.notebook else ''}{c.grade_id} ({c.points:g})"
        for c in release.cells
        if c.points > 0
    ]
    return [
        f"the untouched release earns {release.score:g} of {release.max_score:g} points without an answer, in "
        + ", ".join(passing)
        + " (these tests pass with no answer; `--strict-canary` refuses such an assignment)"
    ]


def is_strict(reference: Reference, asked: bool) -> bool:
    """The release must earn 0 when asked, and always where every test is checked outside the kernel (this
    course's assignments): a test that passes with no answer is then a mistake in the source."""
    return asked or all(c.get("decided", "outside") == "outside" for c in reference.cells.values())


def _canary_results(course, aid, reference, limits, isolation, workers, strict, say) -> tuple[dict, str]:
    """The canary's two results, and how they came: decided again from its kept runs where only decisions
    changed and they pass, else run (a failure is always seen in a real run)."""
    keep = canary_runs(course, aid, reference, limits, isolation, workers)
    results, how = (
        redecide_canary(course, aid, reference, limits, isolation, keep),
        "decided again from its kept runs",
    )
    if results is None or canary_problems(results, limits, strict):  # a failure is always seen in a real run
        say(f"{aid}: proving the grader: grading the solutions and the untouched release (the canary)")
        results, how = run_canary(course, aid, reference, limits, isolation, workers, keep), "ran"
    else:
        say(
            f"{aid}: proving the grader: the canary's kept runs decided again (only tolerances or points changed)"
        )
    return results, how


def prove(
    course: Course,
    aid: str,
    limits: Limits,
    isolation: Isolation,
    workers: int,
    strict: bool = False,
    say=None,
) -> tuple[Reference, dict]:
    """Probe, build the reference, run the canary (or find it passed in the cache); return the reference
    and the canary's record (with ``proof_seconds``, what this proof took). The source's solutions must earn
    full marks; the untouched release 0 where the rule is strict (:func:`is_strict`), else what it earns is
    listed in the record's ``warnings``. ``say`` gets a line as each step starts."""
    from autograder.reference import STAMP_FILE, source_digest

    say = say or (lambda _line: None)
    begun = time.monotonic()
    say(f"{aid}: proving the grader: probing the sandbox")
    probe_isolation(course, limits, isolation)
    stamp = course.reference_dir / aid / STAMP_FILE
    if not stamp.is_file() or stamp.read_text() != source_digest(course, aid):
        say(
            f"{aid}: proving the grader: the reference (the source's solutions run in the sandbox, or decided again)"
        )
    reference = build_reference(course, aid, limits=limits, isolation=isolation)
    strict = is_strict(reference, strict)
    key = canary_key(reference, limits, isolation, workers, strict)
    cached = cached_canary(course, aid, key)
    if cached and cached.get("key") == key and cached.get("passed"):
        return reference, {**cached, "proof_seconds": round(time.monotonic() - begun, 1)}
    started = time.monotonic()
    results, how = _canary_results(course, aid, reference, limits, isolation, workers, strict, say)
    problems = canary_problems(results, limits, strict)
    if problems:  # only a canary that passed is kept to be decided again
        shutil.rmtree(canary_runs(course, aid, reference, limits, isolation, workers), ignore_errors=True)
    record = {
        "warnings": [] if strict else release_warnings(results),
        "key": key,
        "passed": not problems,
        "problems": problems,
        "seconds": round(time.monotonic() - started, 1),
        "how": how,
        "isolation": isolation.describe(),
        "scores": {name: f"{r.score:g}/{r.max_score:g} {r.status}" for name, r in results.items()},
    }
    write_json_atomic(canary_path(course, aid, key), record)
    if problems:
        raise CanaryFailed(
            f"{aid}: the grader failed its own check, so nothing was graded or recorded:\n  "
            + "\n  ".join(problems)
        )
    return reference, {**record, "proof_seconds": round(time.monotonic() - begun, 1)}
