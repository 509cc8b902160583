"""Grading (autograder/grading/): the pipeline, the canary, the reference, regrade, verdicts, and the attacks on them."""
