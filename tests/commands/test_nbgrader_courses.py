"""Any nbgrader course, not only this one: nbgrader's own example course (``nbgrader quickstart``: ``ps1``
with two notebooks, an image, a header notebook, manually graded answers and a task cell) and the scenario
nbgrader's own test suite autogrades (its ``submitted-*.ipynb`` fixtures), built from the installed nbgrader
package, graded by plain ``nbgrader autograde`` and by this autograder in one run: the raw scores must be
equal per student and notebook. Where nbgrader does not hold (a submission that rewrites the gradebook, one
that kills its parent, metadata stripped by Colab), this autograder must.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.course import Course
from autograder.intake.samples import strip_nbgrader_metadata
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.nbgrader_courses import autograded_points, generate_assignment, hand_in, nbgrader, ours
from tests.fixtures.nbgrader_courses import quickstart as example_course

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="grading runs on Linux only")

FIXTURES = Path(__import__("nbgrader").__file__).parent / "tests" / "apps" / "files"


def per_notebook(result) -> dict[str, float]:
    found: dict[str, float] = {}
    for cell in result.cells:
        found[cell.notebook] = round(found.get(cell.notebook, 0.0) + cell.points, 2)
    return found


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    """nbgrader's example course, released, with the honest submissions graded by plain nbgrader first
    (into a copy of the course) and the same submissions handed in to this one."""
    base = tmp_path_factory.mktemp("quickstart")
    root = example_course(base)
    generate_assignment(root, "ps1")
    names = ["problem1", "problem2"]
    source = {n: nbformat.read(str(root / "source" / "ps1" / f"{n}.ipynb"), as_version=4) for n in names}
    release = {n: nbformat.read(str(root / "release" / "ps1" / f"{n}.ipynb"), as_version=4) for n in names}
    hand_in(root, "solutions", "ps1", source)
    hand_in(root, "release", "ps1", release)
    hand_in(root, "partly", "ps1", {"problem1": source["problem1"]})  # problem2 never handed in
    plain = base / "plain"
    shutil.copytree(root, plain)
    nbgrader(plain, "autograde", "ps1")
    return root


def test_quickstart_gets_nbgraders_scores(quickstart):
    """The same raw points per student and notebook as plain nbgrader, and the same written answers awaiting
    manual grading; every test of this course is decided in the kernel (plain asserts) and says so."""
    expected = autograded_points(quickstart.parent / "plain", "ps1")
    assert expected[("solutions", "problem1")] == 3.0  # nbgrader's own numbers on its own example
    assert expected[("release", "problem1")] == 0.0
    results = ours(quickstart, "ps1")
    assert set(results) == {"solutions", "release", "partly"}
    got = autograded_points(quickstart, "ps1")
    assert got == expected, (got, expected)
    for sid, result in results.items():
        assert per_notebook(result).get("problem1", 0.0) == expected[(sid, "problem1")]
        assert all(c.decided == "kernel" for c in result.cells)
    solutions = results["solutions"]
    assert solutions.score == solutions.max_score == 3.0 and solutions.status == "graded"
    awaiting = {w.grade_id for w in solutions.written if w.awaiting}
    assert {"sum_of_squares_equation", "sum_of_squares_application", "part-a", "part-b"} <= awaiting
    assert {w.notebook for w in solutions.written} == {"problem1", "problem2"}
    # a notebook that was not handed in: its written answers get 0, as nbgrader gives them
    partly = {w.grade_id: w for w in results["partly"].written}
    assert partly["part-a"].points == 0.0 and not partly["part-a"].answered
    # the executed notebooks and a feedback page per notebook, where nbgrader puts them
    for nb in ("problem1", "problem2"):
        assert (quickstart / "autograded" / "solutions" / "ps1" / f"{nb}.ipynb").is_file()


def test_quickstart_feedback_report_and_exports(quickstart):
    from autograder.outputs.feedback import write_feedback
    from autograder.outputs.report import write_report

    ours(quickstart, "ps1")
    pages = write_feedback(Course(root=quickstart), "ps1")
    names = {p.relative_to(quickstart / "feedback").as_posix() for p in pages}
    assert "solutions/ps1/problem1.html" in names and "solutions/ps1/problem2.html" in names
    page = (quickstart / "feedback" / "release" / "ps1" / "problem1.html").read_text()
    assert "decided in the kernel" in page and "correct_squares" in page
    assert "part-a" not in page  # problem2's answer is on problem2's page
    text, _ = write_report(Course(root=quickstart), "ps1", quickstart / "reports")
    assert "decided in the kernel" in text


def test_quickstart_regrade_exports_and_gradescope(quickstart, tmp_path):
    """A regrade decides the kernel-decided tests again from the kept outputs without running anything; the
    Canvas CSV and Gradescope's results hold the same points; late work reads the hand-in folder's time."""
    from autograder.commands.gradescope import results_json
    from autograder.commands.regrade import regrade
    from autograder.outputs.export import export_canvas

    course = Course(root=quickstart)
    first = ours(quickstart, "ps1", force=True)
    report = regrade(
        course,
        "ps1",
        Settings(limits=Limits(timeout=120, cell_timeout=60), isolation=resolve("auto"), workers=2),
    )
    assert {c.student_id: c.how for c in report.changes} == dict.fromkeys(first, "decided again")
    assert {c.student_id: c.new.score for c in report.changes} == {s: r.score for s, r in first.items()}
    table = export_canvas(course, tmp_path / "canvas.csv", ["ps1"]).read_text()
    assert "solutions,,,,,3" in table.replace('"', "")
    from autograder.outputs.similarity import write_similarity

    found, page, _ = write_similarity(course, "ps1", nb="problem1")
    assert page.name == "similarity-problem1.html" and found.students == ["partly", "solutions"]
    # both handed in the source's problem1: alike, and each equal to the published solution of `squares`
    assert [(p.first, p.second, p.flagged) for p in found.pairs] == [("partly", "solutions", True)]
    assert any(r.first == "solutions" and r.score == 1.0 for r in found.references)
    data = results_json(first["release"])
    assert data["score"] == 0 and any("decided in the kernel" in t.get("output", "") for t in data["tests"])


@pytest.fixture(scope="module")
def fixtures_course(tmp_path_factory) -> Path:
    """The scenario of nbgrader's own autograde test: a one-notebook assignment ``p1`` whose answer cells
    have no solution delimiters. Its source here is the ``changed`` fixture (whose answers pass the tests; the
    ``unchanged`` one that nbgrader's test uses as source fails its own test, which this grader's canary
    refuses), so the release and every test cell are the same as in nbgrader's test."""
    root = tmp_path_factory.mktemp("fixtures")
    (root / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "submitted-changed.ipynb", root / "source" / "ps1" / "p1.ipynb")
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "fixtures"\n')
    generate_assignment(root, "ps1")
    for sid in ("unchanged", "changed", "cheat-attempt", "cheat-attempt-alternative"):
        folder = root / "submitted" / sid / "ps1"
        folder.mkdir(parents=True)
        shutil.copy(FIXTURES / f"submitted-{sid}.ipynb", folder / "p1.ipynb")
    plain = root.parent / (root.name + "-plain")
    shutil.copytree(root, plain)
    nbgrader(plain, "autograde", "ps1")
    return root


def test_nbgraders_fixtures_get_nbgraders_scores(fixtures_course):
    expected = autograded_points(fixtures_course.parent / (fixtures_course.name + "-plain"), "ps1")
    # as measured with nbgrader: unchanged 1, changed 2, both attempts to hide tracebacks 1
    assert expected == {("unchanged", "p1"): 1.0, ("changed", "p1"): 2.0, ("cheat-attempt", "p1"): 1.0,
                        ("cheat-attempt-alternative", "p1"): 1.0}  # fmt: skip
    notes = []
    results = ours(fixtures_course, "ps1", on_notice=notes.append)
    assert autograded_points(fixtures_course, "ps1") == expected
    assert {sid: r.score for sid, r in results.items()} == {s: p for (s, _), p in expected.items()}
    # the release passes the test that only prints: reported, not refused (the canary is not strict here)
    assert notes and "foo" in notes[0] and "1 of 2" in notes[0]
    with Gradebook("sqlite:///" + str(fixtures_course / "gradebook.db")) as gb:
        unchanged = {g.name: g for g in gb.find_submission_notebook("p1", "ps1", "unchanged").grades}
        changed = {g.name: g for g in gb.find_submission_notebook("p1", "ps1", "changed").grades}
        assert unchanged["quux"].auto_score == 0 and not unchanged["quux"].needs_manual_grade
        assert changed["quux"].auto_score is None and changed["quux"].needs_manual_grade


def test_strict_canary_refuses_a_release_that_scores(fixtures_course):
    from autograder.grading.canary import CanaryFailed

    with pytest.raises(CanaryFailed, match="untouched release got 1 points"):
        ours(fixtures_course, "ps1", strict=True, force=True)


def test_where_nbgrader_does_not_hold(tmp_path):
    """Three hand-ins that break plain nbgrader's batch or grade: one rewrites the gradebook, one kills its
    parent (nbgrader's autograde process), one lost its metadata in Colab. Graded here with the honest
    solutions beside them: the gradebook stays whole, the honest student keeps full marks, the Colab copy
    is repaired and graded, the killer is graded on what ran."""
    isolation = resolve("auto")
    if not (isolation.namespaces or isolation.mode == "bubblewrap"):
        pytest.skip(
            "no namespaces or bubblewrap here: the sandbox cannot hide the gradebook (doctor says so)"
        )
    root = example_course(tmp_path)
    generate_assignment(root, "ps1")
    source = {
        n: nbformat.read(str(root / "source" / "ps1" / f"{n}.ipynb"), as_version=4)
        for n in ("problem1", "problem2")
    }

    def with_first_answer(code: str):
        nb = nbformat.from_dict(json.loads(json.dumps(source["problem1"])))
        answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "squares")
        answer.source += "\n" + code
        return {"problem1": nb, "problem2": source["problem2"]}

    hand_in(root, "honest", "ps1", source)
    hand_in(root, "colab", "ps1", {n: strip_nbgrader_metadata(nb) for n, nb in source.items()})
    wipe = (  # every gradebook.db up the folders it runs in, and the course's own by its path
        f"import os\nfolder, paths = os.getcwd(), [{str(root / 'gradebook.db')!r}]\n"
        "for _ in range(10):\n    paths.append(os.path.join(folder, 'gradebook.db'))\n    folder = os.path.dirname(folder)\n"
        "for p in paths:\n    try:\n        open(p, 'w').write('gone')\n    except OSError:\n        pass\n"
    )
    hand_in(root, "wiper", "ps1", with_first_answer(wipe))
    hand_in(
        root, "killer", "ps1", with_first_answer("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    )
    before = (root / "gradebook.db").read_bytes()[:16]
    results = ours(root, "ps1", isolation=isolation)
    assert (root / "gradebook.db").read_bytes()[:16] == before == b"SQLite format 3\x00"
    assert results["honest"].score == 3.0 and results["colab"].score == 3.0
    assert any("lost its nbgrader metadata" in n for n in results["colab"].notes)
    assert results["wiper"].score == 3.0  # it could not reach the gradebook; its answers are right
    # the kernel's parent is the sandbox's (its PID 1 or the driver), never the grader: graded on what ran
    assert not results["killer"].is_error and results["killer"].status in ("graded", "crashed")
    recorded = autograded_points(root, "ps1")
    assert recorded[("honest", "problem1")] == 3.0 and recorded[("colab", "problem1")] == 3.0


def _cell(kind: str, source: str, **meta):
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    if meta:
        cell.metadata["nbgrader"] = {
            "schema_version": 3,
            "locked": False,
            "solution": False,
            "grade": False,
            **meta,
        }
    return cell


def realistic_course(root: Path) -> None:
    """What real courses hold: a notebook whose name has a space and a non-ASCII letter, a helper module and a
    data folder beside it (read by the tests), magics, a test that imports pytest, a test worth 0 points, a
    task cell, a manually graded code answer, a kernelspec that is not ``python3``, a header notebook."""
    (root / "source" / "hw1" / "data").mkdir(parents=True)
    (root / "source" / "hw1" / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "source" / "hw1" / "data" / "values.csv").write_text("1,2,3\n")
    header = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Course header")])
    nbformat.write(header, str(root / "source" / "header.ipynb"))
    (root / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "real"\nc.IncludeHeaderFooter.header = "source/header.ipynb"\n'
        "c.Execute.timeout = 60\n"
    )
    cells = [
        _cell(
            "code",
            "%load_ext autoreload\n%autoreload 2\nimport numpy as np\nfrom helpers import double",
            grade_id="setup",
            locked=True,
        ),
        _cell(
            "code",
            "def total(path):\n    ### BEGIN SOLUTION\n    return sum(int(v) for v in open(path).read().split(','))\n    ### END SOLUTION",
            grade_id="total",
            solution=True,
        ),
        _cell(
            "code",
            "assert total('data/values.csv') == 6\n### BEGIN HIDDEN TESTS\nassert double(total('data/values.csv')) == 12\n### END HIDDEN TESTS",
            grade_id="test_total",
            grade=True,
            points=2,
        ),
        _cell(
            "code",
            "import pytest\nwith pytest.raises(FileNotFoundError):\n    total('data/missing.csv')",
            grade_id="test_raises",
            grade=True,
            points=1,
        ),
        _cell(
            "code",
            "print('a check worth nothing')\nassert total('data/values.csv') > 0",
            grade_id="test_free",
            grade=True,
            points=0,
        ),
        _cell(
            "code",
            "def explain():\n    ### BEGIN SOLUTION\n    return 'sums'\n    ### END SOLUTION",
            grade_id="explain",
            solution=True,
            grade=True,
            points=2,
        ),
        _cell("markdown", "Describe the data file.", grade_id="task", locked=True, task=True, points=1),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "display_name": "Course Python",
        "language": "python",
        "name": "course-python",
    }
    nbformat.write(nb, str(root / "source" / "hw1" / "Übung 1.ipynb"))


def test_what_real_courses_contain(tmp_path):
    root = tmp_path / "real"
    realistic_course(root)
    generate_assignment(root, "hw1")
    release = nbformat.read(str(root / "release" / "hw1" / "Übung 1.ipynb"), as_version=4)
    assert release.cells[0].source == "# Course header"  # nbgrader's header, as configured
    source = nbformat.read(str(root / "source" / "hw1" / "Übung 1.ipynb"), as_version=4)
    hand_in(root, "solutions", "hw1", {"Übung 1": source})
    hand_in(root, "release", "hw1", {"Übung 1": release})
    plain = tmp_path / "plain"
    shutil.copytree(root, plain)
    # the course's kernel, as its instructor has it installed (plain nbgrader starts the kernel the notebook names)
    kernels = tmp_path / "jupyter" / "kernels" / "course-python"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Course Python",
                "language": "python",
            }
        )  # fmt: skip
    )
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    env["JUPYTER_PATH"] = str(tmp_path / "jupyter")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", "hw1"],
        cwd=plain,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = autograded_points(plain, "hw1")
    assert expected[("solutions", "Übung 1")] == 3.0  # 2 + 1 + 0: nbgrader's own count
    notes = []
    results = ours(root, "hw1", on_notice=notes.append)
    assert autograded_points(root, "hw1") == expected
    assert results["solutions"].score == 3.0 and results["release"].score == 0.0
    assert notes == []  # the release passes only the test worth 0 points: it earns nothing
    assert {w.grade_id for w in results["solutions"].written} == {"explain", "task"}
    executed = root / "autograded" / "solutions" / "hw1" / "Übung 1.ipynb"
    assert executed.is_file()


def test_what_a_hand_in_holds_besides_its_notebooks_is_read_as_untrusted(tmp_path):
    """The student's other files go to the run (as nbgrader gives them), read by the grader without following a
    link, without blocking on a FIFO, bounded in size, count and depth; the source's own files win."""
    from autograder.intake.handin import MAX_DEPTH, assignment_files, submission_digest

    root = tmp_path / "course"
    (root / "source" / "ps1").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), str(root / "source" / "ps1" / "p1.ipynb"))
    (root / "source" / "ps1" / "data.csv").write_text("the instructor's")
    hand = root / "submitted" / "s" / "ps1"
    (hand / "sub").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), str(hand / "p1.ipynb"))
    (hand / "data.csv").write_text("forged")
    (hand / "mine.py").write_text("x = 1")
    (hand / "sub" / "more.txt").write_text("ok")
    os.symlink("/etc/shadow", hand / "link.txt")
    os.mkfifo(hand / "pipe")
    with open(hand / "huge.bin", "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: over the bound without using the disk
    deep = hand
    for level in range(MAX_DEPTH + 5):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_text("too deep")
    target = tmp_path / "files"
    target.mkdir()
    notes = assignment_files(Course(root=root), "ps1", hand, target)
    assert (target / "data.csv").read_text() == "the instructor's"
    assert (target / "mine.py").read_text() == "x = 1" and (target / "sub" / "more.txt").read_text() == "ok"
    assert (
        not (target / "link.txt").exists()
        and not (target / "pipe").exists()
        and not (target / "huge.bin").exists()
    )
    assert not list(target.rglob("deep.txt"))
    assert not (target / "p1.ipynb").exists()  # notebooks run on their own
    text = "\n".join(notes)
    assert "link.txt" in text and "pipe" in text and "huge.bin" in text and "nested deeper" in text
    first = submission_digest(hand, ["p1"])
    (hand / "mine.py").write_text("x = 2")
    assert submission_digest(hand, ["p1"]) != first  # a changed helper is a new hand-in


def test_a_kernel_decided_cell_earns_what_nbgrader_gives_never_more(tmp_path):
    """A test cell's value is the student's: whatever number it shows, the cell earns between 0 and its points."""
    from autograder.grading.verify import kernel_cell

    def value(text):
        return [
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "metadata": {},
                "data": {"text/plain": text},
            }
        ]

    assert kernel_cell("t", 2.0, []).points == 2.0
    assert kernel_cell("t", 2.0, None).points == 0.0  # never ran
    assert kernel_cell("t", 2.0, value("1.5")).points == 1.5  # partial credit, as nbgrader gives it
    for text in ("nan", "-3", "inf", "1e308", "3", "'text'", "[1, 2]"):
        points = kernel_cell("t", 2.0, value(text)).points
        assert 0.0 <= points <= 2.0 and points == points, (text, points)
    stderr = [{"output_type": "stream", "name": "stderr", "text": "warning"}]
    assert kernel_cell("t", 2.0, stderr).points == 0.0  # nbgrader's rule
    assert kernel_cell("t", 2.0, [{"output_type": "weird"}, 7, "x"]).points in (0.0, 2.0)
