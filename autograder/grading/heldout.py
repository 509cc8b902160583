"""Held-out evaluation data: what a student's kernel never receives, drawn by the grader.

A graded property of a trained model (:func:`dlcourse.grading.check_model_accuracy`,
:func:`dlcourse.grading.check_lm_loss`) is worked out by the grader from the recorded weights. Evaluated on the
inputs and labels (or the tokens) the test cell handed over, it can be earned by a notebook that fits a model to
those very data. A case given ``heldout=`` is evaluated instead on data the grader chooses with a seed that lives
only in the grader's workspace (:func:`course_seed`: ``.grading/heldout-seed``, made at random the first time;
never in ``source/``, which is public). The same seed gives the same data, so every machine that grades a course
with the same seed file gives the same grade: copy the file to each of them.

``{"data": "shapes", ...}``: images of lecture 13's shapes, drawn from the generator the course ships.
``{"data": "text", "vocab_size": V, "n_tokens": N}``: N + 1 consecutive tokens of a held-out text, encoded with
:func:`dlcourse.lm.shakespeare_tokenizer` of V (the tokens the model was trained on), from an offset the seed
chooses. The text is the course's own where its ``nbgrader_config.py`` names one (``c.HeldOut.text_file``, a path
relative to the course's root or absolute; a named file that is missing is an error, never a fallback), else
:data:`DEFAULT_TEXT`, which ships with the grader outside the folders a kernel sees.

What the draw cannot stop: the generator and the default text are public, so a notebook can make as many images
of the same kind as it likes and train on them, or train on that text; the measurement run's CPU cap
(:mod:`autograder.grading.measure`) bounds how much. A course that grades a language model for credit names a
text of its own, kept outside ``source/`` (the seed's window still keeps which part of it is used unknown).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np

from autograder.course import ROOT
from dlcourse.grading import HELD_OUT_TEXT, Case

DATA = {"shapes": "model_accuracy", "text": "lm_loss"}  # each held-out data, and the kind of case it is for
DEFAULT_TEXT = ROOT / "heldout" / "shakespeare.txt"  # (public Shakespeare that dlcourse/texts/ does not hold)
TEXT_SIZES = {"vocab_size": (256, 4096), "n_tokens": (64, 65536)}  # a held-out text's spec: each in bounds


def course_seed(course) -> int:
    """The course's held-out seed, from its grader workspace (made at random, once, where there is none)."""
    return int(course.seed_file().read_text().strip()[:16], 16) % 2**63


def heldout_text(course) -> Path:
    """The course's held-out text: the file its ``nbgrader_config.py`` names (``c.HeldOut.text_file``), else
    :data:`DEFAULT_TEXT`. FileNotFoundError, naming the file, where the one it names is not there."""
    named = course.config.HeldOut.get("text_file")
    if named is None:
        return DEFAULT_TEXT
    path = Path(named).expanduser() if isinstance(named, str) and named.strip() else None
    if path is not None and not path.is_absolute():
        path = course.root / path
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"the course's nbgrader_config.py names {path or repr(named)} as its held-out text "
            "(c.HeldOut.text_file), and there is no such file: put the text there, or name the right path "
            "(relative to the course's root, or absolute)"
        )
    return path


def check_spec(spec) -> dict:
    """A held-out spec as a test cell gives it, checked: ``{"data": "shapes", "like": {seed, n_train, n_val},
    "n": images}``: images of lecture 13's shapes, standardised as ``shapes_splits(**like)`` standardises;
    ``{"data": "text", "vocab_size": V, "n_tokens": N}``: N tokens of the held-out text (:data:`TEXT_SIZES`)."""
    if not isinstance(spec, dict) or spec.get("data") not in DATA:
        raise ValueError(f"heldout names its data, one of {tuple(DATA)}: {spec!r}")
    if spec["data"] == "text":
        if set(spec) != {"data", *TEXT_SIZES}:
            raise ValueError(f"a held-out text takes vocab_size and n_tokens, and nothing else: {spec!r}")
        for key, (low, high) in TEXT_SIZES.items():
            if type(spec[key]) is not int or not low <= spec[key] <= high:
                raise ValueError(f"heldout's {key} is a whole number in {low}..{high}: {spec[key]!r}")
        return dict(spec)
    like = spec.get("like", {})
    if not isinstance(like, dict) or not set(like) <= {"seed", "n_train", "n_val", "n_test"}:
        raise ValueError(f"heldout's 'like' takes shapes_splits' seed, n_train, n_val and n_test: {like!r}")
    return {"data": spec["data"], "like": dict(like), "n": int(spec.get("n", 1000))}


@functools.lru_cache(maxsize=8)
def _shapes(seed: int, n: int, like: tuple) -> tuple[np.ndarray, np.ndarray]:
    from dlcourse.data import shapes_dataset

    like = dict(like)
    n_train, n_val, n_test = like.get("n_train", 1000), like.get("n_val", 500), like.get("n_test", 1000)
    seen, _ = shapes_dataset(n_train + n_val + n_test, size=16, seed=like.get("seed", 0), noise=0.15)
    mean, std = seen[:n_train].mean(), seen[:n_train].std()
    images, labels = shapes_dataset(n, size=16, seed=seed, noise=0.15)
    return ((images - mean) / std).astype(np.float64), labels.astype(np.int64)


@functools.lru_cache(maxsize=4)
def _encoded(path: str, stamp: tuple, vocab_size: int) -> np.ndarray:
    """The text at ``path`` (as it was at ``stamp``: its time and size) in the tokens of the course's tokenizer."""
    from dlcourse.lm import shakespeare_tokenizer  # (torch: only where a case asks for a held-out text)

    text = Path(path).read_text(encoding="utf-8")
    tokens = np.array(shakespeare_tokenizer(vocab_size).encode(text), dtype=np.int64)
    tokens.setflags(write=False)
    return tokens


def text_window(spec: dict, seed: int, path: Path) -> np.ndarray:
    """The ``n_tokens + 1`` consecutive tokens of the held-out text at ``path`` that the course's ``seed`` picks."""
    spec = check_spec(spec)
    info = path.stat()
    tokens = _encoded(str(path), (info.st_mtime_ns, info.st_size), spec["vocab_size"])
    need = spec["n_tokens"] + 1
    if len(tokens) < need:
        raise RuntimeError(
            f"the held-out text {path} is {len(tokens)} tokens long with {spec['vocab_size']} tokens in the "
            f"vocabulary; a case asks for {need}: name a longer text (c.HeldOut.text_file) or ask for fewer"
        )
    rng = np.random.default_rng([seed, spec["vocab_size"], spec["n_tokens"]])
    start = int(rng.integers(0, len(tokens) - need + 1))
    return tokens[start : start + need]


def draw(spec: dict, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The held-out inputs and labels of ``spec`` for the course's ``seed``."""
    spec = check_spec(spec)
    return _shapes(seed, spec["n"], tuple(sorted(spec["like"].items())))


def heldout_case(case: Case, seed: int | None, text: Path | None = None) -> Case:
    """``case`` with the held-out data in place of what the test cell gave, where it asks for it: inputs and
    labels drawn with the course's ``seed``, or the seed's window of the held-out ``text``
    (:func:`heldout_text`). Without a seed (or a text, for a case that asks for one) such a case cannot be
    decided: the grader's configuration is missing."""
    spec = case.params.get("heldout")
    if not spec:
        return case
    if seed is None:
        raise RuntimeError(
            f"{case.name}: evaluated on held-out data, but the grader was given no held-out seed"
        )
    spec = check_spec(spec)
    if DATA[spec["data"]] != case.kind:
        raise ValueError(
            f"{case.name}: held-out {spec['data']} is for a {DATA[spec['data']]} case, not {case.kind}"
        )
    if spec["data"] == "text":
        if text is None:
            raise RuntimeError(f"{case.name}: evaluated on a held-out text, but the grader was given none")
        window = text_window(spec, seed, Path(text))
        return replace(case, params={**case.params, "tokens": window.tolist(), "evaluated_on": HELD_OUT_TEXT})
    inputs, labels = draw(spec, seed)
    return replace(case, params={**case.params, "inputs": inputs.tolist(), "labels": labels.tolist()})
