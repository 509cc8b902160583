"""The static check of a submission's code (:mod:`autograder.grading.tamper`): each construct that changes what the
student did not define is flagged on its line, the configuration the lectures teach is not, no cell of the
course's own sources, lectures and honest samples is flagged, the cheater samples are, and the flags reach
the result, the class report and the feedback page without changing points."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.course import Course, is_solution
from autograder.grading.tamper import MAX_FLAGS, given_code, scan, scan_source
from autograder.intake.repair import repair
from autograder.result import Flag

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course()

# code, the line flagged (1-based), words the reason holds
FLAGGED = [
    (
        "import torch\ntorch.profiler.profile = Fake",
        2,
        "torch.profiler.profile, which tests time or count with",
    ),
    ("import time\ntime.perf_counter = lambda: 0.0", 2, "time.perf_counter"),
    ("from torch import profiler\nsetattr(profiler, 'profile', Fake)", 2, "torch.profiler.profile"),
    ("import tracemalloc as t\nt.get_traced_memory = f", 2, "tracemalloc.get_traced_memory"),
    # the course package and the grader's recording
    ("import dlcourse.a7 as a7\na7.saved_bytes = f", 2, "dlcourse.a7.saved_bytes in the course package"),
    ("import dlcourse.a7\nx = 1\ndlcourse.a7.saved_bytes = f", 3, "dlcourse.a7.saved_bytes"),
    ("from dlcourse import grading\ngrading._record = lambda *a: None", 2, "grader's recording"),
    (
        "import dlcourse.attention\nsetattr(dlcourse.attention, 'flop_counts', f)",
        2,
        "dlcourse.attention.flop_counts",
    ),
    ("import dlcourse.attention as A\ndelattr(A, name)", 2, "dlcourse.attention in the course package"),
    ("import dlcourse.a7 as a7\ndel a7.saved_bytes", 2, "dlcourse.a7.saved_bytes"),
    ("import dlcourse.a7 as a7\na7.counter += 1", 2, "dlcourse.a7.counter"),
    ("from dlcourse.grading import check\ncheck.tolerance = 1e9", 2, "dlcourse.grading.check.tolerance"),
    ("import dlcourse.grading as g\ncases = g.CASES\ncases.clear()", 3, "dlcourse.grading.CASES"),
    ("import dlcourse.grading as g\ng.__dict__['check'] = f", 2, "grader's recording"),
    ("import dlcourse\nvars(dlcourse.grading).update(check=f)", 2, "grader's recording"),
    ("import dlcourse.grading as g\nprint(g._cases)", 2, "private part of the grader's recording"),
    ("from dlcourse.grading import _cases", 1, "private part of the grader's recording"),
    (
        "import importlib\nm = importlib.import_module('dlcourse.a7')\nm.saved_bytes = 0",
        3,
        "dlcourse.a7.saved_bytes",
    ),
    ("import importlib, dlcourse.grading\nimportlib.reload(dlcourse.grading)", 2, "reloads dlcourse.grading"),
    ("import dlcourse\ndef f(a7=dlcourse.a7):\n    a7.saved_bytes = g\n", 3, "dlcourse.a7.saved_bytes"),
    ("import sys\na7 = sys.modules['dlcourse.a7']\na7.saved_bytes = g", 3, "dlcourse.a7.saved_bytes"),
    # sys.modules, built-ins, code attributes
    ("import sys\nsys.modules['dlcourse.grading'] = fake", 2, "sys.modules"),
    ("import sys\nsys.modules.update({'dlcourse.a7': fake})", 2, "sys.modules"),
    ("import sys\nsys.modules.pop('dlcourse.a7')", 2, "sys.modules"),
    ("import sys\nsys.modules.__setitem__('x', y)", 2, "sys.modules"),
    ("import sys\ndel sys.modules['dlcourse.a7']", 2, "sys.modules"),
    ("from sys import modules\nmodules['dlcourse'] = fake", 2, "sys.modules"),
    ("import sys\nsys.meta_path.insert(0, Finder())", 2, "sys.meta_path"),
    ("import sys\nsys.excepthook = lambda *a: None", 2, "sys.excepthook"),
    ("def f():\n    pass\nf.__code__ = g.__code__", 3, "sets __code__"),
    ("fn.__globals__['check'] = f", 1, "globals"),
    ("fn.__globals__.update(check=f)", 1, "globals"),
    ("fn.__closure__ = None", 1, "__closure__"),
    ("thing.__dict__ = {}", 1, "__dict__"),
    ("fn.__defaults__ = (1e9,)", 1, "__defaults__"),
    ("__builtins__.print = f", 1, "built-ins"),
    ("__builtins__['print'] = f", 1, "built-ins"),
    ("import builtins\nbuiltins.print = f", 2, "built-ins (builtins.print)"),
    ("import builtins as b\nsetattr(b, 'len', f)", 2, "built-ins"),
    ("__builtins__ = {}", 1, "replaces __builtins__"),
    # the notebook's shell, trace and audit hooks
    ("get_ipython().events.register('pre_run_cell', hook)", 1, "event hook"),
    ("ip = get_ipython()\n\nip.events.register('post_run_cell', hook)", 3, "event hook"),
    (
        "from IPython import get_ipython\nev = get_ipython().events\nev.register('post_execute', f)",
        3,
        "event hook",
    ),
    ("shell.register('pre_execute', f)", 1, "event hook"),
    ("get_ipython().input_transformers_cleanup.append(f)", 1, "input or AST transformers"),
    ("ip = get_ipython()\nip.input_transformers_post.append(f)", 2, "input or AST transformers"),
    ("get_ipython().ast_transformers.append(T())", 1, "input or AST transformers"),
    ("get_ipython().set_custom_exc((Exception,), handler)", 1, "exception handler"),
    ("get_ipython().showtraceback = lambda *a, **k: None", 1, "showtraceback"),
    ("shell.showtraceback = quiet", 1, "showtraceback"),
    ("ip = get_ipython()\nip.run_cell = f", 2, "run_cell"),
    ("import sys\nsys.settrace(tracer)", 2, "trace"),
    ("import sys\nsys.setprofile(p)", 2, "trace"),
    ("import threading\nthreading.settrace(tracer)", 2, "trace"),
    ("import sys\nsys.addaudithook(hook)", 2, "audit hook"),
    ("from sys import settrace as st\nst(f)", 2, "trace"),
    # frames and every object
    ("import gc\nobjs = gc.get_objects()", 2, "every object"),
    ("import gc\ngc.get_referrers(check)", 2, "every object"),
    ("import gc\ngc.get_referents(x)", 2, "every object"),
    ("import inspect\nframe = inspect.currentframe()", 2, "frames"),
    ("import inspect\nfor info in inspect.stack():\n    pass", 2, "frames"),
    ("import sys\nf = sys._getframe(1)", 2, "frames"),
    ("caller = frame.f_back", 1, "frames"),
    ("values = frame.f_globals['expected']", 1, "frames"),
    ("names = frame.f_locals", 1, "frames"),
    ("import ctypes", 1, "ctypes"),
    # code the reading cannot see
    ("exec(code)", 1, "exec of a computed string"),
    ("eval(expression)", 1, "eval of a computed string"),
    ("compile(text, 'f', 'exec')", 1, "compile of a computed string"),
    ("exec(base64.b64decode(blob))", 1, "exec of a computed string"),
    ("import builtins\nbuiltins.exec(text)", 2, "exec of a computed string"),
    ("exec('import sys\\nsys.modules.clear()')", 1, "sys.modules"),
    ("m = __import__('dlcourse.grading')", 1, "__import__"),
    ("import importlib\nmod = importlib.import_module('dlcourse.' + name)", 2, "computed at run time"),
    ("get_ipython().run_cell(text)", 1, "the shell's run_cell"),
    ("import sys\n%time sys.modules.clear()", 2, "sys.modules"),
    ("%%time\nimport sys\nsys.settrace(f)", 3, "trace"),
    ("!pip install numpy\nimport gc\ngc.get_objects()", 3, "every object"),
]


@pytest.mark.parametrize(
    "code, line, words", FLAGGED, ids=[c.replace("\n", "; ")[:60] for c, _, _ in FLAGGED]
)
def test_each_construct_is_flagged_on_its_line(code, line, words):
    flags = scan_source(code, "answer")
    assert [f.line for f in flags] == [line], flags
    flag = flags[0]
    assert words in flag.why, flag
    assert flag.cell == "answer" and flag.text == code.splitlines()[line - 1].strip()


ORDINARY = [
    "import torch\ntorch.backends.cudnn.benchmark = True",
    "import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\ntorch.backends.cudnn.allow_tf32 = True",
    "import torch\ntorch.set_float32_matmul_precision('high')",
    "import tensorflow as tf\ntf.config.experimental.enable_op_determinism()\ntf.config.threading.set_inter_op_parallelism_threads(1)",
    "import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy('mixed_float16')",
    "import torch, numpy as np, random\ntorch.manual_seed(0)\nnp.random.seed(0)\nrandom.seed(0)",
    "import warnings\nwarnings.filterwarnings('ignore', category=DeprecationWarning)",
    "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'",
    "import matplotlib.pyplot as plt\nplt.rcParams['figure.dpi'] = 120\nplt.rcParams.update({'font.size': 9})",
    "class Net:\n    def __init__(self):\n        self.fc = 1\n        self.__dict__.update(extra=2)\n",
    "model = make_model()\nmodel.fc = Linear(4, 2)\nmodel.eval()",
    "import sys\nsys.path.insert(0, '.')\nsys.setrecursionlimit(5000)\nprint('x' in sys.modules)",
    "import sys\nmod = sys.modules.get('google.colab')",
    "import inspect\nprint(inspect.getsource(f), inspect.signature(f))",
    "import gc\ngc.collect()",
    "import importlib.util\nimportlib.util.find_spec('torchvision')",
    "import importlib\nm = importlib.import_module('torchvision')",
    "x = eval('1 + 2')\nexec('y = 3')",
    "import re\npattern = re.compile(text)\nmodel = torch.compile(model)",
    "def compile(x):\n    return x\ncompile(anything)",
    "from dlcourse.grading import check\ncheck('a1.x', x, expected=1)\ncheck = my_check",
    "from dlcourse.data import load_digits_split\nsplit = load_digits_split()\nsplit.X_train[:] = 0",
    "import dlcourse.a7 as a7\nresult = a7.saved_bytes(model)\nprint(a7.__name__)",
    "%matplotlib inline\n%config InlineBackend.figure_format = 'retina'\n%timeit f(x)\n!nvidia-smi",
    "%%time\ny = train(model)",
    "get_ipython().run_line_magic('load_ext', 'autoreload')",
    "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.ast_node_interactivity = 'all'",
    "from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))",
    "events = []\nevents.append('clock')\nregistry.register(MyModel)",
    "import sys\nsys.stdout.flush()\nsys.stdout.write('x')",
]


@pytest.mark.parametrize("code", ORDINARY, ids=[c.replace("\n", "; ")[:60] for c in ORDINARY])
def test_ordinary_configuration_and_own_objects_are_not_flagged(code):
    assert scan_source(code) == []


@pytest.mark.parametrize(
    "code",
    ["def f(:\n    pass", "x = = 1", "%%bash\nls -la\n", "print(1)\x00", "(" * 300 + ")" * 300, "x?"],
    ids=["syntax error", "bad assignment", "bash cell", "null byte", "too nested to parse", "help"],
)
def test_a_cell_that_does_not_parse_is_not_flagged_and_does_not_crash(code):
    assert scan_source(code) == []


def test_a_string_escape_that_warns_hides_nothing_even_where_warnings_are_errors():
    import warnings

    code = 'pattern = "\\d+"\nimport sys\nsys.modules.clear()'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flags = scan_source(code)
    assert [f.line for f in flags] == [3]


def test_a_cell_nested_beyond_what_the_reading_follows_is_flagged_for_review():
    chain = "import dlcourse\nx = dlcourse" + ".a" * 900  # parses (3000 would not: never runs)
    flags = scan_source(chain)
    assert [f.line for f in flags] == [1] and "nested too deeply" in flags[0].why


def test_names_are_followed_across_cells_and_scopes():
    """An import in the set-up cell names what an answer changes; a parameter that shadows a name does not
    hide a later write; rebinding a name to the student's own object ends what it stood for."""
    nb = new_notebook(
        cells=[
            new_code_cell("import sys\nimport dlcourse.a7 as a7", metadata=_meta("setup", locked=True)),
            new_code_cell(
                "def helper(sys, a7):\n    a7.x = 1\n    sys.modules = {}\n\nsys.modules['m'] = None",
                metadata=_meta("answer", solution=True),
            ),
            new_code_cell("a7 = MyThing()\na7.saved_bytes = 3"),
        ]
    )
    flags = scan(nb)
    assert [(f.cell, f.line) for f in flags] == [("answer", 5)], flags


def test_only_answer_cells_and_added_cells_are_flagged():
    """The assignment's own cells (metadata that is not an answer, or a text the source gives) are read for
    names, never flagged; an answer by its grade_id, an added cell by its number and the id before it."""
    tamper = "import sys\nsys.modules.clear()"
    nb = new_notebook(
        cells=[
            new_code_cell(tamper, metadata=_meta("setup", locked=True)),
            new_markdown_cell("sys.modules.clear()"),
            new_code_cell(tamper, metadata=_meta("square", solution=True)),
            new_code_cell(tamper, metadata=_meta("test_square", grade=True, locked=True, points=1)),
            new_code_cell(tamper),
            new_code_cell("x = 1\n" + tamper),
        ]
    )
    flags = scan(nb, given=given_code(new_notebook(cells=[new_code_cell(tamper)])))
    assert [(f.cell, f.line) for f in flags] == [("square", 2), ("cell 6 (after test_square)", 3)]


def test_a_notebook_that_tampers_on_every_line_lists_the_first_lines_and_counts_the_rest():
    nb = new_notebook(cells=[new_code_cell("import gc\n" + "gc.get_objects()\n" * (MAX_FLAGS + 5))])
    flags = scan(nb)
    assert len(flags) == MAX_FLAGS + 1 and "5 more flagged lines" in flags[-1].why
    assert all(f.why != flags[-1].why for f in flags[:-1])


# ----------------------------------------------------------------------------- the course's own notebooks


def _meta(gid: str, **fields) -> dict:
    return {"nbgrader": {"grade_id": gid, "schema_version": 3, "solution": False, "grade": False,
                         "locked": False, **fields}}  # fmt: skip


def _samples():
    return sorted(ROOT.glob("source/*/samples/*.ipynb"))


@pytest.mark.parametrize("path", _samples(), ids=lambda p: f"{p.parts[-3]}-{p.stem}")
def test_the_samples_are_flagged_only_where_they_tamper(path):
    """Each sample as the grader reads it (repaired, as it runs): the cheater's first cell makes every check
    pass (``g.check = ... = lambda``) and silences tracebacks: both lines flagged, nothing else; the other
    samples (pasted lecture code among them) give no flag."""
    aid = path.parts[-3]
    repaired = repair(COURSE, aid, path)
    if repaired.notebook is None:
        assert path.stem == "broken"
        return
    flags = scan(repaired.notebook, given=given_code(COURSE.read_source(aid)))
    if path.stem != "cheater":
        assert flags == [], [f.describe() for f in flags]
        return
    assert [(f.line, f.text.split(" ")[0]) for f in flags] == [
        (3, "g.check"),
        (4, "get_ipython().showtraceback"),
    ]
    assert "dlcourse.grading.check_accuracy in the grader's recording" in flags[0].why
    assert "showtraceback" in flags[1].why
    assert len({f.cell for f in flags}) == 1 and flags[0].cell.startswith("cell ")


@pytest.mark.parametrize("aid", COURSE.assignments())
def test_no_cell_of_a_source_is_flagged_not_even_its_tests(aid):
    """The solutions (and the set-up and tests, read as if a student had written them) give no flag."""
    source = COURSE.read_source(aid)
    assert any(is_solution(c) for c in source.cells)
    for number, cell in enumerate(source.cells, 1):
        if cell.cell_type == "code":
            assert scan_source(cell.source, f"cell {number}") == []
    assert scan(source) == []


@pytest.mark.parametrize("path", sorted(ROOT.glob("lectures/*.ipynb")), ids=lambda p: p.stem)
def test_no_cell_of_a_lecture_is_flagged(path):
    """Every code cell of every lecture, read in order as cells a student added (pasted)."""
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    assert scan(nb) == []


# ----------------------------------------------------------------------------- forgers


FORGERS = {
    "flop counts replaced": (
        "import dlcourse.attention as A\nA.flop_counts = lambda *a, **k: {'sdpa': 1}",
        2,
        "dlcourse.attention.flop_counts",
    ),
    "event hook": (
        "def hook(info):\n    pass\nget_ipython().events.register('pre_run_cell', hook)",
        3,
        "event hook",
    ),
    "saved bytes through setattr": (
        "import dlcourse.a7\nsetattr(dlcourse.a7, 'saved_bytes', lambda *a: 0)",
        2,
        "dlcourse.a7.saved_bytes",
    ),
    "grading module replaced": (
        "import sys, types\nfake = types.ModuleType('dlcourse.grading')\nsys.modules['dlcourse.grading'] = fake",
        3,
        "sys.modules",
    ),
}


@pytest.mark.parametrize("name", list(FORGERS))
def test_forgers_added_to_a_perfect_hand_in_are_flagged(name, tmp_path):
    """Each forger's cell added to A7's perfect sample, read as the grader reads the hand-in."""
    code, line, words = FORGERS[name]
    nb = nbformat.read(str(COURSE.samples("A7") / "perfect.ipynb"), as_version=4)
    nb.cells.insert(3, new_code_cell(code))
    path = tmp_path / "A7.ipynb"
    nbformat.write(nb, str(path))
    flags = scan(repair(COURSE, "A7", path).notebook, given=given_code(COURSE.read_source("A7")))
    assert [(f.line, words in f.why) for f in flags] == [(line, True)], flags
    assert flags[0].cell.startswith("cell ")


# ----------------------------------------------------------------------------- the way to the pages


def test_a_flag_reaches_the_result_and_survives_its_round_trip_through_json():
    from autograder.result import Result

    flag = Flag("square", 2, "a7.saved_bytes = f", "changes dlcourse.a7.saved_bytes", "A7")
    result = Result("ada", "A7", 100, 100, "flagged", code_flags=[flag])
    back = Result.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.code_flags == [flag]
    old = result.to_dict()
    del old["code_flags"]  # a result kept before the field existed
    assert Result.from_dict(old).code_flags == []


def test_the_pipeline_reads_the_repaired_notebook_and_flags_never_change_points(tmp_path):
    """The tamper stage flags the answer cells of the notebook that will run; the status stage then says
    "flagged" and leaves every point as the verdict gave it; merging names each flag's notebook."""
    from types import SimpleNamespace

    from autograder.grading.pipeline import STAGES, Grading, Job, merge_parts, status_stage, tamper_stage
    from autograder.intake.repair import Template, rebuild
    from autograder.result import CellResult, Result
    from autograder.runner.sandbox import Limits, Outcome

    assert [name for name, _ in STAGES][:3] == ["repair", "tamper", "sandbox_run"]
    nb = nbformat.read(str(COURSE.samples("A1") / "perfect.ipynb"), as_version=4)
    nb.cells.insert(2, new_code_cell("import dlcourse.grading as g\ng.check = print"))
    raw = (nbformat.writes(nb).encode(), None)
    template = Template.read(COURSE, "A1")
    batch = SimpleNamespace(templates={"A1": template}, limits=Limits())
    cells = [CellResult("test_x", 10.0, 10.0, True)]
    part = Result("ada", "A1", 10.0, 10.0, cells=cells)
    g = Grading(Job("ada"), None, Path("A1.ipynb"), part, nb="A1", repaired=rebuild(template, raw))
    assert tamper_stage(batch, g) is True
    [flag] = part.code_flags
    assert (flag.line, flag.text) == (2, "g.check = print") and "dlcourse.grading.check" in flag.why
    g.outcome = Outcome("finished", 1.0, {}, {"cells": []}, "")
    status_stage(batch, g)
    assert (part.status, part.score, [c.points for c in part.cells]) == ("flagged", 10.0, [10.0])
    whole = Result("ada", "A1", 10.0)
    whole = merge_parts(whole, [("A1", part)], [])
    assert whole.code_flags == [replace(flag, notebook="A1")] and whole.status == "flagged"


def test_the_class_report_and_the_feedback_page_show_the_line_and_why(tmp_path):
    from autograder.outputs.feedback import render
    from autograder.outputs.report import render as render_report
    from autograder.result import Result

    course = Course(root=tmp_path)
    flag = Flag(
        "square", 2, "a7.saved_bytes = <lambda>", "changes dlcourse.a7.saved_bytes in the course package"
    )
    result = Result("ada", "T1", 100, 40, "flagged", "1 of 2 tests failed", code_flags=[flag])
    page = render(course, "T1", result)
    assert "a7.saved_bytes = &lt;lambda&gt;" in page and "changes dlcourse.a7.saved_bytes" in page
    assert "line 2" in page and "do not change your points" in page
    report = render_report(course, "T1", [result], b"", tmp_path)
    assert "<b>ada</b>" in report and "a7.saved_bytes = &lt;lambda&gt;" in report and "line 2" in report


def test_the_results_table_lists_the_flagged_lines_beside_the_runs_flags():
    from autograder.intake.late import Late
    from autograder.outputs.export import RESULT_COLUMNS, result_row
    from autograder.outputs.gradesheet import Line
    from autograder.result import Result

    flag = Flag("square", 2, "a7.saved_bytes = f", "changes dlcourse.a7.saved_bytes in the course package")
    result = Result(
        "ada", "T1", 100, 40, "flagged", "1 of 2 tests failed", flags=["a public check"], code_flags=[flag]
    )
    row = result_row(Line(result, Late(0.0, 0.0, None, "none")))
    assert row[1] == "40" and row[len(RESULT_COLUMNS)] == f"a public check; {flag.describe()}"


def test_gradescopes_output_shows_the_student_the_flagged_lines():
    from autograder.commands.gradescope import results_json
    from autograder.result import Result

    flag = Flag("square", 2, "a7.saved_bytes = f", "changes dlcourse.a7.saved_bytes in the course package")
    output = results_json(Result("ada", "T1", 100, 40, "flagged", "1 of 2 tests failed", code_flags=[flag]))
    assert (
        output["score"] == 40
        and "square, line 2 (a7.saved_bytes = f): changes dlcourse.a7" in output["output"]
    )


def test_a_regrade_keeps_what_reading_the_code_flagged(tmp_path, monkeypatch):
    """Deciding again from a kept run reads no code: the old result's flags stay, and so does its status."""
    from types import SimpleNamespace

    from autograder.commands import regrade
    from autograder.grading.pipeline import status_stage
    from autograder.result import CellResult, Result
    from autograder.runner.sandbox import Limits, Outcome
    from tests.fixtures.toy_course import make_course

    course = Course(root=make_course(tmp_path / "course"))
    flag = Flag("square", 2, "g.check = print", "changes dlcourse.grading.check", "T1")
    old = Result("ada", "T1", 100, 100, "flagged", code_flags=[flag], submission_sha256="sha")
    part = SimpleNamespace(max_score=100.0)
    reference = SimpleNamespace(max_score=100.0, digest="ref", notebooks={"T1": {}}, part=lambda nb: part)
    batch = SimpleNamespace(course=course, aid="T1", reference=reference, limits=Limits(), inputs={})

    def redecide(b, g, chosen):  # the verify stage's verdict: every point, and no flag of its own
        assert [name for name, _ in chosen] == ["verify", "status"]
        g.result.cells = [CellResult("test_square", 100.0, 100.0, True)]
        status_stage(b, g)

    monkeypatch.setattr(regrade, "run_stages", redecide)
    new = regrade.decide_again(batch, old, {"T1": Outcome("finished", 1.0, {}, {"cells": []}, "")})
    assert (new.code_flags, new.status, new.score) == ([flag], "flagged", 100.0)


def test_the_canary_passes_solutions_flagged_only_by_their_code_and_warns_of_it():
    """A source's solution that the reading of code flags would flag every student who writes it so: the proof
    passes (the grader agrees with itself) and says so; a flag of the run still fails it."""
    from autograder.grading.canary import canary_problems, code_flag_warnings
    from autograder.result import Result
    from autograder.runner.sandbox import Limits

    flag = Flag(
        "square", 1, "eval(expression)", "runs code made at run time (eval of a computed string)", "T1"
    )
    solutions = Result("solutions", "T1", 100, 100, "flagged", "all tests passed", code_flags=[flag])
    release = Result("release", "T1", 100, 0, "graded", "10 of 10 tests failed")
    results = {"solutions": solutions, "release": release}
    assert canary_problems(results, Limits()) == []
    [warning] = code_flag_warnings(results)
    assert "square, line 1 (eval(expression))" in warning
    solutions.flags = ["test_square: passed in the kernel, failed outside"]
    assert canary_problems(results, Limits())


@pytest.mark.filterwarnings(
    "ignore:invalid escape sequence"
)  # their code's strings, as the kernel warns of them
def test_of_nbgraders_own_notebooks_only_its_cheat_attempts_are_flagged():
    """nbgrader ships its test notebooks (plain-assert courses, written by others): every code cell of every one,
    read as cells a student wrote; only its two cheat attempts (each replaces IPython's showtraceback) flag."""
    import nbgrader

    flagged = {}
    paths = sorted(Path(nbgrader.__file__).parent.rglob("*.ipynb"))
    assert len(paths) > 40
    for path in paths:
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            cell.metadata.pop("nbgrader", None)
        if flags := scan(nb):
            flagged[path.name] = [f.why for f in flags]
    assert set(flagged) == {"submitted-cheat-attempt.ipynb", "submitted-cheat-attempt-alternative.ipynb"}
    assert all(
        whys == ["replaces IPython's showtraceback, which shows errors or runs every cell"]
        for whys in flagged.values()
    )
