"""Lecture 8's self-checks reject wrong answers and stubs, and accept a torch.where answer to relu_or_tanh.

The checks' positive control is the lecture's own hidden solution, run by tests/course/test_lectures.py; this
file shows the checks reject wrong answers and stubs."""

from __future__ import annotations

import warnings

import pytest

from dlcourse import check
from dlcourse.selfcheck import TODO

torch = pytest.importorskip("torch")


def stub(*args):
    raise NotImplementedError


# trace_is_faithful ---------------------------------------------------------------------------------


def trace_is_faithful_compares_on_the_example(function, example, other):
    # The trace always reproduces the input it was traced on: always True.
    traced = torch.jit.trace(function, example)
    return bool(torch.allclose(traced(example), function(example)))


def trace_is_faithful_always_true(function, example, other):
    return True


def trace_is_faithful_scripted(function, example, other):
    # Scripting keeps the branch, so this compares the function with itself: always True.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        scripted = torch.jit.script(function)
    return bool(torch.allclose(scripted(other), function(other)))


@pytest.mark.parametrize(
    "wrong",
    [trace_is_faithful_always_true, trace_is_faithful_scripted, trace_is_faithful_compares_on_the_example],
)
def test_trace_is_faithful_fails_on_wrong_answers(wrong):
    assert not check("l08.trace_is_faithful", wrong, show=False).passed


def test_trace_is_faithful_reports_a_stub_as_not_done():
    report = check("l08.trace_is_faithful", stub, show=False)
    assert not report.passed
    assert report.lines[-1].status == TODO


def test_trace_is_faithful_keeps_its_warnings_inside():
    # An answer that traces the check's function with an `if` on tensor data, which warns.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check("l08.trace_is_faithful", trace_is_faithful_compares_on_the_example, show=False)
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]


# export_dynamic_batch -------------------------------------------------------------------------------


def export_static(module, example):
    return torch.export.export(module, (example,))


def export_returns_module(module, example):
    return module


def test_export_dynamic_batch_fails_on_a_static_export_and_says_why():
    report = check("l08.export_dynamic_batch", export_static, show=False)
    assert not report.passed
    assert any("dynamic_shapes" in line.hint for line in report.lines)


def test_export_dynamic_batch_fails_on_the_wrong_type():
    assert not check("l08.export_dynamic_batch", export_returns_module, show=False).passed


def test_export_dynamic_batch_reports_a_stub_as_not_done():
    report = check("l08.export_dynamic_batch", stub, show=False)
    assert not report.passed
    assert report.lines[-1].status == TODO


# relu_or_tanh ------------------------------------------------------------------------------------


def relu_or_tanh_where(x):
    # Computes both branches and picks one: also exportable, also correct.
    return torch.where(x.mean() > 0, x.clamp(min=0), torch.tanh(x))


def relu_or_tanh_python_if(x):
    if x.mean() > 0:
        return x.clamp(min=0)
    return torch.tanh(x)


def relu_or_tanh_swapped(x):
    return torch.cond(x.mean() > 0, lambda t: torch.tanh(t), lambda t: t.clamp(min=0), (x,))


def test_relu_or_tanh_accepts_torch_where_as_well_as_torch_cond():
    # The lecture's solution uses torch.cond; this other right answer must pass too.
    assert check("l08.relu_or_tanh", relu_or_tanh_where, show=False).passed


def test_relu_or_tanh_fails_on_a_python_if_and_points_to_cond(capfd):
    report = check("l08.relu_or_tanh", relu_or_tanh_python_if, show=False)
    assert not report.passed
    assert any("torch.cond" in line.hint for line in report.lines)
    # A failed export also prints its partial graph on stderr; the check keeps that quiet.
    assert "def forward" not in capfd.readouterr().err


def test_relu_or_tanh_fails_on_swapped_branches():
    assert not check("l08.relu_or_tanh", relu_or_tanh_swapped, show=False).passed


def test_relu_or_tanh_reports_a_stub_as_not_done():
    report = check("l08.relu_or_tanh", stub, show=False)
    assert not report.passed
    assert report.lines[-1].status == TODO
