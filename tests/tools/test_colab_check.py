"""``make colab-check`` itself is never run here (several GB, many minutes); what is checked is the part that
decides what it reports: how a second Python is found, how two runs' stderr lines are compared, and that its
recorded runs turn into a RESULTS.md section."""

from __future__ import annotations

import json
import sys

from benchmarks import colab_check
from benchmarks.report import colab_section


def test_colab_python_comes_from_the_variable_first(monkeypatch):
    monkeypatch.setenv("COLAB_PYTHON", sys.executable)
    assert colab_check.find_python() == (sys.executable, "COLAB_PYTHON")


def test_cache_lives_outside_the_repository_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv("DLCOURSE_COLAB_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert colab_check.cache_dir() == tmp_path / "dlcourse-colab"
    monkeypatch.setenv("DLCOURSE_COLAB_ENV", str(tmp_path / "elsewhere"))
    assert colab_check.cache_dir() == tmp_path / "elsewhere"


def test_lines_are_compared_without_paths_prefixes_and_line_numbers():
    workdir = "/tmp/colab-check-abc"
    a = colab_check.normalise(
        "/opt/py313/lib/python3.13/site-packages/torch/serialization.py:1850: UserWarning: The given buffer",
        workdir,
    )
    b = colab_check.normalise(
        "/venv/lib/python3.11/site-packages/torch/serialization.py:1790: UserWarning: The given buffer",
        workdir,
    )
    assert a == b == "torch/serialization.py: UserWarning: The given buffer"
    glog = colab_check.normalise(
        "E0000 00:00:1764100000.123456   4242 cuda_executor.cc:1309] cuInit failed", workdir
    )
    assert glog == "E cuda_executor.cc: cuInit failed"
    torch_log = "W1125 21:16:42.680000 2329 torch/utils/cpp_extension.py:140] [0/0] No CUDA runtime is found"
    assert (
        colab_check.normalise(torch_log, workdir)
        == "W torch/utils/cpp_extension.py: No CUDA runtime is found"
    )
    kineto = (
        "ERROR:2026-11-25 21:12:06 30764:30764 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35"
    )
    assert (
        colab_check.normalise(kineto, workdir)
        == "ERROR DeviceProperties.cpp: gpuGetDeviceCount failed with code 35"
    )
    assert colab_check.normalise(f"saved {workdir}/x.pt2", workdir) == "saved <workdir>/x.pt2"
    assert colab_check.only_in([[3, "x"], [3, "x"], [4, "y"]], [[4, "y"]]) == [[3, "x"]]


def test_a_recorded_check_becomes_a_section(tmp_path):
    versions = {"python": "3.13.0", "torch": "2.11.0", "tensorflow-cpu": "2.20.0", "keras": "3.13.2"}
    entry = {"ran": True, "first_error": None, "errors": 0, "seconds": 5.0}
    failed = {
        "ran": False,
        "first_error": {"cell": 7, "error": "RuntimeError: boom"},
        "errors": 1,
        "seconds": 2.0,
    }
    run = {
        "machine": {"cores": 2, "cpu_model": "cpu", "load_average_start": [1, 1, 1], "load_average_end": [1, 1, 1]},
        "colab": {"versions": versions, "python_found_by": "COLAB_PYTHON", "dlcourse_from": "wheel"},
        "reference": {"versions": {"python": "3.11.7"}},
        "cost": {"reused": True, "wheels_bytes": 3e9, "venv_bytes": 7e9},
        "notebooks": [
            {"notebook": "lectures/08_x.ipynb", "colab": failed, "reference": entry,
             "stderr_only_colab": [[44, "UserWarning: The given buffer is not writable"]],
             "stderr_only_reference": [], "leaked_colab": [[44, "UserWarning: The given buffer"]],
             "leaked_reference": []},
        ],
    }  # fmt: skip
    (tmp_path / "colab-check-2026-01-01T000000Z.json").write_text(json.dumps(run))
    text = "\n".join(colab_section(tmp_path))
    assert "## Colab's versions (run `colab-check-2026-01-01T000000Z.json`)" in text
    assert (
        "**failed** (cell 7: `RuntimeError: boom`)" in text
        and "cell 44: `UserWarning: The given buffer" in text
    )
    assert colab_section(tmp_path / "nothing") == []
