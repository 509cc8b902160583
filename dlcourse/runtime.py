"""Where are we running, and with what? Colab detection and the version banner."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

from dlcourse._lazy import optional

ENABLE_GPU_HINT = (
    "No GPU here. On Colab: Runtime > Change runtime type > Hardware accelerator: GPU (T4), then run the "
    "notebook again from the top. Everything in this course still runs on the CPU, only slower."
)


def in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


# The release the notebooks install: this package's version (pyproject.toml and dlcourse.__version__
# carry the same number, tests/test_project.py checks it) and the GitHub release that holds its wheel.
VERSION = "0.1.0"
RELEASES = "https://github.com/dlcourse-org/dlcourse/releases/download"
WHEEL = f"dlcourse-{VERSION}-py3-none-any.whl"

# The set-up cell that opens every notebook, word for word (tests/test_project.py checks it).
# On Colab it installs this package from the wheel that `make wheel` builds and the release workflow
# (.github/workflows/release.yml) attaches to the tag v<VERSION>: one download, nothing to clone or build.
# Locally it installs nothing. DLCOURSE_PIP points it elsewhere (a fork's wheel, a branch as
# "dlcourse @ git+https://...", or a local wheel file in the tests' Colab-like run).
PACKAGE_SPEC = f"{RELEASES}/v{VERSION}/{WHEEL}"
SETUP_CELL = f"""\
# Set-up: run this cell first. On Colab it installs the course package; locally it does nothing.
import os
import sys

if "google.colab" in sys.modules or os.environ.get("DLCOURSE_PIP"):
    %pip install --quiet "{{os.environ.get('DLCOURSE_PIP', '{PACKAGE_SPEC}')}}"
try:
    import dlcourse
except ModuleNotFoundError as err:
    raise ModuleNotFoundError(
        "The course package is not installed. On Colab: read pip's message above (no network? then "
        "Runtime > Restart session and run this cell again). Locally: run `make setup` and pick the .venv kernel."
    ) from err

dlcourse.banner()"""


def installed_version(*distributions: str) -> str | None:
    """The version of the first of ``distributions`` that is installed, read without importing it."""
    for dist in distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, str]:
    """Versions of Python and of each framework that is installed ('not installed' otherwise).

    Read from the installed packages' metadata, so asking costs no framework import (TensorFlow's
    takes seconds).
    """
    found = {"python": platform.python_version()}
    for name, dists in (
        ("numpy", ("numpy",)),
        ("torch", ("torch",)),
        ("tensorflow", ("tensorflow", "tensorflow-cpu")),
    ):
        found[name] = installed_version(*dists) or "not installed"
    return found


def gpu_status() -> str:
    """One line on the accelerator: the CUDA device's name and memory, Apple's MPS, or how to get a GPU."""
    torch = optional("torch")
    if torch is not None and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        count = torch.cuda.device_count()
        more = f" (and {count - 1} more)" if count > 1 else ""
        return (
            f"GPU: {props.name}{more}, {props.total_memory / 2**30:.1f} GiB, "
            f"compute capability {props.major}.{props.minor}, CUDA {torch.version.cuda}"
        )
    if torch is not None and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "GPU: Apple silicon through MPS"
    return ENABLE_GPU_HINT


def banner_text() -> str:
    """The versions of Python, numpy, torch and TensorFlow, and the GPU status, as text."""
    v = versions()
    where = "Google Colab" if in_colab() else f"local ({platform.system()} {platform.machine()})"
    lines = [
        f"dlcourse on {where}, {os.cpu_count()} CPU cores",
        "Python {python} | numpy {numpy} | torch {torch} | TensorFlow {tensorflow}".format(**v),
        gpu_status(),
    ]
    return "\n".join(lines)


def banner() -> None:
    """Print the versions of Python, numpy, torch and TensorFlow, and the GPU status."""
    print(banner_text())
