"""CSLS mutual top-k (GEH): the tiled C++ kernel against numpy (full similarity matrix + argpartition).

Baseline: S = SA @ SB^T once (N_A x N_B float32, 1.6 GB at the full size),
then, in row blocks to bound the index arrays, the csls_k-mean hubness terms,
the CSLS matrix, row and column top-k by argpartition, the mutual test, and the
same greedy one-to-one pass. FLOPs per call: 2 * N_A * N_B * A (the GEMM).
"""
import numpy as np
import pytest

import crossembed as ce
from crossembed.baselines import numpy_csls_mutual_topk
from _bench import run, size

N, A, K, CSLS_K = size("csls_n", 20_000, 2000), size("csls_a", 256, 256), 5, 50


@pytest.fixture(scope="module")
def signatures():
    """Two sides sharing half their objects (noisy copies), signature-like: non-negative, unit rows."""
    rng = np.random.default_rng(4)
    SA = rng.random((N, A), dtype=np.float32) ** 4
    SB = np.vstack([SA[rng.permutation(N)[: N // 2]] + 0.05 * rng.random((N // 2, A), dtype=np.float32),
                    rng.random((N - N // 2, A), dtype=np.float32) ** 4])
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
