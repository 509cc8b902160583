"""The assignments' test format: one call that checks for the student, records for the grader,
and compares with the reference for nbgrader; and a reader that trusts nothing it reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcourse import grading
from dlcourse.grading import (
    Case,
    GradingError,
    check,
    check_accuracy,
    check_equal,
    check_range,
    compare,
    load_cases,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(grading.CAPTURE_ENV, raising=False)
    monkeypatch.delenv(grading.REFERENCE_ENV, raising=False)
    grading._reference_cache.clear()
    grading.begin_cell(None)


def test_public_case_passes_and_fails_in_plain_words(capsys):
    check("t.ok", torch.tensor([1.0, 2.0]), expected=[1.0, 2.0])
    assert "\u2713 t.ok" in capsys.readouterr().out
    with pytest.raises(GradingError, match=r"t.bad: shape \(3,\) but expected \(2,\)"):
        check("t.bad", np.zeros(3), expected=[0.0, 0.0])


def test_hidden_case_without_reference_says_so():
    with pytest.raises(GradingError, match="hidden case"):
        check("t.hidden", np.zeros(2))


def test_capture_then_reference_round_trip(tmp_path, monkeypatch):
    ref = tmp_path / "ref"
    monkeypatch.setenv(grading.CAPTURE_ENV, str(ref))
    grading.begin_cell("test_part1")
    check("p.value", np.array([1.0, 2.0]), rtol=1e-3)
    check_equal("p.shape", (3, 4))
    grading.begin_cell("test_part2")
    check_range("p.error", 1e-9, high=1e-7)
    check_accuracy("p.acc", np.array([0, 1, 2, 2]), labels=[0, 1, 2, 3], at_least=0.7)
    cases, values, problems = load_cases(ref)
    assert problems == []
    assert [c.cell for c in cases.values()] == ["test_part1", "test_part1", "test_part2", "test_part2"]
    assert cases["p.value"].params["rtol"] == 1e-3
    np.testing.assert_array_equal(values["p.shape"], [3, 4])

    # nbgrader's in-kernel mode: compare with that reference
    monkeypatch.delenv(grading.CAPTURE_ENV)
    monkeypatch.setenv(grading.REFERENCE_ENV, str(ref))
    check("p.value", torch.tensor([1.0005, 2.0]))
    with pytest.raises(GradingError, match="p.value"):
        check("p.value", [1.1, 2.0])
    with pytest.raises(GradingError, match="got"):
        check_equal("p.shape", (4, 3))
    with pytest.raises(GradingError, match="should be <= 1e-07"):
        check_range("p.error", 1e-3, high=1e-7)
    with pytest.raises(GradingError, match="accuracy 50.0%"):
        check_accuracy("p.acc", np.array([0, 1, 0, 0]), labels=[0, 1, 2, 3], at_least=0.7)
    with pytest.raises(GradingError, match="no such case"):
        check("p.unknown", 1.0)


def test_capture_mode_records_hidden_cases_without_judging(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(grading.CAPTURE_ENV, str(tmp_path))
    check("h.anything", np.full(3, 7.0))  # no expected value: recorded, never raises
    # a failing public case prints its verdict and records it, and the cell goes on: later cases still count
    check("h.public", 1.0, expected=2.0)
    check("h.after", 3.0, expected=3.0)
    printed = capsys.readouterr().out
    assert "\u2717 h.public" in printed and "\u2713 h.after" in printed
    cases, values, _ = load_cases(tmp_path)
    assert set(cases) == {"h.anything", "h.public", "h.after"}
    assert (cases["h.anything"].verdict, cases["h.public"].verdict, cases["h.after"].verdict) == (
        None,
        "failed",
        "passed",
    )


def test_unserialisable_values_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(grading.CAPTURE_ENV, str(tmp_path))
    with pytest.raises(GradingError, match="plain data"):
        check("x.obj", {"a": 1})
    with pytest.raises(GradingError, match="one by one"):
        check("x.tuple", (np.zeros(2), np.zeros(3)))
    with pytest.raises(ValueError, match="case names"):
        check("../../etc/passwd", 1.0)


def test_compare_kinds():
    assert compare(Case("c", "close", {"rtol": 1e-5, "atol": 1e-8}), np.ones(2), np.ones(2)) is None
    assert compare(Case("e", "equal", {}), np.array("cpu"), np.array("meta")) is not None
    assert compare(Case("e", "equal", {}), np.array([1, 2]), np.array([1.0, 2.0])) is None
    assert compare(Case("r", "range", {"low": 0.9, "high": None}), None, np.array(np.nan)) is not None
    assert compare(Case("r", "range", {"low": 0.9, "high": None}), None, np.array([1.0, 2.0])) is not None
    assert "unknown kind" in compare(Case("u", "bogus", {}), None, np.ones(1))


def test_reader_survives_forged_capture(tmp_path):
    np.save(tmp_path / "0000.npy", np.ones(2))
    np.save(tmp_path / "0001.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)  # a pickle
    (tmp_path / "0002.npy").write_bytes(b"not numpy at all")
    lines = [
        {"name": "ok", "kind": "close", "file": "0000.npy"},
        {"name": "ok", "kind": "close", "file": "0000.npy"},  # duplicate
        {"name": "pickled", "kind": "close", "file": "0001.npy"},
        {"name": "garbage", "kind": "close", "file": "0002.npy"},
        {"name": "escape", "kind": "close", "file": "../../secret.npy"},
        {"name": "bad name!", "kind": "close", "file": "0000.npy"},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n"
    (tmp_path / grading.CASES_FILE).write_text(text)
    cases, values, problems = load_cases(tmp_path)
    assert set(cases) == {"ok"}
    assert len(problems) == 6
    assert any("more than once" in p for p in problems)
    assert any("pickled" in p for p in problems)


def test_missing_capture_is_reported(tmp_path):
    assert load_cases(tmp_path)[2] == ["no results were recorded"]


def test_summary_lists_session(capsys):
    check("s.one", 1.0, expected=1.0)
    grading.summary()
    assert "s.one" in capsys.readouterr().out


PLAIN_DTYPES = ["?", "i1", "<i4", ">i8", "u2", "<f2", "<f4", ">f8", "<c16", "<U5", ">U3", "S4"]


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(PLAIN_DTYPES),
    shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    fortran=st.booleans(),
    version=st.sampled_from([(1, 0), (2, 0)]),
    seed=st.integers(0, 2**16),
    cut=st.integers(0, 40),
)
def test_a_captured_array_reads_as_numpy_reads_it(dtype, shape, fortran, version, seed, cut):
    """The grader's reader of a capture's ``.npy`` bytes (each distinct header parsed once) gives what
    ``np.load`` gives: values, dtype, shape and memory order, and refuses what it refuses (cut short)."""
    import io

    rng = np.random.default_rng(seed)
    value = rng.integers(-100, 100, size=shape).astype(dtype)
    value = np.asfortranarray(value) if fortran else value
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, value, version=version, allow_pickle=False)
    data = buffer.getvalue()
    for attempt in (data, data):  # the second read takes the header already parsed
        got, want = grading.npy_array(attempt), np.load(io.BytesIO(attempt), allow_pickle=False)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.f_contiguous == want.flags.f_contiguous and got.flags.writeable
        assert np.array_equal(got, want)
    short = data[: len(data) - cut] if cut and value.nbytes else data[:cut]
    try:
        np.load(io.BytesIO(short), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        with pytest.raises((ValueError, OSError, EOFError)):
            grading.npy_array(short)


def test_a_captured_object_array_is_refused_unread(monkeypatch):
    """An object array (a pickle inside) is refused as np.load refuses it, never unpickled."""
    import io
    import pickle

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(ValueError, match="allow_pickle"):
        grading.npy_array(buffer.getvalue())


def test_a_captured_array_whose_header_claims_more_than_it_holds_is_refused():
    """A forged header (a shape whose size wraps around 64 bits, or more elements than the bytes hold) is
    refused with an error, never read as a small or empty array."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.zeros(3), allow_pickle=False)
    data = buffer.getvalue()
    for shape in ("(4,)", "(4294967296, 4294967296)", "(18446744073709551616,)"):
        forged = data.replace(b"(3,)", shape.encode()).replace(b" " * (len(shape) - 4), b"", 1)
        with pytest.raises((ValueError, OverflowError)):
            grading.npy_array(forged)
