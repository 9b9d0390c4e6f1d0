"""uncertainty="rank": the fit pairs' log-rank head and the routing it gives."""

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, RankRouting, UECEnsemble
from crossembed.uec.rank_head import RankHead, fit_rank_head, in_batch_ranks


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_in_batch_ranks_match_a_sort_and_ignore_ties():
    rng = np.random.default_rng(0)
    A, P = _unit(rng.standard_normal((50, 8))), _unit(rng.standard_normal((50, 8)))
    S = A.astype(np.float64) @ P.T.astype(np.float64)
    want = (S > np.diag(S)[:, None]).sum(1)
    np.testing.assert_array_equal(in_batch_ranks(A, P, block=7), want)
    same = np.ones((4, 3), np.float32) / np.sqrt(3)
    np.testing.assert_array_equal(in_batch_ranks(same, same), 0)  # every tie goes to the pair itself


def test_leave_one_out_choice_matches_brute_force():
    rng = np.random.default_rng(1)
    A = _unit(rng.standard_normal((60, 5)))
    P = _unit(A + 0.8 * rng.standard_normal(A.shape))
    head = fit_rank_head(A, P, alphas=(0.1, 10.0))
    y = np.log1p(in_batch_ranks(A, P) * 1000.0 / 59)
    X = np.c_[A.astype(np.float64), np.ones(60)]

    def loo(alpha):
        err = []
        for i in range(60):
            keep = np.arange(60) != i
            Xk, yk = X[keep], y[keep]
            xm, ym = Xk[:, :-1].mean(0), yk.mean()
            Xc = Xk[:, :-1] - xm
            w = np.linalg.solve(Xc.T @ Xc + alpha * np.eye(5), Xc.T @ (yk - ym))
            err.append((y[i] - (ym + (X[i, :-1] - xm) @ w)) ** 2)
        return np.mean(err)

    errs = {a: loo(a) for a in (0.1, 10.0)}
    assert head.alpha == min(errs, key=errs.get)
    assert head.loo_mse == pytest.approx(errs[head.alpha], rel=1e-9)
    back = RankHead.from_array(head.to_array())
    np.testing.assert_array_equal(back.predict(A), head.predict(A))


def test_rank_head_rejects_bad_input():
    a = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="pairs"):
        fit_rank_head(a, a[:2])
    with pytest.raises(ValueError, match="alphas"):
        fit_rank_head(a, a, alphas=(0.0,))


def _two_experts(seed=0, n=600, d=16):
    """Model 0 sees group-0 inputs (positives near anchors), model 1 group 1; each is noise on the other group."""
    rng = np.random.default_rng(seed)
    group = np.arange(n) % 2
    shift = np.zeros(d)
    shift[0] = 3.0  # the groups are separable in every model's embedding
    embs = []
    for k in range(2):
        A = rng.standard_normal((n, d)) + np.where(group[:, None] == 0, shift, -shift)
        noise = np.where(group[:, None] == k, 0.3, 3.0)
        P = A + noise * rng.standard_normal((n, d))
        embs.append((_unit(A), _unit(P)))
    return group, embs


def test_rank_routing_sends_each_group_to_its_expert():
    group, embs = _two_experts()
    fit = slice(0, 400)
    embedders = [LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(A[fit], P[fit]) for A, P in embs]
    for k, e in enumerate(embedders):
        t = e.heads_.predicted_log_rank(embs[k][0][400:])
        g = group[400:]
        assert t[g == k].mean() < t[g != k].mean() - 1.0  # the head knows where its model fails
    ens = UECEnsemble(embedders, routing=RankRouting())
    assert not ens.needs_reference
    q = ens.combine([e.transform(A[400:]) for e, (A, _) in zip(embedders, embs)], role="query")
    w = q.weights[:, 0]
    assert w[group[400:] == 0].mean() > 0.8 and w[group[400:] == 1].mean() < 0.2
    d = ens.combine([e.transform(P[400:]) for e, (_, P) in zip(embedders, embs)], role="passage")
    np.testing.assert_allclose(d.weights, 0.5)


def test_rank_head_survives_save_and_load(tmp_path):
    _, embs = _two_experts(n=100)
    e = LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(*embs[0])
    back = LaplaceEmbedder.load(e.save(tmp_path / "e.cxa"))
    np.testing.assert_array_equal(back.heads_.predicted_log_rank(embs[0][0]), e.heads_.predicted_log_rank(embs[0][0]))
    with pytest.raises(ValueError, match="dimension"):
        e.heads_.predicted_log_rank(np.ones((2, 3), np.float32))


def test_default_scores_the_rank_weighted_cosine():
    group, embs = _two_experts(n=300)
    embedders = [LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(A[:200], P[:200]) for A, P in embs]
    qc = [e.transform(A[200:]) for e, (A, _) in zip(embedders, embs)]
    dc = [e.transform(P[200:]) for e, (_, P) in zip(embedders, embs)]
    ens = UECEnsemble(embedders)  # the default: rank routing, both sides scored as points
    q, d = ens.combine(qc, role="query"), ens.combine(dc, role="passage")
    assert not q.var.any() and not d.var.any()
    w = q.weights.astype(np.float64) * ens.mixing.score_scales(ens.heads)[None, :]

    def mapped(k, x):  # the query head: normalize(x W_k), the identity where the held-out pairs kept it
        head = embedders[k].heads_.query_head
        x = x.astype(np.float64) if head.is_identity else x.astype(np.float64) @ head.weight.astype(np.float64)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    assert ens.mixing.query_head
    # minus half of each document's hubness (CSLS): the mean of its 10 best cosines to the mapped fit anchors
    hub = [
        np.sort(dc[k].mean.astype(np.float64) @ mapped(k, e.heads_.hub_reference).T, axis=1)[:, -10:].mean(axis=1)
        for k, e in enumerate(embedders)
    ]
    want = sum(w[:, k : k + 1] * (mapped(k, qc[k].mean) @ dc[k].mean.T - 0.5 * hub[k][None, :]) for k in range(2))
    np.testing.assert_allclose(ens.similarity(q, d), want, rtol=1e-4, atol=1e-5)
    lap = UECEnsemble(embedders, routing=RankRouting(laplace_variances=True)).combine(qc, role="query")
    assert lap.var.any()  # laplace_variances keeps the posterior variances
