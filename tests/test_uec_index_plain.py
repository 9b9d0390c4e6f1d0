"""UECIndex over documents without variance (the default ensemble's): no stored variances, the means
held once (in the graph), inner-product scores equal to the probit's, and variances appearing later."""

import numpy as np
import pytest

from crossembed import reference
from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex


def _plain(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(12, d)))
    x = unit_rows(centers[rng.integers(0, 12, n)] + 0.4 * rng.normal(size=(n, d))).astype(np.float32)
    return GaussianEmbedding(x, np.zeros_like(x))


def _with_variance(g, seed, scale=0.02):
    rng = np.random.default_rng(seed)
    return GaussianEmbedding(g.mean, (scale * rng.random(g.mean.shape)).astype(np.float32))


def _exact_ids(docs, ids, queries, k):
    """Reference top-k ids: float64 probit scores, ties to the lower id."""
    s = reference.probit_scores(queries.mean, queries.var, docs.mean, docs.var)
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return ids[order]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_documents_without_variance_store_none_and_score_by_inner_product(dtype):
    docs, q = _plain(600, 24, 0), _plain(15, 24, 1)
    index = UECIndex(docs, config=IndexConfig(M=8, dtype=dtype))
    assert not index.has_variance
    mem = index.memory_usage()
    assert mem["store"] == 600 * (8 + 1)  # ids and flags only
    s, i = index.search(q, 8, exact=True)
    held = GaussianEmbedding(docs.mean.astype(dtype).astype(np.float32), docs.var)  # what the graph stores
    np.testing.assert_array_equal(i, _exact_ids(held, np.arange(600), q, 8))
    stored = index.get_docs(i[:, 0])  # the graph's own copy of the means, read back
    np.testing.assert_allclose(s[:, 0], np.einsum("qd,qd->q", q.mean.astype(float), stored.mean), rtol=1e-6)
    assert not stored.var.any()
    ann_s, ann_i = index.search(q, 8)
    np.testing.assert_array_equal(ann_i, i)
    np.testing.assert_array_equal(ann_s, s)
    assert mem["panels"] == 0 and index.memory_usage()["panels"] == 0  # nothing cached: no second copy


def test_plain_scores_equal_those_of_stored_zero_variances():
    """A store that holds variances (one document had some, then left) scores the same documents and
    queries without variance bit for bit as the store that holds none."""
    docs, q = _plain(500, 16, 2), _plain(12, 16, 3)
    lean = UECIndex(docs, num_threads=1, config=IndexConfig(M=8))
    full = UECIndex(docs, num_threads=1, config=IndexConfig(M=8))
    full.add(_with_variance(_plain(1, 16, 4), 5), ids=[10_000])
    full.remove([10_000])
    assert full.has_variance and not lean.has_variance
    for k in (1, 9, 500):
        a, b = lean.search(q, k, exact=True), full.search(q, k, exact=True)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])


def test_a_document_with_variance_turns_the_stored_variances_on():
    docs, q = _plain(300, 12, 6), _with_variance(_plain(10, 12, 7), 8)
    index = UECIndex(docs, config=IndexConfig(M=8))
    extra = _with_variance(_plain(40, 12, 9), 10, scale=0.5)
    index.add(extra[:20])  # ids 300..319
    assert index.has_variance
    index.upsert(extra[20:], ids=np.arange(20))  # rows with variance replace plain ones
    everything = GaussianEmbedding(
        np.concatenate([extra.mean[20:], docs.mean[20:], extra.mean[:20]]),
        np.concatenate([extra.var[20:], docs.var[20:], extra.var[:20]]),
    )
    ids = np.arange(320)
    np.testing.assert_array_equal(index.search(q, 7, exact=True)[1], _exact_ids(everything, ids, q, 7))
    got = index.get_docs(np.arange(18, 22))
    np.testing.assert_array_equal(got.var[:2], extra.var[38:])
    assert not got.var[2:].any()


@pytest.mark.parametrize("mmap", [False, True])
def test_save_and_load_keep_the_store_without_variances(tmp_path, mmap):
    docs, q = _plain(250, 16, 11), _plain(6, 16, 12)
    index = UECIndex(docs, ids=np.arange(250) * 3, config=IndexConfig(M=8))
    index.remove([0, 30])
    back = UECIndex.load(index.save(tmp_path / "p.uec"), mmap=mmap)
    assert not back.has_variance and len(back) == 248
    for exact in (True, False):
        np.testing.assert_array_equal(back.search(q, 5, exact=exact)[1], index.search(q, 5, exact=exact)[1])
    back.add(_with_variance(_plain(2, 16, 13), 14), ids=[1, 2])
    assert back.has_variance and len(back) == 250


def test_queries_with_variance_against_plain_documents_are_scored_exactly():
    docs, q = _plain(400, 20, 15), _with_variance(_plain(9, 20, 16), 17, scale=0.3)
    index = UECIndex(docs, config=IndexConfig(M=8))
    np.testing.assert_array_equal(index.search(q, 6, exact=True)[1], _exact_ids(docs, np.arange(400), q, 6))
