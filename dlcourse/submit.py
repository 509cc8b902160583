"""Hand in from the notebook to the course's grading service, and see what the hidden tests found.

    from dlcourse.submit import submit
    submit("A1", server="https://grader.example.edu", token="...")   # the token your instructor gave you

In Colab it sends the notebook as it is open (no need to save or download it); in JupyterLab the saved file (save
first); anywhere, ``notebook="A1.ipynb"`` names the file. It shows the queue position, then the run, then each
part's score and which hidden cases failed (after the deadline, or where the course allows it, the whole feedback
page). With no network, a wrong token or too many submissions in the hour it says so in one line and raises
:class:`SubmitError`. Only the standard library is used: nothing to install.
"""

from __future__ import annotations

import html
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

TRIES = 3  # a request that could not reach the server is sent again, with the same idempotency key


class SubmitError(RuntimeError):
    """The submission could not be made or followed; the message says why, in one line."""


def submit(
    assignment: str,
    server: str,
    token: str,
    notebook: str | os.PathLike | dict | None = None,
    wait: float = 600.0,
) -> dict:
    """Hand ``notebook`` (default: the one open here) in as ``assignment``; wait up to ``wait`` seconds for its
    grade (0: do not wait) and show it. Returns what the service said last about the submission."""
    client = _Client(server.rstrip("/"), token)
    body = _notebook_bytes(notebook)
    _fits(client.request("GET", "/api/assignments"), len(body))
    show = _Shower()
    sent = client.request("POST", f"/api/assignments/{assignment}/submissions", body, key=uuid.uuid4().hex)
    show.progress(sent)
    deadline = time.monotonic() + wait
    while sent.get("state") in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5 if sent.get("state") == "running" else 1.0)
        sent = client.request("GET", f"/api/submissions/{sent['id']}")
        show.progress(sent)
    page = None
    if sent.get("feedback_page"):
        page = client.request("GET", sent["feedback_page"], want_text=True)
    show.result(sent, page)
    return sent


class _Client:
    def __init__(self, server: str, token: str):
        if not server.startswith(("https://", "http://")):
            raise SubmitError(f"the server is an address such as https://grader.example.edu, not {server!r}")
        self.server, self.token = server, token

    def request(
        self, method: str, path: str, body: bytes | None = None, key: str | None = None, want_text=False
    ):
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if key is not None:
            headers["Idempotency-Key"] = key
        last = None
        for attempt in range(TRIES):
            request = urllib.request.Request(self.server + path, data=body, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    text = answer.read().decode("utf-8")
                return text if want_text else json.loads(text)
            except urllib.error.HTTPError as err:
                if err.code == 503 and attempt + 1 < TRIES:  # busy: the server asks to come back
                    time.sleep(float(err.headers.get("Retry-After", "2")))
                    continue
                raise SubmitError(_refusal(err)) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = err
                time.sleep(1.0 + attempt)
        reason = getattr(last, "reason", last)
        raise SubmitError(f"cannot reach the grading service at {self.server}: {reason}")


def _fits(door: dict, size: int) -> None:
    """Refuse here a notebook over the service's limit: the service refuses it by its declared length and
    closes, which a client still sending sees only as a broken connection."""
    limit = door.get("max_notebook_bytes")
    if isinstance(limit, int) and size > limit:
        raise SubmitError(
            f"this notebook is {size / 2**20:.1f} MB and the grading service takes at most {limit / 2**20:.1f} MB:"
            " clear its outputs (Edit > Clear all outputs), save, and submit again"
        )


def _refusal(err) -> str:
    try:
        said = json.loads(err.read().decode("utf-8")).get("error", "")
    except (ValueError, AttributeError, OSError):
        said = ""
    if err.code == 401:
        return "the grading service did not accept your token: copy it again from your instructor's message"
    if err.code == 429:
        return said or f"too many submissions: try again in {err.headers.get('Retry-After', 'a while')} s"
    return said or f"the grading service answered {err.code} {err.reason}"


def _notebook_bytes(notebook) -> bytes:
    if isinstance(notebook, dict):
        return json.dumps(notebook).encode("utf-8")
    if notebook is not None:
        return Path(notebook).read_bytes()
    try:  # Colab: the notebook as it is open in the browser, unsaved edits included
        from google.colab import _message  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        answer = _message.blocking_request("get_ipynb", timeout_sec=60)
        if not answer or "ipynb" not in answer:
            raise SubmitError(
                "Colab did not hand over the notebook; try again, or pass notebook='<file>.ipynb'"
            )
        return json.dumps(answer["ipynb"]).encode("utf-8")
    path = _open_notebook_path()
    if path is None:
        raise SubmitError(
            "cannot tell which notebook is open here: pass notebook='<file>.ipynb' (save it first)"
        )
    return Path(path).read_bytes()


def _open_notebook_path() -> str | None:
    """The file of the notebook this kernel runs, where the front end says (JupyterLab, VS Code)."""
    try:
        from IPython import get_ipython

        namespace = get_ipython().user_ns if get_ipython() is not None else {}
    except ImportError:
        namespace = {}
    for found in (
        namespace.get("__vsc_ipynb_file__"),
        namespace.get("__session__"),
        os.environ.get("JPY_SESSION_NAME"),
    ):
        if found and str(found).endswith(".ipynb") and Path(found).is_file():
            return str(found)
    return None


class _Shower:
    """Shows progress in one place (a display that updates in a notebook, lines elsewhere)."""

    def __init__(self):
        try:
            from IPython import get_ipython
            from IPython.display import display

            self.display = display if get_ipython() is not None else None
        except ImportError:
            self.display = None
        self.handle = None
        self.last = None

    def line(self, text: str) -> None:
        if text == self.last:
            return
        self.last = text
        if self.display is None:
            print(text, flush=True)
        elif self.handle is None:
            self.handle = self.display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)

    def progress(self, state: dict) -> None:
        if state.get("state") == "queued":
            waiting = f" ({state['waiting']})" if state.get("waiting") else ""
            self.line(
                f"{state['assignment']}: received at {state['received']}; in the queue, number {state.get('queue_position')}{waiting}"
            )
        elif state.get("state") == "running":
            self.line(f"{state['assignment']}: being graded")

    def result(self, state: dict, page: str | None) -> None:
        if state.get("state") in ("queued", "running"):
            self.line(
                f"{state['assignment']}: still {state['state']}; look again later with its id {state['id']}"
            )
            return
        if state.get("state") == "error":
            self.line(f"{state['assignment']}: {state.get('error')}")
            return
        lines = [
            f"{state['assignment']}: {state['score']:g} / {state['max_score']:g} ({state.get('status')})"
        ]
        for part in state.get("parts", []):
            failed = ", ".join(part.get("failed_cases") or [])
            lines.append(
                f"  {part['grade_id']}: {part['points']:g} / {part['max_points']:g}"
                + (f"; failed: {failed}" if failed else "")
                + (f" ({part['message']})" if part.get("message") else "")
            )
        self.line("\n".join(lines))
        if (
            page is not None and self.display is not None
        ):  # the grader's page, made safe, in a frame of its own
            frame = f'<iframe sandbox="" style="width:100%;height:600px;border:1px solid #ccc" srcdoc="{html.escape(page)}"></iframe>'
            self.display({"text/html": frame}, raw=True)
