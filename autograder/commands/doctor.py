"""``python -m autograder doctor``: what isolation is in force here, what is missing and how to get it,
and whether each assignment's canary passes (its source's solutions full marks, its release 0)."""

from __future__ import annotations

import os

from autograder.commands.workflows import settings_from
from autograder.course import Course
from autograder.grading.canary import probe_isolation, prove
from autograder.grading.reference import environment
from autograder.runner.isolation import INSTALL_BUBBLEWRAP, IsolationError, bubblewrap, resolve


def doctor(course: Course, args, aids: list[str] | None = None) -> int:
    healthy = True
    print("machine: " + ", ".join(f"{k} {v}" for k, v in environment().items()))
    print(
        f"grader runs as {'root: each submission gets its own uid' if os.geteuid() == 0 else 'a normal user'}"
    )
    path, why = bubblewrap()
    print(f"bubblewrap: {'works (' + path + ')' if path else why}")
    basic = resolve("basic")
    print(
        "namespaces without bubblewrap: "
        + (
            "available (basic mode has no network and hides the course)"
            if basic.namespaces
            else "NOT available (basic mode has no network or file-system isolation; as a normal user, enable "
            "unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1)"
        )
    )
    if not path:
        print(f"  to get the full sandbox: {INSTALL_BUBBLEWRAP}")
    try:
        settings = settings_from(args, course)
        print(f"--isolation {args.isolation}: {settings.isolation.describe()}")
        report = probe_isolation(course, settings.limits, settings.isolation)
        print(
            f"probe: Python starts in the sandbox as uid {report['uid']}; network interfaces "
            f"{report['interfaces']}; private folders it can read: {report['visible'] or 'none'}"
        )
    except IsolationError as err:
        print(f"--isolation {args.isolation}: REFUSED: {err}")
        return 1
    for aid in aids or course.assignments():
        if not all(course.release_notebook(aid, nb).is_file() for nb in course.notebooks(aid) or [None]):
            print(f"{aid}: canary not run: not released (python -m autograder release {aid})")
            healthy = False
            continue
        try:
            _, record = prove(
                course,
                aid,
                settings,
                say=lambda line: print(f"  {line}", flush=True),  # the proof's progress
            )
            scores = record.get("scores", {})
            print(
                f"{aid}: canary passed (solutions {scores.get('solutions', 'full marks')}, "
                f"release {scores.get('release', '0')}; {record.get('seconds', 0):g} s when it last ran)"
            )
            for line in record.get("warnings", []):
                print(f"  note: {line}")
        except RuntimeError as err:
            healthy = False
            print(f"{aid}: canary FAILED: {err}")
    return 0 if healthy else 1
