"""The test format of the graded assignments: one format for the student, nbgrader and the trusted grader.

A test cell in an assignment's source looks like this::

    # public: the student can read and run these
    out, _ = affine_forward(x, w, b)
    check("affine_forward.small", out, expected=[[1.5, -0.5], [3.0, 1.0]])
    ### BEGIN HIDDEN TESTS
    rng = np.random.default_rng(101)
    x, w, b = rng.normal(size=(7, 3, 2)), rng.normal(size=(6, 4)), rng.normal(size=4)
    check("affine_forward.random_3d", affine_forward(x, w, b)[0])
    ### END HIDDEN TESTS

Each ``check`` names a *case*, and gives the value the student's code produced on inputs the test
chose. Hidden cases carry no expected value and no reference code: the expected value is what the
source's own solution produced on the same inputs, recorded once by a reference run. So the hidden
test code that reaches a student's kernel reveals inputs, never answers.

The same call does the right thing in each of four places, chosen by the environment:

======================  ==========================================================================
student (no variables)  public cases are compared with ``expected`` and explained in plain words;
                        hidden cases never reach a student
``DLCOURSE_REFERENCE``  nbgrader's in-kernel run: every case is compared with the reference values
                        in that directory, and a mismatch raises ``AssertionError`` (nbgrader's
                        verdict)
``DLCOURSE_CAPTURE``    the trusted grader's run: the value is written, as plain data (``.npy``
                        without pickle), to that directory. A failing public case prints its
                        message and records the kernel's verdict, and the cell goes on, so every
                        later case is still checked (a failing check costs only its share); points
                        are decided outside the kernel by :func:`compare` on the captured data
reference run           the grader runs the source with ``DLCOURSE_CAPTURE`` and marks each test
                        cell with :func:`begin_cell`; the recorded values and each case's kind and
                        tolerance become the reference
======================  ==========================================================================

The kinds of case: :func:`check` (values close within rtol/atol), :func:`check_equal` (exactly equal:
integers, strings, booleans, shapes), :func:`check_one_of` (one of several answers that only the solution names),
:func:`check_range` (a scalar within bounds),
:func:`check_accuracy` (predictions whose accuracy against labels is at least a threshold),
:func:`check_model_accuracy` (a trained model's accuracy, worked out outside the kernel: the kernel
records only the model's parameters; the architecture, inputs and labels come from the reference), and
:func:`check_lm_loss` (a trained language model's perplexity on a text, worked out alike). The
kind and its parameters are always taken from the reference, never from the student's kernel.

What a kernel records is the submission's word, so the grader gives points only to evidence the kernel could not
forge: a value the student's code returned on inputs whose answer the kernel never held (a hidden case without an
``expected``). A public check, an ``expected`` written in a test, a ``range`` or ``accuracy`` bound, a small
boolean, a model's accuracy on labels the test handed over and a language model's perplexity on tokens it handed
over are *conditions*: they can take a group's points away, never earn them
(``autograder/grading/reference.py: answer_in_kernel``). A recording counts only from the test cell that owns it,
once: the grader's driver tags each with the cell that ran, whatever ``cell`` this module writes. A trained model
can be graded on data the grader draws itself (``heldout=`` of :func:`check_model_accuracy` and of
:func:`check_lm_loss`), and a test cell that grades how code runs is run again under caps the grader sets outside
the kernel (``autograder/grading/measure.py``).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dlcourse.closeness import ATOL, RTOL, close_report, to_numpy
from dlcourse.lmdata import decode_lm, lm_as_data, mean_loss
from dlcourse.modeldata import decode, encode, model_as_data, parameter_count, predictions

CAPTURE_ENV = "DLCOURSE_CAPTURE"
REFERENCE_ENV = "DLCOURSE_REFERENCE"
CASES_FILE = "cases.jsonl"
MAX_CASE_ELEMENTS = 2_000_000  # a case is a result to compare, not a data dump
PLAIN_KINDS = "biufcUS"  # the dtype kinds a recorded value may have (no objects, records, dates)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-\[\]]{1,120}$")

_current_cell: str | None = None
_session: dict[str, str] = {}  # case name -> "passed" / "failed" / "recorded", for summary()


class GradingError(AssertionError):
    """A case failed; the message says what was expected, in plain words."""


@dataclass(frozen=True)
class Case:
    """A case as the reference records it: its kind and parameters, and which test cell it belongs to."""

    name: str
    kind: str
    params: dict
    cell: str | None = None
    public: bool = False
    expected_file: str | None = None  # public cases: the expected value the kernel compared with
    verdict: str | None = None  # public cases: what the kernel said ("passed"/"failed"), the kernel's word
    times: int = 1  # how many times the run recorded it: more than once earns nothing (:mod:`autograder.grading.verify`)


def plain_value(value) -> np.ndarray:
    """Turn a result into plain data that numpy saves without pickle, or raise TypeError."""
    if isinstance(value, tuple | list) and value and all(_is_tensorish(v) for v in value):
        arrays = [to_numpy(v) for v in value]
        if len({a.shape for a in arrays}) > 1:
            raise TypeError(
                "a case holds one array; check the items of a tuple of different shapes one by one"
            )
        value = np.stack(arrays)
    elif isinstance(value, tuple | list | bool | int | float | str | np.generic):
        try:
            value = np.asarray(value)
        except ValueError as err:  # ragged nested lists
            raise TypeError(f"cannot record a ragged list as one array ({err})") from None
    arr = to_numpy(value) if _is_tensorish(value) else np.asarray(value)
    if arr.dtype == object or arr.dtype.kind == "V":
        raise TypeError(f"cannot record a value of type {type(value).__name__} as plain data")
    if arr.size > MAX_CASE_ELEMENTS:
        raise TypeError(f"value has {arr.size} elements; a case may hold at most {MAX_CASE_ELEMENTS}")
    return arr


def _is_tensorish(value) -> bool:
    return type(value).__module__.split(".")[0] in ("torch", "tensorflow", "numpy") or isinstance(
        value, np.ndarray
    )


# ----------------------------------------------------------------------------- recording


def begin_cell(cell_id: str) -> None:
    """Mark the start of a graded test cell (the reference run inserts this call)."""
    global _current_cell
    _current_cell = cell_id


def _record(
    directory: Path,
    name: str,
    kind: str,
    params: dict,
    value: np.ndarray,
    public: bool,
    expected=None,
    verdict: str | None = None,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    index = sum(1 for _ in directory.glob("*.npy"))
    filename = f"{index:04d}.npy"
    np.save(directory / filename, value, allow_pickle=False)
    entry = {
        "name": name,
        "kind": kind,
        "params": params,
        "file": filename,
        "cell": _current_cell,
        "public": public,
    }
    if verdict is not None:
        entry["verdict"] = verdict
    if expected is not None:  # so the grader can redo the kernel's own comparison on the same data
        entry["expected"] = f"{index:04d}e.npy"
        np.save(directory / entry["expected"], expected, allow_pickle=False)
    with open(directory / CASES_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")


class _Files:
    """A capture's or a reference's files by name: a directory, or the bytes a run's report carried
    (``{name: bytes}``, already in the grader's memory: nothing is written to disk to be read back)."""

    def __init__(self, source: Path | str | Mapping[str, bytes]):
        self.held = source if isinstance(source, Mapping) else None
        self.directory = None if self.held is not None else Path(source)

    def size(self, name: str) -> int | None:
        """The file's size, or None where there is no such (regular) file."""
        if self.held is not None:
            data = self.held.get(name)
            return len(data) if isinstance(data, bytes) else None
        path = self.directory / name
        return path.stat().st_size if path.is_file() else None

    def text(self, name: str) -> str:
        if self.held is not None:
            return self.held[name].decode("utf-8", errors="replace")
        return (self.directory / name).read_text(encoding="utf-8", errors="replace")

    def array(self, name: str) -> np.ndarray:
        """The ``.npy`` file's array, never unpickled."""
        if self.held is not None:
            return npy_array(self.held[name])
        return np.load(self.directory / name, allow_pickle=False)


_HEADERS: dict[bytes, tuple] = {}  # an .npy file's header -> (shape, Fortran order, dtype), parsed once


def npy_array(data: bytes) -> np.ndarray:
    """The array in ``data``, an ``.npy`` file's bytes, as ``np.load`` reads it without unpickling (the same
    values, dtype, shape and order; the same errors), each distinct header parsed once: numpy parses one
    with Python's ``ast``, most of the time a small array takes to read, and a class's captures hold
    thousands of arrays with a few dozen distinct headers."""
    version = data[6:7] if data[:6] == b"\x93NUMPY" else b""
    if version not in (b"\x01", b"\x02") or len(data) < 12:  # anything else: as numpy reads it
        return np.load(io.BytesIO(data), allow_pickle=False)
    start = 10 if version == b"\x01" else 12
    end = start + int.from_bytes(data[8:start], "little")
    header = data[:end]
    parsed = _HEADERS.get(header)
    if parsed is None:
        fp = io.BytesIO(header)
        np.lib.format.read_magic(fp)
        read = np.lib.format.read_array_header_1_0 if start == 10 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fp)
        if dtype.hasobject or dtype.itemsize == 0:  # refused, or an empty kind: numpy's own answer
            return np.load(io.BytesIO(data), allow_pickle=False)
        parsed = (tuple(shape), bool(fortran), dtype)
        if len(_HEADERS) < 4096 and len(header) <= 512:  # bounded: a capture's headers are the student's
            _HEADERS[header] = parsed
    shape, fortran, dtype = parsed
    count = math.prod(shape)  # Python's integers: a forged shape cannot wrap around to a small count
    if len(data) - end < count * dtype.itemsize:
        raise ValueError("the array's data is shorter than its header says")
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=end)
    return (flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)).copy(order="K")


def load_cases(
    source: Path | str | Mapping[str, bytes], max_bytes: int = 256 * 2**20
) -> tuple[dict[str, Case], dict[str, np.ndarray], list[str]]:
    """Read a capture or reference defensively: ``(cases, values, problems)``. ``source``: its directory,
    or its files as ``{name: bytes}``.

    Meant for data written by untrusted code: never unpickles, skips malformed lines, files outside the
    directory and oversized files, and lists each problem. A name recorded more than once keeps its first
    value and counts how often it came (:attr:`Case.times`): the grader gives such a case nothing.
    """
    files = _Files(source)
    cases: dict[str, Case] = {}
    values: dict[str, np.ndarray] = {}
    problems: list[str] = []
    size = files.size(CASES_FILE)
    if size is None:
        return cases, values, ["no results were recorded"]
    if size > 16 * 2**20:
        return cases, values, ["the results index is implausibly large; ignored"]
    total = 0
    for number, line in enumerate(files.text(CASES_FILE).splitlines(), 1):
        try:
            entry = json.loads(line)
            name, kind, filename = str(entry["name"]), str(entry["kind"]), str(entry["file"])
            params = entry.get("params") or {}
            cell = entry.get("cell")
            if not isinstance(params, dict) or not NAME_PATTERN.match(name):
                raise ValueError("bad name or parameters")
        except (ValueError, KeyError, TypeError, RecursionError):
            problems.append(f"line {number} of the results index is malformed")
            continue
        if name in cases:
            problems.append(f"case {name!r} was recorded more than once; it earns nothing")
            cases[name] = replace(cases[name], times=cases[name].times + 1)
            continue
        size = files.size(filename) if re.fullmatch(r"\d{4,6}\.npy", filename) else None
        if size is None:
            problems.append(f"case {name!r}: its data file is missing or misnamed")
            continue
        total += size
        if total > max_bytes:
            problems.append("recorded results exceed the size limit; the rest were ignored")
            break
        try:
            value = files.array(filename)
        except (ValueError, OSError, EOFError) as err:
            problems.append(f"case {name!r}: unreadable data ({type(err).__name__})")
            continue
        if value.dtype.kind not in PLAIN_KINDS:  # what a check records: numbers, booleans, text
            problems.append(f"case {name!r}: a value of dtype {value.dtype} is not plain data")
            continue
        values[name] = value
        expected = entry.get("expected")
        expected = (
            expected if isinstance(expected, str) and re.fullmatch(r"\d{4,6}e\.npy", expected) else None
        )
        verdict = entry.get("verdict") if entry.get("verdict") in ("passed", "failed") else None
        cases[name] = Case(
            name,
            kind,
            params,
            cell if isinstance(cell, str) else None,
            entry.get("public") is True,
            expected,
            verdict,
        )
    return cases, values, problems


def load_expected(source: Path | str | Mapping[str, bytes], case: Case) -> np.ndarray | None:
    """The expected value a public case was compared with in the kernel, or None (not recorded, unreadable)."""
    if not case.expected_file:
        return None
    files = _Files(source)
    try:
        size = files.size(case.expected_file)
        if size is None or size > 64 * 2**20:
            return None
        value = files.array(case.expected_file)
    except (ValueError, OSError, EOFError):
        return None
    return value if value.dtype.kind in PLAIN_KINDS else None


# ----------------------------------------------------------------------------- comparing


def compare(case: Case, reference, got) -> str | None:
    """None when ``got`` satisfies ``case`` (with ``reference``, the source solution's value), else why not.

    Used in the kernel for nbgrader's verdict and, on plain data, by the trusted grader.
    """
    p = case.params
    if case.kind == "close":
        return close_report(
            got, reference, rtol=p.get("rtol", RTOL), atol=p.get("atol", ATOL), name=case.name
        )
    if case.kind == "equal":
        a, e = np.asarray(got), np.asarray(reference)
        same_kind = (a.dtype.kind in "US") == (e.dtype.kind in "US") and (a.dtype.kind == "b") == (
            e.dtype.kind == "b"
        )
        if a.shape == e.shape and same_kind and np.array_equal(a, e):  # (True is not the count 1)
            return None
        return f"{case.name}: got {_short(a)}, expected {_short(e)}"
    if case.kind == "range":
        a = np.asarray(got)
        if a.size != 1 or a.dtype.kind not in "biuf":
            return f"{case.name}: expected one number, got {_short(a)}"
        x = float(a.reshape(()))
        low, high = p.get("low"), p.get("high")
        if not np.isfinite(x) or (low is not None and x < low) or (high is not None and x > high):
            bounds = " and ".join(
                s
                for s in (
                    f">= {low:g}" if low is not None else "",
                    f"<= {high:g}" if high is not None else "",
                )
                if s
            )
            return f"{case.name}: got {x:.6g}, which should be {bounds}"
        return None
    if case.kind == "model_accuracy":
        return _model_problem(case, reference, got)
    if case.kind == "lm_loss":
        return _lm_problem(case, reference, got)
    if case.kind == "one_of":
        a, accepted = np.asarray(got), np.asarray(p.get("accepted", []))
        if (
            a.size == 1
            and a.dtype.kind in "biufUS"
            and accepted.size
            and bool(np.any(accepted == a.reshape(())))
        ):
            return None
        return f"{case.name}: {_short(a)} is not an accepted answer"
    if case.kind == "accuracy":
        labels = np.asarray(p["labels"])
        preds = np.asarray(got)
        if preds.shape != labels.shape:
            return f"{case.name}: {labels.size} predictions expected, got shape {preds.shape}"
        accuracy = float(np.mean(preds == labels))
        if accuracy < p["at_least"]:
            return f"{case.name}: accuracy {accuracy:.1%}, needs at least {p['at_least']:.0%}"
        return None
    return f"{case.name}: unknown kind of case {case.kind!r}"


def _model_problem(case: Case, reference, got) -> str | None:
    """A ``model_accuracy`` case: the recorded model (:mod:`dlcourse.modeldata`) is evaluated here, on the
    case's inputs, against its labels; with ``architecture="fixed"`` it must be built as the reference's
    model is, and ``max_parameters`` bounds its trainable parameters."""
    p = case.params
    try:
        layers, parameters = decode(got)
        if p.get("architecture", "fixed") == "fixed" and reference is not None:
            if layers != decode(reference)[0]:
                return f"{case.name}: the model is not built as the test builds it: {layers}"
        trainable = parameter_count(layers, trainable=True)
        if p.get("max_parameters") is not None and trainable > p["max_parameters"]:
            return f"{case.name}: the model has {trainable:,} parameters, more than {p['max_parameters']:,}"
        predicted = predictions(layers, parameters, np.asarray(p["inputs"], dtype=np.float64))
    except ValueError as err:
        return f"{case.name}: {err}"
    accuracy = float(np.mean(predicted == np.asarray(p["labels"])))
    if accuracy < p["at_least"]:
        return (
            f"{case.name}: the trained model's accuracy is {accuracy:.1%}, needs at least {p['at_least']:.0%}"
        )
    return None


HELD_OUT_TEXT = "held-out text"  # an lm_loss case's "evaluated_on" once the grader put its held-out window in


def _lm_problem(case: Case, reference, got) -> str | None:
    """An ``lm_loss`` case: the recorded language model (:mod:`dlcourse.lmdata`) must have a perplexity of at most
    ``at_most`` on the case's tokens; with ``architecture="fixed"`` its settings (sizes, rotary base, eps) must be
    the reference's. Nothing of the tokens is shown: held out, they are the grader's."""
    p = case.params
    try:
        settings, _ = decode_lm(got)
        if p.get("architecture", "fixed") == "fixed" and reference is not None:
            expected, _ = decode_lm(reference)
            differ = [
                f"{k} {settings[k]:g} (the test's: {expected[k]:g})"
                for k in expected
                if settings[k] != expected[k]
            ]
            if differ:
                return f"{case.name}: the model is not built as the test builds it: {', '.join(differ)}"
        tokens = np.asarray(p["tokens"])
        loss = mean_loss(got, tokens, int(p["context"]))
    except ValueError as err:
        return f"{case.name}: {err}"
    perplexity = math.exp(min(loss, 700.0)) if loss == loss else math.nan  # (a NaN loss passes no bound)
    if perplexity <= p["at_most"]:
        return None
    where = (
        f"on the held-out text ({len(tokens) - 1} tokens)"
        if p.get("evaluated_on") == HELD_OUT_TEXT
        else "on the test's tokens"
    )
    return f"{case.name}: perplexity {perplexity:.1f} {where}, needs at most {p['at_most']:.1f}"


def _short(a: np.ndarray) -> str:
    text = np.array2string(a, threshold=8, precision=5) if a.ndim else repr(a.item())
    return text if len(text) < 200 else text[:200] + "..."


# ----------------------------------------------------------------------------- the calls in test cells


def check(name: str, got, expected=None, *, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Case ``name``: ``got`` must be close to ``expected`` (public) or to the reference (hidden)."""
    _case(name, "close", {"rtol": rtol, "atol": atol}, got, expected)


def check_equal(name: str, got, expected=None) -> None:
    """Case ``name``: ``got`` must equal ``expected`` exactly (integers, strings, booleans, shapes)."""
    _case(name, "equal", {}, got, expected)


def check_one_of(name: str, got, accepted=None) -> None:
    """Case ``name`` (hidden): ``got`` must be one of the accepted answers, which the reference records from
    ``accepted`` as the source's solution cell defines it (a quiz with several right answers: the accepted ones
    live in the solution, so they reach the reference run and never a student's kernel, where ``accepted`` is
    None). The kind and the accepted answers are the reference's, never the kernel's."""
    params = {"accepted": plain_value(list(accepted)).tolist()} if accepted is not None else {}
    _case(name, "one_of", params, got, None, public=False)


def check_range(name: str, got, low: float | None = None, high: float | None = None) -> None:
    """Case ``name``: the number ``got`` must lie within ``[low, high]``."""
    _case(name, "range", {"low": low, "high": high}, got, None, public=True)


def check_accuracy(name: str, predictions, labels, at_least: float) -> None:
    """Case ``name``: ``predictions`` must match ``labels`` on at least the fraction ``at_least``."""
    labels = plain_value(labels)
    _case(name, "accuracy", {"labels": labels.tolist(), "at_least": at_least}, predictions, None, public=True)


def check_model_accuracy(
    name: str,
    model,
    inputs,
    labels,
    at_least: float,
    *,
    architecture: str = "fixed",
    max_parameters: int | None = None,
    heldout: dict | None = None,
) -> None:
    """Case ``name``: the trained ``model`` must classify ``inputs`` as ``labels`` on at least the fraction
    ``at_least``. The grader records the model itself, as plain data (:mod:`dlcourse.modeldata`: an
    ``nn.Sequential`` of common layers, or a two-layer net's ``params``), and works the accuracy out on the
    reference's inputs and labels, which the student's kernel never hands over. ``architecture="fixed"``:
    the model must be built as the test builds it (the reference's); ``"any"``: the student designs it,
    within ``max_parameters`` trainable parameters. ``heldout`` (``{"data": "shapes", "like": {...}}``): the
    grader evaluates the model on images and labels it draws itself, which this kernel never receives
    (:mod:`autograder.grading.heldout`); ``inputs`` and ``labels`` then only tell the student where they stand."""
    if architecture not in ("fixed", "any"):
        raise ValueError("architecture is 'fixed' or 'any'")
    try:
        value = encode(*model_as_data(model))
    except TypeError as err:
        _session[name] = "failed"
        raise GradingError(f"{name}: {err}") from None
    params = {
        "inputs": plain_value(inputs).astype(np.float64).tolist(),
        "labels": plain_value(labels).tolist(),
        "at_least": at_least,
        "architecture": architecture,
        "max_parameters": max_parameters,
    }
    if heldout is not None:
        params["heldout"] = dict(heldout)
    _case(name, "model_accuracy", params, value, None, public=True)


def check_lm_loss(
    name: str,
    model,
    tokens,
    context: int,
    at_most: float,
    *,
    heldout: dict | None = None,
    seeded: bool = False,
) -> None:
    """Case ``name``: the trained language model ``model`` (lecture 16's or the assignment's:
    :func:`dlcourse.lmdata.lm_as_data`) must have a perplexity (``exp`` of :func:`dlcourse.lmdata.mean_loss`: whole
    windows of ``context + 1`` tokens) of at most ``at_most`` on ``tokens``. The grader records the model itself,
    as plain data, and works the perplexity out; the model must be built as the test builds it (its sizes, rotary
    base and RMSNorm eps are the reference's). With ``heldout={"data": "text", "vocab_size": V, "n_tokens": N}``
    the grader evaluates it instead on N tokens of a held-out text this kernel never receives, encoded with
    :func:`dlcourse.lm.shakespeare_tokenizer` of V (:mod:`autograder.grading.heldout`); ``tokens`` then only
    tell the student where they stand. ``seeded=True``: the cell trains the model from the grader's ``MEASURE_SEED``
    when it measures the cell, so the same weights byte for byte in the notebook's own run (with the cell's own
    seed) and in the measured run were not trained by the cell, and the hand-in is flagged for review
    (:func:`autograder.grading.measure.unchanged_by_the_seed`)."""
    ids = plain_value(tokens)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError("tokens: one vector of token ids")
    try:
        value = lm_as_data(model)
    except TypeError as err:
        _session[name] = "failed"
        raise GradingError(f"{name}: {err}") from None
    params = {"tokens": ids.astype(np.int64).tolist(), "context": int(context), "at_most": float(at_most),
              "architecture": "fixed"}  # fmt: skip
    if heldout is not None:
        params["heldout"] = dict(heldout)
    if seeded:
        params["seeded"] = True
    _case(name, "lm_loss", params, value, None, public=True)


def _case(name: str, kind: str, params: dict, got, expected, public: bool | None = None) -> None:
    if not NAME_PATTERN.match(name):
        raise ValueError(f"case names use letters, digits and . _ - [ ], not {name!r}")
    public = expected is not None if public is None else public
    case = Case(name, kind, params, _current_cell)
    try:
        value = plain_value(got)
    except TypeError as err:
        _session[name] = "failed"
        raise GradingError(f"{name}: {err}") from None

    capture = os.environ.get(CAPTURE_ENV)
    if capture:
        try:
            plain_expected = None if expected is None else plain_value(expected)
        except TypeError as err:
            _session[name] = "failed"
            raise GradingError(f"{name}: expected value: {err}") from None
        problem = None
        if public:  # the student sees the verdict at once; the cell goes on, so later cases are checked too
            problem = compare(case, plain_expected if plain_expected is not None else value, value)
        verdict = None if not public else ("failed" if problem else "passed")
        _record(Path(capture), name, kind, params, value, public, plain_expected, verdict)
        _session[name] = verdict or "recorded"
        if problem:
            print(f"\u2717 {problem}")
        elif public:
            print(f"\u2713 {case.name}")
        return
    reference_dir = os.environ.get(REFERENCE_ENV)
    if reference_dir:
        reference_case, reference_value = _reference(Path(reference_dir), name)
        _verdict(reference_case, reference_value, value)
        return
    if not public:
        raise GradingError(
            f"{name} is a hidden case: it is graded against the reference solution, which only the grader has"
        )
    _verdict(case, expected, value)


def _verdict(case: Case, reference, value) -> None:
    problem = compare(case, None if reference is None else plain_value(reference), value)
    _session[case.name] = "failed" if problem else "passed"
    if problem:
        raise GradingError(problem)
    print(f"\u2713 {case.name}")


_reference_cache: dict[str, tuple[dict, dict]] = {}


def _reference(directory: Path, name: str) -> tuple[Case, np.ndarray]:
    """The reference's case (kind and parameters as the source set them) and its value."""
    key = str(directory)
    if key not in _reference_cache:
        cases, values, _ = load_cases(directory)
        _reference_cache[key] = (cases, values)
    cases, values = _reference_cache[key]
    if name not in values:
        raise GradingError(
            f"{name}: the reference has no such case (is DLCOURSE_REFERENCE the right assignment?)"
        )
    return cases[name], values[name]


def summary() -> None:
    """Print which checks of this session passed, failed or are still to be run."""
    if not _session:
        print("No checks have run yet: run the test cells below your solutions.")
        return
    width = max(map(len, _session))
    for name, status in _session.items():
        mark = {"passed": "\u2713", "failed": "\u2717"}.get(status, "\u2022")
        print(f"{mark} {name:<{width}}  {status}")
    failed = sum(s == "failed" for s in _session.values())
    print(f"{len(_session) - failed} of {len(_session)} checks passed or recorded, {failed} failed.")
