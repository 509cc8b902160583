"""The README's instructor section works as typed from the repository: every autograder command it shows names the
``.venv``'s Python (a fresh machine has no other with the course's packages) and is one the command line accepts;
plain nbgrader is shown with the ``.venv`` on PATH (its gradebook needs ``alembic`` from there); and the
``make colab-check`` paragraph says how a run is recorded (by default it is only printed)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autograder.commands.cli import build_parser
from benchmarks import colab_check

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("## Instructors") : README.index("## Self-learners")]
PYTHONS = (".venv/bin/python -m autograder ", "path/to/.venv/bin/python -m autograder ")


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M)


def autograder_commands(text: str) -> list[str]:
    """Each command that runs the autograder: a line of a code block, or an inline code span (whitespace joined)."""
    lines = [line.split("  #")[0].strip() for block in code_blocks(text) for line in block.splitlines()]
    spans = [" ".join(span.split()) for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", re.sub(r"^```.*?^```", "",
                                                                                         text, flags=re.S | re.M))]  # fmt: skip
    return [c for c in lines + spans if "-m autograder" in c]


def test_every_autograder_command_names_the_venvs_python():
    commands = autograder_commands(SECTION)
    assert len(commands) > 15, commands
    bare = [c for c in commands if not c.startswith(PYTHONS)]
    assert not bare, f"commands that need the .venv's Python but do not name it: {bare}"


@pytest.mark.parametrize("command", autograder_commands(SECTION))
def test_every_autograder_command_is_one_the_command_line_accepts(command):
    argv = shlex.split(next(command[len(p) :] for p in PYTHONS if command.startswith(p)))
    build_parser().parse_args(argv)  # exits (SystemExit) on an unknown command or option


def test_plain_nbgrader_is_shown_with_the_venv_on_path():
    lines = [line.strip() for block in code_blocks(SECTION) for line in block.splitlines()]
    nbgrader = [line for line in lines if re.search(r"(^|\s|/)nbgrader\s", line.split("#")[0])]
    assert nbgrader, "the section shows plain nbgrader beside the autograder"
    for line in nbgrader:
        assert line.startswith("PATH=path/to/.venv/bin:$PATH nbgrader "), line


def test_colab_check_paragraph_says_how_to_record():
    paragraph = README[README.index("- `make colab-check`") :].split("\n- ")[0]
    assert "make colab-check COLAB_ARGS=--record" in paragraph, paragraph
    assert colab_check.build_parser().parse_args(["--record"]).record
    assert not colab_check.build_parser().parse_args([]).record
    assert "COLAB_ARGS" in (ROOT / "Makefile").read_text()
