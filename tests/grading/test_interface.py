"""The sandbox behind its interface (:mod:`autograder.runner.interface`): the real :class:`Sandbox` and the tests'
fake (:mod:`tests.fixtures.fake_sandbox`) both answer it, with the same calls, so what passes with the fake
is what the pipeline asks of the real one."""

from __future__ import annotations

import inspect

from autograder.runner.interface import SandboxFactory, SandboxRun
from autograder.runner.sandbox import Limits, Sandbox
from tests.fixtures.fake_sandbox import FakeSandbox, FakeSandboxes


def test_the_real_sandbox_and_the_fake_answer_the_interface_with_the_same_calls():
    real = Sandbox(Limits())
    try:
        assert isinstance(real, SandboxRun) and isinstance(Sandbox, SandboxFactory)
    finally:
        real.cleanup()
    fake = FakeSandboxes()
    assert isinstance(fake, SandboxFactory) and isinstance(fake(Limits()), SandboxRun)
    for method in ("start", "run", "probe", "cleanup"):
        wanted = inspect.signature(getattr(SandboxRun, method)).parameters
        for made in (Sandbox, FakeSandbox):
            assert list(inspect.signature(getattr(made, method)).parameters) == list(wanted), (made, method)
    called = list(inspect.signature(SandboxFactory.__call__).parameters)[1:]
    assert list(inspect.signature(Sandbox).parameters) == called
    assert list(inspect.signature(fake).parameters) == called


def test_the_batch_makes_each_sandbox_with_the_settings_factory_and_the_real_one_by_default(toy_course):
    from dataclasses import replace

    from autograder.grading.pipeline import make_batch
    from autograder.grading.reference import build_reference
    from tests.fixtures.fake_sandbox import settings

    fake = FakeSandboxes()
    given = settings(fake)
    reference = build_reference(toy_course, "T1", given)
    batch = make_batch(toy_course, "T1", reference, given)
    made = batch.sandbox(3)
    assert isinstance(made, FakeSandbox) and made.slot == 3 and fake.made[-1] is made
    assert make_batch(toy_course, "T1", reference, replace(given, sandbox=None)).sandboxes is Sandbox
