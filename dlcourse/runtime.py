"""Where are we running, and with what? Colab detection and the version banner."""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

from dlcourse._lazy import optional

ENABLE_GPU_HINT = (
    "No GPU here. On Colab: Runtime > Change runtime type > Hardware accelerator: GPU (T4), then run the "
    "notebook again from the top. Everything in this course still runs on the CPU, only slower."
)


def in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


# The release the notebooks install and the repository they open from, in one place: this package's version
# (pyproject.toml and dlcourse.__version__ carry the same number, tests/tools/test_project.py checks it) and the
# GitHub repository, owner/name, whose release v<VERSION> holds its wheel (a fork sets its own). The set-up
# cell below and the README's Colab links are made from these two; `python -m dlcourse.runtime` rewrites
# every copy of them in the repository after a change (the tests fail until it has run).
VERSION = "0.1.0"
HOME = "dlcourse-org/dlcourse"
RELEASES = f"https://github.com/{HOME}/releases/download"
WHEEL = f"dlcourse-{VERSION}-py3-none-any.whl"

# The set-up cell that opens every notebook, word for word (tests/tools/test_project.py checks it).
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


def colab_url(path: str) -> str:
    """The Colab link that opens ``path`` (relative to the repository root) as it is at the tag v<VERSION>."""
    return f"https://colab.research.google.com/github/{HOME}/blob/v{VERSION}/{path}"


_COLAB_LINK = re.compile(
    r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/([^\s)]+)"
)


def sync_release_references(root: Path, write: bool = True) -> list[Path]:
    """Make the README's Colab links and the set-up cell of every lecture and assignment source under ``root``
    (a checkout of the repository) name VERSION and HOME. Returns the files that differed (and, with ``write``,
    were rewritten). The releases in assignments/ and the samples follow with
    ``python -m autograder check <AID> --update``."""
    import nbformat

    changed = []
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    synced = _COLAB_LINK.sub(lambda link: colab_url(link.group(1)), text)
    if synced != text:
        changed.append(readme)
        if write:
            readme.write_text(synced, encoding="utf-8")
    for path in sorted(root.glob("lectures/*.ipynb")) + sorted(root.glob("source/*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0] if nb.cells else None
        is_setup = (
            first is not None and first.cell_type == "code" and first.source.startswith(SETUP_CELL[:40])
        )
        if is_setup and first.source != SETUP_CELL:
            changed.append(path)
            if write:
                first.source = SETUP_CELL
                nbformat.write(nb, path)
    return changed


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


if __name__ == "__main__":
    for changed_path in sync_release_references(Path(__file__).resolve().parents[1]):
        print(f"rewrote {changed_path}")
