"""What a run was measured on: cores, CPU, versions, isolation, and how busy the machine was."""

from __future__ import annotations

import os
import platform
import sys

from dlcourse.runtime import installed_version


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (runnable processes), rounded; other people share this CPU."""
    return [round(x, 2) for x in os.getloadavg()]


def describe_machine() -> dict:
    from autograder.api import resolve
    from dlcourse.measure import cpu_info

    cpu = cpu_info()
    return {
        "cores": cpu.cores,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu.model,
        "cpu_ghz": cpu.ghz,
        "vector_isa": cpu.vector_isa,
        "cpu_peak_fp32_flops": cpu.peak_fp32(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {
            "torch": installed_version("torch"),
            "tensorflow": installed_version("tensorflow", "tensorflow-cpu"),
            "nbgrader": installed_version("nbgrader"),
            "nbclient": installed_version("nbclient"),
            "numpy": installed_version("numpy"),
        },
        "bubblewrap": resolve("auto").mode == "bubblewrap",
        "isolation": resolve("auto").describe(),
        "grader_is_root": os.geteuid() == 0,
        "load_average_start": load_average(),
    }
