"""The README's plain nbgrader commands as a newcomer types them: `.venv/bin/nbgrader` with the .venv not on
PATH opens the gradebook (nbgrader runs `alembic` from PATH; the course's nbgrader_config.py puts the
interpreter's own bin/ there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_venvs_nbgrader_runs_without_the_venv_on_path(tmp_path):
    nbgrader = Path(sys.executable).parent / "nbgrader"
    if not nbgrader.is_file():
        pytest.skip("nbgrader's script is not beside this interpreter")
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": os.defpath}
    done = subprocess.run(
        [str(nbgrader), "db", "student", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "students in the database" in done.stdout + done.stderr
