"""GEH's per-round candidate lists: the one-sweep C++ kernel against numpy and faiss.

Regime: a GEH round at 10k rows a side - signatures against 512 pool
anchors, top-64 per row each way (the ``pool`` proposer's defaults). The
kernel computes each ``<SA_i, SB_j>`` once and keeps both directions' lists;
numpy computes row blocks of ``SA @ SB^T`` and of ``SB @ SA^T`` with an
argpartition (unsorted lists, in its favour); faiss runs two exact flat
searches (``IndexFlatIP``). FLOPs per call: 2 * N_A * N_B * A (the peers do
it twice).
"""

import numpy as np
import pytest

from _bench import run, size
from crossembed import kernels
from crossembed.cli.kernel_peers import faiss_topk_rows_and_columns, numpy_topk_rows_and_columns

N, A, K = size("lists_n", 10_000, 2_000), 512, 64


@pytest.fixture(scope="module")
def signatures():
    """Non-negative unit rows, peaked like kernel signatures, B a noisy shuffled copy of A."""
    rng = np.random.default_rng(5)
    SA = rng.random((N, A), dtype=np.float32) ** 6
    SB = SA[rng.permutation(N)] + 0.02 * rng.random((N, A), dtype=np.float32)
    return [np.ascontiguousarray(s / np.linalg.norm(s, axis=1, keepdims=True)) for s in (SA, SB)]


def _agreement(got, want) -> float:
    """Mean fraction of each row's list the two methods share."""
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got.tolist(), want.tolist())]))


@pytest.mark.benchmark(group="topk_rows_and_columns")
def test_lists_kernel(benchmark, signatures):
    run(benchmark, kernels.topk_rows_and_columns, *signatures, K, role="kernel", flops=2.0 * N * N * A, primary=True)


@pytest.mark.benchmark(group="topk_rows_and_columns")
def test_lists_numpy_baseline(benchmark, signatures):
    rows, cols = run(
        benchmark, numpy_topk_rows_and_columns, *signatures, K, role="numpy float32", flops=4.0 * N * N * A
    )
    _, want_rows, _, want_cols = kernels.topk_rows_and_columns(*signatures, K)
    assert _agreement(rows, want_rows) > 0.99 and _agreement(cols, want_cols) > 0.99


@pytest.mark.benchmark(group="topk_rows_and_columns")
def test_lists_faiss_two_flat_searches(benchmark, signatures):
    pytest.importorskip("faiss")
    rows, cols = run(
        benchmark, faiss_topk_rows_and_columns, *signatures, K, role="faiss 2 flat searches", flops=4.0 * N * N * A
    )
    _, want_rows, _, want_cols = kernels.topk_rows_and_columns(*signatures, K)
    assert _agreement(rows, want_rows) > 0.99 and _agreement(cols, want_cols) > 0.99
