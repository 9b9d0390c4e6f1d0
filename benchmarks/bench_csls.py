"""CSLS mutual top-k (GEH): the tiled C++ kernel against numpy (full similarity matrix + argpartition) and faiss.

Baseline: S = SA @ SB^T once (N_A x N_B float32, 1.6 GB at the full size),
then, in row blocks to bound the index arrays, the csls_k-mean hubness terms,
the CSLS matrix, row and column top-k by argpartition, the mutual test, and the
same greedy one-to-one pass. Peer: faiss, two exact flat searches (IndexFlatIP,
csls_k neighbours each way) plus the merge of the candidate baseline (CSLS
restricted to those neighbours), and the two searches alone. FLOPs per call: 2 * N_A * N_B * A (the GEMM;
faiss does it twice).
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size
from crossembed.cli.kernel_peers import (
    faiss_csls_mutual_topk,
    faiss_topk_rows_and_columns,
    numpy_csls_mutual_topk,
    numpy_csls_mutual_topk_candidates,
)

N, A, K, CSLS_K = size("csls_n", 20_000, 2000), size("csls_a", 256, 256), 5, 50
M = size("csls_m", 64, 64)  # candidates per row for the candidate-restricted kernel


@pytest.fixture(scope="module")
def signatures():
    """Two sides sharing half their objects (noisy copies), signature-like: non-negative, unit rows."""
    rng = np.random.default_rng(4)
    SA = rng.random((N, A), dtype=np.float32) ** 4
    SB = np.vstack(
        [
            SA[rng.permutation(N)[: N // 2]] + 0.05 * rng.random((N // 2, A), dtype=np.float32),
            rng.random((N - N // 2, A), dtype=np.float32) ** 4,
        ]
    )
    return [s / np.linalg.norm(s, axis=1, keepdims=True) for s in (SA, SB)]


@pytest.mark.benchmark(group="csls_mutual_topk")
def test_csls_kernel(benchmark, signatures):
    SA, SB = signatures
    run(benchmark, ce.csls_mutual_topk, SA, SB, k=K, csls_k=CSLS_K, role="kernel", flops=2.0 * N * N * A, primary=True)


@pytest.mark.benchmark(group="csls_mutual_topk")
def test_csls_numpy_baseline(benchmark, signatures):
    SA, SB = signatures
    got = run(benchmark, numpy_csls_mutual_topk, SA, SB, K, CSLS_K, role="numpy float32", flops=2.0 * N * N * A)
    kernel = ce.csls_mutual_topk(SA, SB, k=K, csls_k=CSLS_K)
    same = len(set(map(tuple, got[0].tolist())) & set(map(tuple, kernel[0].tolist())))
    assert same >= 0.99 * len(kernel[0]), f"the baseline computes something else ({same} of {len(kernel[0])} pairs)"


@pytest.mark.benchmark(group="csls_mutual_topk")
def test_csls_faiss_two_flat_searches(benchmark, signatures):
    pytest.importorskip("faiss")
    SA, SB = signatures
    got = run(
        benchmark,
        faiss_csls_mutual_topk,
        SA,
        SB,
        K,
        CSLS_K,
        role="faiss 2 flat searches + merge",
        flops=2.0 * N * N * A,
    )
    kernel = ce.csls_mutual_topk(SA, SB, k=K, csls_k=CSLS_K)
    same = len(set(map(tuple, got[0].tolist())) & set(map(tuple, kernel[0].tolist())))
    assert same >= 0.95 * len(kernel[0]), f"the peer computes something else ({same} of {len(kernel[0])} pairs)"


@pytest.mark.benchmark(group="csls_mutual_topk")
def test_csls_faiss_searches_alone(benchmark, signatures):
    """The two flat searches without the merge: the floor of any two-sweep method (issue 33's yardstick)."""
    pytest.importorskip("faiss")
    SA, SB = signatures
    run(
        benchmark,
        faiss_topk_rows_and_columns,
        SA,
        SB,
        CSLS_K,
        role="faiss 2 flat searches alone (no merge)",
        flops=2.0 * N * N * A,
    )


@pytest.fixture(scope="module")
def candidates(signatures):
    """Each side's M nearest rows of the other side (the fused probit top-k with zero variances is a dot-product top-k)."""
    SA, SB = signatures
    near = lambda X, Y: ce.ProbitDocs(Y, np.zeros_like(Y)).top_k(X, np.zeros_like(X), M)[1]  # noqa: E731
    return near(SA, SB), near(SB, SA)


@pytest.mark.benchmark(group="csls_mutual_topk_candidates")
def test_csls_candidates_kernel(benchmark, signatures, candidates):
    SA, SB = signatures
    run(
        benchmark,
        ce.kernels.csls_mutual_topk_candidates,
        SA,
        SB,
        *candidates,
        k=K,
        csls_k=CSLS_K,
        role="kernel",
        flops=2.0 * 2 * N * M * A,
        primary=True,
    )


@pytest.mark.benchmark(group="csls_mutual_topk_candidates")
def test_csls_candidates_numpy_baseline(benchmark, signatures, candidates):
    SA, SB = signatures
    got = run(
        benchmark,
        numpy_csls_mutual_topk_candidates,
        SA,
        SB,
        *candidates,
        K,
        CSLS_K,
        role="numpy float32",
        flops=2.0 * 2 * N * M * A,
    )
    kernel = ce.kernels.csls_mutual_topk_candidates(SA, SB, *candidates, k=K, csls_k=CSLS_K)
    same = len(set(map(tuple, got[0].tolist())) & set(map(tuple, kernel[0].tolist())))
    assert same >= 0.99 * len(kernel[0]), f"the baseline computes something else ({same} of {len(kernel[0])} pairs)"
