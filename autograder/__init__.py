"""The course's autograder: safe, parallel, resumable batch grading on top of nbgrader.

Run it as ``python -m autograder --help``.
"""
