"""Students run cells out of order. A cell that needs an earlier one says which to run first (a clear
RuntimeError, not a NameError or a missing file), or needs nothing but the imports; a cell that changes the
environment puts it back."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

LECTURES = Path(__file__).resolve().parents[2] / "lectures"


def cell_source(notebook: str, cell_id: str) -> str:
    nb = nbformat.read(str(LECTURES / notebook), as_version=4)
    return next(cell.source for cell in nb.cells if cell.get("id") == cell_id)


def run_cells(notebook: str, *cell_ids: str, namespace: dict | None = None) -> dict:
    """Execute cells of a lecture, in the order given, in one namespace (a kernel's globals, without IPython)."""
    namespace = {} if namespace is None else namespace
    for cell_id in cell_ids:
        exec(compile(cell_source(notebook, cell_id), f"{notebook}:{cell_id}", "exec"), namespace)
    return namespace


LECTURE_10_IMPORTS = "6d57874c"


@pytest.mark.parametrize(
    ("notebook", "setup", "cell_id"),
    [
        ("10_hardware.ipynb", [LECTURE_10_IMPORTS], "1b81fa0b"),  # GPU matmuls need section 3's CPU sweep
        ("10_hardware.ipynb", [LECTURE_10_IMPORTS], "64b11e5d"),  # the bar chart needs the GPU matmuls
        ("10_hardware.ipynb", [LECTURE_10_IMPORTS], "bdc6d7aa"),  # the GPU roofline needs sections 3, 5, 6
        ("08_static_graphs.ipynb", [], "71fa2c1f"),  # reloading needs the saved file
        ("08_static_graphs.ipynb", [], "d7f0ff9b"),  # the fresh process needs the saved file
        ("08_static_graphs.ipynb", [], "c8cc2423"),  # saving the export needs the export and the folder
    ],
)
def test_cell_run_too_early_says_what_to_run_first(notebook, setup, cell_id):
    namespace = run_cells(notebook, *setup)
    with pytest.raises(RuntimeError, match=r"(?i)run .* first"):
        run_cells(notebook, cell_id, namespace=namespace)


def test_lecture_10_bandwidth_cell_needs_only_the_imports(capsys):
    run_cells("10_hardware.ipynb", LECTURE_10_IMPORTS, "3286bd6b")
    assert "main memory on this machine" in capsys.readouterr().out


def test_lecture_8_leaves_its_saved_files_for_the_cells_that_read_them():
    source = cell_source("08_static_graphs.ipynb", "c8cc2423")
    assert "rmtree" not in source, "deleting the folder breaks re-running the cells that load from it"
    assert "atexit.register(shutil.rmtree, workdir" in cell_source("08_static_graphs.ipynb", "5c821979")


@pytest.mark.parametrize("own_setting", [None, "cpu"])
def test_lecture_1_restores_the_device_variable(monkeypatch, capsys, own_setting):
    if own_setting is None:
        monkeypatch.delenv("DLCOURSE_DEVICE", raising=False)
    else:
        monkeypatch.setenv("DLCOURSE_DEVICE", own_setting)
    import dlcourse

    namespace = {"dlcourse": dlcourse}
    run_cells("01_setup.ipynb", "f516cc1d", namespace=namespace)  # sets cpu, then meta
    assert os.environ.get("DLCOURSE_DEVICE") == own_setting
    assert "meta" in capsys.readouterr().out
    # The meta-device cell works whether or not the cell before it ran, and changes nothing.
    namespace = run_cells("01_setup.ipynb", "1ae7a432", "6e3062a4", namespace={"dlcourse": dlcourse})
    assert namespace["product"].device.type == "meta"
    assert os.environ.get("DLCOURSE_DEVICE") == own_setting
    # Asking for cuda on a machine without one: the error is printed and the setting comes back.
    namespace = run_cells("01_setup.ipynb", "f178f1f1", namespace={"dlcourse": dlcourse})
    assert os.environ.get("DLCOURSE_DEVICE") == own_setting
    assert namespace["device"] == dlcourse.get_device()
