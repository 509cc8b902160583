"""The grader's Python reached through a link in a folder the sandbox hides: ``python3`` a link in ``~/bin`` or
``/tmp`` (Linuxbrew's is one in ``/home``), and a virtual environment made from it, whose ``bin/python`` names that
link. A kernel must find the link where the environment says it is, and nothing else of that folder; before, every
run was refused (the sandbox's probe could not start Python)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from autograder.runner.visibility import Visibility

MODES = [("basic", "fork"), ("basic", "spawn"), ("bubblewrap", "spawn")]
CELL = """
import os, subprocess, sys
print(subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip())
print(sorted(os.listdir(os.path.dirname(os.readlink(sys.executable)))))
"""
GRADER = """
import json, sys
import nbformat
from autograder.runner.isolation import IsolationError, resolve
from autograder.runner.sandbox import Sandbox
from autograder.settings import Limits
try:
    isolation = resolve(sys.argv[1], sys.argv[2])
except IsolationError as err:
    print(json.dumps({"refused": str(err)}))
    raise SystemExit(0)
sandbox = Sandbox(Limits(timeout=120, cell_timeout=60), 0, ("numpy",), isolation)
report = sandbox.probe()
if report.get("error") or report.get("visible"):
    print(json.dumps({"probe": report}))
    raise SystemExit(0)
sandbox.start()
try:
    outcome = sandbox.run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(sys.argv[3])]))
finally:
    sandbox.cleanup()
print(json.dumps({"status": outcome.status, "detail": outcome.detail[-1500:],
                  "printed": [c.get("output", "") for c in outcome.summary.get("cells", [])]}))
"""


def linked_environment(tmp_path: Path) -> Path:
    """A virtual environment, as ``python3 -m venv`` makes one where ``python3`` is a link in ``tmp_path/bin``
    (under /tmp, which every kernel's view covers), that uses this environment's packages; its ``bin/python``."""
    links = tmp_path / "bin"
    links.mkdir()
    (links / "python3").symlink_to(os.path.realpath(sys.executable))
    (links / "notes.txt").write_text("the rest of the folder: not for kernels\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(links / "python3")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "pyvenv.cfg").write_text(
        f"home = {links}\ninclude-system-site-packages = false\nversion = {version}.{sys.version_info.micro}\n"
    )
    site = venv / "lib" / f"python{version}" / "site-packages"
    site.mkdir(parents=True)
    packages = sysconfig.get_paths()["purelib"]
    (site / "this_project.pth").write_text(f"import site; site.addsitedir({packages!r})\n")
    return venv / "bin" / "python"


def test_a_link_on_the_way_to_python_in_a_hidden_folder_is_made_again_and_nothing_else_of_it(tmp_path):
    python = linked_environment(tmp_path)
    view = Visibility(tmp_path / "scratch")
    made = view.links(str(python))
    # venv/bin/python and bin/python3 both lie under /tmp, which is covered: each link, as it is
    assert made == [
        (str(python), str(tmp_path / "bin" / "python3")),
        (str(tmp_path / "bin" / "python3"), os.path.realpath(sys.executable)),
    ]
    # a relative link is read from the folder it lies in, and followed from there
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "python").symlink_to("../bin/python3")
    assert view.links(str(tmp_path / "other" / "python")) == [
        (str(tmp_path / "other" / "python"), "../bin/python3"),
        (str(tmp_path / "bin" / "python3"), os.path.realpath(sys.executable)),
    ]
    # a link in a folder the kernel is shown anyway is there already: not made again
    shown = Visibility(tmp_path / "scratch", shown=(str(tmp_path / "bin"),))
    assert shown.links(str(python)) == [(str(python), str(tmp_path / "bin" / "python3"))]


@pytest.mark.parametrize(("mode", "runner"), MODES, ids=[f"{m}-{r}" for m, r in MODES])
def test_a_grader_whose_python_is_a_link_in_a_hidden_folder_runs_kernels_that_find_it(tmp_path, mode, runner):
    python = linked_environment(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run(
        [str(python), "-c", GRADER, mode, runner, CELL],
        capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if "refused" in found:
        pytest.skip(f"{mode} cannot run here: {found['refused']}")
    assert "probe" not in found, found
    assert found["status"] == "finished", found
    printed = "".join(found["printed"])
    assert "42" in printed, found  # the kernel started its own interpreter, through the links
    assert "['python3']" in printed, found  # of the link's folder, the link alone


def test_a_grader_started_beside_another_copy_of_its_code_refuses_and_says_how_to_start_it(tmp_path):
    """``python -m autograder`` started in a second copy of the course imports that copy first, while the kernels
    import what the environment installs: they ran one copy and the grader decided with the other, and A5 to A8
    failed their own references. The grader refuses, and says how to start it."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    for package in ("autograder", "dlcourse"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    code = "from autograder.runner.isolation import resolve; print(resolve('auto').mode)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    beside = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert beside.returncode != 0
    assert f"runs autograder from {tmp_path / 'autograder'}" in beside.stderr, beside.stderr[-2000:]
    assert f"installs it from {root / 'autograder'}" in beside.stderr and "pip install -e" in beside.stderr
    # started where its own code is the installed one, it grades
    at_home = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert at_home.returncode == 0 and at_home.stdout.strip() in ("basic", "bubblewrap"), at_home.stderr[
        -2000:
    ]


def test_what_the_kernels_import_is_read_from_the_last_line_and_an_answer_without_one_checks_nothing(
    monkeypatch,
):
    """A ``sitecustomize`` or ``.pth`` of the environment may print before the fresh interpreter answers; an answer
    that is not one (a crash, a timeout, text) leaves the check out rather than stop every grader."""
    from autograder.runner import isolation

    def answering(stdout, code=0):
        return lambda *a, **k: subprocess.CompletedProcess(a, code, stdout=stdout, stderr="")

    monkeypatch.setattr(
        isolation.subprocess, "run", answering('hello from a .pth\n{"autograder": "/x/a.py"}\n')
    )
    assert isolation._kernels_code() == {"autograder": "/x/a.py"}
    for stdout, code in (("not json", 0), ('{"autograder": "/x/a.py"}', 1), ("", 0), ('["a"]', 0)):
        monkeypatch.setattr(isolation.subprocess, "run", answering(stdout, code))
        assert isolation._kernels_code() == {}, stdout

    def slow(*a, **k):
        raise subprocess.TimeoutExpired(a, 120)

    monkeypatch.setattr(isolation.subprocess, "run", slow)
    assert isolation._kernels_code() == {}
