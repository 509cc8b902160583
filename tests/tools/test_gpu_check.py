"""``make gpu-check``: without a CUDA device it says so and succeeds, quickly; with one it is tested by running it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]


def test_without_cuda_it_checks_nothing_and_succeeds(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ran = []
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda: ran.append("tests") or (True, ""))
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.strip() == "no CUDA device: nothing to check"
    assert not ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_the_module_runs_as_make_gpu_check_runs_it():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no CUDA device: nothing to check"


def test_a_failed_step_fails_the_check_and_the_others_still_run(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_check, "device_line", lambda: "a fake GPU")
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda: (True, "3 passed"))
    monkeypatch.setattr(gpu_check, "run_lecture", lambda path: (True, "ran"))
    monkeypatch.setattr(gpu_check, "sandbox_uses_the_gpu", lambda isolation: (True, f"{isolation}: cuda"))
    graded = []

    def grade(aid, isolation):
        graded.append((aid, isolation))
        if aid == "A3":
            raise RuntimeError("the sandbox did not start")
        return True, "100/100"

    monkeypatch.setattr(gpu_check, "grade_perfect_sample", grade)
    monkeypatch.setattr(gpu_check, "matmul_rates", lambda n: [("float16", 50.0, 65.0), ("tf32", 8.0, None)])
    assert gpu_check.main(["--size", "64", "--isolation", "bubblewrap", "--lectures", "10,16"]) == 1
    out = capsys.readouterr().out
    assert graded == [("A3", "bubblewrap"), ("A5", "bubblewrap"), ("A7", "bubblewrap"), ("A8", "bubblewrap")]
    assert "PASS  sandbox (bubblewrap) uses the GPU" in out
    assert "FAIL  autograder: A3 perfect sample" in out and "RuntimeError: the sandbox did not start" in out
    assert "PASS  autograder: A5 perfect sample" in out and "PASS  autograder: A7 perfect sample" in out
    assert "float16       50.0 TFLOP/s  (77% of 65)" in out
    assert "lecture 10_hardware" in out and "lecture 16_language_model" in out
    assert "12_fast_training" not in out and "15_attention" not in out  # (not asked for)


@pytest.mark.parametrize("aid", gpu_check.GRADED)
def test_each_assignment_it_grades_has_a_perfect_sample_and_a_graded_cuda_branch(aid):
    """What the check grades on a GPU is there to grade: the perfect sample it hands the autograder, and a
    graded test cell that runs the student's code on CUDA where there is a GPU (on a CPU it is skipped)."""
    from autograder.course import Course, is_graded_test

    course = Course()
    assert (course.samples(aid) / "perfect.ipynb").is_file()
    graded = [c.source for c in course.read_source(aid).cells if is_graded_test(c)]
    assert any("if torch.cuda.is_available():" in source for source in graded), aid


def test_grading_a_perfect_sample_reads_its_row_of_the_grades(monkeypatch, tmp_path):
    """The step's CPU-visible half: the autograder's command line and the grades CSV it leaves, read back."""
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "grades.csv").write_text(
            "student_id,score,max_score,status,reason\nperfect,90,100,graded,a7.sdpa.cuda_problems failed\n"
        )
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    passed, detail = gpu_check.grade_perfect_sample("A7", "bubblewrap")
    assert commands[0][1:5] == ["-m", "autograder", "run", "A7"]
    assert commands[0][-2:] == ["--isolation", "bubblewrap"]
    assert not passed and detail == "90/100 (graded: a7.sdpa.cuda_problems failed)"


def test_a_perfect_sample_passes_on_its_autograded_points_while_its_written_answers_await_grading():
    """A3, A5 and A7 have written answers: their perfect samples score 100 of 106 or 110 until an instructor
    grades them, and the check judges the autograded points (it failed all three on a GPU before)."""
    row = {
        "student_id": "perfect", "score": "100", "max_score": "110", "status": "graded", "reason": "",
        "autograded_score": "100", "autograded_max": "100", "written_score": "0", "written_max": "10",
        "manual_grading": "awaiting manual grading: a7.q1 (10 points)",
    }  # fmt: skip
    passed, detail = gpu_check.judged(row)
    assert passed and detail.startswith("autograded 100/100 (graded)"), detail
    passed, detail = gpu_check.judged(
        {**row, "autograded_score": "95", "reason": "a7.sdpa.cuda_problems failed"}
    )
    assert not passed and "95/100" in detail and "cuda_problems" in detail


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a CPU machine's sandbox reports")
@pytest.mark.parametrize("isolation", ["basic", "bubblewrap"])
def test_the_sandbox_probe_fails_where_the_kernel_finds_no_gpu(isolation):
    """The probe's kernel starts as the grader's do and says what it found: here, no CUDA, and the step fails
    (a sandbox that hid the GPU would grade every GPU branch as on a CPU, with full marks)."""
    from autograder.runner.isolation import IsolationError, resolve

    try:
        resolve(isolation)
    except IsolationError as err:
        pytest.skip(str(err))
    passed, detail = gpu_check.sandbox_uses_the_gpu(isolation)
    assert not passed
    assert detail.startswith(f"{isolation} isolation") and detail.endswith("no CUDA device in the sandbox"), (
        detail
    )


def test_the_gpu_tests_are_collected_from_the_files_that_mark_them_and_none_runs_nothing(monkeypatch):
    """Only the files that mark a test ``gpu`` are collected (the others need what a GPU machine may lack); where
    none does, pytest is not started (given no file, it would collect the whole suite)."""
    files = gpu_check.gpu_test_files()
    assert "tests/course/test_measure.py" in files and "tests/tools/test_gpu_check.py" not in files
    monkeypatch.setattr(gpu_check, "gpu_test_files", lambda: [])
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: pytest.fail("pytest was started"))
    assert gpu_check.run_gpu_tests() == (True, "no tests are marked gpu")


def demo_lines(kernel: str, bf16_off: str = "1.6e-02", timed: bool = True) -> str:
    """What A8's ``triton_demo`` cell prints, in its own format strings (read from the source below)."""
    lines = f"torch.float32: largest difference from F.rms_norm {kernel}\n"
    lines += f"torch.bfloat16: largest difference from F.rms_norm {bf16_off}\n"
    if timed:
        for name, us in (("your Triton kernel", 21.3), ("F.rms_norm", 30.9), ("your RMSNorm (Part 2)", 95.0)):
            lines += f"{name:22}: {us:8.1f} us, {2 * 8192 * 1024 * 4 / us / 1e3:7.1f} GB/s\n"
    return lines


def page_showing(output: str, monkeypatch) -> str:
    """The feedback page of A8's perfect sample where its ``triton_demo`` cell printed ``output``."""
    import nbformat

    from autograder.course import Course
    from autograder.outputs import feedback
    from autograder.result import Result

    course = Course()
    run = nbformat.from_dict(nbformat.v4.reads(nbformat.v4.writes(course.read_source("A8"))))
    demo = next(c for c in run.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "triton_demo")
    assert (
        'print(f"{dtype}: largest difference from F.rms_norm' in demo.source
    )  # (the lines demo_lines mimics)
    assert 'print(f"{name:22}: {timing.median * 1e6:8.1f} us' in demo.source
    demo.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    monkeypatch.setattr(feedback, "_run_notebook", lambda *args: run)
    return feedback.render(course, "A8", Result(student_id="perfect", assignment="A8", status="graded"))


def test_a8s_triton_part_passes_only_when_its_feedback_shows_it_checked_and_timed_on_the_gpu(monkeypatch):
    """A8's optional part earns no points, so its grade cannot show whether the sandbox let Triton compile: the
    check reads the perfect sample's feedback page, where the student reads it."""
    passed, detail = gpu_check.triton_part(page_showing(demo_lines("2.4e-07"), monkeypatch))
    assert passed and detail.startswith(
        "off by 2.4e-07 (float32), 1.6e-02 (bfloat16); your Triton kernel 21.3 us ("
    ), detail
    assert "F.rms_norm 30.9 us (" in detail and "your RMSNorm (Part 2) 95.0 us (" in detail
    for output, said in (
        ("your kernel did not run: RuntimeError: Failed to find C compiler\n", "Failed to find C compiler"),
        ("Triton is not installed here, so your kernel was not run.\n", "Triton is not installed"),
        (demo_lines("2.4e-07", timed=False) + "no GPU: Triton's interpreter ran your kernel\n", "no GPU"),
    ):
        passed, detail = gpu_check.triton_part(page_showing(output, monkeypatch))
        assert not passed and detail.startswith("not checked and timed on the GPU") and said in detail, detail
    passed, detail = gpu_check.triton_part(page_showing(demo_lines("2.4e-07", bf16_off="0.5"), monkeypatch))
    assert not passed and "too far from F.rms_norm: bfloat16 0.5" in detail, detail
    passed, detail = gpu_check.triton_part(page_showing(demo_lines("nan"), monkeypatch))
    assert not passed and "float32 nan" in detail, detail
    passed, detail = gpu_check.triton_part(page_showing(demo_lines("2.4e-07,"), monkeypatch))
    assert not passed and "float32 2.4e-07," in detail, detail  # (not a number: refused, not raised)
    assert not gpu_check.triton_part("")[0]  # (no page)


def test_grading_a8s_sample_fails_where_its_page_says_the_kernel_did_not_run(monkeypatch):
    def fake_run(command, **kwargs):
        out = Path(command[command.index("--out") + 1])
        (out / "feedback").mkdir(parents=True)
        (out / "grades.csv").write_text("student_id,score,max_score,status,reason\nperfect,100,100,graded,\n")
        (out / "feedback" / "perfect.html").write_text(
            page_showing("your kernel did not run: CalledProcessError: ptxas\n", monkeypatch)
        )
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    passed, detail = gpu_check.grade_perfect_sample("A8", "bubblewrap")
    assert not passed and detail.startswith("100/100 (graded); triton_kernel: not checked and timed"), detail
    assert "CalledProcessError: ptxas" in detail


def test_the_assignments_are_graded_in_the_order_asked_and_an_unknown_one_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_check, "device_line", lambda: "a fake GPU")
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda: (True, ""))
    monkeypatch.setattr(gpu_check, "sandbox_uses_the_gpu", lambda isolation: (True, ""))
    monkeypatch.setattr(gpu_check, "matmul_rates", lambda n: [])
    graded = []
    monkeypatch.setattr(
        gpu_check, "grade_perfect_sample", lambda aid, isolation: graded.append(aid) or (True, "")
    )
    assert gpu_check.main(["--assignments", "a8, A3", "--lectures", ""]) == 0
    assert graded == ["A8", "A3"]
    with pytest.raises(SystemExit):
        gpu_check.main(["--assignments", "A8,A9"])
    assert "--assignments: A9 not among A3, A5, A7, A8" in capsys.readouterr().err


def test_a_gpu_this_torch_cannot_use_fails_the_check_saying_why(monkeypatch, capsys):
    """A machine with an NVIDIA card whose environment's torch cannot use it (a CPU-only build, as ``make setup``
    installs here, or a CUDA build newer than the driver) must not pass having checked nothing."""
    import autograder.api

    monkeypatch.setattr(gpu_check, "cuda_available", lambda: False)
    monkeypatch.setattr(autograder.api, "nvidia_gpu_here", lambda: True)
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda: pytest.fail("a step ran"))
    monkeypatch.setattr(torch.version, "cuda", None)
    assert gpu_check.main([]) == 1
    out = capsys.readouterr().out
    assert out.startswith("this machine has an NVIDIA GPU, but torch ") and "is a CPU-only build" in out
    assert "nothing was checked" in out and "python -m benchmarks.gpu_check" in out
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert gpu_check.main([]) == 1
    assert "built for CUDA 13.0 and cannot start it" in capsys.readouterr().out
    monkeypatch.setattr(
        autograder.api, "nvidia_gpu_here", lambda: False
    )  # no card: nothing to check, as before
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.strip() == "no CUDA device: nothing to check"
