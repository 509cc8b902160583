"""Kernels forked from a warm parent: the parent starts no thread, each kernel gets exactly the isolation,
user, limits and thread count a freshly started one gets, and nothing one student does reaches the next."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell

from autograder.course import Course
from autograder.grading.batch import grade
from autograder.intake.handin import frameworks_used
from autograder.intake.release import release
from autograder.intake.samples import filled
from autograder.runner import forkserver
from autograder.runner.isolation import resolve
from autograder.runner.sandbox import Limits, Sandbox
from autograder.settings import Settings
from tests.fixtures.toy_course import make_course, meta, source_notebook, submit

LIMITS = Limits(timeout=120, cell_timeout=60, memory_mb=3072)

REPORT = """
import ctypes, json, os, socket, sys, threading, threadpoolctl, torch
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
libc = ctypes.CDLL(None, use_errno=True)
print(json.dumps({
    "torch_threads": torch.get_num_threads(),
    "blas_threads": sorted({p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"}),
    "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "interfaces": [name for _, name in socket.if_nameindex()],
    "umount_tmp": libc.umount2(b"/tmp", 2),  # MNT_DETACH: undoing a cover needs a capability it lacks
    "sigchld_caught": bool(int(status["SigCgt"], 16) >> 16 & 1),  # (signal 17: the warm parent's own handler)
    # the threads were set through the parent's threadpoolctl controller, not one of the kernel's own
    "threadpools": [len(m._THREADPOOLS) for m in list(sys.modules.values())
                    if getattr(m, "__file__", None) and m.__file__.endswith("forkserver.py")],
}))
"""


def forked_isolation():
    isolation = resolve("basic", "fork")
    if not isolation.namespaces:
        pytest.skip("this machine lets no process make namespaces (neither root nor user namespaces)")
    return isolation


def run_in_sandbox(nb, warm, isolation, threads=1, slot=0):
    sandbox = Sandbox(Limits(**{**LIMITS.__dict__, "threads": threads}), slot, warm, isolation).start()
    try:
        return sandbox.run(nb)
    finally:
        sandbox.cleanup()


@pytest.mark.slow
def test_the_warm_parent_starts_no_thread_and_each_kernel_gets_its_own_threads_and_isolation():
    isolation = forked_isolation()
    warm = ("numpy", "torch", "tensorflow")  # TensorFlow's and torch's pools must not exist yet
    server = forkserver.server_for(warm, slot=41)
    assert server.info["ready"] and {"torch", "tensorflow"} <= set(server.info["modules"])
    assert psutil.Process(server.process.pid).num_threads() == 1
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(REPORT)])
    for threads in (1, 3):
        outcome = run_in_sandbox(nb, warm, isolation, threads, slot=41)
        assert outcome.status == "finished", outcome.detail
        report = json.loads(outcome.summary["cells"][0]["output"])
        assert report["torch_threads"] == threads and report["blas_threads"] == [threads], report
        assert report["threadpools"] == [1]  # (the parent's module is its __main__)
        assert report["cap_eff"] == "0000000000000000" and report["no_new_privs"] == "1"
        assert report["umount_tmp"] != 0
        assert report["interfaces"] == ["lo"]
        assert report["sigchld_caught"] is False  # the parent wakes on its children's ends; a kernel does not
        assert len(report["pids"]) <= 4, report["pids"]  # its own PID namespace: init and the kernel
        assert (report["uid"] != 0) if os.geteuid() == 0 else (report["uid"] == os.geteuid())
    assert psutil.Process(server.process.pid).num_threads() == 1  # forking left the parent as it was


POLLUTER = """
import sys, threading, time, torch, numpy as np, dlcourse, dlcourse.grading
torch.allclose = lambda *args, **kwargs: True
np.allclose = lambda *args, **kwargs: True
dlcourse.LEFT_BEHIND = "by another student"
dlcourse.grading.check = lambda *args, **kwargs: None
sys.modules["json"] = None
threading.Thread(target=time.sleep, args=(3600,), name="left-running", daemon=False).start()
with open("/tmp/filler", "wb") as f:
    try:
        while True:
            f.write(b"x" * 2**20)
    except OSError:
        pass
"""

INSPECT = """
import sys, os, pathlib, threading, torch, numpy as np, dlcourse, dlcourse.grading
# The rule for /tmp: it shows the kernel's own scratch folder and, where the checkout or the Python
# environment lives under /tmp, the way to them (shown read-only); nothing any other run wrote.
shown = [pathlib.Path(dlcourse.__file__).resolve().parents[1], pathlib.Path(sys.prefix).resolve()]
on_the_way = {p.relative_to("/tmp").parts[0] for p in shown if p.is_relative_to("/tmp")}
print("STATE", {
    "torch_allclose": bool(torch.allclose(torch.zeros(1), torch.ones(1))),
    "np_allclose": bool(np.allclose([0.0], [1.0])),
    "dlcourse_global": hasattr(dlcourse, "LEFT_BEHIND"),
    "check": dlcourse.grading.check.__module__,
    "json": sys.modules.get("json") is not None,
    "thread": "left-running" in [t.name for t in threading.enumerate()],
    "tmp": [n for n in os.listdir("/tmp") if not n.startswith("dlcourse-run-") and n not in on_the_way],
})
"""


def with_cell(nb, after: str, code: str):
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after)
    nb.cells.insert(at + 1, new_code_cell(code))
    return nb


@pytest.mark.slow
def test_nothing_one_submission_does_reaches_the_next_in_the_same_worker(tmp_path, monkeypatch):
    isolation = forked_isolation()
    source = source_notebook()
    source.cells[1] = new_code_cell(
        "import numpy as np\nimport torch\nimport dlcourse", metadata=meta("imports", locked=True)
    )
    course = Course(root=make_course(tmp_path / "course", notebook=source))
    release(course, ["T1"])
    perfect = filled(course, "T1")
    submit(course, "a_polluter", with_cell(perfect, "imports", POLLUTER))
    submit(course, "b_next", with_cell(perfect, "imports", INSPECT))
    spawned = []
    real_spawn = forkserver.ForkServer.spawn
    monkeypatch.setattr(
        forkserver.ForkServer,
        "spawn",
        lambda self, request: spawned.append((self, request.scratch)) or real_spawn(self, request),
    )
    results = {
        r.student_id: r for r in grade(course, "T1", Settings(workers=1, limits=LIMITS, isolation=isolation))
    }
    assert (results["b_next"].score, results["b_next"].status) == (100, "graded"), results["b_next"].reason
    assert results["a_polluter"].score == 0  # its check() did nothing: nothing was captured
    printed = [
        out.get("text", "")
        for cell in nbformat.read(str(course.executed("T1", "b_next")), as_version=4).cells
        for out in cell.get("outputs", [])
        if "STATE" in out.get("text", "")
    ]
    state = printed[0].split("STATE ", 1)[1].strip()
    assert state == str({"torch_allclose": False, "np_allclose": False, "dlcourse_global": False,
                         "check": "dlcourse.grading", "json": True, "thread": False, "tmp": []})  # fmt: skip
    # both students' kernels came from the one warm parent of that worker (the canary's came first)
    servers = {id(server) for server, _ in spawned[-2:]}
    assert len(servers) == 1 and spawned[-1][0].process.poll() is None


@pytest.mark.slow
def test_a_warm_parent_that_dies_is_the_graders_failure_and_is_replaced():
    isolation = forked_isolation()
    nb = nbformat.v4.new_notebook(cells=[new_code_cell("import time\ntime.sleep(30)")])
    sandbox = Sandbox(LIMITS, 42, ("numpy",), isolation).start()
    try:
        assert sandbox.wait_ready(60)
        server = forkserver.server_for(("numpy",), 42)
        os.kill(server.process.pid, signal.SIGKILL)
        outcome = sandbox.run(nb)
    finally:
        sandbox.cleanup()
    assert outcome.status == "error" and "warm parent" in outcome.detail
    again = run_in_sandbox(
        nbformat.v4.new_notebook(cells=[new_code_cell("1 + 1")]), ("numpy",), isolation, slot=42
    )
    assert again.status == "finished" and forkserver.server_for(("numpy",), 42) is not server


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_second_workers_warm_parent_is_a_twin_of_the_first_and_outlives_it():
    """Slot 0's parent imports; the others are forked from it once it is ready (no imports of their own),
    each in a session of its own, so that stopping or losing the first takes neither a twin nor its runs."""
    isolation = forked_isolation()
    first = forkserver.server_for(("numpy",), 0)
    twin = forkserver.server_for(("numpy",), 43)
    assert twin.info["twin"] and twin.info["imports"] == 0 and "numpy" in twin.info["modules"]
    assert psutil.Process(twin.process.pid).ppid() == first.process.pid
    assert os.getsid(twin.process.pid) == twin.process.pid != os.getsid(first.process.pid)
    assert psutil.Process(twin.process.pid).num_threads() == 1
    code = "import os, sys\nprint(os.getppid() > 0, 'numpy' in sys.modules, 'np' in dir())"
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(code)])
    outcome = run_in_sandbox(nb, ("numpy",), isolation, slot=43)
    assert outcome.status == "finished" and outcome.summary["cells"][0]["output"].strip() == "True True False"
    first.stop()  # (as when the first parent dies: its whole session goes)
    assert twin.process.poll() is None and not twin.dead
    again = run_in_sandbox(nb, ("numpy",), isolation, slot=43)
    assert again.status == "finished", again.detail
    assert forkserver.server_for(("numpy",), 43) is twin
    twin.stop()
    assert twin.process.poll() is not None and gone(twin.process.pid)  # (an orphan now: init reaps it)
    replaced = forkserver.server_for(("numpy",), 43)  # a dead twin is replaced by a twin of the new first
    assert replaced is not twin and replaced.info["twin"]
    assert psutil.Process(replaced.process.pid).ppid() == forkserver.server_for(("numpy",), 0).process.pid


def test_a_parent_refuses_a_clone_request_without_its_socket():
    """A malformed request gets an error answer, not a fork (nor a parent stuck serving nothing)."""
    server = forkserver.server_for(("numpy",), 0)
    before = psutil.Process(server.process.pid).children()  # (twins made for other slots)
    with pytest.raises(RuntimeError, match="could not fork: ValueError: 0 descriptors"):
        server._ask(forkserver.CLONE, [])
    assert server.process.poll() is None and psutil.Process(server.process.pid).children() == before


@pytest.mark.parametrize(
    "namespaces, bwrap, mode, expected",
    [
        (True, "/usr/bin/bwrap", "auto", ("basic", True, "fork")),  # its own namespaces, forked: fastest
        (False, "/usr/bin/bwrap", "auto", ("bubblewrap", False, "spawn")),  # bubblewrap can only spawn
        (False, None, "auto", ("basic", False, "fork")),
        (True, "/usr/bin/bwrap", "bubblewrap", ("bubblewrap", False, "spawn")),
        (True, None, "basic", ("basic", True, "fork")),
    ],
)
def test_which_isolation_and_runner_each_machine_gets(monkeypatch, namespaces, bwrap, mode, expected):
    from autograder.runner import isolation

    monkeypatch.setattr(isolation, "_CACHE", {})
    monkeypatch.setattr(isolation, "namespaces_available", lambda: namespaces)
    monkeypatch.setattr(
        isolation, "bubblewrap", lambda: (bwrap, "" if bwrap else "bubblewrap is not installed")
    )
    got = isolation.resolve(mode)
    assert (got.mode, got.namespaces, got.runner) == expected
    assert ("kernels forked from a warm parent" in got.describe()) == (got.runner == "fork")
    assert isolation.resolve(mode, "spawn").runner == "spawn"
    with pytest.raises(isolation.IsolationError, match="cannot use bubblewrap"):
        isolation.resolve("bubblewrap", "fork")


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["fork", "spawn"])
def test_both_runners_load_the_frameworks_but_leave_no_name_behind(runner):
    """A notebook that forgot `import torch` fails the same way whichever runner started its kernel."""
    isolation = resolve("basic", runner)
    code = "import sys\nprint(sorted(n for n in ('torch', 'numpy') if n in dir()), 'torch' in sys.modules)"
    outcome = run_in_sandbox(
        nbformat.v4.new_notebook(cells=[new_code_cell(code)]), ("numpy", "torch"), isolation
    )
    assert outcome.status == "finished", outcome.detail
    assert outcome.summary["cells"][0]["output"].strip() == "[] True"


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["fork", "spawn"])
def test_a_run_too_short_for_the_watchdogs_samples_still_reports_its_kernels_peak(runner, monkeypatch):
    """The watchdog samples every 0.2 s; a kernel that lives 0.1 s can end between two samples. Its peak comes
    from the kernel's own high-water mark, read by the driver before it stops the kernel."""
    from autograder.runner.watchdog import Watchdog

    monkeypatch.setattr(Watchdog, "tree_usage", lambda self: (1, 0))  # every sample misses the kernel
    # 400 MB held for a moment: more than any process of the run besides the kernel ever maps (a forked one
    # maps its warm parent's pages, about 100 MB with numpy), so the peak must be the kernel's own
    code = "import numpy as np\nx = np.ones(400 * 2**20, dtype=np.uint8)\nprint(int(x.sum()))\ndel x"
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(code)])
    outcome = run_in_sandbox(nb, ("numpy",), resolve("basic", runner))
    assert outcome.status == "finished", outcome.detail
    assert outcome.peak_memory_mb is not None and 400 < outcome.peak_memory_mb < LIMITS.memory_mb


def test_the_frameworks_of_an_assignment_are_found_without_importing_them(tmp_path):
    """Which modules a warm parent imports is decided in the grader without importing them there: a submodule's
    ``find_spec`` imports its package (torch, 1.4 s, in the grader's own process and before anything runs)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from autograder.intake.handin import _findable\n"
        "assert [_findable(m) for m in ('torch._dynamo', 'torch._inductor.compile_fx', 'numpy', 'torch.nosuch',"
        " 'nosuch', 'nosuch.sub')] == [True, True, True, False, False, False]\n"
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )


@pytest.mark.tooling  # (how fast a warm parent starts, not what a run may do: make test-tools)
def test_warm_parents_of_different_slots_start_at_the_same_time(monkeypatch):
    """Starting slot 1's warm parent (seconds of imports) must not hold up slot 0's, which is already up."""
    import threading
    import time

    started = threading.Event()

    class Slow:
        dead = False

        def __init__(self, warm):
            self.process = type("P", (), {"poll": staticmethod(lambda: None), "pid": 0})()

        def start(self):
            started.set()
            time.sleep(3)
            return self

        def twin(self):  # (slot 1's parent is slot 0's twin: the fork must not hold up slot 0 either)
            return self.start()

        def stop(self):
            pass

    monkeypatch.setattr(forkserver, "_SERVERS", {})
    monkeypatch.setattr(forkserver, "ForkServer", Slow)
    first = forkserver.server_for(("numpy",), 0)
    started.clear()
    second = threading.Thread(target=forkserver.server_for, args=(("numpy",), 1))
    second.start()
    assert started.wait(5)
    t0 = time.monotonic()
    assert forkserver.server_for(("numpy",), 0) is first
    assert time.monotonic() - t0 < 2  # (held up, it would wait out the 3 s start)
    second.join()


COMPILING = ("numpy", "torch", "torch._dynamo", "torch._inductor.compile_fx")


@pytest.mark.tooling  # (how fast a warm parent starts, not what a run may do: make test-tools)
def test_a_kernel_of_a_compiling_assignment_starts_with_the_vector_isa_probed():
    """torch.compile's first call on a CPU compiles C++ probes of the machine's vector instructions (8 s); the
    warm parent of an assignment that compiles asks once, and each forked kernel starts with the answer."""
    code = (
        "import gc\n"
        "from torch._inductor import config, cpu_vec_isa\n"
        "print(cpu_vec_isa.valid_vec_isa_list.cache_info().currsize, config.cpp_cache_precompile_headers,"
        " gc.get_freeze_count() > 1000)"
    )
    notebook = nbformat.v4.new_notebook(cells=[new_code_cell(code)])
    isolation = forked_isolation()  # (without namespaces, a kernel could write the header: it is not used)
    outcome = run_in_sandbox(notebook, COMPILING, isolation)
    assert outcome.status == "finished", outcome.detail
    # the parent's precompiled header in use; the parent's objects are out of the kernel's garbage collector's walk
    assert outcome.summary["cells"][0]["output"].strip() == "1 True True"
    plain = run_in_sandbox(notebook, ("numpy", "torch"), isolation)  # not asked: not known
    assert plain.summary["cells"][0]["output"].strip() == "0 False True"
    spawned = run_in_sandbox(notebook, ("numpy", "torch"), resolve("basic", "spawn"))  # (a fresh interpreter)
    assert spawned.summary["cells"][0]["output"].strip() == "0 False False"


HEADER_ATTACK = """
import json, os, torch
from torch._inductor import codecache
given = []
shared = codecache._precompile_header
def watching(*args, **kwargs):
    given.append(shared(*args, **kwargs))
    return given[-1]
codecache._precompile_header = watching
x = torch.linspace(-2, 2, 64)
same = bool(torch.allclose(torch.compile(lambda t: torch.sin(t) * 3 + t * t)(x), torch.sin(x) * 3 + x * x))
header = next(p for p in given if p)
tries = {}
for name, attempt in {
    "append": lambda: open(header + ".gch", "ab").close(),
    "replace": lambda: os.replace(header, header + ".old"),
    "new": lambda: open(os.path.join(os.path.dirname(header), "poison.h"), "w").close(),
    "chmod": lambda: os.chmod(header + ".gch", 0o666),
}.items():
    try:
        attempt()
        tries[name] = "done"
    except OSError as err:
        tries[name] = type(err).__name__
print(json.dumps({"same": same, "header": header, "tries": tries}))
"""


@pytest.mark.slow
def test_a_compiling_kernel_compiles_with_the_parents_header_and_cannot_change_it():
    """The warm parent precompiles torch's C++ header once (its own fixed function, no notebook's code); a kernel
    compiling anything of its own gets it read-only. A header one run could write would be compiled into the
    next run's kernels, so each way of changing it must fail, and the next run still compiles it."""
    notebook = nbformat.v4.new_notebook(cells=[new_code_cell(HEADER_ATTACK)])
    isolation = forked_isolation()
    for _ in range(2):
        outcome = run_in_sandbox(notebook, COMPILING, isolation)
        assert outcome.status == "finished", outcome.detail
        report = json.loads(outcome.summary["cells"][0]["output"].strip().splitlines()[-1])
        assert report["same"]
        assert report["header"].startswith(str(forkserver.header_folder()))
        assert "done" not in report["tries"].values(), report["tries"]
    built = sorted(p.name for p in forkserver.header_folder().iterdir())
    assert "poison.h" not in built and not any(name.endswith(".old") for name in built)


def test_a_header_a_kernel_could_change_or_that_is_missing_is_not_used(tmp_path, monkeypatch):
    """Where the kernel could write the parent's header (no separate user, no read-only view) or the header is
    not there, the kernel compiles from text, as with precompiled headers off."""
    header = tmp_path / "prefix.h"
    header.write_text("#include <torch/csrc/inductor/cpp_prefix.h>\n")
    monkeypatch.setattr(forkserver, "PRECOMPILED", {("h", "g++", ()): str(header)})
    assert not forkserver.use_precompiled_header()  # no .gch built
    (tmp_path / "prefix.h.gch").write_bytes(b"built")
    assert os.access(header, os.W_OK)  # (this test's own folder: writable)
    assert not forkserver.use_precompiled_header()
    monkeypatch.setattr(forkserver, "PRECOMPILED", {})
    assert not forkserver.use_precompiled_header()


def test_only_code_decides_what_a_warm_parent_imports(tmp_path):
    """A model answer that names torch.compile must not cost every kernel the compiler's start (8 s)."""
    source = source_notebook()
    source.cells.append(nbformat.v4.new_markdown_cell("Fuse them with `torch.compile` or `torch.export`."))
    source.cells.append(new_code_cell("import torch\nwith torch.profiler.profile() as p:\n    pass"))
    course = Course(root=make_course(tmp_path / "course", notebook=source))
    assert frameworks_used(course, "T1") == (
        "numpy",
        "dlcourse",
        "torch",
        "torch._dynamo",
        "dlcourse.grading",
    )
    source.cells.append(new_code_cell("fast = torch.compile(lambda x: x + 1)"))
    course = Course(root=make_course(tmp_path / "again", notebook=source))
    assert {"torch._inductor.compile_fx", "torch.export", "sympy.tensor.tensor"} <= set(
        frameworks_used(course, "T1")
    )


def test_a_source_that_uses_torch_or_plots_warms_what_torch_and_matplotlib_import_on_first_use(tmp_path):
    """torch imports torch._dynamo on an optimizer's first construction (and in gradcheck, attention, ...):
    1 s of every kernel. A source that uses torch gets it in its parent; one that plots gets matplotlib's
    figure, Agg canvas and pyplot; one that loads the course's data gets scikit-learn's datasets and
    model_selection; the course's modules the code names are imported; a numpy-only source gets none."""
    numpy_only = frameworks_used(Course(root=make_course(tmp_path / "numpy")), "T1")
    assert numpy_only == ("numpy", "dlcourse", "dlcourse.grading")  # (its tests check with dlcourse.grading)
    source = source_notebook()
    source.cells.append(new_code_cell("import torch\nopt = torch.optim.SGD([torch.zeros(1)], lr=0.1)"))
    source.cells.append(
        new_code_cell("from dlcourse.plots import show\nfrom dlcourse.data import load_digits_split")
    )
    source.cells.append(new_code_cell("dlcourse.banner()\ndlcourse.no_such_module.x = 1"))
    warm = frameworks_used(Course(root=make_course(tmp_path / "torch", notebook=source)), "T1")
    assert warm.index("torch") < warm.index("torch._dynamo")
    assert {"matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.pyplot"} <= set(warm)
    assert {"sklearn.datasets", "sklearn.model_selection", "dlcourse.plots", "dlcourse.data"} <= set(warm)
    assert not {"dlcourse.banner", "dlcourse.no_such_module"} & set(warm)  # a function, a name of no module
    assert "torch._inductor.compile_fx" not in warm


FIRST_USE = """
import io, json, sys
before = set(sys.modules)
import torch
import matplotlib
import matplotlib.pyplot as plt
from matplotlib.mathtext import MathTextParser
from dlcourse.data import load_digits_split
figures_at_start = plt.get_fignums()
parser_built = MathTextParser._parser is not None
opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
split = load_digits_split()
fig, ax = plt.subplots()
ax.plot([0, 1], [1, 0.01])
ax.set_yscale("log")
png = io.BytesIO()
fig.savefig(png, format="png")
# (spelled "torch." + "_dynamo": those words in a source warm the compiler too)
heavy = ("torch." + "_dynamo", "sympy", "matplotlib", "sklearn", "dlcourse")
print(json.dumps({
    "imported": sorted({p for p in heavy for m in set(sys.modules) - before if m.startswith(p)}),
    "png": png.getvalue()[:4] == b"\\x89PNG",
    "backend": matplotlib.get_backend().lower(),
    "figures": [figures_at_start, plt.get_fignums()],
    "parser built": parser_built,
    "digits": [load_digits_split.cache_info().hits, len(split.X_train), split.X_train.flags.writeable],
}))
"""


@pytest.mark.slow
def test_a_kernel_of_a_source_that_trains_and_plots_imports_neither_again(tmp_path):
    """What the parent of such a source imported, a forked kernel does not import again, and what a first use
    computes (matplotlib's mathtext parser, the digits' split) it finds made; it still plots (Agg, as every
    kernel), and each run's pyplot is its own: no figure at its start."""
    isolation = forked_isolation()
    source = source_notebook()
    source.cells.append(new_code_cell(FIRST_USE))
    warm = frameworks_used(Course(root=make_course(tmp_path / "course", notebook=source)), "T1")
    notebook = nbformat.v4.new_notebook(cells=[new_code_cell(FIRST_USE)])
    for _ in range(2):  # the second run gets a fresh pyplot: no figure of the first
        outcome = run_in_sandbox(notebook, warm, isolation)
        assert outcome.status == "finished", outcome.detail
        report = json.loads(outcome.summary["cells"][0]["output"].strip().splitlines()[-1])
        assert report == {
            "imported": [], "png": True, "backend": "agg", "figures": [[], [1]], "parser built": True,
            "digits": [1, 1347, False],
        }, report  # fmt: skip


CUDA_HOST = """
import json, sys
from autograder.runner import forkserver
forkserver.sees_a_cuda_device = lambda: True  # as on a machine with a CUDA GPU
imported = forkserver.warm_up(["numpy", "torch", "torch._dynamo", forkserver.COMPILES, "torch.export"], None)
print(json.dumps({"imported": imported, "compiler": forkserver.COMPILES in sys.modules,
                  "threads": forkserver.thread_count(), "headers": len(forkserver.PRECOMPILED)}))
"""


def test_where_torch_can_use_a_cuda_gpu_the_warm_parent_leaves_its_compiler_to_the_kernels():
    """On a CUDA host, importing torch's compiler starts the CUDA driver's thread and the header compile starts
    CUDA (an H100 with torch 2.11+cu130 showed both): a parent that did either forks no kernel that can use the
    GPU, and refuses to start. There it imports the rest (torch._dynamo and torch.export start nothing there)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CUDA_HOST], capture_output=True, text=True, check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"torch._dynamo", "torch.export"} <= set(report["imported"])
    assert forkserver.COMPILES not in report["imported"] and not report["compiler"]
    assert report == {**report, "threads": 1, "headers": 0}
    assert "left to the kernels (this machine has a CUDA GPU)" in done.stdout


KERNEL_START = """
import json, os, secrets, sys, tempfile
from autograder.runner import forkserver
forkserver.warm_up([], None)
from jupyter_client.connect import write_connection_file
from ipykernel.kernelapp import IPKernelApp
folder = tempfile.mkdtemp()
connection = os.path.join(folder, "kernel.json")
ports = dict(shell_port=1, iopub_port=2, stdin_port=3, hb_port=4, control_port=5)
write_connection_file(connection, ip=os.path.join(folder, "k"), transport="ipc", key=secrets.token_hex(8).encode(),
                      **ports)
before, out = set(sys.modules), os.dup(1)  # (the kernel takes over standard output as it starts)
IPKernelApp.instance().initialize(["-f", connection, "--IPKernelApp.parent_handle=1",
                                   "--HistoryManager.hist_file=:memory:"])
os.write(out, json.dumps(sorted(set(sys.modules) - before)).encode() + b"\\n")
os._exit(0)
"""


def test_a_kernel_imports_nothing_as_it_starts_that_its_parent_could_have():
    """Every module ``IPKernelApp.initialize`` imports (as the forked kernel starts) is one of the parent's."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", KERNEL_START], capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["faulthandler"]  # (built in: nothing to load)


def test_the_kernels_environment_keeps_pyarrows_allocator_from_starting_a_thread(tmp_path):
    """Where pandas and pyarrow are installed (Colab, a GPU host's image), ``import sklearn`` loads pyarrow,
    whose jemalloc started a background thread there, so the warm parent of every assignment that uses
    scikit-learn refused to start; ``JE_ARROW_MALLOC_CONF`` turns that thread off (seen there: 2 threads -> 1).
    Here, where pyarrow is installed, a parent that imported it has no other thread."""
    import subprocess
    import sys

    from autograder.runner.protocol import kernel_env

    env = kernel_env(tmp_path, 1)
    assert "background_thread:false" in env["JE_ARROW_MALLOC_CONF"].split(",")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return
    code = "import os, pyarrow.lib; print(len(os.listdir('/proc/self/task')))"
    threads = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert threads.stdout.strip() == "1", threads.stderr


FORMAT_CHECKERS = (
    "import jsonschema, nbformat\n"
    "print(sorted(jsonschema.FormatChecker.checkers), nbformat.ValidationError is jsonschema.ValidationError)"
)


def test_the_grader_loads_nbformat_without_the_iri_grammar_and_leaves_that_module_to_everyone_else():
    """jsonschema's ``iri`` checkers import rfc3987_syntax, which builds three parsers as it loads (0.8 s of
    every grader process, warm parent and child). The grader's processes skip that one import and nothing else:
    a notebook still validates, and the module itself imports for any other code."""
    import subprocess
    import sys

    pytest.importorskip("rfc3987_syntax")
    code = (
        "import sys, autograder, nbformat\n"
        "nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]))\n"
        "assert 'jsonschema._format' in sys.modules and 'rfc3987_syntax' not in sys.modules\n"
        "import rfc3987_syntax\n"
        "assert rfc3987_syntax.is_valid_syntax('iri', 'https://example.org/x')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["fork", "spawn"])
def test_a_kernel_gets_jsonschema_with_every_format_checker_a_plain_python_has(runner):
    """The warm parent's jsonschema, loaded without the iri grammar, is not what a notebook imports."""
    import subprocess
    import sys

    plain = subprocess.run(
        [sys.executable, "-c", FORMAT_CHECKERS], capture_output=True, text=True, check=True
    )
    isolation = resolve("basic", runner)
    if runner == "fork" and not isolation.namespaces:
        pytest.skip("this machine lets no process make namespaces (neither root nor user namespaces)")
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(FORMAT_CHECKERS)])
    outcome = run_in_sandbox(nb, ("numpy",), isolation)
    assert outcome.status == "finished", outcome.detail
    assert outcome.summary["cells"][0]["output"].strip() == plain.stdout.strip()


SPIN = """
import time
import numpy as np
a = np.random.default_rng(0).normal(size=(400, 400))
spun = []
for _ in range(5):
    a @ a  # OpenBLAS splits it among the kernel's threads
    started = time.process_time()
    time.sleep(0.05)
    spun.append(time.process_time() - started)
print(max(spun), sorted(spun)[2])
"""


@pytest.mark.slow
def test_blas_threads_sleep_when_their_work_is_done():
    """OpenBLAS's threads spin for 2**28 cycles (0.1 s) after each product by default: on a grader whose cores
    are all given to kernels, a kernel with several threads (the reference's calibration runs at 2 and 4,
    any run on a bigger machine) burns CPU another run needed (0.4 s of each reference's 2 s seen on 2 cores).
    Every kernel's OpenBLAS waits 2**4 cycles, then sleeps."""
    outcome = run_in_sandbox(
        nbformat.v4.new_notebook(cells=[new_code_cell(SPIN)]), ("numpy",), forked_isolation(), 2
    )
    assert outcome.status == "finished", outcome.detail
    worst, median = map(float, outcome.summary["cells"][0]["output"].split())
    assert median < 0.01, (worst, median)  # CPU while the kernel sleeps: its BLAS threads' spinning


def test_every_module_of_the_course_package_imports_without_starting_a_thread(tmp_path):
    """A warm parent imports every ``dlcourse`` module its source names, and refuses to start with a second
    thread (a fork copies only one): no module of the package may start one as it loads."""
    import subprocess
    import sys

    from autograder.runner.protocol import kernel_env

    code = (
        "import os, pkgutil, importlib, dlcourse\n"
        "names = [m.name for m in pkgutil.walk_packages(dlcourse.__path__, 'dlcourse.')]\n"
        "started = []\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "    if len(os.listdir('/proc/self/task')) > 1 and not started: started.append(name)\n"
        "print(len(names), started)\n"
    )
    env = {**kernel_env(tmp_path, 1), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    count, started = done.stdout.split(" ", 1)
    assert int(count) > 20 and started.strip() == "[]", done.stdout + done.stderr


def test_a_forked_kernel_sets_the_parents_jsonschema_aside_without_freeing_it():
    """Out of the kernel's sys.modules, but kept: freeing those modules would write to (and so copy) about 2,000
    of the parent's pages in every kernel, 8 ms of each."""
    import subprocess
    import sys

    code = (
        "import gc, sys, weakref\n"
        "import autograder, nbformat, nbclient\n"
        "modules = [weakref.ref(sys.modules[n]) for n in ('jsonschema', 'nbformat', 'nbclient')]\n"
        "del nbformat, nbclient\n"
        "autograder.give_back_jsonschema()\n"
        "gc.collect()\n"
        "print([n in sys.modules for n in ('jsonschema', 'nbformat', 'nbclient')], [m() is not None for m in modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "[False, False, False] [True, True, True]", done.stdout + done.stderr


def test_a_parent_whose_threadpool_controller_fails_still_starts_and_its_kernels_set_their_own_threads():
    import subprocess
    import sys

    code = (
        "import json, threadpoolctl\n"
        "from autograder.runner import forkserver\n"
        "forkserver.threadpool_controller = lambda: 1 / 0\n"
        "forkserver.warm_up(['numpy'], None)\n"
        "forkserver.set_threads(2)\n"
        "blas = {p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas'}\n"
        "print(json.dumps([len(forkserver._THREADPOOLS), sorted(blas)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "threadpoolctl failed: ZeroDivisionError" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, [2]]


def test_a_kernel_sets_aside_the_driver_modules_its_parent_listed_and_those_loaded_after():
    """A warm parent lists its jsonschema, nbformat and nbclient modules once (a kernel going through all of
    sys.modules would copy thousands of the parent's pages); one loaded after the list is added as it loads."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import autograder, nbformat\n"
        "autograder.list_drivers()\n"
        "import nbclient, nbformat.sign\n"  # after the list
        "autograder.give_back_jsonschema()\n"
        "left = [n for n in sys.modules if n.partition('.')[0] in ('jsonschema', 'nbformat', 'nbclient')]\n"
        "print(left, 'nbclient' in [m.__name__ for m in autograder._SET_ASIDE])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "[] True", done.stdout + done.stderr


def test_a_warm_parent_compiles_nbformats_validators_so_its_drivers_read_notebooks_without_compiling():
    """fastjsonschema writes and compiles each validator on its first use in a process (30 to 45 ms of every
    run's driver); the parent makes them once, for every minor version of nbformat 4."""
    import subprocess
    import sys

    code = (
        "import json, fastjsonschema, nbformat, nbformat.v4\n"
        "from autograder.runner.forkserver import warm_up\n"
        "warm_up([], None)\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('compiled a validator after the warm-up')\n"
        "fastjsonschema.compile = refuse\n"
        "for minor in range(nbformat.v4.nbformat_minor + 1):\n"
        "    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
        "    nb.nbformat_minor = minor\n"
        "    if minor < 5:\n"
        "        del nb.cells[0]['id']\n"
        "    nbformat.reads(json.dumps(nb), as_version=4)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )


def test_a_warm_parents_kernel_shows_its_first_traceback_without_compiling_the_lexer_again():
    """IPython's traceback of a failing cell highlights the code with pygments, whose lexer compiles about a
    hundred patterns on its first use (with the first pass of ``inspect.getmodule`` over thousands of torch
    modules, 60 to 80 ms of each run's first error). The parent formats one traceback; its kernels reuse it."""
    import subprocess
    import sys

    code = (
        "import contextlib, io, re._compiler as compiler\n"
        "from autograder.runner.forkserver import warm_up\n"
        "warm_up(['numpy'], None)\n"
        "count, real = [0], compiler.compile\n"
        "def counting(*args, **kwargs):\n"
        "    count[0] += 1\n"
        "    return real(*args, **kwargs)\n"
        "compiler.compile = counting\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_cell('x = 1')\n"
        "before = count[0]\n"
        "with contextlib.redirect_stdout(io.StringIO()) as shown:\n"
        "    shell.run_cell('def f():\\n    raise NotImplementedError()\\nf()')\n"
        "assert 'NotImplementedError' in shown.getvalue(), shown.getvalue()\n"
        "print(count[0] - before)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )  # fmt: skip
    assert int(ran.stdout.strip().splitlines()[-1]) <= 5, ran.stdout


LINGERING_CHILD = """
import sys, time
from autograder.runner.child import READY
from autograder.runner.protocol import encode_report
print(READY, flush=True)
sys.stdin.readline()
summary = {"cells": [{"index": 0, "status": "ok"}], "stopped": None, "timings": {"notebook": 0.01}}
sys.stdout.buffer.write(encode_report(summary, {}, [("cases.jsonl", b"{}\\n")], []))
sys.stdout.buffer.flush()
time.sleep(float(sys.argv[1]))  # still holding the pipe: its end comes only when this process ends
"""


@pytest.mark.parametrize("linger", [0.0, 6.0])
def test_a_run_whose_report_came_whole_is_decided_while_its_processes_end_and_cleanup_ends_them(
    monkeypatch, linger
):
    """The driver's report is its last act: once it came whole, the grader goes on (a child's memory takes 20
    to 30 ms to tear down) and kills what is left; cleanup waits until the child has ended. A child that
    lingered 6 s after its report held a run that long before."""
    import subprocess
    import sys
    import time

    from autograder.runner import launchers

    def lingering(argv, request):
        return subprocess.Popen(
            [sys.executable, "-c", LINGERING_CHILD, str(linger)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), start_new_session=True,
        )  # fmt: skip

    monkeypatch.setattr(launchers, "spawn", lingering)
    sandbox = Sandbox(LIMITS, 0, (), resolve("basic", "spawn")).start()
    try:
        started = time.monotonic()
        outcome = sandbox.run(nbformat.v4.new_notebook(cells=[new_code_cell("1")]))
        ran = time.monotonic() - started
        assert outcome.status == "finished", outcome.detail
        assert outcome.capture == {"cases.jsonl": b"{}\n"} and outcome.summary["cells"][0]["status"] == "ok"
        assert ran < 3.0, ran  # not held until the child ended on its own
        sandbox.process.wait(timeout=10)  # it had its signals and ended: its id may be another's by now
        signalled = []
        monkeypatch.setattr(os, "killpg", lambda *args: signalled.append(args))
    finally:
        sandbox.cleanup()
    assert sandbox.process.poll() is not None  # ended (killed) before cleanup returned
    assert signalled == []  # cleanup sent nothing more to the ended child's process group


def _huge_pages_possible() -> bool:
    """Transparent huge pages on request (the kernel's mode is not "never") and a glibc that asks (2.35+)."""
    import platform

    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    libc, version = platform.libc_ver()
    return "[never]" not in mode and libc == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35)


def _numpy_parent() -> int:
    (pid,) = [
        pid for (warm, slot, *_), pid in forkserver.warm_parents().items() if warm == ("numpy",) and slot == 0
    ]
    return pid


def _anon_huge_kb(pid: int | str) -> int:
    rollup = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    )
    return int(rollup["AnonHugePages"].split()[0])


def test_the_warm_parent_asks_for_huge_pages_and_its_kernels_environment_stays_the_submissions():
    """The warm parent's malloc asks for huge pages (so each of a run's forks copies far fewer page-table
    entries); the variable that asks is the parent's own: a kernel's environment is the submission's."""
    code = "import os\nprint(sorted(k for k in os.environ if k.startswith('GLIBC')))"
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(code)])
    outcome = run_in_sandbox(nb, ("numpy",), resolve("auto"))
    assert outcome.status == "finished", outcome.detail
    assert outcome.summary["cells"][0]["output"].strip() == "[]"
    environ = Path(f"/proc/{_numpy_parent()}/environ").read_bytes().split(b"\0")
    assert f"GLIBC_TUNABLES={forkserver.HUGE_PAGE_MALLOC}".encode() in environ


def _machine_gives_huge_pages() -> bool:
    """Whether a process that asks as the warm parent asks gets a transparent huge page now: the kernel gives
    them only where it finds 2 MB of free contiguous memory (after a long run, memory is fragmented and the
    kernel splits huge pages again under pressure), so a parent started earlier may hold none."""
    import subprocess
    import sys

    probe = "import numpy as np\na = np.ones(2**23)\nprint(open('/proc/self/smaps_rollup').read())"
    env = {**os.environ, "GLIBC_TUNABLES": forkserver.HUGE_PAGE_MALLOC}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    found = [line for line in done.stdout.splitlines() if line.startswith("AnonHugePages:")]
    return bool(found) and int(found[0].split()[1]) > 0


def test_the_warm_parents_heap_is_in_huge_pages_where_the_machine_gives_them():
    """Where a fresh process that asks gets huge pages, a warm parent started now holds some. (The kernel's
    behaviour, not the grader's: where the machine gives none right now, the test says so and skips.)"""
    from autograder.api import cold_start

    if not _huge_pages_possible():
        pytest.skip("transparent huge pages are off here, or glibc is older than 2.35")
    if not _machine_gives_huge_pages():
        pytest.skip("this machine gives a process asking for huge pages none right now (fragmented memory)")
    cold_start()  # a parent started now, not one an earlier test of this worker started long ago
    nb = nbformat.v4.new_notebook(cells=[new_code_cell("1")])
    assert run_in_sandbox(nb, ("numpy",), resolve("auto")).status == "finished"
    assert _anon_huge_kb(_numpy_parent()) > 0
