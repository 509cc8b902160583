"""Optional frameworks, imported only when asked for and only if installed."""

from __future__ import annotations

import importlib
import os
import sys

# What every non-interactive run sets, the one place it is spelled: TensorFlow prints pages of start-up
# logs and oneDNN notices unless told not to, before its first import. Kernels the grader, the tests and
# the benchmarks start get it in their environment (``autograder.intake.notebooks.kernel_env``, the sandbox).
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


def quiet() -> None:
    """Set :data:`QUIET_ENV` in this process, where the user has not chosen otherwise."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)


def optional(name: str):
    """Return the module ``name`` if it can be imported, else None (never raises ImportError)."""
    if name == "tensorflow":
        quiet()
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def loaded(name: str):
    """Return ``name`` only if the program has imported it already: checks never pay for an import."""
    return sys.modules.get(name)
