"""A strict content-security policy for the Jupyter server an instructor grades in (``make lab``).

Jupyter's default policy only says who may frame its pages, so any script that reaches a page it serves
runs in the instructor's Jupyter origin, with the instructor's rights (change grades, read the sources,
open a terminal). Formgrader renders students' notebooks into its pages. The notebooks are sanitised before
formgrader opens them (:mod:`autograder.intake.sanitize`); this policy is the second wall, for whatever was not
(an ``autograded/`` folder from an older grader, a notebook put there by hand):

- scripts only from the server itself, and inline scripts only when they are the page's own: each inline
  script of a JupyterLab page, and of the head of a formgrader page (the template's, written before any
  notebook content), is allowed by its SHA-256 hash, computed as the response leaves the server; an inline
  event handler runs only if it is one of formgrader's own (:data:`FORMGRADER_HANDLERS`); ``javascript:``
  links never run;
- images, styles, fonts, connections and frames only from the server itself (and ``data:``/``blob:``
  images), so a page loads nothing remote: no tracking pixel, no remote script or style;
- no plugins, no ``<base>`` elsewhere, forms only to the server, framed only by itself.

Formgrader's page loads MathJax 2 from a CDN, which this policy refuses: MathJax 2 evaluates every
``text/x-mathjax-config`` script in a page, so a page with it runs a script a student wrote past any policy.
Formgrader's pages get a stand-in instead (:data:`MATHJAX_STAND_IN`, served by this extension) with the calls
formgrader makes: math shows as its TeX source, and formgrader works offline too.

Every other page the server renders (a notebook exported as HTML, a file shown as it is) gets no inline
script at all. The policy is :data:`POLICY`; ``jupyter_server_config.py`` at the repository root installs
it and loads this extension.
"""

from __future__ import annotations

import base64
import hashlib
import re

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.web import OutputTransform

POLICY = {
    "default-src": "'self'",
    "script-src": "'self' 'unsafe-eval'",  # JupyterLab's own code evaluates strings: without it, its notebooks do not run
    "style-src": "'self' 'unsafe-inline'",  # JupyterLab and formgrader style elements inline
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "media-src": "'self' data: blob:",
    "frame-src": "'self'",
    "worker-src": "'self' blob:",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'self'",
}
# formgrader's own inline event handlers (its templates' onclick attributes)
FORMGRADER_HANDLERS = ("toggle_name(true);", "toggle_name(false);", "toggleAllNames()")
# pages whose HTML the server builds from students' notebooks: only the head is the template's own
CONTENT_PAGES = re.compile(r"/formgrader/")
# JupyterLab's own pages (the notebook is fetched as JSON and rendered by JupyterLab's sanitiser)
APP_PAGES = re.compile(r"/(lab|tree|doc|notebooks|edit|consoles|terminals)(/|$|\?)")
INLINE_SCRIPT = re.compile(rb"<script\b([^>]*)>(.*?)</script\s*>", re.S | re.I)
SCRIPT_TYPE = re.compile(rb"""\btype\s*=\s*["']?([^"'\s>]*)""", re.I)
JAVASCRIPT_TYPES = (b"", b"text/javascript", b"application/javascript", b"module")


def policy(script_hashes: list[str] = (), handler_hashes: list[str] = ()) -> str:
    parts = dict(POLICY)
    extra = [f"'sha256-{h}'" for h in dict.fromkeys([*script_hashes, *handler_hashes])]
    if handler_hashes:
        extra.insert(0, "'unsafe-hashes'")
    parts["script-src"] = " ".join([parts["script-src"], *extra])
    return "; ".join(f"{key} {value}" for key, value in parts.items())


def sha256(text: bytes) -> str:
    return base64.b64encode(hashlib.sha256(text).digest()).decode("ascii")


def trusted_part(path: str, html: bytes) -> bytes:
    """The part of a page whose inline scripts are the server's own: all of a JupyterLab page, the head
    of a formgrader page (students' notebooks come after it), nothing of any other page."""
    if CONTENT_PAGES.search(path):
        body = re.search(rb"<body\b", html, re.I)
        return html[: body.start()] if body else b""
    if APP_PAGES.search(path):
        return html
    return b""


def inline_script_hashes(html: bytes) -> list[str]:
    return [
        sha256(content)
        for attributes, content in INLINE_SCRIPT.findall(html)
        if b"src" not in attributes.lower() and content.strip() and _runs(attributes)
    ]


def _runs(attributes: bytes) -> bool:
    """Whether a script element with these attributes is run by a browser (not data such as JSON)."""
    kind = SCRIPT_TYPE.search(attributes)
    return kind is None or kind.group(1).lower() in JAVASCRIPT_TYPES


# The URL of nbconvert's MathJax macro (formgrader's template calls it with no argument).
MATHJAX_CDN = b"https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"
STAND_IN_PATH = "dlcourse/mathjax-stand-in.js"
MATHJAX_STAND_IN = """// MathJax is not loaded on formgrader's pages (autograder/outputs/jupyter_csp.py says why): the calls formgrader
// makes, doing nothing; math shows as its TeX source.
window.MathJax = {
  Hub: {
    Config: function () {}, Queue: function () {}, Typeset: function () {},
    Startup: {signal: {Interest: function (callback) { setTimeout(function () { callback("End"); }, 0); }}}
  }
};
"""


def formgrader_static_scripts() -> list[str]:
    """Hashes of the inline scripts that nbgrader's formgrader templates hold as fixed text (no template
    expression inside), which its pages may run wherever they stand."""
    from pathlib import Path

    from nbgrader.server_extensions.formgrader import handlers

    found = []
    for template in sorted(Path(handlers.template_path).rglob("*")):
        if template.is_file() and template.suffix in (".tpl", ".j2"):
            for attributes, content in INLINE_SCRIPT.findall(template.read_bytes()):
                if b"{{" not in content and b"{%" not in content and content.strip() and _runs(attributes):
                    found.append(sha256(content))
    return found


class StrictPolicy(OutputTransform):
    """Sets :func:`policy` on every HTML response, with the hashes of the page's own inline scripts."""

    def __init__(self, request):
        super().__init__(request)
        self.path = request.path

    def transform_first_chunk(self, status_code, headers, chunk, finishing):
        if "text/html" in headers.get("Content-Type", "") and "Content-Security-Policy" in headers:
            existing = headers["Content-Security-Policy"]
            hashes = inline_script_hashes(trusted_part(self.path, chunk))
            handlers = []
            formgrader = CONTENT_PAGES.search(self.path)
            if formgrader:
                hashes += STATIC_FORMGRADER_SCRIPTS
                handlers = [sha256(h.encode()) for h in FORMGRADER_HANDLERS]
                base = self.path[: formgrader.start() + 1]
                chunk = chunk.replace(MATHJAX_CDN, (base + STAND_IN_PATH).encode(), 1)
                if "Content-Length" in headers:
                    headers["Content-Length"] = str(len(chunk))
            strict = policy(hashes, handlers)
            # a files handler's own "sandbox" and the like stay
            sandbox = [p.strip() for p in existing.split(";") if p.strip().startswith("sandbox")]
            headers["Content-Security-Policy"] = "; ".join([strict, *sandbox])
        return status_code, headers, chunk


def _jupyter_server_extension_points():
    return [{"module": "autograder.outputs.jupyter_csp"}]


class MathJaxStandIn(JupyterHandler):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/javascript; charset=utf-8")
        self.finish(MATHJAX_STAND_IN)


STATIC_FORMGRADER_SCRIPTS: list[str] = []


def _load_jupyter_server_extension(serverapp) -> None:
    STATIC_FORMGRADER_SCRIPTS[:] = formgrader_static_scripts()
    serverapp.web_app.transforms.insert(0, StrictPolicy)  # before compression sees the page
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, STAND_IN_PATH), MathJaxStandIn)])
    serverapp.log.info(
        "dlcourse: strict content-security policy on every page (autograder.outputs.jupyter_csp)"
    )
