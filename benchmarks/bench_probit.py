"""Probit top-k (UEC scoring): the fused C++ kernel against numpy, torch and faiss, plus plain sgemm.

Three variance regimes at the sizes of docs/kernel_benchmarks.md (Q=1000, N=100k, D=384, k=10),
on clustered unit means (``_bench.clustered_unit_rows``: 500 centroids on an
anisotropic spectrum, each query a document plus noise):
``kron`` - variances like real Kronecker-factored posteriors, 0.016 U(0.5, 1.5)
(the realistic regime), ``wide`` - U(0, 0.5), where the smallest variance
is ~0 and only the centred (Cauchy-Schwarz) bound on the variance term lets
pruning skip it, and ``zero`` - no variance on
either side (the default ensemble's deterministic embeddings: the score is the
inner product, so faiss ``IndexFlatIP`` does exactly the same work). Baselines: the stacked
layout the kernel also uses, as two float32 GEMMs per query block,
mu_s = mu_q @ mu_c^T and sig2_s = [mu_q^2 | v_q] @ [v_c | mu_c^2 + v_c]^T
(3D multiply-adds per pair), then argpartition + sort (numpy) or topk
(torch); faiss ``IndexFlatIP`` top-k on the means (cosine top-k, the
D-MAC-per-pair work probit top-k refines: the peer's time to beat). FLOPs per
call: 2 * Q * N * 3D for all (faiss too, so GFLOP/s compare times). The
``sgemm`` group times numpy's np.dot on a (Q, 3D) x (3D, N) float32 product:
the same FLOPs with no probit, no top-k - the roofline of report.py.

The ``kron`` group also times the kernel on ``ProbitDocs(storage="float16")``
(half the document memory; its recall@10 against the float32 kernel is in
the role; benchmarks/recall_probit_float16.py measures it on real-ish means too).

``probit_topk function``: at Q=256, N=50k (kron variances), the function
``probit_topk(mu_q, v_q, mu_c, v_c, k)``, which prepares the documents on every
call, against a ``ProbitDocs`` built once and searched with ``top_k`` (the
explicit reuse), and numpy with and without its prepared documents.
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import clustered_unit_rows, run, size, unit_rows
from crossembed.cli.kernel_peers import faiss_flat_topk, numpy_probit_docs, numpy_probit_topk, torch_probit_topk

Q, N, D, K = size("probit_q", 1000, 64), size("probit_n", 100_000, 5000), size("probit_d", 384, 384), 10
FQ, FN = size("probit_fn_q", 256, 32), size("probit_fn_n", 50_000, 3000)
FLOPS = 2.0 * Q * N * 3 * D
REGIMES = {"kron": (0.016 * 0.5, 0.016 * 1.5), "wide": (0.0, 0.5), "zero": (0.0, 0.0)}


def _gaussians(rng, n, lo, hi):
    return unit_rows(rng, n, D), rng.uniform(lo, hi, (n, D)).astype(np.float32)


@pytest.fixture(scope="module")
def means():
    """Clustered unit means (like sentence embeddings): the documents' best scores stand out as in real searches."""
    return clustered_unit_rows(np.random.default_rng(1), Q, N, D)


@pytest.fixture(scope="module", params=list(REGIMES))
def data(request, means):
    rng = np.random.default_rng(2)
    lo, hi = REGIMES[request.param]
    mu_q, mu_c = means
    v_q = rng.uniform(lo, hi, (Q, D)).astype(np.float32)
    v_c = rng.uniform(lo, hi, (N, D)).astype(np.float32)
    return request.param, (mu_q, v_q, mu_c, v_c)


@pytest.fixture(scope="module")
def kernel_topk(data):
    """The kernel's answer (and its prepared documents), for the baselines' agreement checks."""
    _, (mu_q, v_q, mu_c, v_c) = data
    docs = ce.ProbitDocs(mu_c, v_c)
    return docs, docs.top_k(mu_q, v_q, K)


def _overlap(a, b):
    return np.mean([len(set(x) & set(y)) / K for x, y in zip(np.asarray(a), np.asarray(b))])


def test_probit_kernel_prepared_docs(benchmark, data, kernel_topk):
    regime, (mu_q, v_q, _, _) = data
    benchmark.group = f"probit_topk {regime}"
    docs, _ = kernel_topk
    run(benchmark, docs.top_k, mu_q, v_q, K, role="kernel", flops=FLOPS, primary=True)


def test_probit_kernel_float16_docs(benchmark, data, kernel_topk):
    """The kernel on float16 document storage (6 D bytes a doc, not 12 D); its recall@10 vs float32 in the role."""
    regime, (mu_q, v_q, mu_c, v_c) = data
    if regime != "kron":
        pytest.skip("float16 storage is timed in the kron regime")
    benchmark.group = f"probit_topk {regime}"
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")  # index time, like the float32 docs
    recall = _overlap(docs.top_k(mu_q, v_q, K)[1], kernel_topk[1][1])
    benchmark.extra_info["recall_at_10_vs_float32"] = recall
    run(benchmark, docs.top_k, mu_q, v_q, K, role=f"kernel, float16 docs (recall@10 {recall:.4f})", flops=FLOPS)
    assert recall > 0.9, f"float16 storage lost the top-{K} (recall {recall:.3f})"


def test_probit_docs_preparation(benchmark, data):
    """ProbitDocs(mu_c, v_c) itself (packing, bounds and the document checks): not a top-k, timed beside the
    top-k it prepares for (its "kernel speed-up" is t(preparation) / t(top_k)). Its bytes per second count
    the inputs read (8 D bytes a document)."""
    regime, (_, _, mu_c, v_c) = data
    if regime != "kron":
        pytest.skip("preparation is timed in the kron regime")
    benchmark.group = f"probit_topk {regime}"
    benchmark.extra_info["input_bytes"] = mu_c.nbytes + v_c.nbytes
    run(benchmark, ce.ProbitDocs, mu_c, v_c, role="ProbitDocs(mu_c, v_c) preparation, not a top-k", flops=0)


def test_probit_numpy_gemm_baseline(benchmark, data, kernel_topk):
    regime, (mu_q, v_q, mu_c, v_c) = data
    benchmark.group = f"probit_topk {regime}"
    np_docs = numpy_probit_docs(mu_c, v_c)  # index time, like ProbitDocs
    got = run(benchmark, numpy_probit_topk, mu_q, v_q, np_docs, K, role="numpy float32", flops=FLOPS)
    overlap = _overlap(got[1], kernel_topk[1][1])
    assert overlap > 0.99, f"the baseline computes something else (top-k overlap {overlap:.3f})"


def test_probit_torch_baseline(benchmark, data, kernel_topk):
    torch = pytest.importorskip("torch")
    regime, (mu_q, v_q, mu_c, v_c) = data
    benchmark.group = f"probit_topk {regime}"
    t_docs = tuple(torch.from_numpy(a) for a in numpy_probit_docs(mu_c, v_c))
    got = run(
        benchmark,
        torch_probit_topk,
        torch.from_numpy(mu_q),
        torch.from_numpy(v_q),
        t_docs,
        K,
        role="torch float32",
        flops=FLOPS,
    )
    overlap = _overlap(got[1].numpy(), kernel_topk[1][1])
    assert overlap > 0.99, f"the baseline computes something else (top-k overlap {overlap:.3f})"


def test_probit_faiss_cosine_peer(benchmark, data):
    faiss = pytest.importorskip("faiss")
    regime, (mu_q, _, mu_c, _) = data
    benchmark.group = f"probit_topk {regime}"
    index = faiss.IndexFlatIP(D)
    index.add(mu_c)
    got = run(benchmark, faiss_flat_topk, index, mu_q, K, role="faiss IndexFlatIP cosine (means only)", flops=FLOPS)
    assert got[1].shape == (Q, K)


@pytest.fixture(scope="module")
def function_data():
    rng = np.random.default_rng(3)
    mu_q, v_q = _gaussians(rng, FQ, *REGIMES["kron"])
    mu_c, v_c = _gaussians(rng, FN, *REGIMES["kron"])
    return mu_q, v_q, mu_c, v_c


FN_FLOPS = 2.0 * FQ * FN * 3 * D


FN_GROUP = "probit_topk function Q=256 N=50k kron"


@pytest.mark.benchmark(group=FN_GROUP)
def test_probit_function(benchmark, function_data):
    run(benchmark, ce.probit_topk, *function_data, K, role="probit_topk (prepares the docs every call)", flops=FN_FLOPS)


@pytest.mark.benchmark(group=FN_GROUP)
def test_probit_docs_reused(benchmark, function_data):
    mu_q, v_q, mu_c, v_c = function_data
    docs = ce.ProbitDocs(mu_c, v_c)  # built once, outside the timed calls
    role = "ProbitDocs.top_k (docs prepared once)"
    run(benchmark, docs.top_k, mu_q, v_q, K, role=role, flops=FN_FLOPS, primary=True)


@pytest.mark.benchmark(group=FN_GROUP)
def test_probit_function_numpy(benchmark, function_data):
    mu_q, v_q, mu_c, v_c = function_data

    def numpy_function(mu_q, v_q, mu_c, v_c, k):
        return numpy_probit_topk(mu_q, v_q, numpy_probit_docs(mu_c, v_c), k)

    got = run(benchmark, numpy_function, *function_data, K, role="numpy (prepares every call)", flops=FN_FLOPS)
    overlap = _overlap(got[1], ce.probit_topk(*function_data, K)[1])
    assert overlap > 0.99, f"the baseline computes something else (top-k overlap {overlap:.3f})"


@pytest.mark.benchmark(group=FN_GROUP)
def test_probit_docs_reused_numpy(benchmark, function_data):
    mu_q, v_q, mu_c, v_c = function_data
    np_docs = numpy_probit_docs(mu_c, v_c)
    run(benchmark, numpy_probit_topk, mu_q, v_q, np_docs, K, role="numpy (docs prepared once)", flops=FN_FLOPS)


@pytest.mark.benchmark(group="sgemm")
def test_numpy_sgemm_at_probit_size(benchmark):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((Q, 3 * D), dtype=np.float32)
    b = rng.standard_normal((3 * D, N), dtype=np.float32)
    run(benchmark, np.dot, a, b, role="numpy float32", flops=2.0 * Q * N * 3 * D)
