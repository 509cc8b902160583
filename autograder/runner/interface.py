"""What the grader asks of a sandbox, as an interface: :class:`SandboxRun` (one child: start it, run one notebook
to an :class:`~autograder.runner.sandbox.Outcome`, clean up) and :class:`SandboxFactory` (what makes one for a
run: :class:`~autograder.runner.sandbox.Sandbox` itself). The pipeline's batch, the reference's runs and the
canary's probe take a factory, so that another runner (or a test's prepared outcomes) plugs in where a kernel
would start; the grader decides every point from the ``Outcome`` alone, whoever made it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import nbformat

    from autograder.runner.isolation import Isolation
    from autograder.runner.sandbox import Outcome
    from autograder.settings import Limits

__all__ = ["SandboxFactory", "SandboxRun"]


@runtime_checkable
class SandboxRun(Protocol):
    """One pre-started child: ``start()`` (its kernel boots and imports meanwhile), then ``run`` exactly once,
    then ``cleanup()`` (always, whatever happened; twice does no harm). ``probe()`` instead of ``run``: the
    child started as a submission's up to where its kernel would start, and what it found there."""

    def start(self) -> SandboxRun: ...

    def run(self, notebook: nbformat.NotebookNode, files: Path | None = None) -> Outcome:
        """Run ``notebook`` with copies of the files in ``files`` beside it; never raise for what the
        notebook did (status ``error``: the grader's failure, nothing of the student's ran)."""
        ...

    def probe(self) -> dict:
        """The child's report: ``uid``, ``interfaces``, ``visible`` (hidden folders it can still see),
        ``python`` ("ok" where Python runs); ``error`` set where it failed."""
        ...

    def cleanup(self) -> None: ...


@runtime_checkable
class SandboxFactory(Protocol):
    """Makes the :class:`SandboxRun` of one run, as ``Sandbox(limits, slot, warm, isolation, private)`` does:
    ``slot`` the worker's (its warm parent), ``warm`` the modules its kernel imports before the notebook comes,
    ``private`` the folders no kernel may see."""

    def __call__(
        self,
        limits: Limits,
        slot: int = 0,
        warm: tuple[str, ...] = ("numpy",),
        isolation: Isolation | None = None,
        private: tuple[str, ...] = (),
    ) -> SandboxRun: ...
