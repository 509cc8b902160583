"""How to grade is one value, :class:`autograder.settings.Settings`: its fields' defaults and help are the
command line's, the command line's arguments make one, and a mode given as a string is resolved once."""

from __future__ import annotations

import os
import sys
from dataclasses import fields
from types import SimpleNamespace

import pytest

from autograder.commands.cli import build_parser
from autograder.settings import Limits, Settings, option

OPTIONS = {  # the command line's option -> (the class that owns the field, the field)
    "--workers": (Settings, "workers"),
    "--timeout": (Limits, "timeout"),
    "--cell-timeout": (Limits, "cell_timeout"),
    "--memory": (Limits, "memory_mb"),
    "--isolation": (Settings, "isolation"),
    "--runner": (Settings, "runner"),
    "--scheduler": (Settings, "scheduler"),
    "--strict-canary": (Settings, "strict"),
}


def grading_options(command: str = "grade") -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.option_strings[0]: a for a in sub._actions if a.option_strings}


@pytest.mark.parametrize("command", ["grade", "regrade", "run", "demo", "doctor"])
def test_each_grading_option_takes_its_default_and_help_from_the_settings_field(command):
    shown = grading_options(command)
    for flag, (owner, name) in OPTIONS.items():
        assert shown[flag].help == option(owner, name)["help"], flag
        assert shown[flag].default == option(owner, name)["default"], flag
    assert shown["--timeout"].default == Limits().timeout and "600" in shown["--timeout"].help
    assert shown["--memory"].default == Limits().memory_mb
    assert shown["--isolation"].default == Settings().isolation == "auto"
    assert shown["--workers"].default == (os.cpu_count() or 1)  # the command line's: the cores
    assert Settings().workers == 2  # a program's own Settings
    assert shown["--cell-timeout"].default is None and "180" in shown["--cell-timeout"].help


def test_every_field_says_what_it_is():
    assert all(f.metadata.get("help") for owner in (Settings, Limits) for f in fields(owner))


def test_the_command_line_makes_the_settings(tmp_path):
    args = build_parser().parse_args(
        ["grade", "A1", "--workers", "3", "--timeout", "30", "--memory", "1024", "--isolation", "basic",
         "--runner", "spawn", "--scheduler", "tcp://here:8786", "--strict-canary"]
    )  # fmt: skip
    args.course = SimpleNamespace(config=SimpleNamespace(Execute={"timeout": 50}, ExecutePreprocessor={}))
    settings = Settings.from_args(args)
    cores = os.cpu_count() or 1
    assert settings == Settings(
        limits=Limits(timeout=30, cell_timeout=30, memory_mb=1024, threads=max(1, cores // 3)),
        isolation="basic", runner="spawn", workers=3, strict=True, scheduler="tcp://here:8786",
    )  # fmt: skip
    # the course's per-cell limit where it is under the notebook's; asked for, it wins
    args.timeout = 600
    assert Settings.from_args(args).limits.cell_timeout == 50
    args.cell_timeout = 7
    assert Settings.from_args(args).limits.cell_timeout == 7
    plain = Settings.from_args(build_parser().parse_args(["grade", "A1", "--workers", "1"]), course=None)
    assert (plain.strict, plain.scheduler, plain.runner) == (False, None, "auto")
    assert plain.limits == Limits(cell_timeout=Limits().cell_timeout, threads=cores)


def test_limits_still_import_from_the_sandbox():
    """A course's ``nbgrader_config.py`` imports ``Limits`` from :mod:`autograder.runner.sandbox`."""
    from autograder.runner import sandbox

    assert sandbox.Limits is Limits


@pytest.mark.skipif(sys.platform != "linux", reason="the isolation resolves on Linux only")
def test_a_mode_resolves_once_with_its_runner_and_a_resolved_isolation_stays():
    from autograder.runner.isolation import Isolation, resolve, resolved

    spawned = resolved(Settings(isolation="basic", runner="spawn"))
    assert spawned.isolation == resolve("basic", "spawn") and spawned.isolation.runner == "spawn"
    mine = Isolation("basic", namespaces=False)
    assert resolved(Settings(isolation=mine)).isolation is mine
    assert resolved(spawned) is spawned
