"""dlcourse: the shared helpers behind the course's lectures, assignments and tests.

Everything a notebook needs more than once lives here, in one place:

- :mod:`dlcourse.runtime`   Colab detection and the version banner
- :mod:`dlcourse.device`    choosing cuda, mps or cpu, and synchronising
- :mod:`dlcourse.seeding`   one call seeds random, numpy, torch and TensorFlow
- :mod:`dlcourse.gradients` numeric gradients, relative error, gradient checks
- :mod:`dlcourse.closeness` one comparison for numpy, torch and TF values
- :mod:`dlcourse.data`      offline data: the scikit-learn digits and the lectures' synthetic data
- :mod:`dlcourse.measure`   timing with warm-up and sync, FLOP/s, bandwidth, published peaks
- :mod:`dlcourse.plots`     loss plots that work live in JupyterLab and Colab, and widgets
- :mod:`dlcourse.selfcheck` friendly checks that students run on their own work
- :mod:`dlcourse.grading`   the test format of the graded assignments

Solutions to graded work are not here: they live in the assignments' sources.
torch and TensorFlow are imported lazily, so ``import dlcourse`` is cheap and works without either.
"""

from dlcourse.closeness import assert_close, to_numpy
from dlcourse.device import get_device, synchronize
from dlcourse.gradients import grad_check, numeric_gradient, rel_error
from dlcourse.runtime import banner, in_colab
from dlcourse.seeding import seed_everything
from dlcourse.selfcheck import check

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "assert_close",
    "banner",
    "check",
    "get_device",
    "grad_check",
    "in_colab",
    "numeric_gradient",
    "rel_error",
    "seed_everything",
    "synchronize",
    "to_numpy",
]
