"""Optional frameworks, imported only when asked for and only if installed."""

from __future__ import annotations

import importlib
import os
import sys


def optional(name: str):
    """Return the module ``name`` if it can be imported, else None (never raises ImportError)."""
    if name == "tensorflow":
        # TensorFlow prints pages of start-up logs unless told not to; set before its first import.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def loaded(name: str):
    """Return ``name`` only if the program has imported it already: checks never pay for an import."""
    return sys.modules.get(name)
