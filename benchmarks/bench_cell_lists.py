"""GEH's anchor-cell candidate lists: fused C++ top-k per cell against numpy and the exact lists.

Regime: the map pass / rounds above 30k rows a side - 20k rows a side here
(the benchmark must finish in minutes), peaked signatures against 512 list
anchors, 4 cells a row, top-64 per row each way. The cells score only pairs
sharing one of their 4 nearest anchors (~3 % of all pairs); the exact lists
(``kernels.topk_rows_and_columns``) score every pair; numpy scores each
cell's block with a GEMM and an argpartition (the implementation before this
kernel path). FLOPs: 2 x scored pairs x anchors for the cell paths.
"""

import numpy as np
import pytest

from _bench import run, size
from crossembed import kernels
from crossembed.cli.kernel_peers import numpy_cell_candidate_lists
from crossembed.linking.cells import cell_candidate_lists, cell_pairs, top_cells

N, A, K, R = size("cells_n", 20_000, 2_000), 512, 64, 4


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    SA = rng.random((N, A), dtype=np.float32) ** 6
    SB = SA[rng.permutation(N)] + 0.02 * rng.random((N, A), dtype=np.float32)
    SA, SB = (np.ascontiguousarray(s / np.linalg.norm(s, axis=1, keepdims=True)) for s in (SA, SB))
    ca, cb = top_cells(SA, R), top_cells(SB, R)
    return SA, SB, ca, cb, cell_pairs(ca, cb, A)


def _agreement(got, want) -> float:
    return float(np.mean([len(set(g) & set(w)) / max(1, len(set(w) - {-1})) for g, w in zip(got, want)]))


@pytest.mark.benchmark(group="cell_candidate_lists")
def test_cells_fused_kernel(benchmark, problem):
    SA, SB, ca, cb, pairs = problem
    assert pairs < 0.125 * N * N  # the cell path, not its exact-lists fallback
    run(benchmark, cell_candidate_lists, SA, SB, ca, cb, K, n_cells=A, role="kernel", flops=2 * pairs * A, primary=True)


@pytest.mark.benchmark(group="cell_candidate_lists")
def test_cells_numpy_baseline(benchmark, problem):
    SA, SB, ca, cb, pairs = problem
    got_a, got_b = run(
        benchmark, numpy_cell_candidate_lists, SA, SB, ca, cb, K, role="numpy float32", flops=2 * pairs * A
    )
    want_a, want_b = cell_candidate_lists(SA, SB, ca, cb, K, n_cells=A)
    assert _agreement(got_a.tolist(), want_a.tolist()) > 0.99 and _agreement(got_b.tolist(), want_b.tolist()) > 0.99


@pytest.mark.benchmark(group="cell_candidate_lists")
def test_cells_exact_lists(benchmark, problem):
    SA, SB, *_ = problem
    run(benchmark, kernels.topk_rows_and_columns, SA, SB, K, role="exact lists (every pair)", flops=2.0 * N * N * A)
