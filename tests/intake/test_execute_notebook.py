""":func:`execute_notebook` says the kernel's own CPU time beside the wall time: the lectures' hang bound is
checked against it, so that a machine busy with other work cannot fail a lecture that does its own in time."""

from __future__ import annotations

import nbformat

from autograder.intake.notebooks import execute_notebook


def test_the_kernels_cpu_time_counts_its_work_and_not_its_waiting(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5: pass"
        ),
        nbformat.v4.new_code_cell("time.sleep(1.5)"),
    ]
    path = tmp_path / "busy.ipynb"
    nbformat.write(nb, path)
    run = execute_notebook(path, timeout=60, workdir=tmp_path / "run")
    assert run.seconds >= 3.0
    assert 1.5 <= run.cpu_seconds < run.seconds - 1.0  # the busy second and a half, not the sleep
