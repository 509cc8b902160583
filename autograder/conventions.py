"""``python -m autograder check AID``: the conventions an assignment's source must meet, stated once.

An assignment is ``source/<AID>/<AID>.ipynb`` (nbgrader's source format) and ``source/<AID>/samples/``.
:func:`problems` lists what breaks a convention, in plain words. ``check --update`` then releases the
assignment and regenerates its samples, so adding one is: write the source, run that one command.
"""

from __future__ import annotations

import re

from autograder.course import Course, is_graded_test, is_solution, nbgrader_meta

TOTAL_POINTS = 100
SETUP_ID = "setup"

CONVENTIONS = f"""\
1. the graded test cells' points add up to {TOTAL_POINTS};
2. the first code cell is the locked set-up cell (grade_id "{SETUP_ID}") that installs the course package on Colab;
3. one of the first three cells is a markdown rules box (it says "rules");
4. there are answer cells (nbgrader solution cells, each with ### BEGIN SOLUTION / ### END SOLUTION);
5. every graded test cell has hidden tests (### BEGIN HIDDEN TESTS) and calls a dlcourse.grading check;
6. every grade_id is unique."""


def problems(course: Course, aid: str) -> list[str]:
    """What in ``aid``'s source breaks a convention; [] when it meets them all."""
    nb = course.read_source(aid)
    found = []
    tests = [c for c in nb.cells if is_graded_test(c)]
    total = sum(float(nbgrader_meta(c).get("points", 0)) for c in tests)
    if total != TOTAL_POINTS:
        found.append(f"the graded test cells' points add up to {total:g}, not {TOTAL_POINTS}")
    code = [c for c in nb.cells if c.cell_type == "code"]
    first = nbgrader_meta(code[0]) if code else {}
    if first.get("grade_id") != SETUP_ID or not first.get("locked"):
        found.append(f'the first code cell must be the locked set-up cell with grade_id "{SETUP_ID}"')
    if not any(c.cell_type == "markdown" and "rules" in c.source.lower() for c in nb.cells[:3]):
        found.append("no rules box: one of the first three cells must be markdown that states the rules")
    answers = [c for c in nb.cells if is_solution(c)]
    if not answers:
        found.append("no answer cells (nbgrader solution cells)")
    for cell in answers:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" not in cell.source:
            found.append(f"answer cell {nbgrader_meta(cell)['grade_id']} has no ### BEGIN SOLUTION block")
    for cell in tests:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if "### BEGIN HIDDEN TESTS" not in cell.source:
            found.append(f"graded cell {grade_id} has no hidden tests")
        if not re.search(r"\bcheck(_equal|_range|_accuracy)?\(", cell.source):
            found.append(f"graded cell {grade_id} calls no check(...) from dlcourse.grading")
    ids = [nbgrader_meta(c).get("grade_id") for c in nb.cells if nbgrader_meta(c)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        found.append(f"grade_ids used more than once: {', '.join(map(str, duplicates))}")
    return found


def check(course: Course, aids: list[str], update: bool = False) -> int:
    """Print each assignment's verdict; with ``update``, release it and regenerate its samples."""
    from autograder.release import release
    from autograder.samples import write_samples

    failed = False
    for aid in aids:
        found = problems(course, aid)
        if found:
            failed = True
            print(f"{aid}: breaks the conventions:\n  " + "\n  ".join(found))
            continue
        print(f"{aid}: meets the conventions")
        if update:
            release(course, [aid])
            written = write_samples(course, aid)
            print(f"{aid}: released, and {len(written)} samples written to {course.samples(aid)}")
    if failed:
        print("The conventions:\n" + CONVENTIONS)
    return 1 if failed else 0
