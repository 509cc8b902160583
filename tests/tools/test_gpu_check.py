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
    assert graded == [("A3", "bubblewrap"), ("A5", "bubblewrap"), ("A7", "bubblewrap")]
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
