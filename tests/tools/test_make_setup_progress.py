"""``make setup`` shows pip's own progress (never ``--quiet``) and a line every ``BEAT_S`` seconds while pip
works, and still fails when pip fails. Run with a fake Python whose pip sleeps: no network, no install."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE = textwrap.dedent("""
    import os, pathlib, shutil, subprocess, sys, time
    args = sys.argv[1:]
    if args[0] == "-c":
        sys.exit(subprocess.run([REAL, *args]).returncode)
    if args[:2] == ["-m", "venv"]:
        (pathlib.Path(args[2]) / "bin").mkdir(parents=True)
        shutil.copy(__file__, pathlib.Path(args[2]) / "bin" / "python")
        sys.exit(0)
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n")
    print("Collecting something", flush=True)
    time.sleep(2.6)
    if os.environ.get("FAKE_PIP_FAILS"):
        sys.exit(1)
    print("Successfully installed something", flush=True)
""")


def make_setup(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "python3"
    fake.write_text(f"#!{sys.executable}\nREAL = {sys.executable!r}\n{FAKE}")
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    return subprocess.run(
        ["make", "--no-print-directory", "-B", "setup", f"VENV={venv}", f"PYTHON={fake}", "BEAT_S=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "FAKE_PIP_LOG": str(tmp_path / "pip.log"), **env},
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_setup_shows_pips_lines_and_beats_while_pip_works(tmp_path):
    done = make_setup(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "venv" / ".installed").is_file()
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("-m pip install") for c in calls), calls
    assert not any(re.search(r"(^| )(--quiet|-q+)( |$)", c) for c in calls), calls
    out = done.stdout.splitlines()
    starts = [i for i, line in enumerate(out) if line == "Collecting something"]
    ends = [i for i, line in enumerate(out) if line == "Successfully installed something"]
    assert len(starts) == len(ends) == 2, done.stdout
    for start, end in zip(starts, ends, strict=True):
        beats = [line for line in out[start:end] if re.fullmatch(r"  \.\.\. pip: \d+ s so far", line)]
        assert len(beats) >= 2, done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_setup_still_fails_when_pip_fails(tmp_path):
    done = make_setup(tmp_path, FAKE_PIP_FAILS="1")
    assert done.returncode != 0
    assert not (tmp_path / "venv" / ".installed").exists()
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 1  # make stopped at the failed install
