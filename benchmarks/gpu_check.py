"""``python -m benchmarks.gpu_check`` (``make gpu-check``): what only a machine with a CUDA GPU can check.

CI and the course's own machines have no GPU, so the code paths that only run on one are tested there on the
CPU and on torch's ``meta`` device. This check is for an instructor with a GPU at hand (a Colab GPU runtime:
``!git clone ... && cd dlcourse && make gpu-check``). It runs, in order:

1. a kernel in the grader's sandbox (``--isolation``, as ``autograder run`` takes it) multiplies on the GPU: a
   sandbox that hid the GPU would grade every GPU branch as on a CPU, with full marks and no word of it;
2. the autograder, in the same isolation, on the perfect sample submissions of A3, A5, A7 and A8: the test cells
   of A3, A5 and A7 run the student's code on the GPU where there is one (A3 and A5 train there; A7 times SDPA's
   fused kernels against the student's own); A8's optional part, worth no points, compiles the student's Triton
   kernel there, checks it against ``F.rms_norm`` in float32 and bfloat16 and times it, and the student's
   feedback page must show that (a sandbox in which Triton cannot compile would tell every student that their
   kernel "did not run");
3. the lectures with GPU cells (10, 12, 15 and 16; ``--lectures`` picks), executed top to bottom;
4. the tests marked ``gpu`` (``pytest -m gpu`` over the files that hold them), which skip themselves elsewhere;
5. the matmul FLOP/s of the card in float32, TF32, float16 and bfloat16, beside its published peak.

It prints one line per step as it ends and a summary, and exits 1 if a step failed. Without a CUDA device it prints
"no CUDA device: nothing to check" and exits 0; on a machine with an NVIDIA GPU that this Python's torch cannot use
(a CPU-only build, or a CUDA build newer than the driver) it says so, and where to run it instead, and exits 1.
"""

from __future__ import annotations

import argparse
import csv
import html
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LECTURES = ("10_hardware", "12_fast_training", "15_attention", "16_language_model")  # each has GPU cells
GRADED = ("A3", "A5", "A7")  # each has a graded test cell with a torch.cuda.is_available() branch
# {assignment: its optional GPU part (no points)}: the perfect sample's feedback shows the part checked and timed
GPU_PARTS = {"A8": "triton_kernel"}
# the largest difference from F.rms_norm (bfloat16: half an ulp of the stored output, 2**-6 at the demo's largest
# values, 4 to 8, with room)
TRITON_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
LECTURE_TIMEOUT_S = 600
ELSEWHERE = (
    "Run the check in a Python whose torch uses the GPU (a Colab runtime's own): pip install -e '.[grader]' pytest "
    "hypothesis, then python -m benchmarks.gpu_check"
)


@dataclass
class Step:
    name: str
    passed: bool
    detail: str
    seconds: float


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def unusable_gpu() -> str:
    """Why this Python's torch cannot use the NVIDIA GPU that this machine has ("" where it has none, or torch
    uses it): a CPU-only build, or a CUDA build newer than the driver. Said, and the check fails: an environment
    whose torch cannot see the card would otherwise check nothing and pass."""
    from autograder.api import nvidia_gpu_here

    if cuda_available() or not nvidia_gpu_here():
        return ""
    try:
        import torch
    except ImportError:
        return "torch is not installed in this Python"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} here is a CPU-only build"
    return (
        f"torch {torch.__version__} here is built for CUDA {torch.version.cuda} and cannot start it "
        "(a driver older than that CUDA needs? nvidia-smi says which CUDA the driver supports)"
    )


def _env() -> dict[str, str]:
    """The current environment with this Python's bin/ first on PATH (nbgrader calls ``alembic`` from there)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _timed(name: str, action) -> Step:
    start = time.perf_counter()
    try:
        passed, detail = action()
    except Exception as err:  # one failed step is reported; the others still run
        passed, detail = False, f"{type(err).__name__}: {err}"
    return Step(name, passed, detail, time.perf_counter() - start)


def gpu_test_files() -> list[str]:
    """The test files that mark a test ``gpu`` (collecting only them: the others need what a GPU machine may
    lack, such as the browser tests' Playwright, and hold nothing for it)."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if "mark.gpu" in path.read_text(encoding="utf-8")
    )


def run_gpu_tests() -> tuple[bool, str]:
    files = gpu_test_files()
    if not files:  # (pytest given no file would collect the whole suite)
        return True, "no tests are marked gpu"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", *files]
    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode == 5:  # pytest: no tests were collected
        return True, "no tests are marked gpu"
    return done.returncode == 0, last


def run_lecture(path: Path) -> tuple[bool, str]:
    from autograder.api import execute_notebook

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
        run = execute_notebook(path, timeout=LECTURE_TIMEOUT_S, workdir=workdir, allow_errors=True)
    errors = [
        f"{out.get('ename')}: {out.get('evalue', '')[:120]}"
        for cell in run.notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    if errors:
        return False, f"{len(errors)} cell(s) failed; first: {errors[0]}"
    return True, f"ran top to bottom in {run.seconds:.0f} s"


PROBE = """\
import torch
if torch.cuda.is_available():
    x = torch.ones(512, 512, device="cuda")
    seen = f"cuda {torch.cuda.get_device_name()} {float((x @ x)[0, 0]):g}"
else:
    seen = "no CUDA device in the sandbox"
seen"""


def sandbox_uses_the_gpu(isolation: str = "auto") -> tuple[bool, str]:
    """A kernel started as the grader starts one, in ``isolation``, finds the GPU and multiplies on it."""
    import nbformat

    from autograder.api import Limits, resolve, run_in_sandbox

    mode = resolve(isolation)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    outcome = run_in_sandbox(notebook, Limits(timeout=300, cell_timeout=240), isolation)
    where = f"{mode.mode} isolation, {mode.runner} runner"
    if outcome.status != "finished":
        return False, f"{where}: the kernel {outcome.status}: {outcome.detail}"[:300]
    seen = outcome.summary["cells"][0].get("output", "").strip().strip("'\"")
    return seen.startswith("cuda ") and seen.endswith(" 512"), f"{where}: {seen}"


def grade_perfect_sample(aid: str, isolation: str = "auto") -> tuple[bool, str]:
    sample = ROOT / "source" / aid / "samples" / "perfect.ipynb"
    if not sample.is_file():
        return False, f"{sample.relative_to(ROOT)} is missing"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        submissions, out = Path(scratch) / "submissions", Path(scratch) / "results"
        submissions.mkdir()
        shutil.copy(sample, submissions / "perfect.ipynb")
        command = [sys.executable, "-m", "autograder", "run", aid, str(submissions), "--out", str(out)]
        command += ["--isolation", isolation]
        done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True)
        grades = out / "grades.csv"
        if not grades.is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            return False, f"no grades (exit {done.returncode}): {' | '.join(tail)}"
        with open(grades, newline="") as fh:
            row = next(r for r in csv.DictReader(fh) if r["student_id"] == "perfect")
        passed, detail = judged(row)
        if aid in GPU_PARTS:
            page = out / "feedback" / "perfect.html"
            part_passed, part = triton_part(page.read_text(encoding="utf-8") if page.is_file() else "")
            passed, detail = passed and part_passed, f"{detail}; {GPU_PARTS[aid]}: {part}"
    return passed, detail


def triton_part(page: str) -> tuple[bool, str]:
    """Whether a feedback page shows A8's Triton kernel compiled on the GPU, within tolerance of ``F.rms_norm``
    in float32 and bfloat16, and timed (the demo cell's lines, as the page shows them under the kernel)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    differences = dict(
        re.findall(r"torch\.(float32|bfloat16): largest difference from F\.rms_norm (\S+)", text)
    )
    timed = {
        name: (us, rate)
        for name, us, rate in re.findall(
            r"(your Triton kernel|F\.rms_norm|your RMSNorm \(Part 2\))\s*:\s*([0-9.]+) us,\s*([0-9.]+) GB/s",
            text,
        )
    }
    if set(differences) != set(TRITON_TOLERANCE) or len(timed) != 3:
        said = re.search(
            r"(your kernel did not run[^\n]*|Triton is not installed[^\n]*|no GPU: [^\n]*)", text
        )
        return False, f"not checked and timed on the GPU: {said.group(1)[:200] if said else 'no output'}"
    wrong = [
        f"{d} {differences[d]}"
        for d, limit in TRITON_TOLERANCE.items()
        if not _number(differences[d]) <= limit
    ]
    detail = f"off by {differences['float32']} (float32), {differences['bfloat16']} (bfloat16); " + "; ".join(
        f"{name} {us} us ({rate} GB/s)" for name, (us, rate) in timed.items()
    )
    return not wrong, detail if not wrong else f"too far from F.rms_norm: {', '.join(wrong)}; {detail}"


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # (not a number: never within a tolerance)
        return math.nan


def judged(row: dict[str, str]) -> tuple[bool, str]:
    """A perfect sample passes with every autograded point: its written answers await an instructor's
    manual grading (so its ``score`` is below ``max_score``), and nothing on a GPU changes them."""
    written = bool(row.get("written_max"))
    points, top = ("autograded_score", "autograded_max") if written else ("score", "max_score")
    score, maximum = float(row[points]), float(row[top])
    detail = f"{score:g}/{maximum:g} ({row['status']}{': ' + row['reason'] if score < maximum else ''})"
    if written:
        detail = f"autograded {detail}; {row.get('manual_grading') or 'written answers graded'}"
    return score == maximum, detail


def matmul_rates(n: int = 8192) -> list[tuple[str, float, float | None]]:
    """(mode, measured TFLOP/s, published peak TFLOP/s or None) for float32, TF32, float16 and bfloat16."""
    import torch

    from dlcourse.measure import gpu_peak, matmul_flops

    peak = gpu_peak(torch.cuda.get_device_name())
    modes = [
        ("float32", torch.float32, False, peak and peak.fp32),
        ("tf32", torch.float32, True, peak and peak.tf32),
        ("float16", torch.float16, None, peak and peak.fp16),
        ("bfloat16", torch.bfloat16, None, peak and peak.bf16),
    ]
    rates = []
    for mode, dtype, tf32, published in modes:
        if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
            continue
        measured = matmul_flops(n, device="cuda", dtype=dtype, repeat=10, allow_tf32=tf32) / 1e12
        rates.append((mode, measured, published))
    return rates


def device_line() -> str:
    import torch

    props = torch.cuda.get_device_properties(0)
    return (
        f"{props.name}, compute capability {props.major}.{props.minor}, {props.total_memory / 2**30:.0f} GiB; "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--size", type=int, default=8192, help="matrix size of the FLOP/s measurement")
    parser.add_argument(
        "--isolation", default="auto", choices=("auto", "bubblewrap", "basic"),
        help="the sandbox the probe and the grading run in, as autograder run takes it (default auto)",
    )  # fmt: skip
    parser.add_argument(
        "--assignments", default=",".join((*GRADED, *GPU_PARTS)),
        help="the assignments whose perfect sample is graded, in this order (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--lectures", default=",".join(n.split("_")[0] for n in LECTURES),
        help="the lectures to run, by number (default: %(default)s)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not cuda_available():
        if why := unusable_gpu():
            print(f"this machine has an NVIDIA GPU, but {why}: nothing was checked. {ELSEWHERE}")
            return 1
        print("no CUDA device: nothing to check")
        return 0

    print(f"device: {device_line()}", flush=True)
    chosen = {n.strip().zfill(2) for n in args.lectures.split(",") if n.strip()}
    plan = [(f"sandbox ({args.isolation}) uses the GPU", lambda: sandbox_uses_the_gpu(args.isolation))]
    known = (*GRADED, *GPU_PARTS)
    assignments = [a.strip().upper() for a in args.assignments.split(",") if a.strip()]
    if unknown := [a for a in assignments if a not in known]:
        parser.error(f"--assignments: {', '.join(unknown)} not among {', '.join(known)}")
    for aid in assignments:
        plan.append(
            (f"autograder: {aid} perfect sample", lambda aid=aid: grade_perfect_sample(aid, args.isolation))
        )
    for name in LECTURES:
        path = ROOT / "lectures" / f"{name}.ipynb"
        if name.split("_")[0] in chosen and path.is_file():
            plan.append((f"lecture {name}", lambda path=path: run_lecture(path)))
    plan.append(("pytest -m gpu", run_gpu_tests))
    steps = []
    for name, action in plan:  # a line as each ends (a long check shows where it is)
        step = _timed(name, action)
        steps.append(step)
        print(
            f"{'PASS' if step.passed else 'FAIL'}  {step.name:<38} {step.detail}  [{step.seconds:.0f} s]",
            flush=True,
        )

    print(f"\nmatmul {args.size} x {args.size}, measured vs published dense peak:")
    try:
        for mode, measured, published in matmul_rates(args.size):
            share = (
                f"  ({measured / published:.0%} of {published:g})" if published else "  (no published figure)"
            )
            print(f"  {mode:<9} {measured:8.1f} TFLOP/s{share}")
    except Exception as err:  # a measurement problem is reported, not a failed check
        print(f"  measurement failed: {type(err).__name__}: {err}")

    failed = [s.name for s in steps if not s.passed]
    print(
        f"\n{len(steps) - len(failed)} of {len(steps)} checks passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
