"""The way back, attacked a second time: hostile notebooks, graded through the real pipeline, that go after
what the first round's tests left open. Each test states what must happen: the student's honest grade (never
a grader error), nothing of the hidden tests or the instructor's solutions in a page anyone opens, and a
perfect submission graded after them in the same worker that still gets full marks."""

from __future__ import annotations

import html
import json
import unicodedata

import nbformat
import pytest

from autograder.course import Course, nbgrader_meta
from autograder.grading.batch import grade
from autograder.grading.reference import load_reference
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.outputs.feedback import write_feedback
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures import toy_course
from tests.fixtures.hostile import answered, with_cells
from tests.fixtures.warm import warm_toy

LIMITS = Limits(timeout=60, cell_timeout=20, memory_mb=2048, nproc=256)
MODES = [("basic", "fork"), ("basic", "spawn"), ("bubblewrap", "spawn")]

# T1 with one more hidden case, compared exactly (as A1's shape checks are)
EXACT_CASE = 'check_equal("t1.square.shape", square(np.zeros(3)).shape)\n'


def source_with_an_exact_case() -> nbformat.NotebookNode:
    nb = toy_course.source_notebook()
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "test_square":
            cell.source = cell.source.replace("import check\n", "import check, check_equal\n").replace(
                "### END HIDDEN TESTS", EXACT_CASE + "### END HIDDEN TESTS"
            )
    return nb


# A results index whose line is nested deeper than a JSON parser can follow.
NESTED_INDEX = """
import os, pathlib
capture = pathlib.Path(os.environ["DLCOURSE_CAPTURE"])
capture.mkdir(parents=True, exist_ok=True)
(capture / "cases.jsonl").write_text("[" * 200_000 + "\\n")
"""

# The exact case's value replaced by a value numpy cannot compare with the reference's (a void dtype, which
# loads without pickle), by a hook that runs at the end of every cell, before the driver takes what it recorded.
VOID_VALUE = """
def install_void_writer():
    import json, os, pathlib, numpy
    from IPython import get_ipython

    capture = pathlib.Path(os.environ["DLCOURSE_CAPTURE"])

    def rewrite(result):
        index = capture / "cases.jsonl"
        for line in index.read_text().splitlines() if index.exists() else []:
            entry = json.loads(line)
            if entry["name"] == "t1.square.shape":
                numpy.save(capture / entry["file"], numpy.zeros(1, dtype="V8"), allow_pickle=False)

    get_ipython().events.register("post_run_cell", rewrite)


install_void_writer()
"""

# Text with a lone surrogate (valid JSON as an escape, never valid UTF-8) in an output and in an error the
# test cell stops with: the kernel packs its messages with ASCII escapes.
LONE_SURROGATE = """import json
from IPython import get_ipython

get_ipython().kernel.session.pack = lambda message: json.dumps(message, default=str).encode()
print("lone \\ud800 surrogate")


def square(x):
    raise ValueError("lone \\ud800 surrogate")
"""

# The hidden test cell's source, saved by a hook and printed by a later answer cell with a zero-width space
# between its characters: a browser shows it as it is written.
SAVE_CELLS = """
from IPython import get_ipython
seen_cells = []
get_ipython().events.register("post_run_cell", lambda result: seen_cells.append(result.info.raw_cell))
"""
PRINT_DISGUISED = '''def scale(x, factor):
    """Multiply x (any shape) by the number factor."""
    return x * factor


print("\\u200b".join("\\n".join(seen_cells)))
'''

# The same text in pieces of 8 characters, stdout and stderr in turn: each output holds no whole line of a
# hidden test, and the feedback page joins them.
PRINT_IN_PIECES = '''import sys


def scale(x, factor):
    """Multiply x (any shape) by the number factor."""
    return x * factor


text = "".join(cell.split("### BEGIN HIDDEN TESTS")[-1] for cell in seen_cells if "### BEGIN HIDDEN" in cell)
for start in range(0, len(text), 8):
    stream = (sys.stdout, sys.stderr)[start // 8 % 2]
    stream.write(text[start : start + 8])
    stream.flush()
'''

# Right on the public case, off by 1e-3 on the hidden one: the message of the failed hidden case is all a
# student needs to read an expected value.
NEAR_MISS = '''def square(x):
    """Square every entry of the array x, shape (N,) -> (N,)."""
    return x**2 + (x.size > 2) * 1e-3
'''

# The hidden test calls square(): square reads the running cell's source (IPython's ``In``) and raises with a
# hidden line as its message, which the grader puts in the case's "not checked: the test cell stopped with ..."
RAISE_HIDDEN = '''def square(x):
    """Square every entry of the array x, shape (N,) -> (N,)."""
    if x.size > 2:
        source = get_ipython().user_ns["In"][-1]
        raise RuntimeError(source.split("### BEGIN HIDDEN TESTS")[-1][:250])
    return x**2
'''


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One course, every attack below and a perfect submission graded last, in one worker."""
    root = tmp_path_factory.mktemp("round2") / "course"
    course = Course(root=toy_course.make_course(root, notebook=source_with_an_exact_case()))
    release(course, ["T1"])
    blank = nbformat.read(str(course.release_notebook("T1")), as_version=4)
    perfect = filled(course, "T1")
    attacks = {
        "nested_index": with_cells(blank, NESTED_INDEX),
        "void_value": with_cells(perfect, VOID_VALUE),
        "lone_surrogate": answered(perfect, square=LONE_SURROGATE),
        "zero_width": with_cells(answered(perfect, scale=PRINT_DISGUISED), SAVE_CELLS),
        "in_pieces": with_cells(answered(perfect, scale=PRINT_IN_PIECES), SAVE_CELLS),
        "near_miss": answered(perfect, square=NEAR_MISS),
        "raise_hidden": answered(perfect, square=RAISE_HIDDEN),
        "zz_perfect": perfect,
    }
    for sid, nb in attacks.items():
        toy_course.submit(course, sid, nb)
    results = {
        r.student_id: r
        for r in grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=resolve("auto")))
    }
    feedback_errors = {}
    for sid in attacks:  # one page at a time: a page that cannot be written must not hide the others
        try:
            write_feedback(course, "T1", students=[sid])
        except Exception as err:  # kept, so that each test below says what it needs
            feedback_errors[sid] = err
    return course, results, feedback_errors


def page(course: Course, sid: str) -> str:
    return (course.root / "feedback" / sid / "T1" / "T1.html").read_text(encoding="utf-8")


def hidden_lines(course: Course) -> list[str]:
    """The hidden tests' lines that say something, whitespace removed."""
    source = nbformat.read(str(course.source_notebook("T1")), as_version=4)
    found = []
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            inside = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            found += [
                "".join(line.split()) for line in inside.splitlines() if len("".join(line.split())) >= 12
            ]
    return found


def as_read(text: str) -> str:
    """What a reader sees: entities decoded, invisible format characters (zero-width spaces, joiners, soft
    hyphens) and whitespace removed."""
    text = html.unescape(text)
    return "".join(c for c in text if unicodedata.category(c) != "Cf" and not c.isspace())


@pytest.mark.slow
def test_a_results_index_nested_too_deep_to_parse_is_the_students_grade_not_a_grader_error(batch):
    """A line of ``cases.jsonl`` nested 200,000 deep makes ``load_cases`` raise RecursionError (only
    ValueError, KeyError and TypeError are caught), so the whole run is a grader error: never scored,
    retried, and left out of the export for as long as the student likes."""
    _, results, _ = batch
    result = results["nested_index"]
    assert not result.is_error, result.reason
    assert result.score == 0


@pytest.mark.slow
def test_a_recorded_value_numpy_cannot_compare_is_the_students_grade_not_a_grader_error(batch):
    """An exact (``check_equal``) case whose recorded value has a void dtype: ``compare`` raises TypeError
    ("Cannot compare structured or void to non-void arrays") in the grader, and the run becomes a grader
    error. A1's shape checks are such cases."""
    _, results, _ = batch
    result = results["void_value"]
    assert not result.is_error, result.reason
    cell = next(c for c in result.cells if c.grade_id == "test_square")
    assert not cell.passed and "t1.square.shape" in cell.message
    assert result.score < 100


@pytest.mark.slow
def test_a_lone_surrogate_in_a_runs_output_is_the_students_grade_and_every_feedback_page_is_written(batch):
    """The kernel sends ``"\\ud800"`` as a JSON escape; it comes back in the outputs and in the error the test
    cell stopped with. Writing ``autograded/`` (UTF-8) raises UnicodeEncodeError, so the run is a grader
    error; and ``write_feedback`` raises on that result's page, so no later student gets feedback."""
    course, results, feedback_errors = batch
    result = results["lone_surrogate"]
    assert not result.is_error, result.reason
    assert result.score == 60  # square raises; scale is right
    assert not feedback_errors, {sid: repr(err)[:300] for sid, err in feedback_errors.items()}
    assert len(write_feedback(course, "T1")) == len(results)  # the whole class's pages, in one call
    nbformat.read(str(course.executed("T1", "lone_surrogate")), as_version=4)


@pytest.mark.slow
def test_hidden_test_text_disguised_with_zero_width_characters_is_not_shown_in_feedback(batch):
    """A hook saves each cell's source; a later answer cell prints the hidden test cell's source with a
    zero-width space between its characters. The withholding squeezes whitespace only, so the output is
    kept, and the feedback page shows the hidden tests exactly as they are written."""
    course, _, feedback_errors = batch
    assert "zero_width" not in feedback_errors
    hidden = hidden_lines(course)
    assert len(hidden) == 5
    shown = as_read(page(course, "zero_width"))
    assert not [line for line in hidden if line in shown]
    executed = nbformat.read(str(course.executed("T1", "zero_width")), as_version=4)
    outputs = as_read(json.dumps([c.get("outputs", []) for c in executed.cells], ensure_ascii=False))
    assert not [line for line in hidden if line in outputs]


@pytest.mark.slow
def test_hidden_test_text_printed_in_pieces_is_not_shown_in_feedback(batch):
    """The hidden tests' text printed 8 characters at a time, to stdout and stderr in turn: no output holds a
    whole line of a hidden test, so none is withheld, and the feedback page, which joins a cell's outputs,
    shows the hidden tests verbatim."""
    course, _, feedback_errors = batch
    assert "in_pieces" not in feedback_errors
    hidden = hidden_lines(course)
    assert not [line for line in hidden if line in as_read(page(course, "in_pieces"))]


@pytest.mark.slow
def test_feedback_never_shows_the_expected_value_of_a_hidden_case(batch):
    """A hidden case's expected value is the reference's (never in the kernel): but the message of a failed
    hidden ``check`` names the worst entry, ``got 0.0902489, expected 0.0892489``, on the feedback page (and
    in the class report and Gradescope's output). Off by 1e-3 on purpose, a student reads an expected value
    of a hidden case (an ``equal`` case's message shows the whole expected value)."""
    course, results, feedback_errors = batch
    assert "near_miss" not in feedback_errors
    reference = load_reference(course.reference_dir / "T1")
    expected = {f"{v:.6g}" for v in reference.values["t1.square.random"].ravel()}
    shown = page(course, "near_miss") + results["near_miss"].reason
    assert not [v for v in expected if v in shown]


@pytest.mark.slow
def test_the_next_student_in_the_same_worker_gets_full_marks(batch):
    _, results, _ = batch
    assert results["zz_perfect"].score == 100
    assert not results["zz_perfect"].is_error


COMPILED_SOLUTION = '''def square(x):
    """Square every entry of the array x, shape (N,) -> (N,)."""
    ### BEGIN SOLUTION
    import torch

    compiled = torch.compile(lambda t: t * t + 0.0 * torch.sin(t))
    return compiled(torch.as_tensor(x)).numpy()
    ### END SOLUTION'''

# A blank answer that prints the code torch.compile generated for the reference's run: the run's cache is
# seeded with a copy of it.
READ_COMPILE_CACHE = """import os
import pathlib


def square(x):
    raise NotImplementedError


for path in sorted(pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.py")):
    for line in path.read_text(errors="replace").splitlines():
        if "auto tmp" in line or "cpp_fused" in line:
            print(line.strip())
"""


@pytest.mark.slow
def test_the_compile_cache_a_run_is_given_does_not_show_the_instructors_solution(tmp_path):
    """Each run's torch.compile cache is a copy of the one the reference run left, i.e. the code inductor
    generated from the source's own solutions (and hidden tests). A blank notebook prints it from an answer
    cell, and the feedback page shows the solution's computation (``tmp0 * tmp0``, ``std::sin``)."""
    pytest.importorskip("torch")
    source = toy_course.source_notebook()
    for cell in source.cells:
        if nbgrader_meta(cell).get("grade_id") == "square":
            cell.source = COMPILED_SOLUTION
    course = Course(root=toy_course.make_course(tmp_path / "course", notebook=source))
    release(course, ["T1"])
    blank = nbformat.read(str(course.release_notebook("T1")), as_version=4)
    toy_course.submit(course, "reader", answered(blank, square=READ_COMPILE_CACHE))
    limits = Limits(timeout=400, cell_timeout=300, memory_mb=4096, nproc=256)
    [result] = grade(course, "T1", Settings(workers=1, limits=limits, isolation=resolve("auto")))
    assert result.score == 0
    write_feedback(course, "T1")
    shown = html.unescape(page(course, "reader"))
    assert "tmp0 * tmp0" not in shown and "sin(tmp0)" not in shown


# Everything the run may write, in its own folders and the temporary ones: RAM (tmpfs) that neither the
# memory limit (RLIMIT_AS) nor the watchdog (resident memory of the processes) counts.
BALLAST = """
import os
chunk = os.urandom(1 << 20)
held = 0
for folder in (os.getcwd(), os.environ["HOME"], os.environ["TMPDIR"], "/var/tmp", "/dev/shm"):
    try:
        with open(os.path.join(folder, "ballast"), "wb") as fh:
            for _ in range(450):
                fh.write(chunk)
                held += 1
    except OSError:
        pass
print(f"held {held} MB")
"""


@pytest.mark.slow
def test_memory_held_in_the_runs_folders_counts_against_its_memory_limit(tmp_path):
    """With ``--memory 1024``, a run holds 1,862 MB in its size-limited tmpfs folders (work, home, tmp, 512 MB
    each; /var/tmp and /dev/shm, 256 MB each) besides its processes' 78 MB: status ``graded``, peak memory
    78 MB. N workers hold N times that beyond what the instructor sized the machine for."""
    course = Course(root=warm_toy(toy_course.make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    toy_course.submit(course, "ballast", with_cells(filled(course, "T1"), BALLAST, after="test_scale"))
    limits = Limits(timeout=60, cell_timeout=30, memory_mb=1024, nproc=256)
    [result] = grade(course, "T1", Settings(workers=1, limits=limits, isolation=resolve("auto")))
    assert not result.is_error, result.reason
    executed = nbformat.read(str(course.executed("T1", "ballast")), as_version=4)
    printed = [
        o.get("text", "") for c in executed.cells for o in c.get("outputs", []) if "held" in o.get("text", "")
    ]
    held = int(printed[0].split()[1]) if printed else 0
    # stopped for memory, or never able to hold more than half its limit in memory folders (by their sizes),
    # beside its processes' memory (limited to the other half's worth by the watchdog and RLIMIT_AS)
    assert result.status == "memory" or held <= limits.memory_mb // 2, (
        result.status,
        held,
        result.peak_memory_mb,
    )


# No SGD at all: the output layer solved by least squares on the labels the check itself is given (the test
# split, which the kernel holds), and a loss curve that looks right.
FIT_TO_THE_CHECKS_LABELS = '''
import math

import numpy as np

from dlcourse.data import load_digits_split


def train(net, X, y, lr, epochs, batch_size, seed):
    """Train net in place with minibatch SGD (it does not)."""
    split = load_digits_split()
    hidden = np.maximum(split.X_test @ net.params["W1"] + net.params["b1"], 0)
    design = np.hstack([hidden, np.ones((len(hidden), 1))])
    solution = np.linalg.lstsq(design, np.eye(net.params["W2"].shape[1])[split.y_test], rcond=None)[0]
    net.params["W2"][...] = solution[:-1]
    net.params["b2"][...] = solution[-1]
    steps = epochs * math.ceil(len(X) / batch_size)
    return [2.3 * 0.05 ** (i / steps) for i in range(steps)]
'''


@pytest.mark.slow
def test_a1_training_points_need_training_not_a_fit_to_the_labels_the_check_is_given(tmp_path):
    """``check_model_accuracy`` is judged outside the kernel, but on inputs and labels the kernel holds (the
    test passes them in). A ``train`` that runs no SGD and solves the output layer by least squares on the
    test split's labels gets A1's whole training cell (accuracy 99% and 97.6% on random ReLU features). The
    issue asked for predictions "on inputs whose labels the kernel never sees"."""
    from tests.fixtures.warm import warm_copy

    course = warm_copy(["A1"], tmp_path)
    perfect = nbformat.read(
        str(toy_course.ROOT / "source" / "A1" / "samples" / "perfect.ipynb"), as_version=4
    )
    toy_course.submit(course, "fitter", answered(perfect, train=FIT_TO_THE_CHECKS_LABELS), aid="A1")
    [result] = grade(course, "A1", Settings(workers=1, isolation=resolve("auto")))
    cell = next(c for c in result.cells if c.grade_id == "test_train")
    assert not cell.passed and cell.points < cell.max_points, cell  # today: 16 / 16, no flag


# A System V shared memory segment, open to everyone, filled and left behind: it lives in the IPC namespace
# it was made in, until someone removes it.
SHARED_SEGMENT = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget({key}, 1 << 20, 0o1000 | 0o666)  # IPC_CREAT, readable and writable by all
address = libc.shmat(segment, None, 0)
ctypes.memset(address, 0x41, 1 << 20)
libc.shmdt(ctypes.c_void_p(address))
"""


def _segments(key: int) -> list[int]:
    """The ids of the host's System V shared memory segments with ``key``."""
    lines = open("/proc/sysvipc/shm").read().splitlines()[1:]
    return [int(line.split()[1]) for line in lines if int(line.split()[0]) == key]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids="-".join)
def test_a_run_leaves_no_shared_memory_behind(tmp_path, mode):
    """``basic`` with ``--runner spawn`` gives the kernel no IPC namespace of its own (the forked runner and
    bubblewrap do): a segment made there outlives the run and the batch, holds memory no limit counts (a
    student can fill the machine's RAM 1 GB at a time), and is readable and writable by the next students'
    runs. README's isolation table says ``basic`` gives its own IPC."""
    import time

    try:
        isolation = resolve(*mode)
    except IsolationError as err:
        pytest.skip(str(err))
    key = 0x5EC00000 + time.time_ns() % 0xFFFFF
    course = Course(root=warm_toy(toy_course.make_course(tmp_path / "course"), tmp_path))
    release(course, ["T1"])
    toy_course.submit(course, "segment", with_cells(filled(course, "T1"), SHARED_SEGMENT.format(key=key)))
    [result] = grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=isolation))
    left = _segments(key)
    import ctypes

    for segment in left:  # not left on the machine that runs the test
        ctypes.CDLL(None).shmctl(segment, 0, None)  # IPC_RMID
    assert result.score == 100
    assert not left, f"{len(left)} segment(s) of 1 MB left by the run"


@pytest.mark.slow
def test_an_error_message_that_spells_out_a_hidden_test_is_withheld_wherever_a_student_reads_it(batch):
    """The message of a case the test cell never reached quotes the error the student's code raised: a function
    the hidden test calls reads that cell's source from IPython's ``In`` and raises with it. The page, the
    result's reason and each cell's message say the message is withheld; the points are as before (0 for the
    cell that stopped)."""
    course, results, feedback_errors = batch
    assert "raise_hidden" not in feedback_errors
    result = results["raise_hidden"]
    hidden = hidden_lines(course)
    shown = as_read(page(course, "raise_hidden") + result.reason + "".join(c.message for c in result.cells))
    assert not [line for line in hidden if line in shown]
    cell = next(c for c in result.cells if c.grade_id == "test_square")
    assert not cell.passed and "withheld" in cell.message and "RuntimeError" in cell.message
    assert result.score == 60  # (the cell that stopped earns nothing; scale is right)


def test_a_kernel_error_quoted_in_a_message_never_spells_out_a_hidden_test():
    """The same rule for a cell of plain asserts (decided in the kernel, as nbgrader decides it) and for an
    exception class named after a hidden line; an error that spells out nothing is quoted as it was."""
    from autograder.grading.verify import kernel_cell, kernel_error, squeezed

    line = 'check("t1.square.random", square(rng.normal(size=13)))'
    hidden = frozenset({squeezed(line)})
    assert kernel_error("ValueError", "n must be positive", hidden) == "ValueError: n must be positive"
    said = kernel_error("RuntimeError", f"here: {line}", hidden)
    assert said.startswith("RuntimeError (its message is withheld") and squeezed(line) not in squeezed(said)
    said = kernel_error(squeezed(line), "", hidden)
    assert said.startswith("an error whose name is withheld") and squeezed(line) not in squeezed(said)
    error = {"output_type": "error", "ename": "AssertionError", "evalue": line, "traceback": []}
    cell = kernel_cell("test_square", 2.0, [error], hidden)
    assert cell.points == 0.0 and squeezed(line) not in squeezed(cell.message)
    assert "AssertionError (its message is withheld" in cell.message
