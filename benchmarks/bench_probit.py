"""Probit top-k (UEC scoring): the fused C++ kernel against the numpy GEMM baseline, plus plain sgemm.

Baseline: the stacked layout the kernel also uses, as two float32 GEMMs per
query block, mu_s = mu_q @ mu_c^T and sig2_s = [mu_q^2 | v_q] @ [v_c | mu_c^2 + v_c]^T
(3D multiply-adds per pair), then argpartition + sort of the k best.
FLOPs per call: 2 * Q * N * 3D for both. The ``sgemm`` group times numpy's
np.dot on a (Q, 3D) x (3D, N) float32 product: the same FLOPs with no
probit, no top-k, so the GFLOP/s columns are directly comparable.
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size, unit_rows
from crossembed.baselines import numpy_probit_docs, numpy_probit_topk

Q, N, D, K = size("probit_q", 1000, 64), size("probit_n", 100_000, 5000), size("probit_d", 384, 384), 10
FLOPS = 2.0 * Q * N * 3 * D


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    mu_q, mu_c = unit_rows(rng, Q, D), unit_rows(rng, N, D)
    v_q = rng.uniform(0, 2e-3, (Q, D)).astype(np.float32)
    v_c = rng.uniform(0, 2e-3, (N, D)).astype(np.float32)
    return mu_q, v_q, mu_c, v_c


@pytest.fixture(scope="module")
def numpy_docs(data):
    """The baseline's doc-side precomputation (index time, like ProbitDocs)."""
    _, _, mu_c, v_c = data
    return numpy_probit_docs(mu_c, v_c)


@pytest.mark.benchmark(group="probit_topk")
def test_probit_kernel_prepared_docs(benchmark, data):
    mu_q, v_q, mu_c, v_c = data
    docs = ce.ProbitDocs(mu_c, v_c)
    run(benchmark, docs.top_k, mu_q, v_q, K, role="kernel", flops=FLOPS, primary=True)


@pytest.mark.benchmark(group="probit_topk")
def test_probit_kernel_one_shot(benchmark, data):
    mu_q, v_q, mu_c, v_c = data
    run(benchmark, ce.probit_topk, mu_q, v_q, mu_c, v_c, K, role="kernel one-shot", flops=FLOPS)


@pytest.mark.benchmark(group="probit_topk")
def test_probit_numpy_gemm_baseline(benchmark, data, numpy_docs):
    mu_q, v_q, mu_c, v_c = data
    got = run(benchmark, numpy_probit_topk, mu_q, v_q, numpy_docs, K, role="numpy float32", flops=FLOPS)
    kernel = ce.probit_topk(mu_q, v_q, mu_c, v_c, K)
    overlap = np.mean([len(set(a) & set(b)) / K for a, b in zip(got[1], kernel[1])])
    assert overlap > 0.99, f"the baseline computes something else (top-k overlap {overlap:.3f})"


@pytest.mark.benchmark(group="sgemm")
def test_numpy_sgemm_at_probit_size(benchmark):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((Q, 3 * D), dtype=np.float32)
    b = rng.standard_normal((3 * D, N), dtype=np.float32)
    run(benchmark, np.dot, a, b, role="numpy float32", flops=2.0 * Q * N * 3 * D)
