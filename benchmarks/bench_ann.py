"""HNSW graphs by inner product: crossembed.ann.MeanGraph against pip hnswlib and faiss IndexHNSWFlat.

The same clustered unit-norm vectors (N=100k, D=384; 1,000 queries), the same
graph settings (M=16, ef_construction=100, search ef=64, k=10), built and
searched on every core. ``build`` groups time the insertion of all vectors,
``search`` groups one batch of queries; each search's recall@10 against exact
inner-product top-10 is in its role. MeanGraph stores float32 (as the peers)
or float16 vectors (half the memory). FLOPs: 2 N D per build (one pass over
the vectors: a size, not the work) and 2 Q D ef M per search, so GFLOP/s
compare times within a group only.
"""

import numpy as np
import pytest

from _bench import run, size
from crossembed.ann import MeanGraph

N, D, Q = size("ann_n", 100_000, 3000), size("ann_d", 384, 64), size("ann_q", 1000, 100)
M, EF_C, EF, K = 16, 100, 64, 10
SEARCH_FLOPS = 2.0 * Q * D * EF * M


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((200, D)).astype(np.float32)
    x = centers[rng.integers(0, 200, N + Q)] + 0.6 * rng.standard_normal((N + Q, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    docs, queries = np.ascontiguousarray(x[:N]), np.ascontiguousarray(x[N:])
    truth = np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :K]
    return docs, queries, truth


def _recall(found, truth) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, truth)]))


def _meangraph(docs, storage):
    graph = MeanGraph(D, storage=storage, max_elements=N, M=M, ef_construction=EF_C, random_seed=0)
    graph.add(docs, np.arange(N))
    return graph


def _hnswlib(docs):
    hnswlib = pytest.importorskip("hnswlib")
    index = hnswlib.Index(space="ip", dim=D)
    index.init_index(max_elements=N, M=M, ef_construction=EF_C, random_seed=0)
    index.add_items(docs, np.arange(N))
    index.set_ef(EF)
    return index


def _faiss(docs):
    faiss = pytest.importorskip("faiss")
    index = faiss.IndexHNSWFlat(D, M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_C
    index.add(docs)
    index.hnsw.efSearch = EF
    return index


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_build_meangraph(benchmark, data, storage):
    benchmark.group = "ann build"
    run(
        benchmark,
        _meangraph,
        data[0],
        storage,
        role=f"kernel MeanGraph {storage}",
        flops=2.0 * N * D,
        primary=storage == "float32",
    )


def test_build_hnswlib(benchmark, data):
    benchmark.group = "ann build"
    run(benchmark, _hnswlib, data[0], role="pip hnswlib", flops=2.0 * N * D)


def test_build_faiss(benchmark, data):
    benchmark.group = "ann build"
    run(benchmark, _faiss, data[0], role="faiss IndexHNSWFlat", flops=2.0 * N * D)


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_search_meangraph(benchmark, data, storage):
    docs, queries, truth = data
    graph = _meangraph(docs, storage)
    benchmark.group = "ann search"
    labels, _ = graph.knn(queries, K, ef=EF)
    role = f"kernel MeanGraph {storage} (recall@10 {_recall(labels, truth):.3f})"
    run(benchmark, graph.knn, queries, K, ef=EF, role=role, flops=SEARCH_FLOPS, primary=storage == "float32")


def test_search_hnswlib(benchmark, data):
    docs, queries, truth = data
    index = _hnswlib(docs)
    benchmark.group = "ann search"
    labels, _ = index.knn_query(queries, k=K)
    role = f"pip hnswlib (recall@10 {_recall(labels, truth):.3f})"
    run(benchmark, index.knn_query, queries, k=K, role=role, flops=SEARCH_FLOPS)


def test_search_faiss(benchmark, data):
    docs, queries, truth = data
    index = _faiss(docs)
    benchmark.group = "ann search"
    _, labels = index.search(queries, K)
    role = f"faiss IndexHNSWFlat (recall@10 {_recall(labels, truth):.3f})"
    run(benchmark, index.search, queries, K, role=role, flops=SEARCH_FLOPS)
