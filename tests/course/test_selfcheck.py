"""The self-check reports passed, failed and not-done work in plain words, and never raises for a wrong answer."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import dlcourse
from dlcourse.selfcheck import FAIL, PASS, TODO


@pytest.fixture
def exercise_module(monkeypatch):
    module = types.ModuleType("dlcourse.exercises.ltest")

    def square(c, fn):
        x = np.array([1.0, -2.0, 3.0])
        got = c.call("square([1, -2, 3])", fn, x)
        c.close("values", got, x**2, hint="square each entry")
        c.true("returns a new array", got is not x, hint="do not modify the input")

    module.square = square
    monkeypatch.setitem(sys.modules, "dlcourse.exercises.ltest", module)


def test_right_answer_passes(exercise_module, capsys):
    report = dlcourse.check("ltest.square", lambda x: x**2)
    assert report.passed and [line.status for line in report.lines] == [PASS, PASS]
    assert "all passed" in capsys.readouterr().out


def test_wrong_answer_explains(exercise_module):
    report = dlcourse.check("ltest.square", lambda x: x * 2, show=False)
    assert not report.passed
    assert report.lines[0].status == FAIL and "square each entry" in report.lines[0].hint


def test_stub_and_crash_and_missing_return(exercise_module):
    def stub(x):
        raise NotImplementedError

    def crash(x):
        return x.undefined

    assert dlcourse.check("ltest.square", stub, show=False).lines[0].status == TODO
    crashed = dlcourse.check("ltest.square", crash, show=False).lines[0]
    assert crashed.status == FAIL and "AttributeError" in crashed.hint
    assert "return" in dlcourse.check("ltest.square", lambda x: None, show=False).lines[0].hint


def test_unknown_exercise():
    with pytest.raises(KeyError, match="no exercise"):
        dlcourse.check("nope.nothing", None)
