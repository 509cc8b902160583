"""Public checks for the lectures' exercises, one module per lecture (``l02``, ``l03``, ...).

Each check is a function ``name(c: Checker, *answer)`` that calls the student's answer through
``c.call`` and records verdicts with ``c.close`` and ``c.true``; run one with
``dlcourse.check("l02.name", answer)``. Checks compare with independent computations (numeric
gradients, torch, known properties), never with a stored solution.
"""
