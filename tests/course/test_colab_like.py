"""A student's first run on a Colab-like runtime: frameworks preinstalled, no course package.

Colab comes with torch, TensorFlow, numpy, matplotlib, scikit-learn, tqdm, IPython and ipywidgets. The
set-up cell that opens every notebook must install the course package there without touching those,
print the version banner, and leave the self-check working. On Colab it installs the wheel that
`make wheel` builds and the release workflow attaches to the GitHub release. These tests build that wheel
offline from this working tree, build such a runtime from the project's own environment (nothing is
downloaded), point the set-up cell at the wheel file through DLCOURSE_PIP, and run the cell in that
runtime's IPython with pip's index switched off.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autograder.intake.notebooks import QUIET_ENV
from dlcourse.runtime import VERSION, WHEEL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SITE = Path(sysconfig.get_paths()["purelib"])  # the project's .venv site-packages
# What the runtime must not see of the project's environment: the course package, an editable install
# (which pip would count as installed). Everything else, pip and setuptools included, is "preinstalled".
HIDDEN = ["__editable__*dlcourse*", "dlcourse-*.dist-info", "__pycache__"]
FRAMEWORKS = ("torch", "tensorflow", "tensorflow-cpu")

# Run in the runtime's IPython, one cell at a time, as a notebook's kernel would.
SHELL = """\
import json, sys
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
for number, cell in enumerate(json.load(open(sys.argv[1]))):
    print(f"=== cell {number}", flush=True)
    result = shell.run_cell(cell, store_history=True)
    sys.stdout.flush()
    if not result.success:
        sys.exit(10 + number)
"""


def setup_cell() -> str:
    """The first cell of assignment 1 as students get it (the release, or its source before a release)."""
    for path in (ROOT / "assignments" / "A1" / "A1.ipynb", ROOT / "source" / "A1" / "A1.ipynb"):
        if path.is_file():
            return "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    pytest.skip("no assignment 1 notebook to take the set-up cell from")


def lecture_cells(exercise: str) -> tuple[str, str]:
    """Lecture 6's exercise cell as students find it (a stub) and its solution cell, for ``exercise``."""
    nb = json.loads((ROOT / "lectures" / "06_optim.ipynb").read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    defines = [s for s in code if f"def {exercise}(" in s]
    stubs = [s for s in defines if "NotImplementedError" in s]
    solutions = [s for s in defines if "NotImplementedError" not in s and f'check("l06.{exercise}"' in s]
    assert stubs and solutions, f"lecture 6 no longer has an exercise cell and a solution cell for {exercise}"
    stub, solution = stubs[0], solutions[0]
    return stub, solution


def run(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def pip_list(python: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    done = run([str(python), "-m", "pip", "list", "--format=json"], env, cwd)
    assert done.returncode == 0, done.stderr
    return {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(done.stdout)}


def framework_files(python: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Where torch and TensorFlow load from, found without importing them (TensorFlow's import is slow)."""
    probe = (
        "import importlib.util as u, json; "
        "print(json.dumps({m: u.find_spec(m).origin for m in ('torch', 'tensorflow')}))"
    )
    done = run([str(python), "-c", probe], env, cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The students' wheel, built from this working tree by `make wheel`, offline (pip's index switched off)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dist = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "MAKE"))}
    env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1")
    done = run(
        ["make", "--no-print-directory", "wheel", f"DIST={dist}", f"WHEEL_PY={sys.executable}"], env, ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(dist.glob("*.whl"))
    assert [p.name for p in built] == [WHEEL], f"make wheel built {built}, the set-up cell installs {WHEEL}"
    return built[0]


def test_wheel_holds_the_course_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {ROOT / n for n in names if not n.startswith(f"dlcourse-{VERSION}.dist-info/")}
    # every module of dlcourse (its exercises' checks included) and its texts (lecture 16's), and no autograder,
    # tests or notebooks
    expected = {p for p in (ROOT / "dlcourse").rglob("*.py") if "__pycache__" not in p.parts}
    expected |= set((ROOT / "dlcourse" / "texts").glob("*.txt"))
    assert shipped == expected, (
        f"missing {sorted(map(str, expected - shipped))}, extra {sorted(map(str, shipped - expected))}"
    )
    metadata = zipfile.ZipFile(wheel).read(f"dlcourse-{VERSION}.dist-info/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """A fresh venv that sees the project's packages (torch, TF, ...) but not dlcourse."""
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    preinstalled = base / "preinstalled"
    preinstalled.mkdir()
    for entry in PROJECT_SITE.iterdir():
        if not any(fnmatch.fnmatch(entry.name, pattern) for pattern in HIDDEN):
            (preinstalled / entry.name).symlink_to(entry)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # addsitedir (not a bare path line) so that the preinstalled packages' own .pth files are honoured
    (site / "colab_preinstalled.pth").write_text(f"import site; site.addsitedir({str(preinstalled)!r})\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLCOURSE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        COLAB_RELEASE_TAG="colab-like-test",  # what a Colab runtime sets
        **QUIET_ENV,
    )
    return venv / "bin" / "python", env, base


def test_runtime_has_the_frameworks_and_not_the_course_package(runtime):
    python, env, cwd = runtime
    installed = pip_list(python, env, cwd)
    assert "torch" in installed and ("tensorflow" in installed or "tensorflow-cpu" in installed)
    for name in ("numpy", "matplotlib", "scikit-learn", "tqdm", "ipykernel", "ipywidgets"):
        assert name in installed, name
    assert "dlcourse" not in installed
    done = run([str(python), "-c", "import dlcourse"], env, cwd)
    assert done.returncode != 0 and "No module named 'dlcourse'" in done.stderr


def test_set_up_cell_installs_the_wheel_offline_and_leaves_the_frameworks_alone(runtime, wheel):
    python, env, cwd = runtime
    before = pip_list(python, env, cwd)
    files_before = framework_files(python, env, cwd)
    # The wheel file in place of the release's URL, and no package index: the install must need nothing else.
    env = dict(env, DLCOURSE_PIP=str(wheel), PIP_NO_INDEX="1")
    stub, solution = lecture_cells("adam_step")
    cells = [
        setup_cell(),
        'from dlcourse.grading import check\ncheck("x", 1.0, expected=1.0)',
        stub + '\n\ndlcourse.check("l06.adam_step", adam_step);',
        solution,
    ]
    (cwd / "cells.json").write_text(json.dumps(cells))
    (cwd / "shell.py").write_text(SHELL)
    done = run([str(python), str(cwd / "shell.py"), str(cwd / "cells.json")], env, cwd, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    setup_output, check_output, stub_output, solution_output = output.split("=== cell ")[1:]

    # The package is installed; no framework was reinstalled, upgraded or moved.
    after = pip_list(python, env, cwd)
    assert after.pop("dlcourse") == VERSION
    assert after == before, "installing the course package changed other packages"
    assert framework_files(python, env, cwd) == files_before
    venv_site = next((python.parent.parent / "lib").glob("python*/site-packages"))
    assert not [p.name for p in venv_site.iterdir() if p.name.lower().startswith(("torch", "tensorflow"))]
    for line in setup_output.lower().splitlines():
        assert not any(f"installing {f}" in line or f"collecting {f}" in line for f in FRAMEWORKS), line

    # The banner: where we are, the versions of what is installed, and the GPU status.
    torch_version = before["torch"]
    tf_version = before.get("tensorflow") or before["tensorflow-cpu"]
    assert "dlcourse on Google Colab" in setup_output
    python_version = run([str(python), "-c", "import platform; print(platform.python_version())"], env, cwd)
    assert (
        f"Python {python_version.stdout.strip()} | numpy {before['numpy']} | torch {torch_version} | "
        f"TensorFlow {tf_version}"
    ) in setup_output
    assert "GPU: " in setup_output or "No GPU here" in setup_output

    # The self-checks work with the runtime's own numpy and torch.
    assert "\u2713 x" in check_output
    assert "still raises NotImplementedError" in stub_output and "0 of 1 passed" in stub_output
    assert "all passed" in solution_output
