"""Inner-product top-k on quantized codes: QuantizedDocs (int8, bf16) against faiss, numpy and float32.

Q=1000 queries, N=100k documents, D=384, k=10, on the clustered unit means
of bench_probit.py (``_bench.clustered_unit_rows``). Every entry answers the
same question - the 10 best documents per query by inner product - and
records in its role its recall@10 against the exact float32 top-k (the
float32 kernel's, ``ProbitDocs`` with zero variances) and the bytes its
searchable structure holds in memory:

- ``QuantizedDocs`` int8 / bf16: the codes and scales (the float32 means
  they rescore from are the caller's array, which may be a memory map),
  40 candidates per query rescored exactly;
- the float32 kernel: its packed means;
- faiss ``IndexFlatIP`` (float32, exact) and ``IndexScalarQuantizer`` 8-bit
  (per-dimension ranges, no rescoring): their serialized size;
  ``IndexHNSWSQ`` 8-bit (M=32, efSearch=64, built outside the timing): codes
  and graph, serialized;
- numpy: the (Q, N) float32 product and argpartition (the product's bytes).

The primary entry is int8, so the "kernel speed-up" column of report.py is
t(entry) / t(int8): above 1, int8 is faster.
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import clustered_unit_rows, run, size
from crossembed.kernels import QuantizedDocs

Q, N, D, K = size("quant_q", 1000, 64), size("quant_n", 100_000, 5000), size("quant_d", 384, 384), 10
CANDIDATES = 40
FLOPS = 2.0 * Q * N * D
GROUP = f"quantized top-k Q={Q} N={N} D={D}"


@pytest.fixture(scope="module")
def data():
    return clustered_unit_rows(np.random.default_rng(1), Q, N, D)


@pytest.fixture(scope="module")
def exact(data):
    """The float32 kernel's top-k: the truth for recall@10."""
    queries, docs = data
    return ce.ProbitDocs(docs, np.zeros_like(docs)).top_k(queries, np.zeros_like(queries), K)[1]


def _recall(ids, truth) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(np.asarray(ids), truth)]))


def _record(benchmark, ids, truth, nbytes):
    recall = _recall(ids, truth)
    benchmark.extra_info.update(recall_at_10=recall, memory_bytes=int(nbytes))
    return f"recall@10 {recall:.4f}, {nbytes / 2**20:.1f} MiB"


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("codes", ["int8", "bf16"])
def test_quantized_docs(benchmark, data, exact, codes):
    queries, docs = data
    qd = QuantizedDocs(docs, codes=codes)
    got = qd.top_k(queries, K, candidates=CANDIDATES)
    role = f"QuantizedDocs {codes}, {CANDIDATES} candidates rescored ({_record(benchmark, got[1], exact, qd.nbytes)})"
    run(benchmark, qd.top_k, queries, K, candidates=CANDIDATES, role=role, flops=FLOPS, primary=codes == "int8")
    assert _recall(got[1], exact) >= 0.99


@pytest.mark.benchmark(group=GROUP)
def test_float32_kernel(benchmark, data, exact):
    queries, docs = data
    pd, zq = ce.ProbitDocs(docs, np.zeros_like(docs)), np.zeros_like(queries)
    role = f"float32 kernel, ProbitDocs means only ({_record(benchmark, exact, exact, pd.nbytes)})"
    run(benchmark, pd.top_k, queries, zq, K, role=role, flops=FLOPS)


def _faiss_entry(benchmark, index, queries, exact, role):
    faiss = pytest.importorskip("faiss")
    got = index.search(queries, K)[1]
    role = f"{role} ({_record(benchmark, got, exact, faiss.serialize_index(index).nbytes)})"
    run(benchmark, index.search, queries, K, role=role, flops=FLOPS)


@pytest.mark.benchmark(group=GROUP)
def test_faiss_flat(benchmark, data, exact):
    faiss = pytest.importorskip("faiss")
    queries, docs = data
    index = faiss.IndexFlatIP(D)
    index.add(docs)
    _faiss_entry(benchmark, index, queries, exact, "faiss IndexFlatIP float32")


@pytest.mark.benchmark(group=GROUP)
def test_faiss_scalar_quantizer(benchmark, data, exact):
    faiss = pytest.importorskip("faiss")
    queries, docs = data
    index = faiss.IndexScalarQuantizer(D, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    _faiss_entry(benchmark, index, queries, exact, "faiss IndexScalarQuantizer 8-bit, no rescoring")


@pytest.mark.benchmark(group=GROUP)
def test_faiss_hnsw_sq(benchmark, data, exact):
    faiss = pytest.importorskip("faiss")
    queries, docs = data
    index = faiss.IndexHNSWSQ(D, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    index.hnsw.efSearch = 64
    _faiss_entry(benchmark, index, queries, exact, "faiss IndexHNSWSQ 8-bit, M=32, efSearch=64 (ANN)")


def _numpy_topk(queries, docs, k):
    s = queries @ docs.T
    part = np.argpartition(-s, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(s, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


@pytest.mark.benchmark(group=GROUP)
def test_numpy(benchmark, data, exact):
    queries, docs = data
    role = (
        f"numpy float32 product + argpartition ({_record(benchmark, _numpy_topk(queries, docs, K), exact, 4 * Q * N)})"
    )
    run(benchmark, _numpy_topk, queries, docs, K, role=role, flops=FLOPS)
