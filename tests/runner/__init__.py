"""The sandbox (autograder/runner/): warm parents, forks, kernels made ready."""
