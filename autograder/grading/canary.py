"""Before a batch is graded, the grader grades itself.

1. **Probe** the isolation: start one child exactly as a submission's (same sandbox, user id, limits,
   forked from the warm parent the students' runs use) up to where its kernel would start, and check that
   Python runs there, that it has no network and that the course's private folders are out of its sight
   (where the mode promises that).
2. **Reference**: built in that sandbox and calibrated across thread counts (:mod:`autograder.grading.reference`).
3. **Canary**: grade the source's own solutions (the release with every answer filled in from the
   source) and the untouched release through the students' path: same sandbox, limits, workers, thread
   settings and reference. The solutions must get full marks, unflagged, and the release 0. A batch runs
   the canary first on its own workers, with the students queued behind it (:class:`CanaryBeside`).
   Each step grades as the batch's :class:`~autograder.settings.Settings` say (limits, isolation, workers).

Unless all three hold, nothing is recorded (no student starts before the reference is built, and none
after the canary failed): :class:`CanaryFailed` (or ``IsolationError``, or ``ReferenceError``) says in a
few lines what differed and how to fix it. A canary that passed is cached per source digest (which covers
the machine's software and device), the grader's whole code, limits, isolation and workers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import nbformat

from autograder.course import ROOT, Course
from autograder.files import sha256_regular, write_json_atomic
from autograder.grading.pipeline import Job, decide_kept, make_batch, run_jobs
from autograder.grading.reference import Reference, build_reference, code_digest, source_errors
from autograder.intake.handin import frameworks_used
from autograder.intake.samples import filled, untouched
from autograder.progress import Heartbeat
from autograder.result import STOPPED, Result
from autograder.runner.interface import SandboxFactory
from autograder.runner.isolation import (
    INSTALL_BUBBLEWRAP,
    OPEN_COURSE,
    Isolation,
    IsolationError,
    OpenCourse,
    resolved,
)
from autograder.runner.sandbox import Sandbox
from autograder.settings import Limits, Settings

_PROBED: dict[tuple, dict] = {}


class CanaryFailed(RuntimeError):
    """The source's solutions or release did not grade as they must: the grader is not fit to grade."""


def probe_isolation(
    course: Course,
    limits: Limits,
    isolation: Isolation,
    warm: tuple[str, ...] = ("numpy",),
    sandboxes: SandboxFactory | None = None,
) -> dict:
    """Start one child as a submission's (forked from the warm parent of ``warm`` the students' runs use; made
    by ``sandboxes``, a :class:`~autograder.runner.interface.SandboxFactory`, the real Sandbox where None) and
    check what it got; raise IsolationError with the fix."""
    key = (limits, isolation, course.private_folders(), warm, sandboxes, _permissions(course, isolation))
    if key in _PROBED:
        return _PROBED[key]
    sandbox = (sandboxes or Sandbox)(limits, warm=warm, isolation=isolation, private=course.private_folders())
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
    if not isolation.hides_the_course:
        _refuse_an_open_course(course, isolation, report)
    else:
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


def _permissions(course: Course, isolation: Isolation) -> tuple:
    """Where only permissions keep a submission out of the course: the mode and owner of its folders and of every
    folder above them, so that a probe that passed is not kept once one of them changed (a course opened later)."""
    if isolation.hides_the_course:
        return ()
    paths = dict.fromkeys(p for f in map(Path, course.private_folders()) for p in (f, *f.parents))
    found = []
    for path in paths:  # (the workspace and cache lie in the course: their parents once)
        try:
            info = path.stat()
            found.append((str(path), info.st_mode, info.st_uid, info.st_gid))
        except OSError:
            found.append((str(path), None))
    return tuple(found)


def _refuse_an_open_course(course: Course, isolation: Isolation, report: dict) -> None:
    """Without namespaces or bubblewrap nothing covers the course: a submission's user that may enter its folders
    reads the source's solutions, the reference's hidden values and the gradebook by the names the public layout
    gives, and earns points it never computed. Refused, with the fixes, unless the probe (the grader's own child,
    before any submission's code) found that its user may enter none of them: as root, whose submissions run as
    users of their own, a course readable by its owner only; a normal user's own course, never."""
    private = list(course.private_folders())
    enterable = report.get("enterable")
    reachable = private if enterable is None else [p for p in private if p in enterable]
    if not reachable:
        return
    who = "its own uid" if isolation.separate_uid else "the grader's own user"
    fixes = [
        f"install bubblewrap ({INSTALL_BUBBLEWRAP}) where it can make its namespaces",
        "or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10 and "
        "later, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for this Python)",
    ]
    needed = [ROOT / "dlcourse", Path(sys.prefix)]  # what every kernel reads, which no chmod may close
    if isolation.separate_uid and not any(p.is_relative_to(course.root) for p in needed):
        fixes.append(f"or make the course readable by its owner only (chmod -R go-rwx {course.root})")
    elif isolation.separate_uid:
        fixes.append(
            "(the course holds the course package or the Python environment that every kernel needs, so it "
            "cannot be closed to them by its permissions)"
        )
    else:
        fixes.append("or run the grader as root, each submission then runs as a user of its own")
    raise OpenCourse(
        f"{OPEN_COURSE}, and a submission's code runs as {who}, which may "
        f"enter {', '.join(reachable)}: it could read the source's solutions, the reference's hidden values and the "
        "gradebook and earn points it never computed, so nothing is graded:\n"
        + "\n".join(f"  fix: {fix}" for fix in fixes)
    )


def canary_key(reference: Reference, settings: Settings) -> str:
    """What a passed canary is cached by: the reference, the grader's whole code (:func:`code_digest`: a grader
    upgraded proves itself again, by running the canary: :func:`canary_runs`), and the limits, isolation
    (resolved), workers and strictness it was run with."""
    s = settings
    text = json.dumps(
        [reference.digest, _code(), asdict(s.limits), asdict(s.isolation), s.workers, s.strict],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def _code() -> str:
    """This process's :func:`code_digest` (its code does not change under it)."""
    return code_digest()


def canary_path(course: Course, aid: str, key: str) -> Path:
    return course.cache / "canary" / f"{aid}-{key[:20]}.json"


def cached_canary(course: Course, aid: str, key: str) -> dict | None:
    try:
        return json.loads(canary_path(course, aid, key).read_text())
    except (OSError, ValueError):
        return None


def canary_runs(course: Course, aid: str, reference: Reference, settings: Settings) -> Path:
    """Where the canary's runs are kept: one folder per (what the reference's values depend on, the release's
    notebooks, the grader's whole code, limits, isolation, workers), so an edit of decisions only (a tolerance,
    points) is decided again from them on this very machine, and an upgraded grader runs them again: runs made
    by another grader's sandbox (its caps, limits, mounts) prove nothing about this one's."""
    releases = [sha256_regular(course.release_notebook(aid, nb)) for nb in course.notebooks(aid)]
    s = settings
    text = json.dumps(
        [reference.run_key, releases, _code(), asdict(s.limits), asdict(s.isolation), s.workers],
        sort_keys=True,
    )
    return course.cache / "canary-runs" / f"{aid}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


CANARY = ("solutions", "release")


def canary_sid(name: str) -> str:
    """The canary's job id for ``name``: no student's (a student id is a folder's name, which has no ``/``)."""
    return f"canary/{name}"


def canary_jobs(course: Course, aid: str, reference: Reference, folder: Path, keep: Path | None) -> list[Job]:
    """The canary's two hand-ins written under ``folder`` (the release with every answer filled in from the
    source, and the untouched release), as jobs whose runs are kept under ``keep`` when given."""
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
    jobs = []
    for name, make in (("solutions", filled), ("release", untouched)):
        path = folder / name
        path.mkdir()
        for nb in course.notebooks(aid):
            nbformat.write(make(course, aid, nb=nb), str(path / f"{nb}.ipynb"))
        kept = str(keep / name) if keep is not None and reference.run_key else ""
        jobs.append(Job(canary_sid(name), str(path), kept))
    return jobs


def canary_folder(course: Course, aid: str) -> Path:
    (course.work / "canary").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{aid}-", dir=course.work / "canary"))  # graders may run at once


def run_canary(
    course: Course, aid: str, reference: Reference, settings: Settings, keep: Path | None = None, say=None
):
    """Grade the solutions and the untouched release through the students' path (``settings`` resolved):
    ``{name: result}``; their runs are kept under ``keep`` when given. ``say`` gets a line as each is graded,
    and a heartbeat between."""
    folder = canary_folder(course, aid)
    batch = make_batch(course, aid, reference, settings)
    results: dict[str, Result] = {}

    def arrive(result: Result) -> None:
        results[result.student_id.split("/", 1)[1]] = result
        beat(canary_line(aid, result, len(results)))

    try:
        jobs = canary_jobs(course, aid, reference, folder, keep)
        with Heartbeat(say, f"{aid}: canary") as beat:
            run_jobs(batch, jobs, settings.workers, arrive)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def canary_line(aid: str, result: Result, count: int) -> str:
    """The progress line of one of the canary's results ("A6: canary: solutions graded 100/100 (1 of 2)")."""
    name = result.student_id.split("/", 1)[1]
    return f"{aid}: canary: {name} graded {result.score:g}/{result.max_score:g} ({count} of {len(CANARY)})"


def redecide_canary(
    course: Course, aid: str, reference: Reference, settings: Settings, keep: Path
) -> dict[str, Result] | None:
    """The canary's two results decided again from its kept runs (no run), or None where they were not kept."""
    if not reference.run_key or not keep.is_dir():
        return None
    batch = make_batch(course, aid, reference, settings)
    results = {name: decide_kept(batch, Job(canary_sid(name), keep=str(keep / name))) for name in CANARY}
    return None if None in results.values() else results


def canary_problems(results: dict[str, Result], limits: Limits, strict: bool = True) -> list[str]:
    """What the canary's two runs show is wrong, in plain words with the fix; [] when it passed. Not
    ``strict``, an untouched release that scores is not a problem (see :func:`release_warnings`)."""
    lines = []
    solutions, release = results["solutions"], results["release"]
    # flags from reading the solutions' code alone are the instructor's to know (see code_flag_warnings), and
    # no sign of a grader that disagrees with itself
    unflagged = solutions.status == "graded" or (solutions.status == "flagged" and not solutions.flags)
    if not unflagged or solutions.score != solutions.max_score:
        lines.append(
            f"the source's own solutions got {solutions.score:g}/{solutions.max_score:g} "
            f"(status {solutions.status}): {solutions.reason}"
        )
        lines += [f"  {c.grade_id}: {c.message}" for c in solutions.cells if not c.passed][:5]
        lines += [f"  flagged: {flag}" for flag in solutions.flags][:3]
        if solutions.status in STOPPED:
            fix = f"the solutions {limits.stopped(solutions.status)}: {limits.fix(solutions.status)}"
        elif solutions.flags:
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


def code_flag_warnings(results: dict[str, Result]) -> list[str]:
    """The lines of the source's own solutions that the reading of a hand-in's code flags
    (:mod:`autograder.grading.tamper`): every student who writes them as the solution does will be flagged too."""
    return [
        f"the source's solutions are flagged by the check of the code (so will students who write them so): {f.describe()}"
        for f in results["solutions"].code_flags
    ]


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


@dataclass
class Proof:
    """A proof under way (:func:`begin_proof`): the isolation probed and the reference built; ``record`` is
    the canary's record once it passed, None while its two runs are still to come (:func:`conclude`).
    ``settings``: resolved, and ``strict`` as the rule decided it (:func:`is_strict`)."""

    course: Course
    aid: str
    reference: Reference
    settings: Settings
    key: str
    keep: Path
    begun: float
    record: dict | None = None
    # this proof's own runs, until they pass and become ``keep`` (:func:`publish_runs`)
    staging: Path | None = None

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.begun, 1)


def begin_proof(
    course: Course, aid: str, settings: Settings | None = None, say=None, probe: str = "always"
) -> Proof:
    """Probe the isolation and build the reference (as ``settings`` say, the default where None); take the canary's
    passed record from the cache, or decide the canary again from its kept runs where only the source's decisions
    changed (the same grader code) and it passes. Otherwise the proof's ``record`` stays None: its canary jobs
    must run (:func:`run_canary`, or beside the students' runs, none of them recorded before :func:`conclude`
    passed).

    ``probe="if anything runs"`` (a regrade, whose submissions may all be decided again from kept runs)
    probes only where the reference or the canary has to run: the probe guards runs, and it starts a warm
    parent, seconds of a regrade in which nothing else would start one. Whoever then runs a submission
    proves again with the probe (:func:`autograder.grading.batch.grade` does)."""
    say = say or (lambda _line: None)
    begun = time.monotonic()
    settings = resolved(settings or Settings())
    reference = _the_reference(course, aid, settings, probe, say)
    settings = replace(settings, strict=is_strict(reference, settings.strict))
    key = canary_key(reference, settings)
    keep = canary_runs(course, aid, reference, settings)
    # graders may prove the same canary at once: each runs it into a folder of its own
    staging = keep.with_name(f".{keep.name}-{uuid.uuid4().hex[:12]}")
    proof = Proof(course, aid, reference, settings, key, keep, begun, staging=staging)
    cached = cached_canary(course, aid, key)
    if cached and cached.get("key") == key and cached.get("passed"):
        proof.record = cached
        return proof
    started = time.monotonic()
    results = redecide_canary(course, aid, reference, settings, keep)
    if results is not None and not canary_problems(
        results, settings.limits, settings.strict
    ):  # a failure is seen in a real run
        say(
            f"{aid}: proving the grader: the canary's kept runs decided again (nothing that changes a run changed)"
        )
        conclude(proof, results, "decided again from its kept runs", time.monotonic() - started)
    else:
        if probe != "always" and reference.how != "built":  # the canary's runs are next: probed first
            say(f"{aid}: proving the grader: probing the sandbox")
            _probe_or_discard(course, aid, settings, None)
        say(f"{aid}: proving the grader: grading the solutions and the untouched release (the canary)")
    return proof


def _the_reference(course: Course, aid: str, settings: Settings, probe: str, say) -> Reference:
    """The reference up to date, beside the probe, or (``probe`` not "always") probed only if it had to run."""
    from autograder.grading.reference import STAMP_FILE, source_digest

    if probe == "always":
        say(f"{aid}: proving the grader: probing the sandbox")
    stamp = course.reference_dir / aid / STAMP_FILE
    if not stamp.is_file() or stamp.read_text() != source_digest(course, aid):
        say(
            f"{aid}: proving the grader: the reference (the source's solutions run in the sandbox, or decided again)"
        )
    with Heartbeat(say, f"{aid}: reference") as beat:  # a line at least every HEARTBEAT_SECONDS
        if probe == "always":
            return _reference_beside_the_probe(course, aid, settings, beat)
        reference = build_reference(course, aid, settings, say=beat)
    if reference.how == "built":  # it ran: as if beside the probe, kept only if the probe passes
        say(f"{aid}: proving the grader: probing the sandbox")
        _probe_or_discard(course, aid, settings, reference)
    return reference


def _probe_or_discard(course: Course, aid: str, settings: Settings, built: Reference | None) -> None:
    """Probe the isolation; where it fails, remove the reference ``built`` in it (if any) and raise."""
    try:
        probe_isolation(
            course, settings.limits, settings.isolation, frameworks_used(course, aid), settings.sandbox
        )
    except BaseException:
        if built is not None:
            shutil.rmtree(built.directory, ignore_errors=True)
        raise


def _reference_beside_the_probe(course: Course, aid: str, settings: Settings, say=None) -> Reference:
    """Probe the isolation and build the reference at once: the reference runs the instructor's own source, so
    it need not wait for the probe, which guards the students' code (0.3 s of a first class). A probe that
    fails refuses everything all the same, and a reference built beside it is not kept: it was made in a
    sandbox that failed its check."""
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            probe_isolation(
                course, settings.limits, settings.isolation, frameworks_used(course, aid), settings.sandbox
            )
        except BaseException as err:  # noqa: BLE001 (raised again below, in the caller's thread)
            failed.append(err)

    prober = threading.Thread(target=probe, name="probe", daemon=True)
    prober.start()
    try:
        reference = build_reference(course, aid, settings, say=say)
    except BaseException:
        prober.join()
        if failed:  # the isolation's failure first: it is what the instructor must fix
            raise failed[0] from None
        raise
    prober.join()
    if failed:
        if reference.how == "built":
            shutil.rmtree(reference.directory, ignore_errors=True)
        raise failed[0]
    return reference


def conclude(proof: Proof, results: dict[str, Result], how: str, seconds: float) -> dict:
    """Decide the canary from its two results, keep its record (and its runs only if it passed); raise
    :class:`CanaryFailed` when it did not pass."""
    problems = canary_problems(results, proof.settings.limits, proof.settings.strict)
    if problems:  # only a canary that passed is kept to be decided again; runs kept by one that passed stay
        discard_runs(proof)
    else:
        publish_runs(proof)
    record = {
        "warnings": source_errors(proof.reference)
        + code_flag_warnings(results)
        + ([] if proof.settings.strict else release_warnings(results)),
        "key": proof.key,
        "passed": not problems,
        "problems": problems,
        "seconds": round(seconds, 1),
        "how": how,
        "isolation": proof.settings.isolation.describe(),
        "scores": {name: f"{r.score:g}/{r.max_score:g} {r.status}" for name, r in results.items()},
    }
    write_json_atomic(canary_path(proof.course, proof.aid, proof.key), record)
    if problems:
        raise CanaryFailed(
            f"{proof.aid}: the grader failed its own check, so nothing was graded or recorded:\n  "
            + "\n  ".join(problems)
        )
    proof.record = record
    return record


def publish_runs(proof: Proof) -> None:
    """Make this proof's runs (run into its own ``staging`` folder) the kept runs of its canary, in one rename:
    a grader proving the same canary at once never finds them half-written, and never removes another's.
    Where another grader's passed runs took the place first, they stay (the same inputs, the same runs)."""
    if proof.staging is None or not proof.staging.is_dir():
        return  # decided again from the kept runs: nothing ran
    shutil.rmtree(proof.keep, ignore_errors=True)
    try:
        proof.staging.rename(proof.keep)
    except OSError:
        discard_runs(proof)


def discard_runs(proof: Proof) -> None:
    if proof.staging is not None:
        shutil.rmtree(proof.staging, ignore_errors=True)


def prove(
    course: Course, aid: str, settings: Settings | None = None, say=None, probe: str = "always"
) -> tuple[Reference, dict]:
    """Probe, build the reference, run the canary (or find it passed in the cache), as ``settings`` say (the
    default where None); return the reference
    and the canary's record (with ``proof_seconds``, what this proof took). The source's solutions must earn
    full marks; the untouched release 0 where the rule is strict (:func:`is_strict`), else what it earns is
    listed in the record's ``warnings``. ``say`` gets a line as each step starts; ``probe`` as in
    :func:`begin_proof`."""
    proof = begin_proof(course, aid, settings, say, probe)
    if proof.record is None:
        started = time.monotonic()
        try:
            results = run_canary(course, aid, proof.reference, proof.settings, proof.staging, say)
            conclude(proof, results, "ran", time.monotonic() - started)
        finally:
            discard_runs(proof)  # (what conclude did not publish)
    return proof.reference, {**proof.record, "proof_seconds": proof.seconds}


class CanaryBeside:
    """The canary run on the students' workers, first in their queue, so that no core waits for it: the
    students' results that arrive before it passed are held, never recorded, until :meth:`arrive` has
    both of its results and :func:`conclude` passed (it raises otherwise). ``say`` gets a line as each of
    its results arrives, and a heartbeat until both have."""

    def __init__(self, proof: Proof, say=None):
        self.proof, self.results, self.started = proof, {}, time.monotonic()
        self.folder = canary_folder(proof.course, proof.aid)
        self.jobs = canary_jobs(proof.course, proof.aid, proof.reference, self.folder, proof.staging)
        self.sids = {job.sid for job in self.jobs}
        self.beat = Heartbeat(say, f"{proof.aid}: canary").start()

    def owns(self, result: Result) -> bool:
        return result.student_id in self.sids

    def arrive(self, result: Result) -> bool:
        """Take one of the canary's results; True once both are in and the canary passed."""
        self.results[result.student_id.split("/", 1)[1]] = result
        self.beat(canary_line(self.proof.aid, result, len(self.results)))
        if len(self.results) < len(CANARY):
            return False
        self.beat.stop()
        conclude(self.proof, self.results, "ran", time.monotonic() - self.started)
        return True

    def cleanup(self) -> None:
        self.beat.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
        discard_runs(self.proof)  # (what conclude did not publish)
