"""Where no namespace covers the course (no bubblewrap, no user namespaces: a normal user on Ubuntu 24.04 without
bubblewrap, a container whose seccomp refuses them), a submission's code runs beside the course's files. If its user
may enter them, it reads the source's solutions, the reference's hidden values and the gradebook by the names the
public layout gives, and earns what it never computed. ``--isolation auto`` fell back to that mode and graded. It
is refused now, saying how to fix it; as root, whose submissions run as users of their own, a course readable by its
owner only is graded."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder.course import Course, nbgrader_meta
from autograder.grading import canary
from autograder.grading.batch import grade
from autograder.grading.canary import probe_isolation
from autograder.grading.record import load_result
from autograder.intake.release import release
from autograder.runner.isolation import OPEN_COURSE, Isolation, IsolationError
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.refusal import grading_refused_here
from tests.fixtures.toy_course import ROOT, make_course, submit

LIMITS = Limits(timeout=90, cell_timeout=30, memory_mb=2048)
REFUSED = "could read the source's solutions, the reference's hidden values and the gradebook"


class Probed:
    """A sandbox factory whose one sandbox reports ``report`` when probed (what the child's probe finds)."""

    def __init__(self, report: dict):
        self.report = report

    def __call__(self, limits, slot=0, warm=(), isolation=None, private=()):
        return self

    def probe(self) -> dict:
        return dict(self.report)

    def cleanup(self) -> None:
        pass


@pytest.mark.parametrize("separate_uid", [False, True], ids=["normal user", "root"])
def test_without_namespaces_a_course_the_submissions_user_may_enter_is_refused(tmp_path, separate_uid):
    course = Course(root=make_course(tmp_path / "course"))
    bare = Isolation("basic", namespaces=False, separate_uid=separate_uid, runner="fork")
    seen = {"uid": 1000, "interfaces": ["eth0", "lo"], "python": "ok", "visible": []}
    for enterable in ([str(course.root)], [str(course.cache)], None):  # None: a report that does not say
        report = {**seen, **({} if enterable is None else {"enterable": ["/tmp", *enterable]})}
        with pytest.raises(IsolationError, match=REFUSED) as refused:
            probe_isolation(course, LIMITS, bare, sandboxes=Probed(report))
        fix = "chmod -R go-rwx" if separate_uid else "run the grader as root"
        assert fix in str(refused.value) and "install bubblewrap" in str(refused.value)
    # a course that holds the course package every kernel imports (this repository) cannot be closed by chmod
    here = Course(root=ROOT)
    with pytest.raises(IsolationError, match=REFUSED) as refused:
        probe_isolation(here, LIMITS, bare, sandboxes=Probed({**seen, "enterable": [str(ROOT)]}))
    assert "chmod" not in str(refused.value)
    assert ("cannot be closed to them" in str(refused.value)) == separate_uid
    # the course out of its user's reach (root's submissions under their own uid, the course private): graded
    assert probe_isolation(course, LIMITS, bare, sandboxes=Probed({**seen, "enterable": ["/tmp"]}))
    # with namespaces the course is covered by empty folders, whatever the permissions: nothing to refuse
    covered = Isolation("basic", namespaces=True, separate_uid=separate_uid, runner="fork")
    report = {**seen, "interfaces": ["lo"], "enterable": [str(course.root)]}
    assert probe_isolation(course, LIMITS, covered, sandboxes=Probed(report))


class ByPermissions(Probed):
    """A probe that finds the course enterable exactly when others may enter its root (as a sandbox user would)."""

    def probe(self) -> dict:
        root = self.report["root"]
        return {**self.report, "enterable": [root] if os.stat(root).st_mode & 0o001 else []}


def test_a_course_opened_after_its_probe_passed_is_probed_again_and_refused(tmp_path):
    """A probe that passed is kept for the process (a service grades many submissions with one); a course closed
    when it passed and opened later (a chmod, a copy that reset the modes) must not keep that pass."""
    course = Course(root=make_course(tmp_path / "course"))
    bare = Isolation("basic", namespaces=False, separate_uid=True, runner="fork")
    sandboxes = ByPermissions({"uid": 1000, "interfaces": ["eth0", "lo"], "python": "ok", "visible": [],
                               "root": str(course.root)})  # fmt: skip
    course.root.chmod(0o700)
    assert probe_isolation(course, LIMITS, bare, sandboxes=sandboxes)
    course.root.chmod(0o755)
    with pytest.raises(IsolationError, match=REFUSED):
        probe_isolation(course, LIMITS, bare, sandboxes=sandboxes)


FROM_THE_SOURCE = """import glob, json

for path in glob.glob("/tmp/dlcourse-open-*/course/source/T1/T1.ipynb"):  # (the test's; an attacker searches)
    for cell in json.load(open(path))["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") in ("square", "scale"):
            exec("".join(cell["source"]))
"""


@pytest.mark.slow
def test_without_namespaces_a_submission_that_reads_the_course_is_never_graded(monkeypatch):
    """The real sandbox, with no namespaces: a hand-in that answers nothing and runs the instructor's solutions,
    read from the course's source folder, is refused before it runs (before the fix it earned 100)."""
    home = Path(tempfile.mkdtemp(prefix="dlcourse-open-"))  # under /tmp, as a course anyone may read
    try:
        home.chmod(0o755)
        course = Course(root=make_course(home / "course"))
        for path in [course.root, *course.root.rglob("*")]:  # as a umask of 022 leaves them
            path.chmod(0o755 if path.is_dir() else 0o644)
        release(course, ["T1"])
        forged = nbformat.read(str(course.release_notebook("T1")), as_version=4)
        answer = next(c for c in forged.cells if nbgrader_meta(c).get("grade_id") == "square")
        answer.source = FROM_THE_SOURCE
        submit(course, "mallory", forged)
        root = os.geteuid() == 0
        bare = Isolation("basic", namespaces=False, separate_uid=root, runner="fork")
        monkeypatch.setattr(canary, "_PROBED", {})
        with pytest.raises(IsolationError) as refused:
            grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=bare))
        assert load_result(course, "T1", "mallory") is None
        if "cannot reach this Python" in str(refused.value):  # root, with Python behind a private folder
            pytest.skip(
                "the sandbox's own user cannot start this Python without namespaces: refused before it"
            )
        assert REFUSED in str(refused.value), refused.value
        if (
            root
        ):  # the course readable by root alone: graded, and the solutions are out of the hand-in's reach
            for path in [course.root, *course.root.rglob("*")]:
                path.chmod(path.stat().st_mode & 0o700)
            monkeypatch.setattr(canary, "_PROBED", {})
            (mallory,) = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=bare))
            assert mallory.score == 0, mallory
    finally:
        shutil.rmtree(home, ignore_errors=True)


MADE_UP = """
import os

from autograder.runner import isolation
from autograder.runner.isolation import OPEN_COURSE, Isolation, IsolationError, OpenCourse

if os.environ.get("MADE_UP_REFUSED"):  # as on a machine with neither bubblewrap nor namespaces
    isolation._CACHE[("auto", "auto")] = Isolation("basic", namespaces=False, runner="fork")


def test_that_grades_where_grading_is_refused():
    raise OpenCourse(OPEN_COURSE + ", and a submission's code runs as the grader's own user")


def test_whose_grader_said_so():
    assert False, "the grader it started said: " + OPEN_COURSE


def test_whose_grader_printed_it():
    import sys

    print("error: " + OPEN_COURSE, file=sys.stderr)  # as the command line's main() does, captured
    assert False, "the grader exited 2"


def test_whose_sandbox_is_broken():
    raise IsolationError("the sandbox could not start Python")
"""


def test_the_suite_skips_a_test_that_grades_where_grading_is_refused_and_fails_any_other_isolation_error(
    tmp_path,
):
    """On a machine that refuses to grade, the suite says why (each test that grades is skipped with the grader's
    reason, raised in the test or said by a grader it started), as the bubblewrap tests skip where bubblewrap
    cannot run; a sandbox that fails for another reason still fails its test, and where grading is not refused
    (this machine's namespaces), nothing is skipped."""
    import subprocess
    import sys

    (tmp_path / "test_made_up.py").write_text(MADE_UP)

    def run(**env):
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:randomly",
             "-rfs", "-q", str(tmp_path / "test_made_up.py")],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
        ).stdout  # fmt: skip

    refused = run(MADE_UP_REFUSED="1")
    assert "1 failed, 3 skipped" in refused, refused[-2000:]
    assert refused.count("grading refused here: " + OPEN_COURSE) == 3, refused[-2000:]
    assert "FAILED" in refused and "test_whose_sandbox_is_broken" in refused
    if not grading_refused_here():
        assert "4 failed" in run(), "a test was skipped where grading is not refused"
