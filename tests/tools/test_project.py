"""The project's own habits: pins agree, the package's requirements stay ranges, notebooks carry no
outputs, every notebook opens with the same set-up cell (which installs this version's release wheel),
lectures' solutions are hidden in Colab and JupyterLab alike, and CI runs the README's test command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

import dlcourse
from dlcourse.runtime import (
    HOME,
    PACKAGE_SPEC,
    SETUP_CELL,
    VERSION,
    WHEEL,
    colab_url,
    sync_release_references,
)

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^\s*-?\s*([A-Za-z0-9_.\-\[\]]+)==([^\s#]+)")


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def tracked(pattern: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    return [ROOT / p for p in out]


def test_environment_yml_and_requirements_pin_the_same_versions():
    pip_pins = pins(ROOT / "requirements.txt")
    conda_pins = pins(ROOT / "environment.yml")
    assert pip_pins == conda_pins
    assert pip_pins["torch"] == "2.13.0"  # the CPU wheel on disk; a looser pin downloads GBs of CUDA


def test_package_dependencies_are_ranges_and_never_force_a_framework():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        assert "==" not in requirement, requirement
        assert not requirement.startswith(("torch", "tensorflow")), "frameworks belong in extras"
    extras = project["optional-dependencies"]
    assert {"torch", "tf", "grader", "dev"} <= set(extras)
    assert all("==" not in r for reqs in extras.values() for r in reqs)


def test_committed_notebooks_have_no_outputs():
    # (the autograder's sample submissions include a deliberately broken file; they are checked elsewhere)
    notebooks = [p for p in tracked("*.ipynb") if "samples" not in p.parts]
    assert notebooks, "no notebooks are tracked"
    dirty = []
    for path in notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                dirty.append(path.relative_to(ROOT).as_posix())
                break
    assert not dirty, f"strip outputs (make strip): {dirty}"


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "lectures").glob("*.ipynb"))
    + sorted(ROOT.glob("source/*/*.ipynb"))
    + sorted(ROOT.glob("assignments/*/*.ipynb")),
    ids=lambda p: p.name,
)
def test_every_notebook_opens_with_the_set_up_cell(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    assert first["cell_type"] == "code"
    assert "".join(first["source"]) == SETUP_CELL
    assert PACKAGE_SPEC in SETUP_CELL and "google.colab" in SETUP_CELL  # one pinned reference, Colab only


def test_set_up_cell_installs_the_release_wheel_of_this_version():
    """The URL the notebooks install from is the wheel `make wheel` builds for this very version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert VERSION == version == dlcourse.__version__, (
        "bump pyproject.toml, dlcourse.__version__ and runtime.VERSION together"
    )
    assert WHEEL == f"dlcourse-{version}-py3-none-any.whl"
    assert PACKAGE_SPEC == f"https://github.com/{HOME}/releases/download/v{version}/{WHEEL}"
    assert f"'DLCOURSE_PIP', '{PACKAGE_SPEC}'" in SETUP_CELL  # still overridable, for forks and the tests


def test_colab_links_and_the_homepage_name_this_version_and_home():
    """The README's Colab links open this version's tag of HOME, the one place that names both."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"https://colab\.research\.google\.com/github/[^\s)]+", readme)
    assert len(links) >= 20, "the README lists every lecture and assignment with its Colab link"
    for link in links:
        path = link.split("/blob/", 1)[1].split("/", 1)[1]
        assert link == colab_url(path), f"{link}: run `python -m dlcourse.runtime`"
        assert (ROOT / path).is_file(), f"{link} opens a file that is not in the repository"
    homepage = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
    assert homepage == f"https://github.com/{HOME}"
    assert sync_release_references(ROOT, write=False) == []


def test_a_release_bump_rewrites_every_stale_link_and_set_up_cell(tmp_path):
    stale_cell = SETUP_CELL.replace(
        PACKAGE_SPEC, "https://github.com/someone/fork/releases/download/v0.0.1/x.whl"
    )
    (tmp_path / "README.md").write_text(
        "| 1 | set-up | [open](https://colab.research.google.com/github/someone/fork/blob/v0.0.1/lectures/01_setup.ipynb) |\n"
    )
    (tmp_path / "lectures").mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(stale_cell), nbformat.v4.new_code_cell("x = 1")]
    )
    nbformat.write(nb, tmp_path / "lectures" / "01_setup.ipynb")
    other = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import torch")]
    )  # no set-up cell: left alone
    nbformat.write(other, tmp_path / "lectures" / "02_other.ipynb")
    changed = sync_release_references(tmp_path)
    assert changed == [tmp_path / "README.md", tmp_path / "lectures" / "01_setup.ipynb"]
    assert colab_url("lectures/01_setup.ipynb") in (tmp_path / "README.md").read_text()
    assert nbformat.read(tmp_path / "lectures" / "01_setup.ipynb", as_version=4).cells[0].source == SETUP_CELL
    assert (
        nbformat.read(tmp_path / "lectures" / "02_other.ipynb", as_version=4).cells[0].source
        == "import torch"
    )
    assert sync_release_references(tmp_path) == []


def test_release_workflow_attaches_the_wheel_to_the_tag():
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert re.search(r"^on:\s*\n\s+push:\s*\n\s+tags:", workflow, flags=re.M), (
        "the release runs on a pushed tag"
    )
    assert "make wheel" in workflow  # the same build as here
    assert "gh release upload" in workflow and "dist/" in workflow
    assert "GITHUB_REF_NAME" in workflow  # it refuses a tag that does not name the package's version


COLAB_TITLE = re.compile(r"#\s*@title Solution: run to check, double-click to read\b")


def hidden_in_jupyterlab(cell) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def hidden_in_colab(cell) -> bool:
    """Colab shows a code cell as a form, its title only, when metadata.cellView is "form" and the first
    line is a `# @title` comment (double-clicking the title shows the code)."""
    source = "".join(cell["source"])
    return cell.get("metadata", {}).get("cellView") == "form" and bool(COLAB_TITLE.match(source))


@pytest.mark.parametrize("path", sorted((ROOT / "lectures").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_hidden_solutions_are_hidden_in_colab_and_jupyterlab(path):
    from tests.fixtures.lectures import is_hidden_solution

    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    solutions = []
    for number, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        after_heading = (
            number > 0
            and cells[number - 1]["cell_type"] == "markdown"
            and ("Solution (try first!)" in "".join(cells[number - 1]["source"]).split("\n", 1)[0])
        )
        hidden = {"JupyterLab": hidden_in_jupyterlab(cell), "Colab": hidden_in_colab(cell)}
        if after_heading or any(hidden.values()):
            assert all(hidden.values()), (
                f"cell {number} ({cell.get('id')}) is a solution: hide it in JupyterLab and Colab alike, {hidden}"
            )
            solutions.append(cell)
    assert solutions, f"{path.name} has no hidden solution"
    # the lecture test runs exactly these cells as hidden solutions, with their self-checks
    found = [c for c in nbformat.reads(json.dumps(nb), as_version=4).cells if is_hidden_solution(c)]
    assert [c.id for c in found] == [c["id"] for c in solutions]


def test_set_up_cell_installs_nothing_locally(tmp_path):
    """Run the set-up cell's code in a plain IPython shell: with no Colab and no DLCOURSE_PIP, no pip runs."""
    script = tmp_path / "run.py"
    script.write_text(
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "calls = []\n"
        "ip.register_magic_function(lambda line: calls.append(line), 'line', 'pip')\n"
        f"result = ip.run_cell({SETUP_CELL!r})\n"
        "assert result.success, result.error_in_exec\n"
        "print('PIP CALLS', calls)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "PIP CALLS []" in done.stdout and "Python" in done.stdout


def test_set_up_cell_says_what_to_do_when_the_install_failed(tmp_path):
    """A failed %pip (no network on Colab) must not end in a bare ModuleNotFoundError."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "ip.register_magic_function(lambda line: None, 'line', 'pip')\n"
        "sys.modules['dlcourse'] = None  # as if pip had installed nothing\n"
        "sys.modules['google.colab'] = type(sys)('google.colab')\n"
        f"result = ip.run_cell({SETUP_CELL!r})\n"
        "print('ERROR', type(result.error_in_exec).__name__, result.error_in_exec)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    import sys

    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert "ERROR ModuleNotFoundError The course package is not installed. On Colab" in done.stdout, (
        done.stdout
    )
    assert "Restart session" in done.stdout


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^\s*(make \w+)\s*$", readme.split("##", 1)[0], flags=re.M)
    assert commands[:2] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_tests_lint_reads_every_python_file_in_git_and_no_generated_release():
    """ruff's excludes name the generated releases (the root's ``assignments/``) and nothing else of the course: a
    pattern ``assignments`` alone also left ``tests/assignments/`` unlinted and unformatted."""
    ruff = Path(sys.executable).parent / "ruff"  # (make test's own)
    shown = subprocess.run(
        [str(ruff), "check", "--no-cache", "--show-files", "."], cwd=ROOT, capture_output=True, text=True
    ).stdout
    read = {
        Path(line).relative_to(ROOT).as_posix() for line in shown.splitlines() if line.startswith(str(ROOT))
    }
    python = [p.relative_to(ROOT).as_posix() for p in tracked("*.py")]
    if not python:
        pytest.skip("not a git checkout: no list of the course's files to compare with")
    assert not [p for p in python if p not in read], "ruff (make test's lint) skips these"
    assert not [p for p in read if p.startswith("assignments/")], (
        "the releases are nbgrader's output, not ours"
    )
    assert [p for p in python if p.startswith("tests/assignments/")]


def test_readme_links_every_lecture_and_assignment_and_nothing_else(root):
    readme = (root / "README.md").read_text()
    linked = set(
        re.findall(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/([^)\s]+\.ipynb)", readme)
    )
    notebooks = {p.relative_to(root).as_posix() for p in (root / "lectures").glob("[0-9][0-9]_*.ipynb")}
    notebooks |= {p.relative_to(root).as_posix() for p in (root / "assignments").glob("*/*.ipynb")}
    assert linked == notebooks, (
        f"README's Colab table: missing {notebooks - linked}, stale {linked - notebooks}"
    )
