"""One call to make a run repeatable across random, numpy, torch and TensorFlow."""

from __future__ import annotations

import os
import random

import numpy as np

from dlcourse._lazy import loaded


def seed_everything(seed: int = 0, deterministic: bool = False) -> np.random.Generator:
    """Seed Python's ``random``, numpy, torch and TensorFlow (those already imported), and return a
    fresh ``numpy.random.Generator`` seeded the same way.

    With ``deterministic=True`` torch also uses deterministic algorithms (slower on the GPU, and an
    error for operations that have none) and TensorFlow enables op determinism.
    Frameworks are seeded only if the program imported them: seeding never pays for an import.
    """
    random.seed(seed)
    np.random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)  # affects child processes, e.g. DataLoader workers
    torch = loaded("torch")
    if torch is not None:
        torch.manual_seed(seed)  # seeds CUDA too
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
    tf = loaded("tensorflow")
    if tf is not None:
        tf.random.set_seed(seed)
        if deterministic:
            tf.config.experimental.enable_op_determinism()
    return np.random.default_rng(seed)
