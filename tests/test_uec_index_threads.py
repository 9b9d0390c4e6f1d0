"""UECIndex.search from many threads, and graphs that cannot answer every query."""

import threading

import numpy as np

from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


def test_concurrent_searches_equal_sequential_ones():
    docs, queries = _docs(3000, 32, 0), _docs(40, 32, 1)
    # a sparse graph and very different ef values: answers depend on ef
    index = UECIndex(docs, num_threads=1, config=IndexConfig(M=4, ef_construction=20, rerank=5))
    settings = [dict(rerank=5, ef=5), dict(rerank=300, ef=600), dict(rerank=8, ef=8), dict(rerank=50, ef=120)]
    expected = [index.search(queries, 5, **kw) for kw in settings]
    assert any(not np.array_equal(expected[0][1], e[1]) for e in expected[1:])  # ef matters here
    results, errors = {}, []

    def worker(t):
        try:
            for r in range(6):
                j = (t + r) % len(settings)
                results[(t, r)] = (j, index.search(queries, 5, num_threads=1, **settings[j]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 48
    for j, (s, i) in results.values():
        np.testing.assert_array_equal(i, expected[j][1])
        np.testing.assert_array_equal(s, expected[j][0])


def test_identical_documents_k_equals_n():
    rng = np.random.default_rng(2)
    row = unit_rows(rng.normal(size=(1, 8))).astype(np.float32)
    docs = GaussianEmbedding(np.repeat(row, 300, 0), np.full((300, 8), 0.01, np.float32))
    index = UECIndex(docs, config=IndexConfig(M=16, ef_construction=50, rerank=10))
    s, i = index.search(docs[:3], 300)
    assert i.shape == (3, 300)
    assert all(sorted(r) == list(range(300)) for r in i)
    s_ex, _ = index.search(docs[:3], 300, exact=True)
    np.testing.assert_array_equal(s, s_ex)


def test_degenerate_graph_falls_back_to_exact_candidates():
    docs, queries = _docs(400, 16, 3), _docs(20, 16, 4)
    index = UECIndex(docs, config=IndexConfig(M=2, ef_construction=1, rerank=10))
    s, i = index.search(queries, 400)  # k = N: every document, ANN or not
    s_ex, i_ex = index.search(queries, 400, exact=True)
    np.testing.assert_array_equal(i, i_ex)
    np.testing.assert_array_equal(s, s_ex)
    s, i = index.search(queries, 50, rerank=60)
    assert ((i >= 0) & (i < 400)).all() and np.isfinite(s).all()
