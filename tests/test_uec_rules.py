"""The official code's rules and retrieval-confidence routing (crossembed.uec.ablations, and the harness's
calibrated and Laplace-weighted variants in experiments.uec_rules) against float64 numpy references."""

import math

import numpy as np
import pytest

import crossembed.uec.ablations as rules
from crossembed._rows import unit_rows
from crossembed.uec import (
    EmbeddingMixing,
    GaussianEmbedding,
    IndexConfig,
    LaplaceEmbedder,
    LaplaceRouting,
    ScoreMixing,
    UECEnsemble,
    UECIndex,
    UniformRouting,
)
from crossembed.uec.ablations import BetaCosineScoring, ConfidenceRouting, PrecisionSumRouting
from experiments.uec_rules import (
    DEFAULT_TEMPERATURES,
    CalibratedConfidenceRouting,
    ConfidenceLaplaceRouting,
    make_routing,
    make_scoring,
)


def _embedder(D, seed, hessian="kron"):
    rng = np.random.default_rng(seed)
    A = unit_rows(rng.normal(size=(64, D)))
    P = unit_rows(A + 0.5 * rng.normal(size=(64, D)))
    return LaplaceEmbedder(None, batch_size=16, prior_precision=2.0, hessian=hessian).fit_embeddings(A, P)


@pytest.fixture(scope="module")
def duo():
    return [_embedder(8, 0, "diag"), _embedder(8, 1, "kron")]


def _gauss(n, D, seed, scale=0.05):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(n, D)).astype(np.float32)
    var = (scale * rng.random((n, D)) + 1e-4).astype(np.float32)
    return GaussianEmbedding(mean, var)


# --------------------------------------------------------------------------- pure maths
def test_variance_normalisation_and_precision_sum_match_numpy():
    v = np.random.default_rng(0).random((5, 7)) + 0.01
    ref = v / (np.linalg.norm(v, axis=1, keepdims=True) ** 2)
    np.testing.assert_allclose(rules.normalize_variance_official(v), ref, rtol=1e-12)
    np.testing.assert_allclose(rules.precision_sum(ref), (1.0 / (ref + 1e-30)).sum(axis=1), rtol=1e-12)
    # a zero variance row stays zero instead of dividing by zero
    assert (rules.normalize_variance_official(np.zeros((1, 3))) == 0).all()
    with pytest.raises(ValueError, match="var"):
        rules.normalize_variance_official(-v)


def test_beta_similarity_matches_a_float64_reference():
    q, c = _gauss(6, 5, 1), _gauss(9, 5, 2)
    mq, vq, mc, vc = (x.astype(np.float64) for x in (q.mean, q.var, c.mean, c.var))
    sig2 = (mq**2) @ vc.T + vq @ (mc**2).T + vq @ vc.T
    cos = (mq @ mc.T) / np.outer(np.linalg.norm(mq, axis=1), np.linalg.norm(mc, axis=1))
    for beta in (0.0, 0.5, 2.0):
        ref = cos / (1.0 + beta * sig2 / math.pi)
        got = rules.beta_scores(q.mean, q.var, c.mean, c.var, beta=beta)
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-6)
    # top-k: best first, same as sorting the dense scores; candidates rerank only those rows
    s, i = rules.beta_topk(q.mean, q.var, c.mean, c.var, 4, beta=1.0, chunk=4)
    dense = cos / (1.0 + sig2 / math.pi)
    np.testing.assert_array_equal(i, np.argsort(-dense, axis=1, kind="stable")[:, :4])
    cand = np.tile(np.array([[8, 0, 3, -1]]), (6, 1))
    s2, i2 = rules.beta_topk(q.mean, q.var, c.mean, c.var, 2, candidates=cand)
    for r in range(6):
        exp = sorted([8, 0, 3], key=lambda j: -dense[r, j])[:2]
        assert i2[r].tolist() == exp
    with pytest.raises(ValueError, match="beta"):
        rules.beta_scores(q.mean, q.var, c.mean, c.var, beta=-1.0)
    with pytest.raises(TypeError, match="beta"):
        rules.beta_scores(q.mean, q.var, c.mean, c.var, beta="1")


def test_topk_ties_go_to_the_lower_index():
    s = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]])
    vals, idx = rules._topk_rows(s, 2)
    assert idx.tolist() == [[1, 2]] and vals.tolist() == [[3.0, 3.0]]


def test_retrieval_gap_and_confidence_variance_match_numpy():
    rng = np.random.default_rng(3)
    q, r = rng.normal(size=(7, 6)), rng.normal(size=(40, 6))
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    rn = r / np.linalg.norm(r, axis=1, keepdims=True)
    s = np.sort(qn @ rn.T, axis=1)[:, ::-1]
    ref = (s[:, 0] - s[:, 1:20].mean(axis=1)) / 0.1
    got = rules.retrieval_gap(q.astype(np.float32), r.astype(np.float32), top=20, scale=0.1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rules.confidence_variance(ref, 0.1), (0.1 / np.maximum(ref, 1e-3)) ** 2)
    with pytest.raises(ValueError, match="top"):
        rules.retrieval_gap(q, r, top=41)
    with pytest.raises(ValueError, match="top"):
        rules.retrieval_gap(q, r, top=1)
    with pytest.raises(ValueError, match="dimension"):
        rules.retrieval_gap(q[:, :3], r)
    with pytest.raises(ValueError, match="gap"):
        rules.confidence_variance([np.nan])


# --------------------------------------------------------------------------- the ensemble
NO_HUB = ScoreMixing(hubness=0)


def _u(ens, comps):
    """The ensemble's per-model confidence variances sigma_k^2 of ``comps`` over its reference."""
    return ens.routing.confidence_variance(comps, ens.heads, ens.reference_)


def _calibrated(ens, documents, queries):
    """``ens`` with its reference set and its CalibratedConfidenceRouting calibrated on ``queries`` (as uec-eval does)."""
    ens = ens.with_reference(documents)
    routing = ens.routing.calibrated(ens.reference_, queries, ens.heads)
    return UECEnsemble(ens.embedders, routing=routing, mixing=ens.mixing, scoring=ens.scoring, reference=ens.reference_)


def test_official_weights_are_the_precision_sum_softmax(duo):
    comps = [e.transform(np.random.default_rng(5 + k).normal(size=(6, 8))) for k, e in enumerate(duo)]
    ens = UECEnsemble(duo, routing=PrecisionSumRouting(50.0), mixing=EmbeddingMixing(), scoring=BetaCosineScoring())
    out = ens.combine(comps, role="query")
    P = []
    for c in comps:
        v = c.var.astype(np.float64)
        vn = v / (np.linalg.norm(v, axis=1, keepdims=True) ** 2)
        P.append((1.0 / (vn + 1e-30)).sum(axis=1))
    z = np.stack(P, axis=1) / 50.0
    pi = np.exp(z - z.max(axis=1, keepdims=True))
    pi /= pi.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.weights, pi, rtol=1e-5, atol=1e-6)
    # the official convolution: sum pi mu (unit means), sum pi^2 v' (not renormalised)
    mus = [c.mean / np.linalg.norm(c.mean, axis=1, keepdims=True) for c in comps]
    vns = [c.var / (np.linalg.norm(c.var.astype(np.float64), axis=1, keepdims=True) ** 2) for c in comps]
    mu = sum(pi[:, k : k + 1] * mus[k] for k in range(2))
    var = sum(pi[:, k : k + 1] ** 2 * vns[k] for k in range(2))
    np.testing.assert_allclose(out.mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.var, var, rtol=1e-4, atol=1e-7)
    # its similarity is the beta-scaled cosine
    sim = ens.similarity(out, out)
    np.testing.assert_allclose(sim, rules.beta_scores(out.mean, out.var, out.mean, out.var, beta=1.0), rtol=1e-6)
    # the preset names the same objects
    assert type(make_routing("laplace", "official")) is PrecisionSumRouting
    assert make_routing("laplace", "official").temperature == DEFAULT_TEMPERATURES[("official", "laplace")]
    assert make_scoring("official", beta=0.3).get_config() == {"kind": "beta_cosine", "beta": 0.3}


def _expert_world(seed=0, n_docs=200, D=16):
    """Model 0 sees the right document clearly for the first half of the queries, model 1 for the second."""
    rng = np.random.default_rng(seed)
    docs = unit_rows(rng.normal(size=(n_docs, D)))
    target = rng.integers(0, n_docs, 60)
    noise = np.where(np.arange(60) < 30, 0.05, 3.0)[:, None]
    q0 = docs[target] + noise * rng.normal(size=(60, D))
    q1 = docs[target] + noise[::-1] * rng.normal(size=(60, D))
    return docs, (q0, q1), target


def test_a_confident_model_gets_the_higher_weight():
    docs, (q0, q1), target = _expert_world()
    embs = [_embedder(16, 7), _embedder(16, 8)]
    ens = UECEnsemble(embs, routing=ConfidenceRouting(1.0, laplace_variances=True), mixing=NO_HUB)
    d_comps = [e.transform(docs) for e in embs]
    # no reference yet: the queries fall back to the Laplace coefficients, with a warning
    with pytest.warns(RuntimeWarning, match="reference"):
        fallback = ens.combine([embs[0].transform(q0), embs[1].transform(q1)])
    lap = UECEnsemble(embs, routing=LaplaceRouting()).combine([embs[0].transform(q0), embs[1].transform(q1)])
    np.testing.assert_allclose(fallback.weights, lap.weights, rtol=1e-6)
    unset = ens
    ens = ens.with_reference(d_comps)
    assert not unset.has_reference  # with_reference returns a new ensemble
    q = ens.combine([embs[0].transform(q0), embs[1].transform(q1)], role="query")
    w = q.weights
    assert (w[:30, 0] > w[:30, 1]).mean() > 0.9 and (w[30:, 1] > w[30:, 0]).mean() > 0.9
    # the weights are the inverse-variance rule: pi ∝ sigma^-2 at T = 1
    u = _u(ens, [e.transform(x) for e, x in zip(embs, (q0, q1))])
    ref = (1 / u) / (1 / u).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(w, ref, rtol=1e-4)
    # centred per model: log sigma^2 minus its mean over calibration queries
    cen = UECEnsemble(embs, routing=CalibratedConfidenceRouting(1.0))
    with pytest.raises(ValueError, match="calibrated"):
        cen.with_reference(d_comps).combine([embs[0].transform(q0), embs[1].transform(q1)])
    cal = [embs[0].transform(q0[::2]), embs[1].transform(q1[::2])]
    cen = _calibrated(cen, d_comps, cal)
    cu = np.log(_u(ens, [c.normalized() for c in cal])).mean(axis=0)
    np.testing.assert_allclose(cen.routing.center, cu, rtol=1e-6)
    z = -(np.log(u) - cu[None, :])
    ref_c = np.exp(z - z.max(axis=1, keepdims=True))
    got = cen.combine([embs[0].transform(q0), embs[1].transform(q1)]).weights
    np.testing.assert_allclose(got, ref_c / ref_c.sum(axis=1, keepdims=True), rtol=1e-4)
    assert q.mean.shape == (60, 32)
    # routing beats the uniform mix on this task
    d = ens.combine(d_comps, role="passage")
    hits = (ens.topk(q, d, 1)[1][:, 0] == target).mean()
    uni = UECEnsemble(embs, routing=UniformRouting(), mixing=NO_HUB)
    qu = uni.combine([embs[0].transform(q0), embs[1].transform(q1)], role="query")
    hits_u = (uni.topk(qu, d, 1)[1][:, 0] == target).mean()
    assert hits > hits_u


def test_confidence_times_laplace_and_documents(duo):
    docs, (q0, q1), _ = _expert_world(D=8)
    ens = UECEnsemble(duo, routing=ConfidenceLaplaceRouting(2.0))
    ens = ens.with_reference([e.transform(docs) for e in duo])
    comps = [duo[0].transform(q0), duo[1].transform(q1)]
    pi = ens.combine(comps, role="query").weights.astype(np.float64)
    u = _u(ens, [c.normalized() for c in comps])
    tr = np.stack([c.normalized().var.astype(np.float64).sum(axis=1) for c in comps], axis=1)
    t = np.log(u) + np.log(tr / np.array([e.heads_.trace_mean for e in duo]))
    ref = np.exp(-t / 2.0 - (-t / 2.0).max(axis=1, keepdims=True))
    np.testing.assert_allclose(pi, ref / ref.sum(axis=1, keepdims=True), rtol=1e-4)
    assert ConfidenceLaplaceRouting().temperature == 1.0 and ConfidenceRouting().temperature == 2.0
    # documents carry no retrieval confidence: uniform for plain confidence routing
    conf = UECEnsemble(duo, routing=ConfidenceRouting(), mixing=EmbeddingMixing()).with_reference(
        [e.transform(docs) for e in duo]
    )
    dw = conf.combine([e.transform(docs[:5]) for e in duo], role="passage").weights
    np.testing.assert_allclose(dw, 0.5)


def test_state_round_trip_with_rules_and_reference(duo):
    docs, (q0, q1), _ = _expert_world(D=8)
    routing = make_routing("confidence", "official", temperature=0.7, top=5, center=True)
    ens = UECEnsemble(duo, routing=routing, scoring=make_scoring("official", beta=0.3))
    ens = _calibrated(ens, [e.transform(docs) for e in duo], [duo[0].transform(q0), duo[1].transform(q1)])
    arrays, meta = ens.get_state()
    back = UECEnsemble.from_state(arrays, meta)
    assert back.routing.center == ens.routing.center and len(ens.routing.center) == 2
    assert back.routing.get_config() == ens.routing.get_config()
    assert (back.routing.top, back.routing.temperature, back.scoring.beta) == (5, 0.7, 0.3)
    assert type(back.routing.fallback) is PrecisionSumRouting  # the official rules' fallback survives
    comps = [duo[0].transform(q0), duo[1].transform(q1)]
    a, b = ens.combine(comps), back.combine(comps)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.weights, b.weights)
    # a saved state without its reference arrays is refused
    broken = {k: v for k, v in arrays.items() if not k.startswith("ref")}
    with pytest.raises(ValueError, match="reference"):
        UECEnsemble.from_state(broken, meta)


def test_index_with_official_rules_and_confidence(tmp_path, duo):
    docs, (q0, q1), target = _expert_world(D=8, n_docs=300)
    d_comps = [e.transform(docs) for e in duo]
    for kw in (
        {"routing": make_routing("rank", "official"), "scoring": BetaCosineScoring(0.5)},
        {"routing": ConfidenceRouting()},
    ):
        ens = UECEnsemble(duo, **kw)
        if ens.needs_reference:
            ens = ens.with_reference(d_comps)
        d = ens.combine(d_comps, role="passage")
        index = UECIndex(d, ensemble=ens, config=IndexConfig(M=8, rerank=300))
        q = ens.combine([duo[0].transform(q0), duo[1].transform(q1)])
        s_exact, i_exact = index.search(q, 5, exact=True)
        s_ann, i_ann = index.search(q, 5)  # reranking every document = exact
        np.testing.assert_array_equal(i_exact, i_ann)
        np.testing.assert_allclose(s_exact, s_ann, rtol=1e-5)
        dense = ens.similarity(q, d)
        np.testing.assert_array_equal(i_exact, np.argsort(-dense, axis=1, kind="stable")[:, :5])
        path = index.save(tmp_path / "i.uec")
        back = UECIndex.load(path)
        assert back.ensemble.routing.get_config() == ens.routing.get_config()
        assert back.ensemble.scoring.get_config() == ens.scoring.get_config()
        np.testing.assert_array_equal(back.search(q, 5, exact=True)[1], i_exact)


def test_bad_arguments(duo):
    with pytest.raises(ValueError, match="rules"):
        make_scoring("offical")
    with pytest.raises(ValueError, match="uncertainty"):
        make_routing("margin")
    with pytest.raises(ValueError, match="beta"):
        BetaCosineScoring(beta=-0.1)
    with pytest.raises(ValueError, match="top"):
        ConfidenceRouting(top=1)
    with pytest.raises(TypeError, match="top"):
        ConfidenceRouting(top=2.5)
    with pytest.raises(TypeError, match="laplace_variances"):
        ConfidenceRouting(laplace_variances="add")
    with pytest.raises(TypeError, match="fallback"):
        ConfidenceRouting(fallback="laplace")
    ens = UECEnsemble(duo, routing=ConfidenceRouting())
    with pytest.raises(ValueError, match="documents"):
        ens.with_reference([np.zeros((30, 8), np.float32)])
    with pytest.raises(ValueError, match="dimension"):
        ens.with_reference([np.ones((30, 8), np.float32), np.ones((30, 4), np.float32)])
    with pytest.raises(ValueError, match="at least 2"):
        ens.with_reference([np.ones((1, 8), np.float32)] * 2)
    small = ens.with_reference([np.eye(8, dtype=np.float32)[:5]] * 2)  # fewer than top: the gap uses all 5
    assert _u(small, [GaussianEmbedding(np.eye(8, dtype=np.float32)[:3], np.zeros((3, 8)))] * 2).shape == (3, 2)
    with pytest.raises(TypeError, match="documents"):
        ens.with_reference(np.ones((30, 8), np.float32))
    # defaults: T resolves per rules x uncertainty
    assert make_routing("rank", "official").temperature == 0.5 and make_routing().temperature == 1.0


def test_replace_scoring_ranks_by_the_confidence_weighted_score():
    docs, (q0, q1), _ = _expert_world(D=16)
    embs = [_embedder(16, 7), _embedder(16, 8)]
    ens = UECEnsemble(embs, routing=ConfidenceRouting(2.0), mixing=NO_HUB)  # sigma^2 / points scored
    assert ens.routing.laplace_variances is False and ens.routing.temperature == 2.0
    d_comps = [e.transform(docs) for e in embs]
    ens = ens.with_reference(d_comps)
    qc = [embs[0].transform(q0), embs[1].transform(q1)]
    q, d = ens.combine(qc), ens.combine(d_comps, role="passage")
    assert (d.var == 0).all()
    u = _u(ens, [c.normalized() for c in qc])
    w = q.weights.astype(np.float64) * ens.mixing.score_scales(ens.heads)[None, :]
    np.testing.assert_allclose(q.var[:, :16], np.repeat((w[:, :1] ** 2) * u[:, :1], 16, axis=1), rtol=1e-4)
    # sig2_s is one number per query (unit documents), so the probit ranks exactly like the weighted score
    mixed = sum(w[:, k : k + 1] * (qc[k].normalized().mean @ d_comps[k].normalized().mean.T) for k in range(2))
    _, top = ens.topk(q, d, 10)
    np.testing.assert_array_equal(top, np.argsort(-mixed, axis=1, kind="stable")[:, :10])
    sig2 = (w**2 * u).sum(axis=1)
    np.testing.assert_allclose(
        ens.similarity(q, d), mixed / np.sqrt(1 + math.pi / 8 * sig2)[:, None], rtol=2e-4, atol=1e-6
    )


def _anisotropic_world():
    """Model 1 looks confident everywhere (tiny cosine spread, like e5) but only sees the second half clearly."""
    docs, (q0, q1), target = _expert_world(seed=3)
    embs = [_embedder(16, 7), _embedder(16, 8)]
    # a small unrelated-pair spread divides into sigma = c^2 / raw gap: a global lead for model 1
    embs[1].heads_.score_scale = 0.02 * embs[1].heads_.score_scale
    return docs, (q0, q1), target, embs


def test_standardised_confidence_is_a_per_model_z_score():
    docs, (q0, q1), _, embs = _anisotropic_world()
    d_comps = [e.transform(docs) for e in embs]
    comps = [embs[0].transform(q0), embs[1].transform(q1)]
    # calibration queries on different scales per model, so the two spreads differ
    cal = [embs[0].transform(q0[::2]), embs[1].transform(0.5 * q1[1::2] + 0.1)]
    z = UECEnsemble(embs, routing=CalibratedConfidenceRouting(0.5, standardize=True))
    with pytest.raises(ValueError, match="calibrated"):
        z.with_reference(d_comps).combine(comps)
    z = _calibrated(z, d_comps, cal)
    raw = UECEnsemble(embs, routing=ConfidenceRouting()).with_reference(d_comps)
    lc = np.log(_u(raw, [c.normalized() for c in cal]))
    np.testing.assert_allclose(z.routing.center, lc.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(z.routing.spread, lc.std(axis=0), rtol=1e-6)
    assert abs(z.routing.spread[0] - z.routing.spread[1]) > 0.1 * max(z.routing.spread)
    t = (np.log(_u(raw, [c.normalized() for c in comps])) - lc.mean(axis=0)) / lc.std(axis=0)
    ref = np.exp(-t / 0.5 - (-t / 0.5).max(axis=1, keepdims=True))
    np.testing.assert_allclose(z.combine(comps).weights, ref / ref.sum(axis=1, keepdims=True), rtol=1e-4)


def test_standardised_confidence_stops_a_globally_confident_model_winning_everywhere():
    docs, (q0, q1), target, embs = _anisotropic_world()
    d_comps = [e.transform(docs) for e in embs]
    comps = [embs[0].transform(q0), embs[1].transform(q1)]
    raw = UECEnsemble(embs, routing=ConfidenceRouting(1.0)).with_reference(d_comps)
    w_raw = raw.combine(comps).weights
    assert (w_raw[:, 1] > 0.5).mean() > 0.9  # the anisotropic model takes (nearly) every query
    z = _calibrated(UECEnsemble(embs, routing=CalibratedConfidenceRouting(1.0, standardize=True)), d_comps, comps)
    w = z.combine(comps).weights
    # per-model z-scores route each half to the model that sees it
    assert (w[:30, 0] > w[:30, 1]).mean() > 0.9 and (w[30:, 1] > w[30:, 0]).mean() > 0.9
    d = z.combine(d_comps, role="passage")
    hits_z = (z.topk(z.combine(comps), d, 1)[1][:, 0] == target).mean()
    hits_raw = (raw.topk(raw.combine(comps), d, 1)[1][:, 0] == target).mean()
    assert hits_z > hits_raw
    # the spread is saved and reloaded with the ensemble
    back = UECEnsemble.from_state(*z.get_state())
    assert back.routing.standardize and back.routing.spread == z.routing.spread
    np.testing.assert_array_equal(back.combine(comps).weights, z.combine(comps).weights)
