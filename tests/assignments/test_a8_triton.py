"""A8's optional Triton kernel (no points): the source's solution is right and the release's stub says it is not
written, both run by Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, as A8's imports cell sets it where there
is no GPU). Triton is not one of the project's requirements (a CUDA compiler stack of about 300 MB), so this test
runs where it is installed (``pip install triton``) and is skipped elsewhere, saying so. On a GPU the same kernel is
compiled (the ``gpu`` test below; ``make gpu-check`` runs it, and grades A8's perfect sample in the grader's sandbox,
whose feedback page must show the kernel checked and timed there)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nbformat
import pytest

from autograder.course import nbgrader_meta
from tests.fixtures.warm import MAIN

CHECK = """
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch
import torch.nn.functional as F
cell = open({path!r}).read()
namespace = {{"torch": torch}}
exec(cell, namespace)
if namespace["triton"] is None:
    raise SystemExit("triton did not import")
for width, dtype in ((48, torch.float32), (100, torch.float32), (64, torch.bfloat16)):
    x = torch.randn(5, 3, width).to(dtype)
    w = torch.rand(width) + 0.5
    try:
        got = namespace["triton_rmsnorm"](x, w)
    except Exception as err:
        print("did not run:", type(err).__name__, err)
        break
    expected = F.rms_norm(x.float(), (width,), w, eps=1e-6)
    print(width, str(dtype), got.dtype == dtype, float((got.float() - expected).abs().max()))
"""


def kernel_cell(notebook) -> str:
    return next(c.source for c in notebook.cells if nbgrader_meta(c).get("grade_id") == "triton_kernel")


@pytest.mark.parametrize("which", ["source", "release"])
def test_the_triton_kernel_in_the_interpreter(which, tmp_path):
    pytest.importorskip(
        "triton", reason="Triton is not installed (not a requirement): pip install triton to run it"
    )
    notebook = (
        MAIN.read_source("A8") if which == "source" else nbformat.read(str(MAIN.release_notebook("A8")), 4)
    )
    cell = tmp_path / "cell.py"
    cell.write_text(kernel_cell(notebook))
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHECK.format(path=str(cell)))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    if which == "release":
        assert lines == ["did not run: InterpreterError NotImplementedError()"], out.stdout
        return
    assert len(lines) == 3, out.stdout
    for line in lines:
        width, dtype, same_dtype, error = line.split()
        assert same_dtype == "True" and float(error) < (2e-2 if "bfloat16" in dtype else 1e-5), line


COMPILED = """
import torch
import torch.nn.functional as F
cell = open({path!r}).read()
namespace = {{"torch": torch}}
exec(compile(cell, {path!r}, "exec"), namespace)  # (from its file: triton.jit reads the kernel's source)
for rows, width, dtype in ((3, 48, torch.float32), (4096, 1000, torch.float32), (7, 4096, torch.bfloat16)):
    x = torch.randn(rows, width, device="cuda").to(dtype)
    w = torch.rand(width, device="cuda") + 0.5
    got = namespace["triton_rmsnorm"](x, w)
    expected = F.rms_norm(x.float(), (width,), w, eps=1e-6)
    print(width, str(dtype), got.dtype == dtype, got.is_cuda, float((got.float() - expected).abs().max()))
"""


@pytest.mark.gpu
def test_the_solution_kernel_compiles_and_matches_f_rms_norm_on_the_gpu(tmp_path):
    """On a GPU Triton compiles the kernel (no interpreter): widths below, at and far from a power of two, in
    float32 and bfloat16, stored in the input's dtype on the device."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("triton", reason="Triton is not installed")
    cell = tmp_path / "cell.py"
    cell.write_text(kernel_cell(MAIN.read_source("A8")))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMPILED.format(path=str(cell)))],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    for line in lines:
        width, dtype, same_dtype, on_gpu, error = line.split()
        assert same_dtype == on_gpu == "True" and float(error) < (2e-2 if "bfloat16" in dtype else 1e-5), line
