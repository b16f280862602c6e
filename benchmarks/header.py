"""The header every benchmark report starts with (shared by the benchmarks)."""

from __future__ import annotations

import multiprocessing
import os
import platform
import sys

__all__ = ["report_header"]


def report_header(benchmark: str) -> dict:
    """The benchmark's name, its command line, Python, the machine and its load."""
    return {
        "benchmark": benchmark,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {multiprocessing.cpu_count()} cpus",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
