"""The calibrated top-hit confidence: features, the logistic fit, the ensemble's and the index's API."""

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, UECEnsemble, UECIndex
from crossembed.uec.confidence import FEATURES, TopHitConfidence, fit_top_hit_confidence, search_features
from crossembed.uec.gaussian import GaussianEmbedding


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _pairs(rng, n, d, noise):
    """Anchors and positives; the noise varies per pair, so some pairs are easy and some hard."""
    A = _unit(rng.standard_normal((n, d)))
    P = _unit(A + noise[:, None] * rng.standard_normal((n, d)))
    return A, P


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(0)
    n, d = 1200, 12  # the test queries search as many documents as the fit pairs do
    noise = rng.uniform(0.1, 1.5, n)
    embs = [_pairs(rng, n, d, noise * s) for s in (1.0, 1.3)]
    fit = slice(0, 600)
    embedders = [LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(A[fit], P[fit]) for A, P in embs]
    ens = UECEnsemble(embedders)
    comps = [[e.transform(x[fit]) for e, x in zip(embedders, side)] for side in zip(*embs)]
    fitted = ens.fit_confidence_components(comps[0], comps[1])
    test = slice(600, n)
    q = ens.combine([e.transform(A[test]) for e, (A, _) in zip(embedders, embs)])
    docs = ens.combine([e.transform(P[test]) for e, (_, P) in zip(embedders, embs)], role="passage")
    return fitted, q, docs


def test_fit_on_pairs_gives_a_calibrated_confidence_that_ranks_hits(toy):
    from crossembed.uec.metrics import expected_calibration_error, roc_auc

    fitted, q, docs = toy
    assert fitted.confidence_ is not None and 0 < fitted.confidence_.fit_accuracy < 1
    index = UECIndex(docs, ensemble=fitted)
    scores, ids, conf = index.search(q, k=3, exact=True, return_confidence=True)
    assert scores.shape == ids.shape == (len(q), 3) and conf.shape == (len(q),)
    hit = ids[:, 0] == np.arange(len(q))
    assert 0.2 < hit.mean() < 0.9
    assert roc_auc(conf, hit) > 0.8
    # calibrated on held-out folds, so neither over- nor under-confident (in-sample it read 0.102 here)
    assert abs(conf.mean() - hit.mean()) < 0.05
    assert expected_calibration_error(conf, hit) < 0.07
    # the same numbers with no confidence asked, and through the ensemble directly
    s2, i2 = index.search(q, k=3, exact=True)
    np.testing.assert_array_equal(i2, ids)
    s10, i10 = index.search(q, k=10, exact=True)
    direct = fitted.top_hit_confidence(q, s10, docs.mean[i10])
    np.testing.assert_allclose(direct, conf, rtol=1e-6)


def test_confidence_is_saved_with_the_ensemble(toy, tmp_path):
    fitted, q, docs = toy
    back = UECEnsemble.load(fitted.save(tmp_path / "e.ens"))
    assert back.confidence_ == fitted.confidence_
    s, i = fitted.topk(q, docs, 10)
    np.testing.assert_array_equal(
        back.top_hit_confidence(q, s, docs.mean[i]), fitted.top_hit_confidence(q, s, docs.mean[i])
    )


def test_without_a_fit_the_confidence_is_refused(toy):
    fitted, q, docs = toy
    plain = UECEnsemble(fitted.embedders)
    index = UECIndex(docs, ensemble=plain)
    with pytest.raises(ValueError, match="fit_confidence"):
        index.search(q, k=2, return_confidence=True)


def test_padding_gives_zero_confidence(toy):
    fitted, q, docs = toy
    index = UECIndex(docs[:2], ensemble=fitted)
    _, ids, conf = index.search(q[:5], k=4, exact=True, return_confidence=True)
    assert (ids[:, 2:] == -1).all() and np.isfinite(conf).all()
    _, ids, conf = index.search(q[:5], k=4, filter=[10**9], return_confidence=True)
    assert (ids == -1).all() and (conf == 0).all()


def test_features_read_member_agreement():
    # two models of 2 dims, hubness coordinates; the query agrees with doc 0 in model 0 only
    q = GaussianEmbedding(
        np.array([[1.0, 0.0, 1.0, 0.0, 0.0, 0.0]], np.float32), np.zeros((1, 6), np.float32), np.array([[0.7, 0.3]])
    )
    docs = np.zeros((1, 2, 6), np.float32)
    docs[0, 0, :4] = [1.0, 0.0, 0.0, 1.0]
    docs[0, 1, :4] = [0.0, 1.0, 1.0, 0.0]
    feats, has = search_features(q, np.array([[2.0, 1.0]]), docs, [2, 2], 2, np.array([3.0]))
    assert has.all()
    f = dict(zip(FEATURES, feats[0]))
    assert f["agreement"] == pytest.approx(0.7) and f["log_rank"] == 3.0
    assert f["margin"] == pytest.approx(1.0) and f["member_margin"] == pytest.approx(0.4)
    assert f["drop"] == pytest.approx(1.0)  # top-1 minus the last result's score
    deeper = np.concatenate([docs, docs[:, :1]], axis=1)
    feats, _ = search_features(q, np.array([[2.0, 1.5, 0.25]]), deeper, [2, 2], 2, np.array([3.0]))
    f = dict(zip(FEATURES, feats[0]))
    assert f["drop"] == pytest.approx(1.75) and f["margin"] == pytest.approx(0.5)


def test_a_fit_set_all_right_or_all_wrong_gives_a_constant_smoothed_rate():
    feats = np.random.default_rng(0).normal(size=(9, len(FEATURES)))
    for correct, rate in ((np.ones(9), 9.5 / 10), (np.zeros(9), 0.5 / 10)):
        with pytest.warns(RuntimeWarning, match="does not rank"):
            conf = fit_top_hit_confidence(feats, correct)
        assert np.allclose(conf.coef, 0.0)
        assert 1.0 / (1.0 + np.exp(-conf.intercept)) == pytest.approx(rate)


def test_bad_input_is_refused():
    n = len(FEATURES)
    with pytest.raises(ValueError, match="features must not be empty"):
        fit_top_hit_confidence(np.zeros((0, len(FEATURES))), np.ones(0))
    with pytest.raises(ValueError, match="coef"):
        TopHitConfidence(coef=(1.0,), intercept=0.0, center=(0.0,) * n, scale=(1.0,) * n)
    with pytest.raises(ValueError, match="scale"):
        TopHitConfidence(coef=(1.0,) * n, intercept=0.0, center=(0.0,) * n, scale=(0.0,) * n)
