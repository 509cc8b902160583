"""Benchmarks of the course and its autograder: ``python -m benchmarks`` (``make bench``).

Three sections, each one module with one entry function, recorded side by side in one run:

- ``grading``: grading throughput of plain nbgrader, the bare lower bound and the autograder, on the same
  generated submissions; scaling with batch size and workers; the autograder's overhead per submission;
- ``course``: run time of every lecture and source assignment in a fresh kernel, against its limit;
- ``claims``: the lectures' speed claims, measured outside the notebooks with warm-up and synchronisation.

Each run writes ``results/<UTC timestamp>.json``; ``report`` rebuilds ``RESULTS.md`` and its plot from the
recorded runs, so every figure there comes from a recorded run. Shared machines are noisy: read the
ratios, and the load average recorded with each run.
"""
