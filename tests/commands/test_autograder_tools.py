"""The instructor's tools around grading: collecting LMS downloads, the one-shot `run` command,
exports, the class report, the Gradescope package, and grading on a Dask cluster."""

from __future__ import annotations

import csv
import json
import zipfile

import nbformat
import pytest

from autograder.commands import cli
from autograder.commands.gradescope import build_package, results_json
from autograder.course import Course
from autograder.grading.batch import grade
from autograder.intake.collect import collect
from autograder.intake.samples import filled
from autograder.outputs.export import export_canvas, export_nbgrader
from autograder.outputs.report import write_report
from autograder.runner.sandbox import Limits
from autograder.settings import Settings
from tests.fixtures.toy_course import submit

LIMITS = Limits(timeout=60, cell_timeout=20, memory_mb=2048)


def notebook_text(course: Course, answered=None) -> str:
    return nbformat.writes(filled(course, "T1", answered))


def test_collect_from_lms_zip_folders_and_plain_names(toy, tmp_path):
    archive = tmp_path / "canvas.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("smithjane_12345_6789012_T1.ipynb", notebook_text(toy))
        zf.writestr("doejohn_LATE_23456_7890123_T1-1.ipynb", notebook_text(toy, {"square"}))
        zf.writestr("bob/T1.ipynb", notebook_text(toy))
        zf.writestr("bob/scratch.ipynb", "{}")
        zf.writestr("carol.ipynb", "not json at all")
        zf.writestr("../escape.ipynb", "{}")
        zf.writestr("notes.txt", "hello")
    found = collect(toy, "T1", archive)
    assert set(found.students) == {"smithjane", "doejohn", "bob", "carol"}
    assert toy.submission("T1", "smithjane").is_file()
    assert toy.submission("T1", "carol").read_text() == "not json at all"
    text = "\n".join(found.notes)
    assert (
        "unsafe path" in text and "notes.txt" in text and "bob: several notebooks; took bob/T1.ipynb" in text
    )
    for sid in found.students:  # leave the shared toy course as it was
        for path in (toy.root / "submitted" / sid).rglob("*"):
            if path.is_file():
                path.unlink()


@pytest.mark.slow
def test_run_command_writes_grades_feedback_and_exits_zero(toy, tmp_path, capsys):
    submissions = tmp_path / "inbox"
    submissions.mkdir()
    (submissions / "ada.ipynb").write_text(notebook_text(toy))
    (submissions / "ben.ipynb").write_text(notebook_text(toy, {"scale"}))
    (submissions / "cyd.ipynb").write_text("")
    out = tmp_path / "out"
    code = cli.main(
        [
            "--course",
            str(toy.root),
            "run",
            "T1",
            str(submissions),
            "--out",
            str(out),
            "--workers",
            "2",
            "--timeout",
            "60",
        ]
    )
    assert code == 0
    rows = {r["student_id"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert {k: (r["score"], r["max_score"], r["status"]) for k, r in rows.items()} == {
        "ada": ("100", "100", "graded"),
        "ben": ("60", "100", "graded"),
        "cyd": ("0", "100", "unreadable"),
    }
    assert rows["cyd"]["reason"] == "the file is empty"
    page = (out / "feedback" / "ben.html").read_text()
    assert "60 / 100" in page and "test_square" in page and "default_rng" not in page
    assert "isolation:" in capsys.readouterr().out


@pytest.mark.slow
def test_exports_report_and_gradescope(toy, tmp_path, monkeypatch):
    submit(toy, "eve", filled(toy, "T1"))
    submit(toy, "fay", filled(toy, "T1", {"square"}))
    results = {
        r.student_id: r
        for r in grade(toy, "T1", Settings(workers=2, limits=LIMITS), students=["eve", "fay"], force=True)
    }
    assert results["fay"].score == 40

    canvas = list(csv.reader(open(export_canvas(toy, tmp_path / "canvas.csv", ["T1"]))))
    assert (
        canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and canvas[0][5] == "T1"
    )
    assert ["fay", "", "", "", "", "40"] in canvas  # no Canvas user id: collected from no Canvas download

    plain = list(csv.DictReader(open(export_nbgrader(toy, tmp_path / "nbgrader.csv"))))
    assert {r["student_id"]: float(r["score"]) for r in plain if r["student_id"] in ("eve", "fay")} == {
        "eve": 100,
        "fay": 40,
    }

    text, png = write_report(toy, "T1", tmp_path / "report")
    assert "test_square" in text and png.read_bytes().startswith(b"\x89PNG")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `report --course` from another folder writes into the course's reports/
    assert cli.main(["--course", str(toy.root), "report", "T1"]) == 0
    assert (toy.root / "reports" / "T1-report.html").is_file() and not any(elsewhere.iterdir())

    package = build_package(toy, "T1", tmp_path / "gs.zip")
    with zipfile.ZipFile(package) as zf:
        names = set(zf.namelist())
        assert {
            "setup.sh",
            "run_autograder",
            "source/T1/T1.ipynb",
            "assignments/T1/T1.ipynb",
            "autograder/commands/cli.py",
        } <= names
        assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111
        assert "gradescope-run T1" in zf.read("run_autograder").decode()
    data = results_json(results["fay"])
    assert data["score"] == 40
    assert [(t["name"], t["score"], t["max_score"]) for t in data["tests"]] == [
        ("test_square", 40, 40),
        ("test_scale", 0, 60),
    ]
    assert all(t["visibility"] == "visible" and "default_rng" not in t["output"] for t in data["tests"])
    json.dumps(data)


DASK_SCRIPT = """
import json, sys
from pathlib import Path
from distributed import Client, LocalCluster
from autograder.course import Course
from autograder.grading.batch import grade
from autograder.settings import Limits, Settings


def warm_parents():
    import os, psutil
    from autograder.runner import forkserver
    return [(s.process.pid, psutil.Process(s.process.pid).ppid(), os.getpid()) for s in forkserver._SERVERS.values()]


if __name__ == "__main__":
    # as a throwaway course of `run` or `demo` has it: the cache (references) outside the course
    course = Course(root=Path(sys.argv[1]), cache_root=Path(sys.argv[2]))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        settings = Settings(limits=Limits(timeout=60, cell_timeout=20, memory_mb=2048),
                            scheduler=cluster.scheduler_address)
        rows = grade(course, "T1", settings, students=["dask1", "dask2"], force=True)
        with Client(cluster) as client:
            parents = client.run(warm_parents)
    print(json.dumps({"scores": {r.student_id: r.score for r in rows}, "parents": parents}))
"""


@pytest.mark.slow
def test_grading_on_a_dask_cluster_gives_the_same_results(toy, tmp_path):
    import subprocess
    import sys

    submit(toy, "dask1", filled(toy, "T1"))
    submit(toy, "dask2", filled(toy, "T1", {"scale"}))
    script = tmp_path / "dask_grade.py"  # a file, not stdin: Dask spawns its worker processes
    script.write_text(DASK_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(toy.root), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    on_dask = printed["scores"]
    # each worker process that graded forked its kernels from a warm parent of its own
    parents = [p for found in printed["parents"].values() for p in found]
    assert parents and all(parent_of == worker for _, parent_of, worker in parents), printed["parents"]
    assert len({pid for pid, _, _ in parents}) == len(parents)
    local = {
        r.student_id: r.score
        for r in grade(toy, "T1", Settings(limits=LIMITS), students=["dask1", "dask2"], force=True)
    }
    assert on_dask == local == {"dask1": 100, "dask2": 60}
