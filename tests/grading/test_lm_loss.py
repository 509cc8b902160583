"""A trained language model's perplexity, worked out by the grader from the weights the kernel recorded as data
(``lm_loss``: :func:`dlcourse.grading.check_lm_loss`), never reported by the kernel. The attack: a notebook that
fits its model to the very tokens the test hands over passes a perplexity bound on them; with ``heldout=`` the
grader judges the model on a window of a held-out text the kernel never receives (its place chosen by the course's
secret seed), in a capped child of its own (:mod:`autograder.grading.evaluate`), and the test's own tokens only
tell the student where they stand."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from autograder.course import Course
from autograder.grading import evaluate, verify
from autograder.grading.heldout import DEFAULT_TEXT, heldout_case, heldout_text
from autograder.grading.reference import Reference, answer_in_kernel
from dlcourse import grading, lm, lmdata
from dlcourse.grading import Case, compare

CONTEXT = 16
HELD_OUT = {"data": "text", "vocab_size": 512, "n_tokens": 256}


@pytest.fixture(autouse=True)
def no_verdicts_kept(monkeypatch):
    """Each test starts with no verdict kept by this process (the cache is the grader's, per process)."""
    monkeypatch.setattr(evaluate, "_verdicts", OrderedDict())


def small_model(seed: int = 0, **sizes) -> lm.LanguageModel:
    torch.manual_seed(seed)
    config = {"vocab_size": 512, "d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 32, **sizes}
    return lm.LanguageModel(lm.LMConfig(**config)).eval()


@pytest.fixture(scope="module")
def test_tokens() -> np.ndarray:
    """What a test cell hands the kernel: 257 tokens of the course's public text, in the course's tokens."""
    return np.array(lm.shakespeare_tokenizer(512).encode(lm.shakespeare_text()[:3000])[:257])


@pytest.fixture(scope="module")
def overfit(test_tokens) -> np.ndarray:
    """The attacker's model: trained on nothing but the test's tokens, until it knows them by heart."""
    torch.set_num_threads(1)
    model = small_model().train()
    ids = torch.from_numpy(test_tokens)
    n = (len(ids) - 1) // CONTEXT
    x, y = ids[: n * CONTEXT].view(n, CONTEXT), ids[1 : n * CONTEXT + 1].view(n, CONTEXT)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = lm.lm_loss(model, x, y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return lmdata.lm_as_data(model.eval())


def lm_case(tokens, at_most: float, heldout: dict | None = None, public: bool = True) -> Case:
    """The case as check_lm_loss records it."""
    params = {
        "tokens": np.asarray(tokens).tolist(),
        "context": CONTEXT,
        "at_most": at_most,
        "architecture": "fixed",
    }
    if heldout is not None:
        params["heldout"] = heldout
    return Case("a8.lm.perplexity", "lm_loss", params, "test_lm", public=public)


def perplexity(value, tokens) -> float:
    return math.exp(lmdata.mean_loss(value, np.asarray(tokens), CONTEXT))


def reference_with(case: Case, value, seed: int = 7, text: Path | None = DEFAULT_TEXT) -> Reference:
    return Reference(
        Path("."), {}, {case.name: case}, {case.name: value}, heldout_seed=seed, heldout_text=text
    )


# ----------------------------------------------------------------------------- the attack, and the answer to it


def test_a_model_fit_to_the_tests_tokens_passes_on_them_and_fails_on_the_held_out_text(overfit, test_tokens):
    case = lm_case(test_tokens, at_most=50.0, heldout=HELD_OUT)
    assert perplexity(overfit, test_tokens) < 2.0  # it knows the test's tokens by heart
    assert compare(case, overfit, overfit) is None  # the kernel's own verdict: passed
    reference = reference_with(case, overfit)
    problem = verify.case_problem(reference, {case.name: overfit}, case.name, None)
    assert re.fullmatch(
        r"a8\.lm\.perplexity: perplexity \d+\.\d on the held-out text \(256 tokens\), needs at most 50\.0",
        problem,
    ), problem
    # ... and that is no sign of tampering: redone outside, the kernel's own comparison (on the test's tokens) passes
    assert not verify.tampered_public_check(
        reference, Path("."), {case.name: case}, {case.name: overfit}, case.name
    )
    # without heldout= the same bound on the test's tokens is met, and is a condition that earns nothing
    plain = lm_case(test_tokens, at_most=50.0)
    assert verify.case_problem(reference_with(plain, overfit), {plain.name: overfit}, plain.name, None) == ""
    assert answer_in_kernel(plain) and not answer_in_kernel(case)


def test_only_a_held_out_case_is_scored_public_or_not():
    for public in (True, False):
        assert not answer_in_kernel(lm_case([1, 2, 3], 10.0, HELD_OUT, public=public))
        assert answer_in_kernel(lm_case([1, 2, 3], 10.0, public=public))


# ----------------------------------------------------------------------------- compare


def test_a_perplexity_within_the_bound_passes_and_one_over_it_fails_saying_both(overfit, test_tokens):
    ppl = perplexity(overfit, test_tokens)
    assert compare(lm_case(test_tokens, ppl * 1.01), overfit, overfit) is None
    untrained = lmdata.lm_as_data(small_model(seed=1))
    bound = perplexity(untrained, test_tokens) * 0.99
    assert compare(lm_case(test_tokens, bound), overfit, untrained) == (
        f"a8.lm.perplexity: perplexity {perplexity(untrained, test_tokens):.1f} on the test's tokens, "
        f"needs at most {bound:.1f}"
    )


def with_rope_base(base: float) -> lm.LanguageModel:
    model = small_model()
    model.rope_base = base  # (lmdata reads the attribute; lecture 16's model has none: 10000)
    return model


def with_eps(eps: float) -> lm.LanguageModel:
    model = small_model()
    for norm in model.modules():
        if isinstance(norm, lm.RMSNorm):
            norm.eps = eps
    return model


@pytest.mark.parametrize(
    "other, words",
    [
        (lambda: small_model(d_model=48), "d_model 48 (the test's: 32), hidden 128 (the test's: 88)"),
        (lambda: small_model(n_heads=4), "n_heads 4 (the test's: 2), n_kv_heads 4 (the test's: 2)"),
        (lambda: small_model(n_layers=2), "n_layers 2 (the test's: 1)"),
        (lambda: small_model(max_len=64), "max_len 64 (the test's: 32)"),
        (lambda: with_rope_base(500.0), "rope_base 500 (the test's: 10000)"),
        (lambda: with_eps(1e-3), "eps 0.001 (the test's: 1e-06)"),
    ],
)
def test_a_model_built_otherwise_than_the_tests_fails_saying_how(other, words, test_tokens):
    reference = lmdata.lm_as_data(small_model())
    problem = compare(lm_case(test_tokens, 1e9), reference, lmdata.lm_as_data(other()))
    assert problem == f"a8.lm.perplexity: the model is not built as the test builds it: {words}"


def garbage(reference: np.ndarray) -> list:
    claims = reference.copy()
    claims[1:8] = [65536, 4096, 64, 64, 64, 16384, 65536]  # the largest sizes, a small model's parameters
    nan = reference.copy()
    nan[-3] = np.nan
    overflowing = reference.copy()
    overflowing[lmdata.HEADER :] = 1e300  # finite numbers whose products are not (it predicts uniformly)
    return [np.zeros(3), np.array(["a", "b"]), reference[:, None], reference.astype(np.int64), claims, nan,
            reference[:-1], overflowing]  # fmt: skip


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (numpy's overflow, said in the verdict instead)
def test_garbage_fails_with_a_reason_and_never_raises(test_tokens, monkeypatch):
    reference = lmdata.lm_as_data(small_model())
    case = lm_case(test_tokens, 100.0)
    for got in garbage(reference):
        for ref in (reference, None):
            problem = compare(case, ref, got)
            assert isinstance(problem, str) and problem.startswith("a8.lm.perplexity: "), (got[:12], problem)
    # a loss that is no number passes no bound
    monkeypatch.setattr(grading, "mean_loss", lambda *args: math.nan)
    assert compare(case, reference, reference) == (
        "a8.lm.perplexity: perplexity nan on the test's tokens, needs at most 100.0"
    )


# ----------------------------------------------------------------------------- the child


def test_the_child_gives_the_verdicts_compare_gives_in_process(overfit, test_tokens):
    untrained = lmdata.lm_as_data(small_model(seed=1))
    wider = lmdata.lm_as_data(small_model(d_model=48))
    case = lm_case(test_tokens, 50.0)
    found = []
    for got in (overfit, untrained, wider, garbage(overfit)[4]):
        assert verify.safe_compare(case, overfit, got) == compare(case, overfit, got)
        found.append(compare(case, overfit, got))
    assert found[0] is None and "perplexity" in found[1] and "not built as" in found[2] and "need" in found[3]
    # the request carries the case's kind; the child evaluates no other kind
    assert evaluate.verdict_of(evaluate.request_bytes(case, overfit, untrained)) == {"verdict": found[1]}
    other = replace(case, kind="close")
    assert evaluate.verdict_of(evaluate.request_bytes(other, overfit, overfit)) == {
        "verdict": "a8.lm.perplexity: a case of kind 'close' is not evaluated here"
    }


def test_a_vector_that_claims_huge_sizes_is_refused_and_the_graders_memory_stays_as_it_was(
    overfit, test_tokens
):
    huge = garbage(overfit)[4]
    case = lm_case(test_tokens, 50.0)
    before = reset_peak_memory()
    for reference in (overfit, None):
        problem = verify.safe_compare(case, reference, huge)
        assert problem.startswith("a8.lm.perplexity: ") and "MemoryError" not in problem, problem
    assert peak_memory() - before < 64, "the grader's own memory grew"


def test_an_evaluation_over_the_childs_memory_is_refused_naming_the_limit(monkeypatch):
    """A model of the test's own shape whose logits take 64 MB a batch: more than a child of 200 MB holds."""
    model = lmdata.lm_as_data(small_model(vocab_size=8192, max_len=64))
    tokens = np.random.default_rng(0).integers(0, 8192, 64 * 40 + 1)
    case = replace(lm_case(tokens, 1e9), params={**lm_case(tokens, 1e9).params, "context": 64})
    monkeypatch.setattr(evaluate, "MEMORY_MB", 200)
    before = reset_peak_memory()
    assert verify.safe_compare(case, model, model) == (
        "a8.lm.perplexity: the recorded model needed more than 200 MB to evaluate"
    )
    assert peak_memory() - before < 64, "the grader's own memory grew"


def reset_peak_memory() -> float:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as err:
        pytest.skip(f"this system cannot reset a process's peak memory ({err})")
    return peak_memory()


def peak_memory() -> float:
    line = next(
        line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM")
    )
    return int(line.split()[1]) / 1024


# ----------------------------------------------------------------------------- the held-out text


def test_the_window_follows_the_seed_is_n_tokens_of_the_held_out_text_and_never_the_tests(test_tokens):
    case = lm_case(test_tokens, 50.0, HELD_OUT)
    first = heldout_case(case, 11, DEFAULT_TEXT).params
    assert heldout_case(case, 11, DEFAULT_TEXT).params["tokens"] == first["tokens"]
    assert heldout_case(case, 12, DEFAULT_TEXT).params["tokens"] != first["tokens"]
    window = first["tokens"]
    assert len(window) == 257 and window != case.params["tokens"]
    tokenizer = lm.shakespeare_tokenizer(512)
    text = tokenizer.decode(window)
    assert text[5:-5] in DEFAULT_TEXT.read_text(encoding="utf-8")  # a stretch of that text,
    assert text[5:105] not in lm.shakespeare_text()  # ... which the course's text is not
    assert first["evaluated_on"] == "held-out text"  # (what the failing verdict says it was judged on)
    assert {k: v for k, v in first.items() if k not in ("tokens", "evaluated_on")} == {
        k: v for k, v in case.params.items() if k != "tokens"
    }
    # a case as the test cell gave it, never the grader's window, reaches the kernel's own comparison
    assert "evaluated_on" not in case.params


def test_a_held_out_text_case_without_its_text_or_seed_or_of_another_kind_is_refused(test_tokens):
    case = lm_case(test_tokens, 50.0, HELD_OUT)
    with pytest.raises(RuntimeError, match="given no held-out seed"):
        heldout_case(case, None, DEFAULT_TEXT)
    with pytest.raises(RuntimeError, match="given none"):
        heldout_case(case, 1, None)
    with pytest.raises(ValueError, match="for a lm_loss case, not model_accuracy"):
        heldout_case(replace(case, kind="model_accuracy"), 1, DEFAULT_TEXT)
    for spec in ({**HELD_OUT, "n_tokens": 10}, {**HELD_OUT, "vocab_size": 100000}, {**HELD_OUT, "offset": 0},
                 {**HELD_OUT, "n_tokens": 64.5}):  # fmt: skip
        with pytest.raises(ValueError, match="held-out text takes|whole number in"):
            heldout_case(lm_case(test_tokens, 50.0, spec), 1, DEFAULT_TEXT)
    with pytest.raises(RuntimeError, match="a case asks for 65537"):
        heldout_case(lm_case(test_tokens, 50.0, {**HELD_OUT, "n_tokens": 65536}), 1, DEFAULT_TEXT)


def course_naming(tmp_path: Path, text_file: str | None) -> Course:
    root = tmp_path / "course"
    root.mkdir(parents=True, exist_ok=True)
    named = "" if text_file is None else f"c.HeldOut.text_file = {text_file!r}\n"
    (root / "nbgrader_config.py").write_text(f"c = get_config()\n{named}")
    return Course(root=root)


def test_a_course_that_names_a_missing_held_out_text_is_refused_naming_it(tmp_path):
    from autograder.grading.pipeline import make_batch
    from autograder.settings import Settings

    course = course_naming(tmp_path, "private/heldout.txt")
    with pytest.raises(
        FileNotFoundError, match=re.escape(str(tmp_path / "course" / "private" / "heldout.txt"))
    ):
        heldout_text(course)
    with pytest.raises(FileNotFoundError, match="c.HeldOut.text_file"):  # the batch is refused before any run
        make_batch(course, "A8", Reference(tmp_path, {}, {}, {}), Settings())
    assert heldout_text(course_naming(tmp_path / "plain", None)) == DEFAULT_TEXT


def test_a_course_that_names_its_own_text_is_judged_on_it_not_on_the_default(tmp_path, test_tokens):
    text = tmp_path / "elsewhere" / "heldout.txt"
    text.parent.mkdir()
    text.write_text("0123456789 98765 43210 " * 300 + "\n", encoding="utf-8")  # characters of other kinds
    course = course_naming(tmp_path, str(text))
    assert heldout_text(course) == text
    case = lm_case(test_tokens, 50.0, HELD_OUT)
    model = lmdata.lm_as_data(small_model(d_model=16))  # untrained: the plumbing, not the training, is tried
    mine = reference_with(case, model, text=heldout_text(course))
    configured = verify.held_out(case, mine).params["tokens"]
    default = verify.held_out(case, reference_with(case, model)).params["tokens"]
    assert set(lm.shakespeare_tokenizer(512).decode(configured)) <= set("0123456789 \n")
    assert perplexity(model, configured) != pytest.approx(perplexity(model, default), rel=1e-3)
    # relative to the course's root too; a changed file is encoded afresh (the encoding is kept by time and size)
    (tmp_path / "course" / "mine.txt").write_text("abc abd abe " * 200, encoding="utf-8")
    relative = heldout_text(course_naming(tmp_path, "mine.txt"))
    assert relative == tmp_path / "course" / "mine.txt"
    before = heldout_case(case, 3, relative).params["tokens"]
    relative.write_text("xyz xyw xyv, " * 300, encoding="utf-8")
    after = heldout_case(case, 3, relative).params["tokens"]
    assert set(lm.shakespeare_tokenizer(512).decode(after)) <= set("xyzwv, ") and after != before


def test_no_kernel_sees_the_held_out_folder():
    """The namespaces and bubblewrap show a kernel only the course's code of this repository (dlcourse/ and
    autograder/), never the repository itself, where the held-out text lies."""
    from autograder.course import ROOT
    from autograder.runner.visibility import Visibility

    seen = Visibility(scratch=Path("/nonexistent-scratch"))
    assert DEFAULT_TEXT.is_file() and DEFAULT_TEXT.is_relative_to(ROOT)
    assert str(ROOT) in seen.hidden()
    assert not any(DEFAULT_TEXT.is_relative_to(p) or DEFAULT_TEXT.parent == Path(p) for p in seen.revealed())


def test_the_default_held_out_text_is_none_of_the_text_the_course_ships():
    """No stretch of 200 characters of it is in dlcourse/texts/shakespeare.txt: every such stretch holds one of
    its 50-character blocks, and none of those is there."""
    held_out, shipped = DEFAULT_TEXT.read_text(encoding="utf-8"), lm.shakespeare_text()
    assert len(held_out) > 30_000
    assert not any(held_out[i : i + 50] in shipped for i in range(0, len(held_out) - 49, 50))


# ----------------------------------------------------------------------------- weights the cell did not train


def _capture(cell: str, name: str, value: bytes, kind: str = "lm_loss") -> dict[str, bytes]:
    import json

    from autograder.runner.protocol import CASES_FILE

    line = {"name": name, "kind": kind, "params": {"seeded": True}, "file": "0000.npy", "cell": cell}
    return {CASES_FILE: (json.dumps(line) + "\n").encode(), "0000.npy": value}


def test_weights_the_same_under_the_graders_seed_are_flagged_and_trained_ones_are_not():
    """A8's training cell trains from ``MEASURE_SEED`` in the measured run and from its own seed in the notebook's run:
    a hand-in whose train_lm returns pasted weights records the same bytes in both (the review's forger earned 15 of
    15 so), a trained model does not. Only the reference says which cases are seeded: a kernel that drops the mark
    from its own recording changes nothing."""
    from autograder.grading.measure import unchanged_by_the_seed

    seeded = {"a8.train": Case("a8.train", "lm_loss", {"seeded": True}, "test_training")}
    unseeded = {"a8.train": Case("a8.train", "lm_loss", {}, "test_training")}
    main, same = (
        _capture("test_training", "a8.train", b"weights"),
        _capture("test_training", "a8.train", b"weights"),
    )
    trained = _capture("test_training", "a8.train", b"other weights")
    (problem,) = unchanged_by_the_seed(seeded, main, same, "test_training")
    assert problem.startswith("a8.train: the model is the same, byte for byte")
    assert unchanged_by_the_seed(seeded, main, trained, "test_training") == []
    assert unchanged_by_the_seed(unseeded, main, same, "test_training") == []  # the source did not ask
    assert unchanged_by_the_seed(seeded, main, same, "test_cache") == []  # another cell's run
    other_cell = _capture("test_other", "a8.train", b"weights")  # recorded outside its cell: not this check's
    assert unchanged_by_the_seed(seeded, main, other_cell, "test_training") == []
