"""``make colab-check`` leaves the checkout as it was unless asked to record (``--record``), and names no file
the repository does not have."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import colab_check

ROOT = Path(__file__).resolve().parents[2]


def test_colab_check_records_only_when_asked():
    assert not colab_check.build_parser().parse_args([]).record
    assert colab_check.build_parser().parse_args(["--record"]).record


def test_colab_check_names_only_files_that_exist():
    text = Path(colab_check.__file__).read_text(encoding="utf-8")
    for name in set(re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text)):
        assert list(ROOT.rglob(name)), f"benchmarks/colab_check.py points at {name}, which does not exist"
