"""The suite's slowest-tests table: each test's seconds (setup, call and teardown summed), written when a session
of at least ``MIN_TESTS`` tests ends, for ``make bench`` to keep beside RESULTS.md (``benchmarks/suite.py``).

Registered by ``tests/conftest.py`` on the process that reports: the only process of a plain run, the controller
of an xdist run (``pytest_runtest_logreport`` receives every worker's reports there). Workers never write.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

MIN_TESTS = 50  # a run of one file or a few tests leaves a full run's table in place
PART_NAME = "durations-part.json"  # where a session of part of the suite writes its table instead


def whole_suite(config: pytest.Config) -> bool:
    """Whether the session chose every test the suite has (markers aside, as ``make test``'s ``-m``): no paths or
    node ids named, no ``-k``, no ``--lf`` and nothing deselected. Only such a table says how long the suite takes."""
    option = config.option
    sources = (pytest.Config.ArgsSource.TESTPATHS, pytest.Config.ArgsSource.INVOCATION_DIR)
    return (
        getattr(config, "args_source", None) in sources
        and not getattr(option, "keyword", "")
        and not getattr(option, "lf", False)
        and not getattr(option, "deselect", None)
    )


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


class SuiteDurations:
    """Sums each test id's phase durations and writes the table to ``path`` at the session's end."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.started = time.time()  # again at pytest_sessionstart, if this was registered before it
        self.load_start = load_average()
        self.seconds: dict[str, float] = {}
        self.phases: dict[str, dict[str, str]] = {}  # test id -> {phase: its report's outcome}
        self.xfail: set[str] = set()
        self.began: dict[
            str, tuple[float, str]
        ] = {}  # test id -> (its setup's start, epoch; its xdist worker)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.time()
        self.load_start = load_average()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome
        if report.when == "setup":  # when, and on which worker: what else ran beside a test that was slow
            node = getattr(report, "node", None)
            worker = getattr(getattr(node, "gateway", None), "id", "")
            self.began[report.nodeid] = (getattr(report, "start", 0.0), worker)
        if hasattr(report, "wasxfail"):
            self.xfail.add(report.nodeid)

    def outcome(self, nodeid: str) -> str:
        """One word per test, as pytest's summary counts it: an error in setup or teardown is an error."""
        phases = self.phases[nodeid]
        if phases.get("call") == "failed":  # a strict xfail that passed too (its report carries no wasxfail)
            return "failed"
        if "failed" in phases.values():
            return "error"
        if "skipped" in phases.values():
            return "xfailed" if nodeid in self.xfail else "skipped"
        return "xpassed" if nodeid in self.xfail else "passed"

    def row(self, nodeid: str, seconds: float, outcome: str) -> dict:
        row = {"seconds": round(seconds, 3), "outcome": outcome}
        start, worker = self.began.get(nodeid, (0.0, ""))
        if start:
            row["began_s"] = round(start - self.started, 1)  # from the session's start
        if worker:
            row["worker"] = worker
        return row

    def table(self, exitstatus: int | None = None) -> dict:
        ended = time.time()
        outcomes = {nodeid: self.outcome(nodeid) for nodeid in self.seconds}
        numprocesses = getattr(self.config.option, "numprocesses", None)
        return {
            "schema": 1,
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
            "wall_seconds": round(ended - self.started, 2),
            "exit_status": None if exitstatus is None else int(exitstatus),  # 2: interrupted, 1: tests failed
            "args": list(self.config.invocation_params.args),
            "xdist_workers": numprocesses if isinstance(numprocesses, int) else 0,
            "cpu_count": os.cpu_count(),
            "load_average_start": self.load_start,
            "load_average_end": load_average(),
            "markexpr": getattr(self.config.option, "markexpr", "") or None,
            "whole_suite": whole_suite(self.config),
            "counts": dict(Counter(outcomes.values())),
            "tests": {
                nodeid: self.row(nodeid, seconds, outcomes[nodeid])
                for nodeid, seconds in self.seconds.items()
            },
        }

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if len(self.seconds) < MIN_TESTS:
            return
        table = self.table(exitstatus)
        text = json.dumps(table, indent=1) + "\n"
        # part of the suite (paths, -k, --lf) never replaces the whole suite's table, which make bench keeps
        target = self.path if table["whole_suite"] else self.path.with_name(PART_NAME)
        part = target.with_name(f".{target.name}.{os.getpid()}.part")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            part.write_text(text, encoding="utf-8")
            os.replace(part, target)  # whole or not at all: a reader never sees half a table
        except OSError as err:  # the table is a by-product; the session's result stands
            print(f"\nsuite durations not written to {target}: {err}", file=sys.stderr)
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
