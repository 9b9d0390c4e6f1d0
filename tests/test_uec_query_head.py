"""The query head (crossembed.uec.query_head): objective, gradient, selection, and its use in UECEnsemble."""

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, ScoreMixing, UECEnsemble
from crossembed.uec.ablations import BetaCosineScoring
from crossembed.uec.query_head import QueryHead, fit_query_head, query_head_objective


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _reference_loss(W, A, P, labels, tau, penalty):
    """float64 reference: mean over anchors of -log softmax(cos(a W, p) / tau)[label] + c/2 |W - I|^2."""
    Q = _unit(A @ W)
    L = Q @ P.T / tau
    lse = np.log(np.exp(L - L.max(axis=1, keepdims=True)).sum(axis=1)) + L.max(axis=1)
    return (lse - L[np.arange(len(A)), labels]).mean() + 0.5 * penalty * ((W - np.eye(len(W))) ** 2).sum()


def _problem(n=9, m=6, D=5, seed=0):
    rng = np.random.default_rng(seed)
    A = _unit(rng.normal(size=(n, D)))
    P = _unit(rng.normal(size=(m, D)))
    labels = rng.integers(0, m, size=n)
    W = np.eye(D) + 0.3 * rng.normal(size=(D, D))
    return W, A, P, labels


@pytest.mark.parametrize("D", [1, 5, 17])
def test_objective_matches_the_float64_reference_and_finite_differences(D):
    W, A, P, labels = _problem(D=D, seed=D)
    tau, c = 0.07, 0.2
    loss, grad = query_head_objective(W, A, P, labels, tau=tau, penalty=c)
    assert loss == pytest.approx(_reference_loss(W, A, P, labels, tau, c), rel=1e-10)
    num = np.zeros_like(W)
    eps = 1e-6
    for i in range(D):
        for j in range(D):
            Wp, Wm = W.copy(), W.copy()
            Wp[i, j] += eps
            Wm[i, j] -= eps
            num[i, j] = (_reference_loss(Wp, A, P, labels, tau, c) - _reference_loss(Wm, A, P, labels, tau, c)) / (
                2 * eps
            )
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-7)


def test_float32_products_stay_close_to_float64():
    W, A, P, labels = _problem(n=40, m=30, D=16, seed=3)
    l64, g64 = query_head_objective(W, A, P, labels, tau=0.05, penalty=0.1)
    l32, g32 = query_head_objective(W, A.astype(np.float32), P.astype(np.float32), labels, tau=0.05, penalty=0.1)
    assert g32.dtype == np.float64
    assert l32 == pytest.approx(l64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-5)


def test_huge_logits_do_not_overflow():
    W, A, P, labels = _problem(seed=4)
    loss, grad = query_head_objective(W, A, P, labels, tau=1e-6, penalty=0.0)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))


def _distorted_pairs(n, D=12, seed=0, noise=0.3):
    """Queries are a fixed linear distortion of their documents plus noise: a head can undo the distortion."""
    rng = np.random.default_rng(seed)
    M = np.eye(D) + 0.9 * np.random.default_rng(99).normal(size=(D, D)) / np.sqrt(D)
    P = _unit(rng.normal(size=(n, D)))
    A = _unit(P @ M + noise * rng.normal(size=(n, D)) / np.sqrt(D))
    return A.astype(np.float32), P.astype(np.float32)


def _mrr(Q, P):
    S = Q @ P.T
    own = np.diag(S)
    return float((1.0 / (1.0 + (S > own[:, None]).sum(axis=1))).mean())


def test_head_undoes_a_distortion_on_new_pairs():
    A, P = _distorted_pairs(400, seed=1)
    head = fit_query_head(A, P, random_state=0)
    assert not head.is_identity and head.weight.shape == (12, 12) and head.weight.dtype == np.float32
    # the chosen penalty is the best on the held-out pairs (the identity among the candidates)
    assert head.holdout_mrr[head.penalty] == max(head.holdout_mrr.values())
    A2, P2 = _distorted_pairs(300, seed=2)
    assert _mrr(head.apply(A2), P2) > _mrr(A2, P2) + 0.05
    mapped = head.apply(A2)
    np.testing.assert_allclose(np.linalg.norm(mapped, axis=1), 1.0, rtol=1e-5)


def test_identity_is_kept_when_it_wins_and_for_tiny_fits():
    A, P = _distorted_pairs(3, seed=5)
    tiny = fit_query_head(A, P)
    assert tiny.is_identity and tiny.holdout_mrr == {}
    np.testing.assert_array_equal(tiny.weight, np.eye(12, dtype=np.float32))
    np.testing.assert_allclose(tiny.apply(A * 3), A, rtol=1e-6)
    # already aligned pairs with no noise: the identity ranks every held-out pair first and stays (tie rule)
    rng = np.random.default_rng(6)
    X = _unit(rng.normal(size=(200, 8))).astype(np.float32)
    same = fit_query_head(X, X)
    assert same.is_identity and same.holdout_mrr[float("inf")] == 1.0


def test_repeated_positives_are_no_negatives_of_themselves():
    # two anchors share one document: the objective sees it once (as the fit does, through distinct rows)
    W, A, P, _ = _problem(n=4, m=3, D=5, seed=7)
    labels = np.array([0, 0, 1, 2])
    dup = np.vstack([P[0], P[0], P[1], P[2]])
    loss_distinct, _ = query_head_objective(W, A, P, labels, tau=0.1, penalty=0.0)
    loss_dup, _ = query_head_objective(W, A, dup, np.arange(4), tau=0.1, penalty=0.0)
    assert loss_distinct < loss_dup  # the duplicate column would count the right document as a negative


def _fitted(query_head=True, seed=1, n=300):
    A, P = _distorted_pairs(n, seed=seed)
    return LaplaceEmbedder(None, prior_precision=2.0, query_head=query_head).fit_embeddings(A, P)


def test_embedder_stores_and_round_trips_the_head(tmp_path):
    e = _fitted()
    head = e.heads_.query_head
    assert isinstance(head, QueryHead) and not head.is_identity
    A, _ = _distorted_pairs(20, seed=3)
    np.testing.assert_allclose(e.heads_.map_queries(A), head.apply(A), rtol=1e-6)
    # the Gaussian mean stays the pretrained embedding: the head is the ensemble's to apply
    np.testing.assert_allclose(e.transform(A).mean, _unit(A), rtol=1e-5, atol=1e-6)
    back = LaplaceEmbedder.load(e.save(tmp_path / "e.npz"))
    np.testing.assert_array_equal(back.heads_.query_head.weight, head.weight)
    assert back.heads_.query_head.penalty == head.penalty and back.query_head
    off = _fitted(query_head=False)
    assert off.heads_.query_head is None
    with pytest.raises(ValueError, match="query head"):
        off.heads_.map_queries(A)
    with pytest.raises(TypeError, match="query_head"):
        LaplaceEmbedder(None, query_head="yes")


def test_ensemble_maps_queries_only_and_measures_hubness_against_mapped_anchors():
    embs = [_fitted(seed=1), _fitted(seed=2)]
    ens = UECEnsemble(embs)
    assert ens.mixing.query_head and "query_head=True" in repr(ens)
    plain = UECEnsemble(embs, mixing=ScoreMixing(query_head=False))
    A, P = _distorted_pairs(30, seed=4)
    qc = [e.transform(A) for e in embs]
    dc = [e.transform(P) for e in embs]
    q, d = ens.combine(qc, role="query"), ens.combine(dc, role="passage")
    q0, d0 = plain.combine(qc, role="query"), plain.combine(dc, role="passage")
    D = 12
    # documents: the same unit blocks; only their hubness coordinates see the mapped anchors
    np.testing.assert_array_equal(d.mean[:, : 2 * D], d0.mean[:, : 2 * D])
    for k, e in enumerate(embs):
        ref = e.heads_.query_head.apply(e.heads_.hub_reference).astype(np.float64)
        want = np.sort(_unit(P) @ ref.T, axis=1)[:, -10:].mean(axis=1)
        np.testing.assert_allclose(d.mean[:, 2 * D + k], want, rtol=1e-4, atol=1e-5)
    # queries: the routing weights are the encoder's own, the blocks are the mapped queries
    np.testing.assert_allclose(q.weights, q0.weights, rtol=1e-6)
    w = q.weights.astype(np.float64) * ens.mixing.score_scales(ens.heads)[None, :]
    for k, e in enumerate(embs):
        np.testing.assert_allclose(
            q.mean[:, k * D : (k + 1) * D], w[:, [k]] * e.heads_.map_queries(A), rtol=1e-4, atol=1e-6
        )
    # and the mapped queries retrieve their documents better than the encoder's own
    assert _mrr(q.mean, d.mean) > _mrr(q0.mean, d0.mean)


def test_ensemble_query_head_options():
    embs = [_fitted(seed=1), _fitted(query_head=False, seed=2)]
    assert UECEnsemble(embs).mixing.query_head is False  # not every model has one: off, quietly
    with pytest.raises(ValueError, match="query_head=False"):
        UECEnsemble(embs, mixing=ScoreMixing(query_head=True))
    both = [_fitted(seed=1), _fitted(seed=2)]
    assert UECEnsemble(both, scoring=BetaCosineScoring()).mixing.query_head is False
    with pytest.raises(ValueError, match="query_head"):
        UECEnsemble(both, mixing=ScoreMixing(query_head=True), scoring=BetaCosineScoring())
    with pytest.raises(TypeError, match="query_head"):
        ScoreMixing(query_head=1)
    # saved ensembles keep the resolved setting
    arrays, meta = UECEnsemble(both).get_state()
    assert meta["mixing"]["query_head"] is True
    assert UECEnsemble.from_state(arrays, meta).mixing.query_head is True
    arrays, meta = UECEnsemble(both, mixing=ScoreMixing(query_head=False)).get_state()
    assert UECEnsemble.from_state(arrays, meta).mixing.query_head is False
