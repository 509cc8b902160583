"""The course's autograder: safe, parallel, resumable batch grading on top of nbgrader.

Run it as ``python -m autograder --help``. What other code (the benchmarks, a course's own scripts) may use
is :mod:`autograder.api`: ``from autograder.api import grade``. This file imports nothing, so a sandboxed
child that imports one module of the package loads nothing else.
"""
