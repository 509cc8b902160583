"""The course's autograder: safe, parallel, resumable batch grading on top of nbgrader.

Run it as ``python -m autograder --help``. What other code (the benchmarks, a course's own scripts) may use
is :mod:`autograder.api`: ``from autograder.api import grade``. This file imports nothing, so a sandboxed
child that imports one module of the package loads nothing else.

The package is its wings over a shared vocabulary; a wing imports only from the wings before it (the rule is
``tests/tools/test_structure.py``'s):

- the vocabulary, here: :mod:`~autograder.course` (where a course's files are), :mod:`~autograder.result`
  (what a grade is), :mod:`~autograder.settings` (how to grade: limits, isolation, workers), and
  :mod:`~autograder.gradebook`, :mod:`~autograder.files` and :mod:`~autograder.progress`;
- :mod:`autograder.runner`: the sandbox that runs one notebook and brings back plain data;
- :mod:`autograder.intake`: the way in (collecting hand-ins, late work, releases, repair and sanitising of
  what students wrote, the source's conventions);
- :mod:`autograder.grading`: the reference, the canary, the pipeline of one submission, the batch, and the
  verdict decided outside the kernel;
- :mod:`autograder.outputs`: what goes back (feedback pages, grade sheets, exports, the class report,
  similarity);
- :mod:`autograder.service`: the HTTP door students hand in through from the notebook, with its store of
  submissions and tokens and the thread that grades its queue;
- :mod:`autograder.commands`: the command line and the workflows that chain the wings; and the doors
  :mod:`autograder.api` and ``python -m autograder``.

A module's old flat name (``autograder.late``, ``autograder.sanitize``, ... from before the wings) still imports,
as the same module (:class:`OldNames`), so a course's ``nbgrader_config.py`` written against them keeps working.

It does one thing on import: :class:`WithoutIriGrammar`. nbformat, which every grader process, warm parent and
sandboxed child loads, imports jsonschema; jsonschema's format checkers import ``rfc3987_syntax`` where it is
installed (jupyter-events installs it), only for the ``iri`` and ``iri-reference`` formats, and that module
builds three Earley parsers as it loads: 0.75 to 0.9 s of every such process, a third of a warm parent's
start. No notebook schema uses those formats, so while jsonschema's format checkers load in this package's
processes, that one import is skipped: jsonschema then has no ``iri`` checkers in them. Anything else that
imports ``rfc3987_syntax`` gets it as usual, and a kernel forked from a warm parent gets a jsonschema (and an
nbformat) of its own, with every checker, when its code imports it (:func:`give_back_jsonschema`).
"""

import sys

_FORMATS = "jsonschema._format"  # the module whose optional import of the grammar is skipped
_GRAMMAR = "rfc3987_syntax"


class WithoutIriGrammar:
    """A finder (first on ``sys.meta_path``) that refuses ``rfc3987_syntax`` to jsonschema's format module
    alone, which then goes without its ``iri`` checkers (it catches the ImportError)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if _LISTED is not None and name.partition(".")[0] in _DRIVERS:
            _LISTED.append(name)  # (a warm parent's list of them stays whole)
        if name != _GRAMMAR:
            return None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__") == _FORMATS:
                raise ModuleNotFoundError(
                    f"{_GRAMMAR} is not loaded by the autograder's jsonschema", name=name
                )
            frame = frame.f_back
        return None


# what a forked kernel imports afresh (nbformat's errors are jsonschema's: the two go together)
_DRIVERS = ("jsonschema", "nbformat", "nbclient")
_SET_ASIDE: list = []  # the parent's modules of those, out of sys.modules in a forked kernel
_LISTED: list[str] | None = None  # their names, listed once in a warm parent (then kept up to date)


def list_drivers() -> None:
    """In a warm parent, after its imports: list the driver modules it loaded, once. A kernel forked from it
    that went through all of ``sys.modules`` itself would touch (and so copy) thousands of the parent's
    pages: 6 ms of each kernel. What loads later is added as it loads (:class:`WithoutIriGrammar`)."""
    global _LISTED
    _LISTED = [n for n in sys.modules if n.partition(".")[0] in _DRIVERS]


def give_back_jsonschema() -> None:
    """In a kernel forked from a warm parent, before any of its code: a notebook that imports jsonschema
    loads it afresh, with every format checker a plain kernel has, and nbformat and nbclient with it (the
    warm parent loaded them for the run's driver; nbformat's ``ValidationError`` is jsonschema's, so they
    go together)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, WithoutIriGrammar)]
    if _FORMATS in sys.modules and _GRAMMAR not in sys.modules:
        # kept, not freed: freeing them would write to (and so copy) 2,000 of the parent's pages, 8 ms a kernel
        listed = [n for n in sys.modules if n.partition(".")[0] in _DRIVERS] if _LISTED is None else _LISTED
        _SET_ASIDE.extend(module for n in listed if (module := sys.modules.pop(n, None)) is not None)


# a module's flat name before the wings -> its wing
_WINGS = {
    "intake": "collect handin late release samples new conventions notebooks repair sanitize",
    "grading": "batch canary pipeline reference verify decisions tamper measure evaluate heldout record nbgrader_hooks",
    "outputs": "gradesheet export feedback report similarity jupyter_csp",
    "commands": "cli workflows regrade doctor gradescope",
}
OLD_NAMES = {
    f"autograder.{m}": f"autograder.{wing}.{m}" for wing, names in _WINGS.items() for m in names.split()
}


class OldNames:
    """A finder for the flat names of the modules before the wings: ``import autograder.late`` gives the module
    ``autograder.intake.late`` itself (one module under two names, so a class or a patch is the same object)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in OLD_NAMES:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, OldNames(), origin=OLD_NAMES[name])

    @staticmethod
    def create_module(spec):
        from importlib import import_module

        return import_module(OLD_NAMES[spec.name])

    @staticmethod
    def exec_module(module):
        pass  # (it ran under its own name)


if not any(isinstance(f, WithoutIriGrammar) for f in sys.meta_path):
    sys.meta_path.insert(0, WithoutIriGrammar())
if not any(isinstance(f, OldNames) for f in sys.meta_path):
    sys.meta_path.append(OldNames())
