"""Greedy one-to-one selection (GEH promotion, CSLS mutual step): the C++ matcher against numpy.

Regime: a GEH round at 50k rows a side merges its views' proposals into
~500k candidate pairs whose scores are ranks with many ties (posterior,
then CSLS); both sides take pairs by descending score, ties to the lower
(a, b). Baseline: ``np.lexsort`` plus one Python pass over the order, what a
numpy user writes. No FLOPs: the report shows times and the ratio.
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size
from crossembed.cli.kernel_peers import numpy_greedy_one_to_one

P, ROWS = size("greedy_pairs", 500_000, 20_000), size("greedy_rows", 50_000, 2_000)


@pytest.fixture(scope="module")
def candidates():
    rng = np.random.default_rng(7)
    pairs = rng.integers(0, ROWS, size=(P, 2))
    scores = rng.integers(0, 50, size=P).astype(np.float64)  # coarse posteriors: ties everywhere
    return pairs, scores


@pytest.mark.benchmark(group="greedy_one_to_one")
def test_greedy_kernel(benchmark, candidates):
    run(benchmark, ce.kernels.greedy_one_to_one, *candidates, role="kernel", flops=0.0, primary=True)


@pytest.mark.benchmark(group="greedy_one_to_one")
def test_greedy_numpy_baseline(benchmark, candidates):
    got = run(benchmark, numpy_greedy_one_to_one, *candidates, role="numpy", flops=0.0)
    np.testing.assert_array_equal(got, ce.kernels.greedy_one_to_one(*candidates))
