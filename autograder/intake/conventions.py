"""``python -m autograder check AID``: the conventions an assignment's source must meet, stated once.

An assignment is ``source/<AID>/<AID>.ipynb`` (nbgrader's source format) and ``source/<AID>/samples/``.
:func:`problems` lists what breaks a convention, in plain words. ``check --update`` then releases the
assignment and regenerates its samples, so adding one is: write the source, run that one command.
"""

from __future__ import annotations

import ast
import re
import textwrap

from autograder.course import (
    Course,
    demonstration_problems,
    is_graded_test,
    is_solution,
    is_written,
    nbgrader_meta,
)

TOTAL_POINTS = 100
SETUP_ID = "setup"
MAX_KERNEL_POINTS = 5  # what a test cell may earn on the kernel's word (decided or measured in the kernel)

CONVENTIONS = f"""\
1. the graded test cells' points add up to {TOTAL_POINTS};
2. the first code cell is the locked set-up cell (grade_id "{SETUP_ID}") that installs the course package on Colab;
3. one of the first three cells is a markdown rules box (it says "rules");
4. there are answer cells (nbgrader solution cells, each with ### BEGIN SOLUTION / ### END SOLUTION);
5. every graded test cell has hidden tests (### BEGIN HIDDEN TESTS) and calls a dlcourse.grading check;
6. every grade_id is unique;
7. a written answer (graded by hand, its points on top of the {TOTAL_POINTS}) is a markdown answer cell with points and
   grade_id "written_<name>", right after a read-only markdown prompt; its source is one solution block
   that holds "**Rubric (N points):**" (N its points), then its criteria as list items, each naming its
   points ("- (2 points) ...", adding up to N), then "**Model answer:**" and the answer;
8. a hidden check records the student's value only (check("name", value)): the reference, the source's own
   solutions run by the grader, decides it. A check inside ### BEGIN HIDDEN TESTS that is given an expected
   value is graded as hidden all the same (its own share, its expected value never shown); `check` notes it;
9. a test cell decided in the kernel (metadata dlcourse.decided_in_kernel) is worth at most {MAX_KERNEL_POINTS} points, and
   cases measured in the kernel (dlcourse.measured_in_kernel) have their points in dlcourse.case_points, at most
   {MAX_KERNEL_POINTS} a cell.

An assignment in this format is one notebook, source/<AID>/<AID>.ipynb, whose first code cell is the set-up
(it installs the course package on Colab; `python -m autograder new AID` writes a working starter). Other
nbgrader courses (any notebooks, plain-assert tests) are graded without these conventions."""

WRITTEN_PREFIX = "written_"
RUBRIC = re.compile(r"\*\*Rubric \((\d+(?:\.\d+)?) points?\):?\*\*:?")
# a criterion: a list item that names its points, e.g. "- (2 points) names the gap" or "- 0-2 points: ..."
CRITERION = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t].*?\b(\d+(?:\.\d+)?)[ \t]*(?:points?|pts?)\b", re.M)


def hidden_checks_with_expected(source: str) -> list[str]:
    """The names of the checks inside the hidden blocks of a test cell's ``source`` that are given an expected
    value (a third positional argument or ``expected=``): such a check is public, not hidden."""
    found = []
    for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, re.S):
        try:
            tree = ast.parse(textwrap.dedent(block))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in ("check", "check_equal") and (
                len(node.args) > 2 or any(k.arg == "expected" for k in node.keywords)
            ):
                first = node.args[0] if node.args else None
                found.append(first.value if isinstance(first, ast.Constant) else ast.unparse(first or node))
    return found


def problems(course: Course, aid: str) -> list[str]:
    """What in ``aid``'s source breaks a convention; [] when it meets them all."""
    if course.notebooks(aid) != [aid]:
        return [
            f"an assignment in this course's format is one notebook, {aid}/{aid}.ipynb; {aid} has "
            f"{', '.join(n + '.ipynb' for n in course.notebooks(aid)) or 'none'} (an nbgrader course's "
            "assignments are graded as they are, without these conventions)"
        ]
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
    found += written_problems(nb)
    found += demonstration_problems(nb)
    for cell in tests:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if "### BEGIN HIDDEN TESTS" not in cell.source:
            found.append(f"graded cell {grade_id} has no hidden tests")
        if not re.search(r"\bcheck(_[a-z_]+)?\(", cell.source):
            found.append(f"graded cell {grade_id} calls no check(...) from dlcourse.grading")
        found += kernel_points_problems(cell)

    ids = [nbgrader_meta(c).get("grade_id") for c in nb.cells if nbgrader_meta(c)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        found.append(f"grade_ids used more than once: {', '.join(map(str, duplicates))}")
    return found


def kernel_points_problems(cell) -> list[str]:
    """Points decided in the kernel (a cell's ``decided_in_kernel``, or cases it lists as ``measured_in_kernel``)
    are at most :data:`MAX_KERNEL_POINTS` a test cell, and each such case's points are declared in ``case_points``
    (so the rules table can say them): the kernel's word is labelled, and it is never worth a part."""
    meta = cell.metadata.get("dlcourse", {})
    grade_id = nbgrader_meta(cell).get("grade_id")
    found = []
    if meta.get("decided_in_kernel"):
        points = float(nbgrader_meta(cell).get("points", 0))
        if points > MAX_KERNEL_POINTS:
            found.append(
                f"graded cell {grade_id} is decided in the kernel and worth {points:g} points: at most "
                f"{MAX_KERNEL_POINTS:g} (move the rest to cases decided outside it)"
            )
    measured = meta.get("measured_in_kernel") or {}
    if measured:
        case_points = meta.get("case_points") or {}
        missing = sorted(set(measured) - set(case_points))
        if missing:
            found.append(
                f"graded cell {grade_id}: cases measured in the kernel need their points in case_points: "
                + ", ".join(missing)
            )
        total = sum(float(case_points.get(name, 0)) for name in measured)
        if total > MAX_KERNEL_POINTS:
            found.append(
                f"graded cell {grade_id}: its cases measured in the kernel are worth {total:g} points, "
                f"at most {MAX_KERNEL_POINTS:g}"
            )
    return found


def written_problems(nb) -> list[str]:
    """What breaks the format of written answers (convention 7)."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if meta.get("solution") and meta.get("grade") and cell.cell_type == "code":
            found.append(f"answer cell {gid} has points: code answers are graded by test cells, not by hand")
        if not is_written(cell):
            if cell.cell_type == "markdown" and meta.get("solution"):
                found.append(
                    f"markdown answer cell {gid} has no points: a written answer needs grade and points"
                )
            continue
        points = float(meta.get("points") or 0)
        if not str(gid).startswith(WRITTEN_PREFIX):
            found.append(f"written answer {gid}: its grade_id must start with {WRITTEN_PREFIX!r}")
        if points <= 0:
            found.append(f"written answer {gid} has no points")
        if meta.get("locked"):
            found.append(f"written answer {gid} is locked: the student must be able to write in it")
        before = nb.cells[index - 1] if index else None
        if before is None or before.cell_type != "markdown" or not nbgrader_meta(before).get("locked"):
            found.append(f"written answer {gid} does not follow a read-only markdown prompt")
        text = cell.source
        if not (
            text.lstrip().startswith("### BEGIN SOLUTION") and text.rstrip().endswith("### END SOLUTION")
        ):
            found.append(
                f"written answer {gid}: its source must be one ### BEGIN SOLUTION ... ### END SOLUTION block"
            )
        rubric = RUBRIC.search(text)
        if not rubric:
            found.append(
                f"written answer {gid} has no rubric (**Rubric ({points:g} points):** and its criteria)"
            )
            continue
        if float(rubric.group(1)) != points:
            found.append(
                f"written answer {gid}: its rubric is out of {rubric.group(1)} points, the cell is worth {points:g}"
            )
        model = text.find("**Model answer")
        criteria = CRITERION.findall(text[rubric.end() : model if model > 0 else len(text)])
        if not criteria:
            found.append(
                f"written answer {gid}: its rubric lists no criterion with its points, e.g. '- (2 points) ...'"
            )
        elif abs(sum(map(float, criteria)) - points) > 1e-9:
            found.append(
                f"written answer {gid}: its rubric's criteria give {sum(map(float, criteria)):g} points, "
                f"the cell is worth {points:g}"
            )
        if model < 0 or not text[model:].split("**", 2)[-1].replace("### END SOLUTION", "").strip():
            found.append(f"written answer {gid} has no model answer (**Model answer:** ...)")
    return found


def notes(course: Course, aid: str) -> list[str]:
    """What in ``aid``'s source the grader handles but an author may not mean: hidden checks given an
    expected value (hidden conditions, see :func:`autograder.grading.reference.hidden_case_names` and
    :func:`autograder.grading.reference.answer_in_kernel`)."""
    found = []
    for cell in course.read_source(aid).cells:
        if is_graded_test(cell):
            for name in hidden_checks_with_expected(cell.source):
                found.append(
                    f"{nbgrader_meta(cell).get('grade_id')}: the hidden check {name} is given an expected value; "
                    "the value is in the test, so the kernel holds it: a condition that can take points away, never "
                    "earn them (its value never shown); check(name, value) compares with the solution's instead"
                )
    return found


def check(course: Course, aids: list[str], update: bool = False) -> int:
    """Print each assignment's verdict; with ``update``, release it and regenerate its samples."""
    from autograder.intake.release import release
    from autograder.intake.samples import write_samples

    failed = False
    for aid in aids:
        found = problems(course, aid)
        if found:
            failed = True
            print(f"{aid}: breaks the conventions:\n  " + "\n  ".join(found))
            continue
        print(f"{aid}: meets the conventions")
        for line in notes(course, aid):
            print(f"  note: {line}")
        if update:
            release(course, [aid])
            written = write_samples(course, aid)
            print(f"{aid}: released, and {len(written)} samples written to {course.samples(aid)}")
    if failed:
        print("The conventions:\n" + CONVENTIONS)
    return 1 if failed else 0
