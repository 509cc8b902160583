"""The grader's house kept in shape by the suite, not by memory: the import graph of ``autograder/`` and of
``benchmarks/`` has no circle (imports inside functions counted), ``autograder``'s wings import only from the
wings before them (:data:`WINGS`; an import for type checkers alone, under ``if TYPE_CHECKING:``, never runs and
is not counted), no function in ``autograder/`` is over 60 lines nor any class over 200 nor takes more than 6
parameters, ``benchmarks/`` uses only what ``autograder`` exports, and each fact
below is written in one place. Each rule is also tried on a small made-up package, so a broken rule
cannot pass silently."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION, MAX_CLASS = 60, 200
MAX_PARAMETERS = 6  # what travels together is one value (autograder.settings.Settings, a small dataclass)


def modules(package: Path) -> dict[str, ast.Module]:
    """Dotted module name -> its parsed source, for every file of ``package``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def only_for_type_checkers(tree: ast.Module) -> set[ast.AST]:
    """The nodes under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): never run, so never imported."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            skipped |= {n for statement in node.body for n in ast.walk(statement)}
    return skipped


def imports(name: str, tree: ast.Module, known: set[str], is_package: bool) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its file (in functions too), but for what it
    imports for type checkers alone (:func:`only_for_type_checkers`)."""
    found = set()
    skipped = only_for_type_checkers(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}" if base else package
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return {m for m in found if m in known and m != name}


def circles(package: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    trees = modules(package)
    packages = {n for n in trees if (package.parent / n.replace(".", "/") / "__init__.py").is_file()}
    graph = {n: imports(n, t, set(trees), n in packages) for n, t in trees.items()}
    # a package's __init__ that only loads names lazily (importlib) imports nothing at load
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def too_long(package: Path) -> list[str]:
    """Every function over :data:`MAX_FUNCTION` lines and class over :data:`MAX_CLASS`, with its length."""
    found = []
    for name, tree in modules(package).items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
                if lines > limit:
                    found.append(f"{name}.{node.name}: {lines} lines (at most {limit})")
    return found


def too_many_parameters(package: Path) -> list[str]:
    """Every function that takes more than :data:`MAX_PARAMETERS` parameters (``self`` and ``cls`` not
    counted; ``*args`` and ``**kwargs`` one each), with its count."""
    found = []
    for name, tree in modules(package).items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                named = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
                count = (
                    len(named)
                    - (named[:1] in (["self"], ["cls"]))
                    + (a.vararg is not None)
                    + (a.kwarg is not None)
                )
                if count > MAX_PARAMETERS:
                    found.append(f"{name}.{node.name}: {count} parameters (at most {MAX_PARAMETERS})")
    return found


# The wings of ``autograder``, in order: a module imports only from the vocabulary (the package's own modules
# that are not doors), its own wing and the wings before it; the doors (what other code and ``python -m``
# enter by) may import anything, and nothing imports them.
WINGS = ("runner", "intake", "grading", "outputs", "service", "commands")
DOORS = ("api", "__main__")


def rank(name: str, wings=WINGS, doors=DOORS) -> tuple[int, str]:
    """Where ``name`` (a dotted module of the package) stands: 0 the vocabulary, then each wing, then the doors."""
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in doors:
        return len(wings) + 1, "the doors"
    if len(parts) > 1 and parts[1] in wings:
        return wings.index(parts[1]) + 1, parts[1]
    return 0, "the vocabulary"


def wing_breaks(package: Path, wings=WINGS, doors=DOORS) -> list[str]:
    """Every import (in functions too) from a later wing, or of a door, with both ends."""
    trees = modules(package)
    packages = {n for n in trees if (package.parent / n.replace(".", "/") / "__init__.py").is_file()}
    found = []
    for name, tree in trees.items():
        mine, where = rank(name, wings, doors)
        is_door = mine > len(wings)
        for other in sorted(imports(name, tree, set(trees), name in packages)):
            theirs, there = rank(other, wings, doors)
            if other != package.name and not is_door and theirs > mine:
                found.append(f"{name} ({where}) imports {other} ({there})")
    return found


def write(folder: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


# ----------------------------------------------------------------------------- the rules, tried first


def test_the_rules_find_a_circle_through_a_function_level_import_and_a_long_function(tmp_path):
    pkg = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import f\n",
        "pkg/b.py": "def f():\n    from pkg import a\n" + "    x = 1\n" * 60,
        "pkg/c.py": "from . import a\n",
    }) / "pkg"  # fmt: skip
    assert circles(pkg) == [["pkg.a", "pkg.b"]]
    assert too_long(pkg) == ["pkg.b.f: 62 lines (at most 60)"]
    (pkg / "b.py").write_text("def f():\n    return 1\n")
    assert circles(pkg) == [] and too_long(pkg) == []


def test_the_parameter_rule_counts_what_a_function_takes(tmp_path):
    pkg = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": (
            "def f(a, b, c, d, e, g, h):\n    pass\n"
            "def fine(a, b, c, d, e, g):\n    pass\n"
            "def rest(a, b, c, d, *args, e=1, **kwargs):\n    pass\n"
            "class C:\n"
            "    def m(self, a, b, c, d, e, g):\n        pass\n"
            "    @classmethod\n    def k(cls, a, b, c, d, e, g):\n        pass\n"
            "    async def n(self, a, b, c, d, e, g, *, h):\n        pass\n"
        ),
    }) / "pkg"  # fmt: skip
    assert too_many_parameters(pkg) == [
        "pkg.a.f: 7 parameters (at most 6)",
        "pkg.a.rest: 7 parameters (at most 6)",
        "pkg.a.n: 7 parameters (at most 6)",
    ]
    (pkg / "a.py").write_text("def f(a, b, c, d, e, g):\n    pass\n")
    assert too_many_parameters(pkg) == []


def test_the_wing_rule_finds_an_import_from_a_later_wing_and_of_a_door(tmp_path):
    pkg = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/api.py": "from pkg.commands import cli\n",
        "pkg/words.py": "",
        "pkg/runner/__init__.py": "",
        "pkg/runner/box.py": "from pkg import words\n",
        "pkg/intake/__init__.py": "",
        "pkg/intake/late.py": "from pkg.runner import box\ndef f():\n    from pkg.grading import batch\n",
        "pkg/grading/__init__.py": "",
        "pkg/grading/batch.py": "from pkg.intake.late import f\n",
        "pkg/outputs/__init__.py": "",
        "pkg/commands/__init__.py": "",
        "pkg/commands/cli.py": "from pkg.grading import batch\nfrom pkg import api\n",
    }) / "pkg"  # fmt: skip
    assert wing_breaks(pkg) == [
        "pkg.commands.cli (commands) imports pkg.api (the doors)",
        "pkg.intake.late (intake) imports pkg.grading (grading)",
        "pkg.intake.late (intake) imports pkg.grading.batch (grading)",
    ]
    (pkg / "intake/late.py").write_text("from pkg.runner import box\n")
    (pkg / "commands/cli.py").write_text("from pkg.grading import batch\n")
    assert wing_breaks(pkg) == []
    (pkg / "words.py").write_text("from pkg.intake import late\n")  # the vocabulary imports nothing of a wing
    assert wing_breaks(pkg) == [
        "pkg.words (the vocabulary) imports pkg.intake (intake)",
        "pkg.words (the vocabulary) imports pkg.intake.late (intake)",
    ]
    # ... but for type checkers, which never run it; what runs beside (an else, a later line) still counts
    (pkg / "words.py").write_text(
        "import typing\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.intake import late\nelse:\n    from pkg.runner import box\n"
        "if typing.TYPE_CHECKING:\n    from pkg.grading import batch\n"
    )
    assert wing_breaks(pkg) == [
        "pkg.words (the vocabulary) imports pkg.runner (runner)",
        "pkg.words (the vocabulary) imports pkg.runner.box (runner)",
    ]


# ----------------------------------------------------------------------------- the house


def test_each_wing_imports_only_from_the_wings_before_it():
    assert wing_breaks(ROOT / "autograder") == []


def test_each_wing_says_what_it_does_and_what_it_may_import():
    """The order is written where a newcomer reads it: each wing's ``__init__`` and the package's."""
    package = (ROOT / "autograder" / "__init__.py").read_text()
    assert [w for w in WINGS if f":mod:`autograder.{w}`" in package] == list(WINGS)
    for wing in WINGS:
        text = (ROOT / "autograder" / wing / "__init__.py").read_text()
        assert "May import:" in text, wing
        before = WINGS[: WINGS.index(wing)]
        assert all(f"autograder.{w}" in text for w in before if w != "runner") or wing == "commands", wing
        assert not any(
            f"autograder.{w}`" in text.split("May import:")[1] for w in WINGS[WINGS.index(wing) + 1 :]
        )


def test_a_flat_name_from_before_the_wings_is_the_same_module():
    import importlib

    from autograder import OLD_NAMES

    for old, new in OLD_NAMES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    since = ("service",)  # wings made after the flat names were left: they never had one
    assert {n.rsplit(".", 1)[1] for n in OLD_NAMES} == {
        p.stem
        for w in WINGS[1:]
        if w not in since
        for p in (ROOT / "autograder" / w).glob("*.py")
        if p.stem != "__init__"
    }


@pytest.mark.parametrize("package", ["autograder", "benchmarks"])
def test_no_import_circles(package):
    assert circles(ROOT / package) == []


def test_no_function_over_60_lines_nor_class_over_200_in_the_grader():
    assert too_long(ROOT / "autograder") == []


def test_no_function_in_the_grader_takes_more_than_6_parameters():
    assert too_many_parameters(ROOT / "autograder") == []


def test_benchmarks_use_only_what_the_autograder_exports():
    from autograder import api

    used = []
    for name, tree in modules(ROOT / "benchmarks").items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograder"):
                if node.module != "autograder.api":
                    used.append(f"{name}: from {node.module} import ...")
                used += [f"{name}: {a.name} is not exported" for a in node.names if a.name not in api.__all__]
            elif isinstance(node, ast.Import):
                used += [f"{name}: import {a.name}" for a in node.names if a.name.startswith("autograder")]
    assert used == []
    assert all(callable(getattr(api, name)) or name.isupper() for name in api.__all__)


def test_the_package_itself_imports_nothing():
    """A sandboxed child imports ``autograder.runner.child``: the package's ``__init__`` must load nothing more
    (it only puts a finder on ``sys.meta_path``)."""
    import subprocess
    import sys

    code = (
        "import sys\nbefore = set(sys.modules)\nimport autograder\nprint(sorted(set(sys.modules) - before))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert loaded.stdout.strip() == "['autograder']"


# ----------------------------------------------------------------------------- each fact in one place

STATUS_NAMES = None


def status_names() -> set[str]:
    from autograder.result import STATUS

    return set(STATUS)


def constants(package: Path):
    """(module, node) for every constant in ``package``'s code."""
    for name, tree in modules(package).items():
        for node in ast.walk(tree):
            yield name, node


FACTS = {
    # what -> (a test of an AST node that spells it, the one module allowed to)
    "the grader's folder .grading": (
        lambda n: isinstance(n, ast.Constant) and n.value == ".grading",
        "autograder.course",
    ),
    "the SQLite gradebook's file name": (
        lambda n: isinstance(n, ast.Constant) and n.value == "gradebook.db",
        "autograder.course",
    ),
    "the SQLite URL scheme": (
        lambda n: isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("sqlite:"),
        "autograder.course",
    ),
    "a Linux clone or prctl number": (
        lambda n: (
            isinstance(n, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id.startswith(("CLONE_", "PR_SET_", "MS_")) for t in n.targets
            )
        ),
        "autograder.runner.linux",
    ),
    "a table of statuses": (
        lambda n: (
            isinstance(n, (ast.Tuple, ast.List, ast.Set, ast.Dict))
            and sum(
                isinstance(e, ast.Constant) and e.value in status_names()
                for e in (n.keys if isinstance(n, ast.Dict) else n.elts)
            )
            >= 3
        ),
        "autograder.result",
    ),  # fmt: skip
    "a default tolerance": (
        lambda n: (
            (isinstance(n, ast.arg) and n.arg in ("rtol", "atol"))
            or (
                isinstance(n, ast.Call)
                and len(n.args) == 2
                and isinstance(n.args[0], ast.Constant)
                and n.args[0].value in ("rtol", "atol")
                and isinstance(n.args[1], ast.Constant)
            )
        ),
        "",  # a default is a name (dlcourse.closeness's RTOL, ATOL), never a number written again
    ),
}


@functools.cache
def course_constants(package: str) -> tuple:
    """:func:`constants` of one of the repository's own packages (``autograder``, ...), walked once a session
    for every fact (a made-up package is walked afresh: its tests change it)."""
    return tuple(constants(ROOT / package))


def spelled(package: str | Path, test) -> set[str]:
    """Where ``test`` finds a node: in one of the repository's packages (its name) or a made-up one (its folder)."""
    found = course_constants(package) if isinstance(package, str) else constants(package)
    return {name for name, node in found if test(node)}


@pytest.mark.parametrize("fact", list(FACTS))
def test_each_fact_is_written_in_one_place(fact):
    test, home = FACTS[fact]
    where = spelled("autograder", test) | spelled("benchmarks", test)
    if fact == "a default tolerance":  # an argument named rtol/atol whose default is a number
        where = set()
        for package in ("autograder", "benchmarks", "dlcourse"):
            for name, node in course_constants(package):
                if isinstance(node, ast.FunctionDef):
                    args = node.args.args + node.args.kwonlyargs
                    defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
                    defaults += node.args.kw_defaults
                    for arg, default in zip(args, defaults):
                        if arg.arg in ("rtol", "atol") and isinstance(default, ast.Constant):
                            where.add(f"{name}.{node.name}")
                elif test(node) and isinstance(node, ast.Call):
                    where.add(name)
        assert where == set()
        from dlcourse.closeness import ATOL, RTOL

        assert (RTOL, ATOL) == (1e-5, 1e-8)
        return
    assert where == {home}


def test_the_per_cell_limit_is_one_value_for_nbgrader_and_the_grader():
    from autograder.course import Course
    from autograder.runner.sandbox import Limits

    assert Course().config.Execute.timeout == int(Limits().cell_timeout)
    text = (ROOT / "nbgrader_config.py").read_text()
    assert "c.Execute.timeout = int(Limits().cell_timeout)" in text
    assert "ExecutePreprocessor.timeout" not in text


def test_the_fact_rules_find_a_second_spelling(tmp_path):
    pkg = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": 'WORK = ".grading"\nCLONE_NEWNET = 0x40000000\nORDER = ("graded", "flagged", "error")\n',
    }) / "pkg"  # fmt: skip
    for fact in ("the grader's folder .grading", "a Linux clone or prctl number", "a table of statuses"):
        assert spelled(pkg, FACTS[fact][0]) == {"pkg.a"}


def test_a_course_config_written_before_the_wings_loads_unchanged(tmp_path):
    """Other courses copied ``nbgrader_config.py`` when it imported ``autograder.late.LateWork``,
    ``autograder.runner.sandbox.Limits``, ``autograder.nbgrader_hooks`` and ``autograder.sanitize``: that copy
    (kept as it was in ``tests/fixtures/nbgrader_config_before_wings.py``) loads, and hooks up today's classes."""
    import shutil

    from traitlets.config.loader import PyFileConfigLoader

    from autograder.grading.nbgrader_hooks import RequireReference
    from autograder.intake.late import LateWork
    from autograder.intake.sanitize import SanitizeForFormgrader
    from autograder.settings import Limits

    old = (ROOT / "tests" / "fixtures" / "nbgrader_config_before_wings.py").read_text()
    assert "from autograder.late import LateWork" in old and "from autograder.sanitize import" in old
    shutil.copy(
        ROOT / "tests" / "fixtures" / "nbgrader_config_before_wings.py", tmp_path / "nbgrader_config.py"
    )
    config = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    assert config.AssignLatePenalties.plugin_class is LateWork
    assert config.Execute.timeout == int(Limits().cell_timeout)
    assert RequireReference in config.Autograde.sanitize_preprocessors
    assert SanitizeForFormgrader in config.Autograde.autograde_preprocessors
    new = (ROOT / "nbgrader_config.py").read_text()  # and the course's own uses the wings' names
    assert not any(f"from {name} import" in new for name in __import__("autograder").OLD_NAMES)


# ----------------------------------------------------------------------------- the tests' own house


def imports_of_tests(folder: Path) -> list[str]:
    """Every import of a test file (``test_*.py``) by another file of ``folder``: what tests share lives in
    ``tests/fixtures/``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [
                f"{path.relative_to(folder)}: {n}" for n in names if n.rsplit(".", 1)[-1].startswith("test_")
            ]
    return found


def test_the_test_rules_find_a_test_that_imports_another(tmp_path):
    tests = write(tmp_path, {
        "tests/__init__.py": "",
        "tests/fixtures/shared.py": "def helper():\n    return 1\n",
        "tests/grading/test_a.py": "from tests.fixtures.shared import helper\n",
        "tests/grading/test_b.py": "def test_b():\n    from tests.grading.test_a import helper\n",
    }) / "tests"  # fmt: skip
    assert imports_of_tests(tests) == ["grading/test_b.py: tests.grading.test_a"]


def test_no_test_imports_another_and_every_test_lives_in_its_wing():
    assert imports_of_tests(ROOT / "tests") == []
    assert sorted(p.name for p in (ROOT / "tests").glob("test_*.py")) == []  # each in a folder of its own
    wings = {p.name for p in (ROOT / "tests").iterdir() if (p / "__init__.py").is_file()}
    assert set(WINGS) <= wings, set(WINGS) - wings  # the grader's wings, mirrored
