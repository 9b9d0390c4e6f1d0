"""Shared sizes, data and the timing helper of the kernel benchmarks.

Every benchmark group holds one C++ kernel (``role="kernel"``, the primary
one marked ``primary``) and numpy/torch baselines on the same inputs.
``benchmarks/report.py`` turns ``--benchmark-json`` output into a markdown
table with speed ratios and GFLOP/s.

Sizes: the issue's sizes by default; ``CROSSEMBED_BENCH_SCALE=small`` for a
quick smoke run; any single size can be overridden with
``CROSSEMBED_BENCH_<NAME>=<int>`` (e.g. ``CROSSEMBED_BENCH_PROBIT_N=50000``).
Each benchmark runs 3 rounds of one call (pedantic mode; one warm-up call at the small scale).
"""

import numpy as np
import pytest


def pytest_collect_file(file_path, parent):
    """Collect the ``bench_*.py`` modules (pyproject's python_files only names test files)."""
    # a file named on the command line is collected by pytest itself: do not collect it twice
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
