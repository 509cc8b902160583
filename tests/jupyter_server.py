"""A JupyterLab server on loopback for the browser tests, and the Chromium binary to drive it with.

The server runs the project's own environment (``.venv/bin`` first on ``PATH``: nbgrader runs
``alembic``) on a copy of the course, with a fresh Jupyter configuration, a writable nbgrader exchange
and a token, and is stopped (with its kernels) when the test module ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from autograder.intake.notebooks import QUIET_ENV

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

# Debian's `chromium` command is a shell wrapper; Playwright needs the binary itself.
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def find_chromium() -> str | None:
    """A Chromium binary Playwright can launch: $DLCOURSE_CHROMIUM, Debian's, or None."""
    for candidate in (os.environ.get("DLCOURSE_CHROMIUM"), *CHROMIUM_CANDIDATES):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def project_env() -> dict[str, str]:
    """This environment with the project's ``.venv/bin`` first on PATH, and no shared gradebook."""
    env = dict(os.environ)
    env.pop("DLCOURSE_DB_URL", None)  # a course copy keeps its own SQLite gradebook, never a shared one
    env.update(
        **QUIET_ENV,
        PATH=str(VENV_BIN) + os.pathsep + env.get("PATH", ""),
        PYTHONUNBUFFERED="1",
    )
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_course(target: Path) -> Path:
    """The parts of the course a person opens in JupyterLab: lectures, sources, releases, nbgrader config."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", target)
    shutil.copy(ROOT / "jupyter_server_config.py", target)  # the course's content-security policy
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    for name in ("lectures", "source", "assignments"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, target / name, ignore=ignore, dirs_exist_ok=True)
    return target


class JupyterLab:
    """``jupyter lab`` on 127.0.0.1, a free port and a random token, serving ``root``."""

    def __init__(self, root: Path, state: Path, start_timeout: float = 90):
        self.root, self.state = root, state
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.log = state / "jupyter.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path}{sep}token={self.token}"

    def environment(self) -> dict[str, str]:
        env = project_env()
        config = self.state / "jupyter-config"
        # A fresh user configuration: no one's saved workspace or settings, no news pop-up over the page.
        (config / "labconfig").mkdir(parents=True, exist_ok=True)
        (config / "labconfig" / "page_config.json").write_text(
            '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}'
        )
        env.update(
            JUPYTER_CONFIG_DIR=str(config),
            JUPYTER_DATA_DIR=str(self.state / "jupyter-data"),  # the kernelspec and extensions stay in .venv
            JUPYTER_RUNTIME_DIR=str(self.state / "jupyter-runtime"),
            IPYTHONDIR=str(self.state / "ipython"),
            DLCOURSE_EXCHANGE=str(self.state / "exchange"),  # formgrader needs a writable exchange
            # the course's jupyter_server_config.py, as `make lab` reads it
            JUPYTER_CONFIG_PATH=str(self.root),
        )
        (self.state / "exchange").mkdir(parents=True, exist_ok=True)
        return env

    def start(self) -> JupyterLab:
        command = [
            str(VENV_BIN / "jupyter"),
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if os.geteuid() == 0:  # CI containers run as root; Jupyter refuses to without this
            command.append("--allow-root")
        with open(self.log, "wb") as log:
            # Its own session, so stop() can end the server and the kernels it started, and nothing else.
            self.process = subprocess.Popen(
                command,
                cwd=self.root,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(
            f"jupyter lab did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid  # the session (and process group) that start() created
        self.process.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(group, signal.SIGKILL)  # whatever is left of this server's own group
        except ProcessLookupError:
            pass
        self.process.wait(timeout=5)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
