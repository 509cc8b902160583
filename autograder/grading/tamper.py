"""What a submission's code does to what it did not define, read from its text: nothing of it runs here.

:func:`scan` reads the answer cells of a notebook (code cells with nbgrader's ``solution: true``, and every
code cell without nbgrader metadata: the cells a student added) and flags each line that

- changes the course package (``dlcourse``, ``dlcourse.*``, the names imported from them) or the grader's
  recording (``dlcourse.grading`` and anything in it): an assignment, ``del``, ``setattr``/``delattr``, a
  mutating method (``.update``, ``.append``, ...), or reaching a private part of ``dlcourse.grading``;
- replaces what tests time or count with (``time.perf_counter = ...``, ``torch.profiler.profile = ...``,
  ``tracemalloc``, ``resource``, CUDA events and memory counters);
- writes ``sys.modules`` or the import hooks (``sys.meta_path``), ``sys.excepthook``/``displayhook``,
  Python's built-ins (``builtins.x = ...``, ``__builtins__``), or sets ``__code__``, ``__globals__``,
  ``__closure__``, ``__defaults__``, ``__builtins__`` or ``__dict__`` of anything;
- changes the notebook's shell: IPython event hooks (``get_ipython().events.register``), input and AST
  transformers, ``set_custom_exc``, a replaced ``showtraceback``; or installs a trace, profile or audit
  hook (``sys.settrace``, ``threading.settrace``, ``sys.addaudithook``);
- walks to frames or to every object (``inspect.currentframe``, ``inspect.stack``, ``sys._getframe``,
  ``.f_back``/``.f_globals``/``.f_locals``, ``gc.get_objects``/``get_referrers``/``get_referents``) or
  reaches memory through ``ctypes``;
- hides what it runs: ``exec``/``eval``/``compile`` (or the shell's ``run_cell``) of a string that is not
  written in the cell, ``__import__``, ``importlib.import_module`` of a computed name, a course module
  reloaded.

Code in a string written in the cell (``exec("...")``, ``%time ...``, a ``%%time`` cell's body) is read as
code. Lines that are not Python (``%timeit``, ``!pip``) are read as IPython runs them
(``TransformerManager().transform_cell``); a cell that does not parse even then never runs, and is never
flagged. Ordinary configuration (``torch.backends.cudnn.benchmark = True``, ``os.environ[...] = ...``,
``plt.rcParams[...]``, seeds, warnings filters) and attributes of the student's own objects are not flagged.

Why static: the check runs in the grader, outside the kernel, on the submitted text alone, so nothing the
student's code does when it runs can reach it or change its verdict, and the grader runs nothing of the
student's to make it. Points are decided elsewhere, outside the kernel, from evidence the kernel could not
forge; these flags are for the instructor's review (and the student's feedback page) and never change points
by themselves.

What it cannot catch: a reading of the text follows names, imports and plain aliases
(``g = dlcourse.grading``), not values. Code that builds its target at run time (``getattr(m, name)`` with a
computed ``name``, a module taken from ``sys.modules[computed]`` and handed through a function, data decoded
and run by a tool not listed here) is flagged only by the construct it uses to hide (``exec`` of a computed
string, ``__import__``, ...), never for what it then does; code that hides without any listed construct is
not flagged at all.
"""

from __future__ import annotations

import ast
import builtins
import re
import threading
import warnings
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from autograder.course import is_solution, nbgrader_meta
from autograder.result import Flag

if TYPE_CHECKING:
    import nbformat

MAX_FLAGS = 20  # flagged lines listed per notebook; the rest are counted
MAX_TEXT = 80  # characters of a flagged line shown
MAX_CELL_CHARS = 1_000_000  # a code cell longer than this is not read (and is flagged: no answer is)
MAX_NESTED = 4  # code in a string in code in a string ... read this deep

COURSE_PACKAGES = ("dlcourse", "autograder")
RECORDING = "dlcourse.grading"  # the grader's recording, in the kernel
SHELL = "get_ipython()"  # what a path through the notebook's shell starts with
SHELL_GETTERS = {
    "IPython.get_ipython", "IPython.core.getipython.get_ipython", "IPython.InteractiveShell.instance",
    "IPython.core.interactiveshell.InteractiveShell.instance", "ipykernel.zmqshell.ZMQInteractiveShell.instance",
}  # fmt: skip
SHELL_SETTINGS = {"ast_node_interactivity"}  # a display setting notebooks teach: not flagged
SYS_HOOKS = {
    "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache", "sys.excepthook", "sys.displayhook",
    "sys.breakpointhook", "sys.unraisablehook", "sys.__excepthook__", "sys.__displayhook__",
}  # fmt: skip
MEASURING = (
    "time", "torch.profiler", "torch.autograd.profiler", "torch.cuda.Event", "torch.cuda.synchronize",
    "torch.cuda.max_memory_allocated", "torch.cuda.memory_allocated", "tracemalloc", "resource",
)  # fmt: skip  # what tests time and count with: a notebook that replaces one reports what it likes
CODE_ATTRS = {"__code__", "__globals__", "__closure__", "__builtins__", "__dict__", "__defaults__", "__kwdefaults__"}  # fmt: skip
TRANSFORMERS = {
    "input_transformers_cleanup", "input_transformers_post", "ast_transformers", "input_transformer_manager",
    "input_splitter",
}  # fmt: skip
SHELL_RUNNERS = {
    "showtraceback", "_showtraceback", "showsyntaxerror", "showindentationerror", "run_cell", "run_cell_async",
    "run_ast_nodes", "run_code", "transform_cell", "transform_ast",
}  # fmt: skip
SHELL_DISPLAY = {"showtraceback", "_showtraceback", "showsyntaxerror", "showindentationerror"}
IPYTHON_EVENTS = {"pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized"}
MUTATORS = {
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "add", "discard",
    "__setitem__", "__delitem__", "__setattr__", "__delattr__",
}  # fmt: skip
SETTERS = {
    "builtins.setattr", "builtins.delattr", "builtins.object.__setattr__", "builtins.object.__delattr__",
    "builtins.type.__setattr__", "builtins.type.__delattr__",
}  # fmt: skip
RUNS_CODE = {"builtins.exec", "builtins.eval", "builtins.compile"}
SHELL_RUNS_CODE = {"run_cell", "run_cell_async", "ex", "ev", "run_code", "runcode", "safe_execfile"}
CODE_KEYWORDS = ("source", "raw_cell", "code", "expr")  # how exec-like calls may name the code they run
CODE_MAGICS = {"time", "timeit", "prun", "capture", "debug"}  # magics whose argument runs as Python
FRAME_ATTRS = {"f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame"}  # fmt: skip

FRAMES = "walks to the frames of running code, where the tests' and the grader's variables live"
EVERY_OBJECT = "walks through every object in memory (gc), the grader's and the tests' included"
TRACE = "installs a trace, profile or audit hook, which sees (and can change) all code that runs, the tests' included"
EVENTS = "registers an IPython event hook: code that runs around every cell, the tests' included"
INPUT = "changes IPython's input or AST transformers, which rewrite every cell's code (the tests' included) before it runs"
CUSTOM_EXC = "installs an IPython exception handler, which can hide a failing test's error"
HIDDEN_IMPORT = "imports through __import__, which a reading of the code cannot follow"
COMPUTED_IMPORT = "imports a module by a name computed at run time, which a reading of the code cannot follow"
GLOBALS = "writes into a function's module globals (__globals__), which replaces what that module's code sees"
CTYPES = "reaches memory through ctypes, around every rule of Python, the grader's objects included"
TOO_DEEP = "is nested too deeply for the check of the code to read; review it by hand"
TOO_LONG = "is too long for the check of the code to read; review it by hand"

# what reading (or calling) a function means, by its path
REFERENCES = {
    **dict.fromkeys(
        ["sys._getframe", "sys._current_frames", "sys._current_exceptions", "inspect.currentframe", "inspect.stack",
         "inspect.trace", "inspect.getouterframes", "inspect.getinnerframes", "traceback.walk_stack"],
        FRAMES,
    ),
    **dict.fromkeys(["gc.get_objects", "gc.get_referrers", "gc.get_referents"], EVERY_OBJECT),
    **dict.fromkeys(
        ["sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.call_tracing", "threading.settrace",
         "threading.setprofile", "threading.settrace_all_threads", "threading.setprofile_all_threads"],
        TRACE,
    ),
    "builtins.__import__": HIDDEN_IMPORT,
}  # fmt: skip

# a reason: (words before, the thing it names, words after); the things one reason names on a line go together
Why = tuple[str, str, str]
_BUILTIN_NAMES = frozenset(dir(builtins))
_WARNINGS = threading.Lock()  # catch_warnings changes the process's filters: one thread at a time here
IMPORT_LINE = re.compile(r"^[ \t]*(?:import|from)[ \t][^\n]*", re.M)


def scan(notebook: nbformat.NotebookNode, given: Collection[str] = ()) -> list[Flag]:
    """The flags of ``notebook``'s answer cells, in the notebook's order. Every code cell is read in order (so
    that an import in the set-up cell names what a later answer changes); only answer cells are flagged. A
    cell with nbgrader metadata that is not an answer is the assignment's own (the grader put it there, as
    :func:`autograder.intake.repair.rebuild` does); ``given``: the texts of the assignment's other code cells (see
    :func:`given_code`), not flagged either where a cell without metadata is one of them."""
    reader = _Reader()
    flags: list[Flag] = []
    last_id = None
    for number, cell in enumerate(notebook.cells, 1):
        meta = nbgrader_meta(cell) if isinstance(cell.get("metadata"), dict) else {}
        meta = meta if isinstance(meta, dict) else {}
        source = _text(cell.get("source", ""))
        if cell.get("cell_type") == "code":
            answer = bool(meta.get("solution"))
            report = answer or (not meta and source.strip() not in given)
            if answer and meta.get("grade_id"):
                name = str(meta["grade_id"])
            else:
                name = f"cell {number}" + (f" (after {last_id})" if last_id else "")
            flags += _flags(name, source, reader.read(source, report))
        if meta.get("grade_id"):
            last_id = meta["grade_id"]
    if len(flags) > MAX_FLAGS:
        rest = flags[MAX_FLAGS]
        more = f"and {len(flags) - MAX_FLAGS} more flagged lines, this the first of them, not listed"
        flags = [*flags[:MAX_FLAGS], Flag(rest.cell, rest.line, rest.text, more)]
    return flags


def scan_source(code: str, cell: str = "") -> list[Flag]:
    """The flags of one cell's ``code``, read on its own."""
    return _flags(cell, code, _Reader().read(code, True))


def given_code(source: nbformat.NotebookNode) -> frozenset[str]:
    """The texts of an assignment's code cells other than its answers (set-up, tests, given code): the
    instructor's, never flagged."""
    return frozenset(
        _text(c.get("source", "")).strip()
        for c in source.cells
        if c.get("cell_type") == "code" and not is_solution(c)
    )


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source if isinstance(source, str) else ""


def _flags(cell: str, source: str, found: list[tuple[int, Why]]) -> list[Flag]:
    """One flag per line, in the order of the lines, its reasons each once: the things one reason names on a
    line (``changes a.x, a.y in ...``) named together."""
    lines = source.splitlines() or [""]
    by_line: dict[int, dict[tuple[str, str], list[str]]] = {}
    for line, (before, thing, after) in found:
        things = by_line.setdefault(min(max(line, 1), len(lines)), {}).setdefault((before, after), [])
        if thing not in things:
            things.append(thing)
    return [
        Flag(
            cell,
            line,
            _shortened(lines[line - 1]),
            "; ".join(f"{b}{', '.join(t)}{a}" for (b, a), t in whys.items()),
        )
        for line, whys in sorted(by_line.items())
    ]


def _shortened(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 3] + "..."


def _parsed(source: str, as_ipython_runs_it: bool = True) -> ast.Module | None:
    """The cell's syntax tree as IPython would run it (its magics and shell escapes as the calls IPython makes of
    them), or None for a cell that would not run at all. Not ``as_ipython_runs_it``: those lines are read as
    ``pass`` (quicker; enough for a cell that is read only for the names it binds)."""
    tree = _tree(source)
    if tree is not None:
        return tree
    text = None
    if as_ipython_runs_it:
        try:
            from IPython.core.inputtransformer2 import TransformerManager

            text = TransformerManager().transform_cell(source)
        except Exception:  # noqa: BLE001 (IPython's own reading of a hostile text: magics read as pass)
            text = None
    if text is None:
        text = "\n".join(
            line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
            for line in source.splitlines()
        )
    return _tree(text)


def _tree(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError as err:
        if not str(err.msg).startswith("invalid escape sequence"):
            return None
    except (ValueError, RecursionError, MemoryError):
        return None
    # a grader run with warnings as errors (python -W error) made a string's escape one: the kernel only warns
    with _WARNINGS, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _owner(path: str) -> str | None:
    """Whose object a write to ``path`` changes, where that is not the student's: a key of :func:`_changes`."""
    root = path.split(".", 1)[0]
    if path == SHELL or path.startswith(SHELL + ".") or root in ("IPython", "ipykernel"):
        return None if path.rsplit(".", 1)[-1] in SHELL_SETTINGS else "shell"
    if root in COURSE_PACKAGES:
        return "recording" if path == RECORDING or path.startswith(RECORDING + ".") else "course"
    if root == "builtins":
        return "builtins"
    if any(path.startswith(tool + ".") for tool in MEASURING):
        return "measuring"
    if path == "sys.modules" or path.startswith("sys.modules."):
        return "modules"
    if any(path == hook or path.startswith(hook + ".") for hook in SYS_HOOKS):
        return "hooks"
    return None


def _shown(path: str) -> str:
    return path.replace(".[]", "[...]")


def _changes(path: str, owner: str) -> Why:
    """Why a write to ``path`` (owned by ``owner``) is flagged, in plain words."""
    shown = _shown(path)
    parts = set(path.split("."))
    if owner == "shell":
        if parts & TRANSFORMERS:
            return _why(INPUT)
        if "events" in parts:
            return _why(EVENTS)
        if parts & SHELL_RUNNERS:
            return (
                "replaces IPython's ",
                min(parts & SHELL_RUNNERS),
                ", which shows errors or runs every cell",
            )
        return ("changes the notebook's shell (IPython): ", shown, "")
    if owner == "recording":
        return (
            "changes ",
            shown,
            " in the grader's recording (dlcourse.grading), which the student did not define",
        )
    if owner == "course":
        return ("changes ", shown, " in the course package, which the student did not define")
    if owner == "builtins":
        return ("changes Python's built-ins (", shown, ")")
    if owner == "measuring":
        return ("replaces ", shown, ", which tests time or count with")
    if owner == "modules":
        return _why("changes sys.modules, the table of loaded modules: an import may then get another module")
    return ("changes ", shown, ", where the interpreter hooks every cell's errors, output or imports")


def _why(text: str) -> Why:
    return (text, "", "")


class _Names(ast.NodeVisitor):
    """What each name stands for, as far as the code alone tells (an import, a plain alias of one), kept
    across cells and in each function's scope; :meth:`resolve` turns an expression into a dotted path."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, str | None]] = [{}]
        self.declared_global: list[set[str]] = [set()]

    def imported(self, node: ast.AST, path: str) -> None:
        """Called for each name imported (``path`` the module or module.name): for the rules to see."""

    def lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name == "__builtins__":
            return "builtins"
        if name == "get_ipython":
            return "IPython.get_ipython"
        return f"builtins.{name}" if name in _BUILTIN_NAMES else None

    def bind(self, name: str, path: str | None) -> None:
        scope = self.scopes[0] if name in self.declared_global[-1] else self.scopes[-1]
        scope[name] = path

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path ``node`` stands for (``dlcourse.grading.check``, ``sys.modules.[]``,
        ``get_ipython().events``), where the code alone tells; else None."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value)
            if base == "sys.modules":
                return _literal(node.slice) or "sys.modules.[]"
            return f"{base}.[]" if base else None
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            first = _literal(node.args[0]) if node.args else None
            if func in SHELL_GETTERS:
                return SHELL
            if func in ("importlib.import_module", "builtins.__import__") and first:
                return first
            if func == "builtins.getattr" and len(node.args) >= 2:
                base, name = self.resolve(node.args[0]), _literal(node.args[1])
                return f"{base}.{name}" if base and name else None
            if func == "builtins.vars" and node.args:
                base = self.resolve(node.args[0])
                return f"{base}.__dict__" if base else None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported(node, alias.name)
            root = alias.name.split(".")[0]
            self.bind(alias.asname or root, alias.name if alias.asname else root)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            path = None if node.level or not node.module else f"{node.module}.{alias.name}"
            if path:
                self.imported(node, path)
            if alias.name != "*":
                self.bind(alias.asname or alias.name, path)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        path = self.resolve(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and path:
                self.bind(target.id, path)
            else:
                self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)
        path = self.resolve(node.value) if node.value is not None else None
        if isinstance(node.target, ast.Name) and path:
            self.bind(node.target.id, path)
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind(node.target.id, self.resolve(node.value))

    def visit_Global(self, node: ast.Global) -> None:
        self.declared_global[-1].update(node.names)

    def _scoped(self, names: dict[str, str | None], body: list[ast.AST]) -> None:
        self.scopes.append(names)
        self.declared_global.append(set())
        try:
            for item in body:
                self.visit(item)
        finally:
            self.scopes.pop()
            self.declared_global.pop()

    def _arguments(self, args: ast.arguments) -> dict[str, str | None]:
        """A function's parameters, each standing for what its default stands for (``def f(g=dlcourse.grading)``)."""
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        pairs = [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]
        pairs += [(a, None) for a in (args.vararg, args.kwarg) if a is not None]
        return {a.arg: self.resolve(d) if d is not None else None for a, d in pairs}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for item in [*node.decorator_list, node.args, node.returns]:
            if item is not None:
                self.visit(item)
        self.bind(node.name, None)
        self._scoped(self._arguments(node.args), node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self._scoped(self._arguments(node.args), [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for item in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(item)
        self.bind(node.name, None)
        self._scoped({}, node.body)

    def _comprehension(self, node) -> None:
        ends = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        self._scoped({}, [*node.generators, *ends])

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bind(node.name, None)
        self.generic_visit(node)


class _Reader(_Names):
    """Reads cells in order (names kept from cell to cell) and collects (line, why) for the cell being read."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[int, Why]] = []
        self.report = True
        self.place: Callable[[int], int] = lambda line: line  # a line of the code read -> the cell's line
        self.depth = 0

    def read(self, source: str, report: bool) -> list[tuple[int, Why]]:
        """(line, why) for each construct flagged in ``source`` (where ``report``); the names it binds are kept
        for later cells."""
        self.found, self.report = [], report
        if not report:  # the assignment's own cell: only what its imports name matters, read quickly
            for line in IMPORT_LINE.findall(source[:MAX_CELL_CHARS]):
                tree = _parsed(line.strip(), as_ipython_runs_it=False)
                if tree is not None:
                    self.visit(tree)
            return []
        if len(source) > MAX_CELL_CHARS:
            return [(1, _why(TOO_LONG))]
        tree = _parsed(source)
        if tree is None:
            return []
        try:
            self.visit(tree)
        except RecursionError:
            del self.scopes[1:], self.declared_global[1:]
            self.found.append((1, _why(TOO_DEEP)))
        return self.found

    def nested(self, code: str, place: Callable[[int], int]) -> None:
        """Read ``code`` written in a string of the cell (exec's, a magic's), its lines placed by ``place``."""
        tree = _parsed(code) if self.depth < MAX_NESTED else None
        if tree is None:
            return
        outer = self.place
        self.place, self.depth = (lambda line: outer(place(line))), self.depth + 1
        try:
            self.visit(tree)
        finally:
            self.place, self.depth = outer, self.depth - 1

    def flag(self, node: ast.AST, why: str | Why) -> None:
        if self.report:
            line = self.place(getattr(node, "lineno", 1))
            self.found.append((line, _why(why) if isinstance(why, str) else why))

    def imported(self, node: ast.AST, path: str) -> None:
        name = path.rsplit(".", 1)[-1]
        if path.split(".")[0] == "ctypes":
            self.flag(node, CTYPES)
        elif name.startswith("_") and not name.startswith("__") and _owner(path) == "recording":
            self.flag(node, ("imports ", path, ", a private part of the grader's recording"))

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            if node.id == "__builtins__":
                self.flag(node, "replaces __builtins__, Python's built-ins for the code that follows")
            self.bind(node.id, None)
        else:
            self.referenced(node, self.lookup(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.written(node, node.value, node.attr)
        else:
            self.referenced(node, self.resolve(node))
            if node.attr in FRAME_ATTRS:
                self.flag(node, FRAMES)
        if node.attr in TRANSFORMERS:
            self.flag(node, INPUT)
        if node.attr == "__import__":
            self.flag(node, HIDDEN_IMPORT)
        self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = self.resolve(node.value)
            owner = _owner(f"{base}.[]") if base else None
            if owner:
                self.flag(node, _changes(f"{base}.[]", owner))
            else:
                self.through_namespace(node, node.value)
        self.generic_visit(node)

    def through_namespace(self, node: ast.AST, namespace: ast.AST) -> None:
        """A write into ``namespace`` (whose owner is unknown) that is a function's globals or built-ins."""
        if isinstance(namespace, ast.Attribute) and namespace.attr == "__globals__":
            self.flag(node, GLOBALS)
        elif isinstance(namespace, ast.Attribute) and namespace.attr == "__builtins__":
            self.flag(node, ("changes Python's built-ins (", "__builtins__[...]", ")"))

    def written(self, node: ast.AST, base_node: ast.AST, attr: str | None) -> None:
        """An attribute ``attr`` (None: computed) of ``base_node`` set or deleted."""
        base = self.resolve(base_node)
        path = (f"{base}.{attr}" if attr else base) if base else None
        owner = _owner(path) if path else None
        if owner:
            self.flag(node, _changes(path, owner))
        elif attr in CODE_ATTRS:
            self.flag(node, ("sets ", attr, " of an object, which replaces what its code runs or sees"))
        elif attr in SHELL_DISPLAY:
            self.flag(node, ("replaces ", attr, ", which shows errors as IPython's shell names it"))

    def referenced(self, node: ast.AST, path: str | None) -> None:
        """A name or attribute read: what :data:`REFERENCES` lists, and a private part of the grader's recording."""
        if path in REFERENCES:
            self.flag(node, REFERENCES[path])
        elif path and path.startswith("sys.monitoring."):
            self.flag(node, TRACE)
        elif path and path.startswith(RECORDING + "._") and not path.split(".")[2].startswith("__"):
            self.flag(node, ("reaches ", _shown(path), ", a private part of the grader's recording"))

    def visit_Call(self, node: ast.Call) -> None:
        func = self.resolve(node.func) or ""
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        first = node.args[0] if node.args else None
        if method in MUTATORS:
            base = self.resolve(node.func.value)
            owner = _owner(base) if base else None
            if owner:
                self.flag(node, _changes(base, owner))
            else:
                self.through_namespace(node, node.func.value)
        if func in SETTERS and first is not None:
            self.written(node, first, _literal(node.args[1]) if len(node.args) > 1 else None)
        on_events = isinstance(node.func, ast.Attribute) and getattr(node.func.value, "attr", "") == "events"
        if (func.startswith(SHELL) and func.endswith(".events.register")) or (
            method in ("register", "unregister") and (on_events or _literal(first) in IPYTHON_EVENTS)
        ):
            self.flag(node, EVENTS)
        if method == "set_custom_exc" or func == f"{SHELL}.set_hook":
            self.flag(node, CUSTOM_EXC)
        self.runs_code(node, func)
        self.generic_visit(node)

    def runs_code(self, node: ast.Call, func: str) -> None:
        """A call that runs code or imports by name: exec, eval, compile, the shell's run_cell and magics,
        importlib."""
        first = node.args[0] if node.args else None
        code = (
            first
            if first is not None
            else next((k.value for k in node.keywords if k.arg in CODE_KEYWORDS), None)
        )
        last = func.rsplit(".", 1)[-1]
        if func in RUNS_CODE:
            self.code_argument(node, code, ("runs code made at run time (", last, " of a computed string)"))
        elif func.startswith(SHELL + ".") and last in SHELL_RUNS_CODE:
            self.code_argument(node, code, ("runs code made at run time (the shell's ", last, ")"))
        elif func in (f"{SHELL}.run_line_magic", f"{SHELL}.run_cell_magic"):
            self.magic(node, last == "run_cell_magic")
        elif func == "importlib.import_module" and first is not None and _literal(first) is None:
            self.flag(node, COMPUTED_IMPORT)
        elif func in ("importlib.reload", "imp.reload") and first is not None:
            module = self.resolve(first)
            if module and _owner(module) in ("course", "recording"):
                self.flag(node, ("reloads ", module, ", a course module: what it held starts again"))

    def code_argument(self, node: ast.Call, code: ast.AST | None, why: Why) -> None:
        """A call that runs the code it is given: that code read where it is written in the cell (a string or
        bytes), else flagged."""
        value = code.value if isinstance(code, ast.Constant) else None
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else _literal(code)
        if text is not None:
            self.nested(text, lambda line, at=node.lineno: at)
        elif code is not None and not isinstance(code, ast.Constant):
            self.flag(node, why)

    def magic(self, node: ast.Call, cell: bool) -> None:
        """``get_ipython().run_line_magic(name, line)`` or ``.run_cell_magic(name, line, body)``, as IPython
        writes ``%name line`` and ``%%name line``: the code a magic runs, read as code."""
        name = _literal(node.args[0]) if node.args else None
        index = 2 if cell else 1
        code = node.args[index] if len(node.args) > index else None
        text = _literal(code)
        if text is not None:  # a %%cell magic's body starts on the line after the magic's own
            self.nested(
                text, (lambda line, at=node.lineno: at + line) if cell else (lambda line, at=node.lineno: at)
            )
        elif code is not None and (name is None or name.lstrip("%") in CODE_MAGICS):
            self.flag(
                node, ("runs code made at run time (the %", name or "...", " magic of a computed string)")
            )
