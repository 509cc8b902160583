"""What an instructor's page shows of a student's notebook runs and loads nothing the student wrote.

A written answer is markdown, and markdown may hold raw HTML (``<script>``, ``<img onerror=...>``), links to
``javascript:`` and images from anywhere (a tracking pixel); a code cell's outputs may be ``text/html`` or
``application/javascript``. nbgrader's formgrader renders all of it, unsanitised, in the instructor's Jupyter
origin, where a script can call the Jupyter API as the instructor. :func:`sanitize_notebook` makes the copy
that formgrader opens (``autograded/``) safe in any renderer:

- a markdown cell that holds anything that could become HTML, a link, an image or an entity (``<``, ``[``,
  ``&``) is rendered here, as nbconvert renders it for formgrader, and kept as that HTML after an allowlist
  (nbconvert's own sanitiser: tags and attributes outside the list are shown as text, links only to
  ``http``, ``https`` and ``mailto``, no images, no styles); brackets are written as entities, so no
  markdown renderer can make a link of them again;
- an output keeps only ``text/plain`` and base64 PNG or JPEG images; every other type (HTML, JavaScript,
  markdown, SVG, LaTeX, widgets...) is shown as its text, under a line that names its type;
- a raw cell is plain text, attachments and unknown metadata are dropped, and every text is bounded.

The grader's own pages (feedback, report, similarity) escape every string and carry :data:`PAGE_CSP`, which
loads and runs nothing but the page's inline styles and images; Jupyter itself serves with the policy in
``jupyter_server_config.py`` (:mod:`autograder.outputs.jupyter_csp`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import re

import nbformat
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import Preprocessor
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat.v4.nbbase import random_cell_id
from traitlets import Bool

from autograder.intake.repair import new_cell

# The grader's own HTML pages: no script, no remote resource, no form; inline styles and data: images only.
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
PAGE_CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">'

MAX_TEXT = 20_000  # characters of one output's text, or of a type shown as text
MAX_IMAGE = 4 * 2**20  # bytes of one base64 image
IMAGE_TYPES = ("image/png", "image/jpeg")
SAFE_TAGS = [
    "a", "abbr", "b", "blockquote", "br", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6",
    "hr", "i", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
]  # fmt: skip
SAFE_ATTRIBUTES = {"a": ["href", "title"], "abbr": ["title"], "td": ["align"], "th": ["align"]}
# Characters without which a markdown text has no HTML, link, image or entity: it is kept as it is.
ACTIVE = re.compile(r"[<\[&]")


def _bounded(text: str, limit: int = MAX_TEXT) -> str:
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"
    )


def _text(value) -> str:
    if isinstance(value, list):
        value = "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def safe_html(fragment: str) -> str:
    """HTML with only the allowlisted tags and attributes; everything else is shown as text."""
    cleaner = SanitizeHTML(tags=SAFE_TAGS, attributes=SAFE_ATTRIBUTES, styles=[], strip=False)
    cleaned = cleaner.sanitize_html_tags(fragment)
    # brackets as entities: a markdown renderer that reads this again cannot make a link or image of them
    return cleaned.replace("[", "&#91;").replace("]", "&#93;")


def safe_markdown(source: str) -> str:
    """A markdown cell's source that renders to nothing active in formgrader, JupyterLab or nbconvert."""
    source = _bounded(_text(source), 10 * MAX_TEXT)
    if not ACTIVE.search(source):
        return source
    # a class's notebooks repeat the assignment's own text: each text is rendered once (a short one is kept)
    return _rendered_markdown(source) if len(source) <= MAX_TEXT else _render_markdown(source)


@functools.lru_cache(maxsize=1024)
def _rendered_markdown(source: str) -> str:
    return _render_markdown(source)


def _render_markdown(source: str) -> str:
    rendered = safe_html(markdown2html_mistune(source)).strip()
    # no blank line inside: an HTML block ends at one, and what follows would be read as markdown again
    rendered = re.sub(r"\n[ \t]*\n", "\n&#10;", rendered)
    return f'<div class="dlcourse-sanitized">\n{rendered}\n</div>'


def _image(value) -> str | None:
    text = _text(value)
    if not text or len(text) > MAX_IMAGE:
        return None
    try:
        base64.b64decode(text.replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def _output(output_type: str, **fields) -> nbformat.NotebookNode:
    """An output as ``nbformat.v4.new_output`` makes it, without validating it alone (jsonschema, for every
    node): :func:`sanitize_notebook` validates the whole notebook once."""
    node = nbformat.NotebookNode(output_type=output_type)
    if output_type in ("display_data", "execute_result"):
        node.metadata = nbformat.NotebookNode()
    node.update(fields)
    return node


def _cell(cell_type: str, source: str, metadata: dict) -> nbformat.NotebookNode:
    """A cell as ``nbformat.v4.new_*_cell`` makes it, without validating it alone (see :func:`_output`)."""
    node = new_cell(cell_type, source, nbformat.from_dict(metadata))
    node.id = random_cell_id()
    return node


def safe_output(output) -> nbformat.NotebookNode:
    """One code cell output with nothing a browser would run or load: see the module's docstring."""
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream":
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return _output("stream", name=name, text=_bounded(_text(output.get("text"))))
    if kind == "error":
        traceback = output.get("traceback") if isinstance(output.get("traceback"), list) else []
        return _output(
            "error",
            ename=_bounded(_text(output.get("ename")), 200),
            evalue=_bounded(_text(output.get("evalue")), 2000),
            traceback=[_bounded(line) for line in traceback[:200] if isinstance(line, str)],
        )
    if kind not in ("display_data", "execute_result"):
        return _output("stream", name="stdout", text="[an output that is not shown]\n")
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept, shown_as_text = {}, []
    for mime, value in data.items():
        if mime in IMAGE_TYPES and _image(value):
            kept[mime] = _image(value)
        elif mime != "text/plain":
            text = value if isinstance(value, (str, list)) else repr(value)
            shown_as_text.append(
                f"[{str(mime)[:80]} output, shown as text]\n{_bounded(_text(text) or str(text))}"
            )
    plain = _bounded(_text(data.get("text/plain")))
    if shown_as_text:
        plain = "\n".join(([plain] if plain else []) + shown_as_text)
    if plain or not kept:
        kept["text/plain"] = plain
    if kind == "execute_result":
        count = output.get("execution_count")
        return _output(
            "execute_result",
            data=nbformat.from_dict(kept),
            execution_count=count if isinstance(count, int) else None,
        )
    return _output("display_data", data=nbformat.from_dict(kept))


def safe_metadata(metadata) -> dict:
    """A cell's metadata less what a renderer could act on: nbgrader's plain values, and tags."""
    metadata = metadata if isinstance(metadata, dict) else {}
    kept = {}
    nbg = metadata.get("nbgrader")
    if isinstance(nbg, dict):
        kept["nbgrader"] = {
            k: v for k, v in nbg.items() if v is None or isinstance(v, (str, bool, int, float))
        }
    tags = metadata.get("tags")
    if isinstance(tags, list):
        kept["tags"] = [t for t in tags if isinstance(t, str)][:50]
    return kept


def sanitize_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` that shows what the student wrote and ran, and runs and loads none of it (its cells
    valid nbformat: checked once, together, at the end)."""
    safe = copy.deepcopy(nb)
    safe.metadata.pop("signature", None)  # an old notebook's trust signature: never trusted
    cells = []
    for cell in safe.cells:
        metadata = safe_metadata(cell.get("metadata"))
        if cell.cell_type == "markdown":
            cells.append(_cell("markdown", safe_markdown(cell.source), metadata))
        elif cell.cell_type == "code":
            new = _cell("code", _bounded(_text(cell.source), 10 * MAX_TEXT), metadata)
            new.outputs = [safe_output(output) for output in cell.get("outputs", [])[:100]]
            cells.append(new)
        else:  # raw: shown as plain text by every renderer, never inserted as HTML
            metadata["raw_mimetype"] = "text/plain"
            cells.append(_cell("raw", _bounded(_text(cell.source), 10 * MAX_TEXT), metadata))
    for old, new in zip(safe.cells, cells):
        if isinstance(old.get("id"), str):
            new.id = old.id
        if new.cell_type == "code" and isinstance(old.get("execution_count"), int):
            new.execution_count = old.execution_count
    # every cell as nbformat 4's current schema wants it, as new_*_cell checked each one (ids aside: they are
    # the notebook's own, copied after that check; one notebook may repeat an id, as its cells stand alone)
    check = nbformat.from_dict({"nbformat": 4, "nbformat_minor": nbformat.v4.nbformat_minor, "metadata": {},
                                "cells": cells})  # fmt: skip
    for index, cell in enumerate(check.cells):
        cell.id = f"cell-{index}"
    nbformat.validate(check)
    safe.cells = cells
    return safe


class SanitizeForFormgrader(Preprocessor):
    """nbgrader's own autograde (and formgrader's Autograde button) writes ``autograded/`` through this
    too (``nbgrader_config.py``): the notebook formgrader opens is sanitised whichever grader made it."""

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off unless enabled

    def preprocess(self, nb, resources):
        return sanitize_notebook(nb), resources
