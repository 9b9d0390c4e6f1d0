"""UEC document hubness at index-build time: the library's path against numpy and faiss.

Regime: encoding documents for a ``UECIndex`` with ``hubness=0.5``: each of
N documents needs the mean of its 10 best cosines to the model's fit anchors
(8,192 kept: the cap), leaving out the anchors paired with the document
itself. ``LaplaceEmbedder.hubness`` runs the tiled dot-product top-k kernel
(GEH's list kernel, top-11 per row) and then one dot product per listed
anchor for the own-pair check; numpy computes row blocks of ``docs @
anchors^T`` with an argpartition; faiss runs one exact flat search
(``IndexFlatIP``). Both peers do the same own-pair check on their lists.
A quarter of the documents are fit positives (their own anchor is left out).
FLOPs per call: 2 * N * 8192 * D.
"""

import numpy as np
import pytest

from _bench import run, size, unit_rows
from crossembed.uec import LaplaceEmbedder

N, M, D, K = size("hubness_n", 50_000, 2_000), 8192, 384, 10
_SAME = 1.0 - 1e-5


@pytest.fixture(scope="module")
def fitted():
    """An embedder whose 8,192 fit pairs are clustered unit rows, and documents drawn like them."""
    rng = np.random.default_rng(7)
    centres = unit_rows(rng, 64, D)
    A = centres[rng.integers(0, 64, M)] + 0.15 * unit_rows(rng, M, D)
    P = A + 0.1 * unit_rows(rng, M, D)
    emb = LaplaceEmbedder(None, prior_precision=1.0, batch_size=256).fit_embeddings(A, P).heads_
    docs = centres[rng.integers(0, 64, N)] + 0.15 * unit_rows(rng, N, D)
    docs[: N // 4] = P[rng.integers(0, M, N // 4)]  # fit documents
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    ref = emb.hub_reference
    own_pos = emb.hub_positives[emb.hub_groups]  # each anchor's positive
    return emb, np.ascontiguousarray(docs, dtype=np.float32), ref, np.ascontiguousarray(own_pos)


def _mean_of_others(docs, vals, idx, anchor_positives):
    """Mean of each row's K best listed anchors whose positive is not the row itself."""
    own = np.einsum("nd,nkd->nk", docs, anchor_positives[idx]) >= _SAME
    keep = ~own
    keep &= np.cumsum(keep, axis=1) <= K
    return np.where(keep, vals, 0.0).sum(axis=1) / np.maximum(keep.sum(axis=1), 1)


def numpy_hubness(docs, ref, anchor_positives, block=4096):
    """Blocked float32 ``docs @ ref.T``, argpartition top-(K+1), sorted, own-pair check."""
    out = np.empty(len(docs))
    for s in range(0, len(docs), block):
        d = docs[s : s + block]
        S = d @ ref.T
        idx = np.argpartition(-S, K, axis=1)[:, : K + 1]
        vals = np.take_along_axis(S, idx, axis=1)
        order = np.argsort(-vals, axis=1)
        idx, vals = np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
        out[s : s + block] = _mean_of_others(d, vals, idx, anchor_positives)
    return out


def faiss_hubness(docs, ref, anchor_positives, block=4096):
    import faiss

    index = faiss.IndexFlatIP(ref.shape[1])
    index.add(ref)
    vals, idx = index.search(docs, K + 1)
    out = np.empty(len(docs))
    for s in range(0, len(docs), block):
        out[s : s + block] = _mean_of_others(
            docs[s : s + block], vals[s : s + block], idx[s : s + block], anchor_positives
        )
    return out


@pytest.mark.benchmark(group="uec_hubness")
def test_hubness_library(benchmark, fitted):
    emb, docs, _, _ = fitted
    run(benchmark, emb.hubness, docs, role="kernel", flops=2.0 * N * M * D, primary=True, k=K)


@pytest.mark.benchmark(group="uec_hubness")
def test_hubness_numpy_baseline(benchmark, fitted):
    emb, docs, ref, pos = fitted
    got = run(benchmark, numpy_hubness, docs, ref, pos, role="numpy float32", flops=2.0 * N * M * D)
    np.testing.assert_allclose(got, emb.hubness(docs, k=K), rtol=1e-4, atol=1e-5)


@pytest.mark.benchmark(group="uec_hubness")
def test_hubness_faiss_flat_search(benchmark, fitted):
    pytest.importorskip("faiss")
    emb, docs, ref, pos = fitted
    got = run(benchmark, faiss_hubness, docs, ref, pos, role="faiss flat search", flops=2.0 * N * M * D)
    np.testing.assert_allclose(got, emb.hubness(docs, k=K), rtol=1e-4, atol=1e-5)
