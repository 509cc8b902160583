"""The suite's slowest-tests table: written by the process that reports (tests/suite_durations.py, registered in
tests/conftest.py), kept by ``make bench`` and shown in RESULTS.md (benchmarks/suite.py), never taken for a
grading run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import suite
from benchmarks.report import load_runs, write_report
from tests.suite_durations import MIN_TESTS, SuiteDurations

MADE_UP_TESTS = """
import time

import pytest


@pytest.fixture
def slow_fixture():
    time.sleep(0.2)  # setup
    yield
    time.sleep(0.2)  # teardown


def test_slow(slow_fixture):
    time.sleep(0.2)


@pytest.mark.parametrize("n", range({n}))
def test_trivial(n):
    assert n >= 0


def test_fails():
    assert False


@pytest.mark.skip(reason="made up")
def test_skipped():
    pass


def test_registered_only_where_reports_are_gathered(request):
    registered = request.config.pluginmanager.get_plugin("suite-durations") is not None
    assert registered != hasattr(request.config, "workerinput")  # an xdist worker has none
"""

# the repository's own hook, with its table sent to the made-up project's .grading/ instead of this repository's
MADE_UP_CONFTEST = """
from pathlib import Path

import tests.conftest as repository

repository.ROOT = Path(__file__).parent
pytest_configure = repository.pytest_configure
"""


def run_made_up_session(root: Path, tmp_path: Path, trivial: int, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(MADE_UP_CONFTEST))
    (tmp_path / "test_made_up.py").write_text(MADE_UP_TESTS.replace("{n}", str(trivial)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = (
        "1"  # seconds saved: xdist, the one plugin needed, is named in args
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.tooling  # (the suite's own timing tool, run for real: make test-tools)
def test_the_controller_writes_every_tests_seconds_and_outcome(root, tmp_path):
    done = run_made_up_session(root, tmp_path, 60, "-p", "xdist.plugin", "-n", "2", "-m", "not gpu")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # test_fails failed, nothing else
    table = json.loads((tmp_path / ".grading" / "suite" / "durations.json").read_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", table["finished_utc"])
    assert table["args"] == ["-q", "-p", "no:cacheprovider", "-p", "xdist.plugin", "-n", "2", "-m", "not gpu"]
    assert table["xdist_workers"] == 2 and table["markexpr"] == "not gpu" and table["exit_status"] == 1
    assert (
        table["whole_suite"] is True
    )  # no path, -k or --lf: a marker leaves it the suite, as make test's -m
    assert table["cpu_count"] == os.cpu_count()
    assert len(table["load_average_start"]) == 3 and len(table["load_average_end"]) == 3
    assert table["counts"] == {"passed": 62, "failed": 1, "skipped": 1}
    tests = table["tests"]
    assert len(tests) == 64  # the controller saw the reports of both workers
    assert tests["test_made_up.py::test_fails"]["outcome"] == "failed"
    assert tests["test_made_up.py::test_skipped"]["outcome"] == "skipped"
    assert tests["test_made_up.py::test_registered_only_where_reports_are_gathered"]["outcome"] == "passed"
    slow = tests["test_made_up.py::test_slow"]["seconds"]
    assert slow >= 0.6  # setup, call and teardown summed: 0.2 s each
    assert tests["test_made_up.py::test_trivial[59]"]["outcome"] == "passed"
    assert tests["test_made_up.py::test_trivial[59]"]["seconds"] < slow
    assert table["wall_seconds"] >= slow
    # when each began and where: what ran beside a test that was slow
    assert {t["worker"] for t in tests.values()} == {"gw0", "gw1"}
    assert all(0 <= t["began_s"] <= table["wall_seconds"] for t in tests.values())
    assert not list((tmp_path / ".grading" / "suite").glob("*.part"))


@pytest.mark.parametrize(
    "part", [["test_made_up.py"], ["-k", "trivial or slow"], ["--deselect", "test_made_up.py::test_fails"]]
)
@pytest.mark.tooling  # (the suite's own timing tool, run for real: make test-tools)
def test_a_session_of_part_of_the_suite_says_so_and_leaves_the_whole_suites_table(root, tmp_path, part):
    folder = tmp_path / ".grading" / "suite"
    folder.mkdir(parents=True)
    (folder / "durations.json").write_text('{"whole": "the last make test"}')
    run_made_up_session(root, tmp_path, 60, *part)
    table = json.loads((folder / "durations-part.json").read_text())
    assert len(table["tests"]) >= MIN_TESTS and table["whole_suite"] is False
    assert json.loads((folder / "durations.json").read_text()) == {"whole": "the last make test"}


def report(nodeid: str, when: str, outcome: str, duration: float, **extra) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=duration, **extra)


def test_a_session_of_fewer_than_50_tests_writes_nothing(tmp_path):
    path = tmp_path / "suite" / "durations.json"
    config = SimpleNamespace(
        option=SimpleNamespace(markexpr=""),
        invocation_params=SimpleNamespace(args=()),
        args_source=pytest.Config.ArgsSource.TESTPATHS,  # the whole suite
    )
    plugin = SuiteDurations(config, path)
    for i in range(MIN_TESTS - 1):
        plugin.pytest_runtest_logreport(report(f"t.py::test_{i}", "call", "passed", 0.5))
    plugin.pytest_sessionfinish(None, 0)
    assert not path.exists()
    plugin.pytest_runtest_logreport(report("t.py::test_one_more", "call", "passed", 0.5))
    plugin.pytest_sessionfinish(None, 0)
    assert len(json.loads(path.read_text())["tests"]) == MIN_TESTS


def test_outcomes_and_an_unwritable_table_do_not_fail_the_session(tmp_path, capsys):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    config = SimpleNamespace(
        option=SimpleNamespace(markexpr=""),
        invocation_params=SimpleNamespace(args=()),
        args_source=pytest.Config.ArgsSource.TESTPATHS,  # the whole suite
    )
    plugin = SuiteDurations(config, blocker / "suite" / "durations.json")
    for i in range(MIN_TESTS):
        for when in ("setup", "call", "teardown"):
            plugin.pytest_runtest_logreport(report(f"t.py::test_{i}", when, "passed", 0.5))
    plugin.pytest_runtest_logreport(report("t.py::error", "setup", "failed", 1.0))
    plugin.pytest_runtest_logreport(report("t.py::xfail", "call", "skipped", 1.0, wasxfail=""))
    plugin.pytest_runtest_logreport(report("t.py::xpass", "call", "passed", 1.0, wasxfail=""))
    table = plugin.table()
    assert table["counts"] == {"passed": MIN_TESTS, "error": 1, "xfailed": 1, "xpassed": 1}
    assert table["tests"]["t.py::test_0"] == {"seconds": 1.5, "outcome": "passed"}
    assert table["xdist_workers"] == 0 and table["markexpr"] is None

    plugin.pytest_sessionfinish(None, 0)  # the folder cannot be made: a file is in the way
    err = capsys.readouterr().err.strip()
    assert err.startswith("suite durations not written to") and len(err.splitlines()) == 1


def made_up_table(finished: str, wall: float) -> dict:
    tests = {
        f"tests/test_f{i % 20:02d}.py::test_{i}": {"seconds": float(i), "outcome": "passed"}
        for i in range(60)
    }
    tests["tests/test_f00.py::test_0"]["outcome"] = "failed"
    tests["tests/test_f00.py::test_p[a|b\nc]"] = {"seconds": 100.0, "outcome": "passed"}  # a parameter's text
    return {"schema": 1, "finished_utc": finished, "wall_seconds": wall, "args": ["-n", "2", "--dist", "worksteal"],
            "xdist_workers": 2, "cpu_count": 2, "load_average_start": [1.5, 1.0, 0.5],
            "load_average_end": [2.5, 1.2, 0.6], "markexpr": None, "counts": {"passed": 60, "failed": 1}, "exit_status": 1,
            "whole_suite": True, "tests": tests}  # fmt: skip


def test_make_bench_keeps_a_newer_table_only(tmp_path):
    results, table = tmp_path / "results", tmp_path / "durations.json"
    assert suite.keep_latest(results, table) is None  # no table written yet
    table.write_text(json.dumps(made_up_table("../2099-01-01T00:00:00Z", 600.0)))
    assert suite.keep_latest(results, table) is None and not results.exists()  # not a time: not a file name
    table.write_text(json.dumps(made_up_table("2026-11-27T07:00:46Z", 600.0)))
    kept = suite.keep_latest(results, table)
    assert kept == results / "suite-2026-11-27T070046Z.json"
    assert json.loads(kept.read_text()) == json.loads(table.read_text())
    assert suite.keep_latest(results, table) is None  # the same table again
    table.write_text(json.dumps(made_up_table("2026-11-26T07:00:46Z", 600.0)))
    assert suite.keep_latest(results, table) is None  # older than the kept one
    table.write_text(json.dumps({**made_up_table("2026-11-29T00:00:00Z", 60.0), "whole_suite": False}))
    assert suite.keep_latest(results, table) is None  # newer, but a part of the suite (-k, paths or --lf)
    table.write_text(json.dumps(made_up_table("2026-11-28T00:00:00Z", 600.0)))
    assert suite.keep_latest(results, table).name == "suite-2026-11-28T000000Z.json"


def test_results_md_shows_the_latest_table_and_no_grading_run_from_it(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "suite-2026-11-26T000000Z.json").write_text(
        json.dumps(made_up_table("2026-11-26T00:00:00Z", 60.0))
    )
    (results / "suite-2026-11-27T070046Z.json").write_text(
        json.dumps(
            {**made_up_table("2026-11-27T07:00:46Z", 800.0), "note": "kept by hand, from a clean checkout"}
        )
    )
    assert load_runs(results) == []
    text = write_report(tmp_path).read_text()
    assert "suite-" not in text.split("## Runs recorded")[1].split("##")[0]  # not a row of the runs table
    section = text.split("## The test suite's time (run `suite-2026-11-27T070046Z.json`)")[1]
    assert "Wall time 13.3 min (800 s): **over** the budget" in section
    assert "12.0 min (720 s) on a 2-core machine" in section
    assert (
        "Note: kept by hand, from a clean checkout" in section
        and "Note:" not in section.split("Wall time")[0]
    )
    assert (
        "Tests: 1 failed, 60 passed; pytest's exit status 1." in section
        and "load average [1.5, 1.0, 0.5] at the start" in section
    )
    assert "| 100.00 | `tests/test_f00.py::test_p[a\\|b\\nc]` | passed |\n" in section  # one row, three cells
    slowest = re.findall(
        r"^\| ([\d.]+) \| `(tests/[^`]+)` \| (\w+) \|$", section.split("### Seconds by")[0], re.M
    )
    assert len(slowest) == 25 and slowest[1] == ("59.00", "tests/test_f19.py::test_59", "passed")
    assert slowest[-1][1] == "tests/test_f16.py::test_36"  # 100, then 59 down to 36: slowest first
    files = re.findall(r"^\| ([\d.]+) \| `(tests/test_f\d\d\.py)` \| (\d+) \|$", section, re.M)
    assert len(files) == 15 and files[:2] == [
        ("160.0", "tests/test_f00.py", "4"),
        ("117.0", "tests/test_f19.py", "3"),
    ]
    assert files[-1][1] == "tests/test_f06.py"  # f00, then f19 down to f06; f01 to f05 left out
