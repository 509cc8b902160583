"""A7's release names no hidden case: its cells' metadata (points per case, conditions, cases measured in the kernel)
refers to cases by the patterns of the features the rules table names, or by public checks' names, never by a hidden
case's name."""

from __future__ import annotations

import json
import re

import nbformat

from autograder.course import Course, is_graded_test

AID = "A7"
MAIN = Course()
HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
CHECK_NAME = re.compile(r'check\w*\(\s*f?"(a7\.[^"{]+)')


def metadata_keys(nb) -> list[str]:
    keys = []
    for cell in nb.cells:
        meta = cell.metadata.get("dlcourse", {})
        for field in ("case_points", "measured_in_kernel", "conditions"):
            keys += list(meta.get(field) or [])
    return keys


def test_release_metadata_names_no_hidden_case():
    source = MAIN.read_source(AID)
    released = nbformat.read(str(MAIN.release_notebook(AID)), as_version=4)
    hidden = {
        name
        for c in source.cells
        for block in HIDDEN_BLOCK.findall(c.source)
        for name in CHECK_NAME.findall(block)
    }
    public = {name for c in released.cells if is_graded_test(c) for name in CHECK_NAME.findall(c.source)}
    assert hidden and public and not hidden & public
    keys = metadata_keys(released)
    assert keys
    # a key is a feature's pattern or a public check's name; a hidden case's name (or the start of one) is neither
    assert not [key for key in keys if "hidden" in key]
    assert not [key for key in keys if not any(ch in key for ch in "*?[") and key not in public]
    text = json.dumps([c.metadata for c in released.cells]) + json.dumps(released.metadata)
    assert not [name for name in hidden if "hidden" in name and name in text]
