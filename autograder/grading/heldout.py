"""Held-out evaluation data: images and labels a student's kernel never receives, drawn by the grader.

A graded property of a trained model (:func:`dlcourse.grading.check_model_accuracy`) is worked out by the grader
from the recorded weights. Evaluated on the inputs and labels the test cell handed over, it can be earned by a
notebook that fits a model to those very labels. A case given ``heldout={"data": "shapes", ...}`` is evaluated
instead on images the grader draws itself, from the generator the course ships, with a seed that lives only in
the grader's workspace (:func:`course_seed`: ``.grading/heldout-seed``, made at random the first time; never in
``source/``, which is public). The same seed gives the same images, so every machine that grades a course with
the same seed file gives the same grade: copy the file to each of them.

What the draw cannot stop: the generator itself is public, so a notebook can make as many images of the same kind
as it likes and train on them; the measurement run's CPU cap (:mod:`autograder.grading.measure`) bounds how much.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import replace

import numpy as np

from dlcourse.grading import Case

SEED_FILE = "heldout-seed"
DATA = ("shapes",)


def course_seed(course) -> int:
    """The course's held-out seed, from its grader workspace (made at random, once, where there is none)."""
    path = course.work / SEED_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x") as fh:  # (two graders at once: the first one's stays)
                fh.write(secrets.token_hex(8) + "\n")
        except FileExistsError:
            pass
    return int(path.read_text().strip()[:16], 16) % 2**63


def check_spec(spec) -> dict:
    """A held-out spec as a test cell gives it, checked: ``{"data": "shapes", "like": {seed, n_train, n_val},
    "n": images}``: images of lecture 13's shapes, standardised as ``shapes_splits(**like)`` standardises."""
    if not isinstance(spec, dict) or spec.get("data") not in DATA:
        raise ValueError(f"heldout names its data, one of {DATA}: {spec!r}")
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


def draw(spec: dict, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The held-out inputs and labels of ``spec`` for the course's ``seed``."""
    spec = check_spec(spec)
    return _shapes(seed, spec["n"], tuple(sorted(spec["like"].items())))


def heldout_case(case: Case, seed: int | None) -> Case:
    """``case`` with the held-out inputs and labels in place of those the test cell gave, where it asks for them;
    without a seed, a case that asks for them cannot be decided (the grader's configuration is missing)."""
    spec = case.params.get("heldout")
    if not spec:
        return case
    if seed is None:
        raise RuntimeError(
            f"{case.name}: evaluated on held-out data, but the grader was given no held-out seed"
        )
    inputs, labels = draw(spec, seed)
    return replace(case, params={**case.params, "inputs": inputs.tolist(), "labels": labels.tolist()})
