"""Document hubness (CSLS) in UEC score mixing, against float64 numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, ScoreMixing, UECEnsemble
from crossembed.uec.ablations import BetaCosineScoring
from crossembed.uec.gaussian import GaussianEmbedding


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def _hubness_reference(X, ref, k, positives=None):
    """Mean of each row's k best cosines to the reference rows (float64), leaving out the
    reference rows whose positive is the row itself (cosine >= 1 - 1e-5 to it)."""
    S = _unit(X) @ _unit(ref).T
    out = np.zeros(len(X))
    for i, row in enumerate(S):
        keep = np.ones(len(ref), bool)
        if positives is not None:
            P = _unit(positives).astype(np.float32).astype(np.float64)
            c = _unit(X[i : i + 1]) @ P.T
            j = int(np.argmax(c[0]))
            if c[0, j] >= 1 - 1e-5:
                keep = ~(P == P[j]).all(axis=1)
        vals = np.sort(row[keep])[::-1][:k]
        out[i] = vals.mean() if vals.size else 0.0
    return out


def _fitted(D, n=60, seed=0, prior=2.0, shared=0):
    """An embedder fitted on n random pairs (the first ``shared`` + 1 pairs share one positive)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, D))
    P = A + 0.5 * rng.normal(size=(n, D))
    P[1 : shared + 1] = P[0]
    return LaplaceEmbedder(None, prior_precision=prior, batch_size=10, random_state=seed).fit_embeddings(A, P), A, P


@pytest.mark.parametrize("D", [1, 13, 16, 33])
def test_hubness_matches_the_numpy_reference(D):
    emb, A, P = _fitted(D, seed=D)
    ref = emb.heads_.hub_reference
    assert ref.shape == (60, D) and ref.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ref, axis=1), 1.0, rtol=1e-5)
    # the reference is the fit anchors themselves (unit), in their order
    np.testing.assert_allclose(ref, _unit(A), rtol=1e-5, atol=1e-6)
    X = np.random.default_rng(1).normal(size=(25, D)) * 1e3  # scale does not matter: cosines
    X = np.vstack([X, P[:4]])  # fit documents: their own anchors are left out
    for k in (1, 10, 60, 500):  # k = N and k > N (capped)
        np.testing.assert_allclose(emb.heads_.hubness(X, k=k), _hubness_reference(X, A, k, P), rtol=1e-5, atol=1e-6)
    # a GaussianEmbedding's mean is used the same way
    g = GaussianEmbedding(X.astype(np.float32), np.ones_like(X, dtype=np.float32))
    np.testing.assert_allclose(emb.heads_.hubness(g), _hubness_reference(X, A, 10, P), rtol=1e-5, atol=1e-6)


def test_a_fit_document_leaves_out_its_own_anchors():
    # pairs 0-2 share one positive: that document's three anchors do not count toward its hubness
    emb, A, P = _fitted(9, n=30, seed=2, shared=2)
    r = emb.heads_.hubness(P[:5], k=4)
    np.testing.assert_allclose(r, _hubness_reference(P[:5], A, 4, P), rtol=1e-5, atol=1e-6)
    S = _unit(P[:1]) @ _unit(A).T
    assert np.argsort(-S[0])[0] in (0, 1, 2)  # its own anchor is its nearest, and left out
    np.testing.assert_allclose(r[0], np.sort(np.delete(S[0], [0, 1, 2]))[::-1][:4].mean(), rtol=1e-5)
    # with every anchor its own, nothing is left: hubness 0
    lone, _, P1 = _fitted(3, n=3, seed=1, shared=2)
    assert lone.heads_.hubness(P1[:1])[0] == 0.0


def test_hubness_adversarial_inputs():
    emb, A, P = _fitted(7, n=12, seed=3)
    # ties: a row equal to a reference row, repeated; a zero row (cosine 0 everywhere); one row
    X = np.vstack([A[[0, 0, 5]], np.zeros((1, 7)), 1e-30 * A[[2]], 1e30 * A[[3]]])
    np.testing.assert_allclose(emb.heads_.hubness(X, k=3), _hubness_reference(X, A, 3, P), rtol=1e-5, atol=1e-6)
    assert emb.heads_.hubness(X[3:4], k=3)[0] == 0.0
    assert emb.heads_.hubness(np.zeros((0, 7))).shape == (0,)
    one, A1, P1 = _fitted(4, n=2, seed=4)  # N = 2 anchors
    np.testing.assert_allclose(one.heads_.hubness(A1[:1], k=10), _hubness_reference(A1[:1], A1, 10, P1), rtol=1e-5)
    with pytest.raises(ValueError, match="dimension"):
        emb.heads_.hubness(np.ones((2, 3)))
    with pytest.raises(ValueError, match="k"):
        emb.heads_.hubness(X, k=0)


def test_the_reference_is_capped_and_drawn_from_the_fit_anchors(monkeypatch):
    import crossembed.uec.heads as heads_mod

    monkeypatch.setattr(heads_mod, "HUB_REFERENCE_ROWS", 16)
    emb, A, _ = _fitted(5, n=60, seed=6)
    ref = emb.heads_.hub_reference.astype(np.float64)
    assert ref.shape == (16, 5)
    # every kept row is one of the anchors
    assert (np.abs(ref @ _unit(A).T).max(axis=1) > 1 - 1e-5).all()


def _experts(seed=0, n=80, D=12):
    rng = np.random.default_rng(seed)
    embs = []
    for k in range(2):
        e, _, _ = _fitted(D, n=n, seed=seed + 10 * k)
        embs.append(e)
    Q = [rng.normal(size=(9, D)) for _ in embs]
    Dc = [rng.normal(size=(14, D)) for _ in embs]
    return embs, [e.transform(q) for e, q in zip(embs, Q)], [e.transform(d) for e, d in zip(embs, Dc)]


@pytest.mark.parametrize(("beta", "k"), [(0.5, 10), (1.3, 3)])
def test_score_mixing_subtracts_the_weighted_hubness(beta, k):
    embs, qc, dc = _experts()
    ens = UECEnsemble(embs, mixing=ScoreMixing(hubness=beta, hubness_k=k))
    q, d = ens.combine(qc, role="query"), ens.combine(dc, role="passage")
    assert q.dim == d.dim == ens.dim == 12 + 12 + 2
    assert not q.var[:, -2:].any() and not d.var[:, -2:].any()
    w = q.weights.astype(np.float64) * ens.mixing.score_scales(ens.heads)[None, :]
    want = np.zeros((9, 14))
    for j, e in enumerate(embs):
        r = _hubness_reference(dc[j].mean, e.heads_.hub_reference, k)
        want += w[:, j : j + 1] * (_unit(qc[j].mean) @ _unit(dc[j].mean).T - beta * r[None, :])
    np.testing.assert_allclose(ens.similarity(q, d), want, rtol=1e-4, atol=1e-5)
    _, top = ens.topk(q, d, 14)  # k = N
    np.testing.assert_array_equal(top, np.argsort(-want, axis=1, kind="stable"))
    # hubness=0 is the plain score mix, with the K coordinates gone
    plain = UECEnsemble(embs, mixing=ScoreMixing(hubness=0))
    assert plain.dim == 24 and plain.combine(dc, role="passage").dim == 24


def test_a_hub_document_loses_its_lead():
    # The fit anchors crowd around e1, so the document e1 is a hub (r ~ 1); e2 is far from them
    # (r ~ 0.2). A query a bit closer to e1 than to e2 gets the hub first by cosine; CSLS
    # (cos - r / 2) puts e2 first because the hub's lead (0.07) is smaller than r's half-gap.
    rng = np.random.default_rng(2)
    D = 16
    eye = np.eye(D)
    A = eye[0] + 0.1 * rng.normal(size=(200, D))
    emb = LaplaceEmbedder(None, prior_precision=2.0, batch_size=20).fit_embeddings(
        A, A + 0.05 * rng.normal(size=A.shape)
    )
    docs = np.vstack([eye[0], eye[1], eye[2:7]])
    r = emb.heads_.hubness(docs)
    assert r[0] > 0.9 and r[1] < 0.5
    q = (eye[0] + 0.9 * eye[1])[None]
    first = []
    for beta in (0.0, 0.5):
        ens = UECEnsemble([emb], mixing=ScoreMixing(hubness=beta))
        first.append(
            ens.topk(ens.combine([emb.transform(q)]), ens.combine([emb.transform(docs)], role="passage"), 1)[1][0, 0]
        )
    assert first == [0, 1]


def test_hubness_options_are_checked():
    embs, qc, dc = _experts(seed=5)
    with pytest.raises(ValueError, match="hubness"):
        ScoreMixing(hubness=-0.1)
    with pytest.raises(ValueError, match="hubness_k"):
        ScoreMixing(hubness_k=0)
    with pytest.raises(ValueError, match="hubness"):
        UECEnsemble(embs, mixing=ScoreMixing(hubness=0.5), scoring=BetaCosineScoring())
    # where it cannot apply, the default turns it off
    assert UECEnsemble(embs, scoring=BetaCosineScoring()).mixing.hubness == 0.0
    assert UECEnsemble(embs).mixing.hubness == 0.5
    assert UECEnsemble(embs).dim == 12 + 12 + 2


def test_state_round_trip():
    embs, qc, dc = _experts(seed=7)
    ens = UECEnsemble(embs, mixing=ScoreMixing(hubness=0.8, hubness_k=4))
    arrays, meta = ens.get_state()
    back = UECEnsemble.from_state(arrays, meta)
    assert (back.mixing.hubness, back.mixing.hubness_k) == (0.8, 4)
    np.testing.assert_array_equal(back.combine(dc, role="passage").mean, ens.combine(dc, role="passage").mean)
    np.testing.assert_array_equal(back.combine(qc).mean, ens.combine(qc).mean)
    # the fit anchors are part of the embedder's state: a state without them is incomplete
    from crossembed._io import CorruptFileError

    arr, m = embs[0].get_state()
    with pytest.raises(CorruptFileError, match="hub_reference"):
        LaplaceEmbedder.from_state({k: v for k, v in arr.items() if k != "hub_reference"}, m)
