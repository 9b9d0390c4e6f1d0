"""Cross-fitting: heads refitted on other pairs, the held-out routing check and its fallback, saved with the ensemble."""

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, RankRouting, UECEnsemble
from crossembed.uec.crossfit import RoutingCheck
from crossembed.uec.routing import LanguageRouting


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _task(seed=0, n=400, d=10):
    rng = np.random.default_rng(seed)
    A = _unit(rng.standard_normal((n, d)))
    P = _unit(A + rng.uniform(0.2, 1.2, n)[:, None] * rng.standard_normal((n, d)))
    return A, P


def _fit(A, P):
    return LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(A, P)


def _comps(embedders, A, P):
    return [e.transform(A) for e in embedders], [e.transform(P) for e in embedders]


@pytest.fixture(scope="module")
def good():
    A, P = _task()
    return A, P, _fit(A, P)


def test_refit_heads_refits_what_the_pairs_give_and_keeps_the_rest(good):
    A, P, e = good
    half = e.refit_heads(A[:200], P[:200])
    assert half is not e and half.posterior_ is e.posterior_ and half.n_pairs_ == 200 and e.n_pairs_ == 400
    h, h0 = half.heads_, e.heads_
    assert (h.trace_mean, h.trace_std, h.probe_head) == (h0.trace_mean, h0.trace_std, h0.probe_head)
    assert h.hub_reference.shape[0] == 200 and h0.hub_reference.shape[0] == 400
    assert not np.array_equal(h.rank_head.to_array(), h0.rank_head.to_array())
    assert h.query_head.penalty == h0.query_head.penalty
    with pytest.raises(ValueError, match="dimension"):
        e.refit_heads(A[:, :5], P[:, :5])


def test_identical_models_fall_back_to_a_fixed_log_rank(good):
    # two copies of one model: the rank heads agree on every query, so they cannot beat uniform weights
    A, P, e = good
    ens = UECEnsemble([e, e])
    fitted = ens.fit_confidence_components(*_comps([e, e], A, P))
    check = fitted.routing_check_
    assert check.n_queries == 400 and check.routed == pytest.approx(check.fixed) and not check.kept
    assert fitted.routing == RankRouting(fixed_log_rank=check.fixed_log_rank) and ens.routing.fixed_log_rank is None
    pi = fitted.coefficients(_comps([e, e], A[:7], P[:7])[0])
    np.testing.assert_allclose(pi, 0.5)


def test_a_member_the_rank_heads_can_tell_apart_keeps_them(good):
    A, P, e = good
    rng = np.random.default_rng(1)
    A2 = _unit(rng.standard_normal(A.shape))  # a noise member: its queries say nothing of their positives
    noise = _fit(A2, P)
    ens = UECEnsemble([e, noise])
    fitted = ens.fit_confidence_components([e.transform(A), noise.transform(A2)], [e.transform(P), noise.transform(P)])
    check = fitted.routing_check_
    assert check.kept and check.routed > check.fixed + 2 * check.std_error
    assert fitted.routing.fixed_log_rank is None


def test_the_check_is_saved_and_old_files_refused(good, tmp_path):
    A, P, e = good
    fitted = UECEnsemble([e, e]).fit_confidence_components(*_comps([e, e], A, P), folds=3)
    back = UECEnsemble.load(fitted.save(tmp_path / "e.ens"))
    assert back.routing_check_ == fitted.routing_check_ and back.routing == fitted.routing
    arrays, meta = fitted.get_state()
    assert meta["format"] == 5 and meta["routing_check"]["n_queries"] == 400
    with pytest.raises(ValueError, match="format version 3"):
        UECEnsemble.from_state(arrays, {**meta, "format": 3})


def test_bad_settings_are_refused(good):
    A, P, e = good
    ens = UECEnsemble([e, e])
    q, p = _comps([e, e], A, P)
    with pytest.raises(ValueError, match="folds"):
        ens.fit_confidence_components(q, p, folds=1)
    with pytest.raises(ValueError, match="at least 10 pairs"):
        ens.fit_confidence_components([c[:6] for c in q], [c[:6] for c in p])
    with pytest.raises(ValueError, match="texts"):
        ens.fit_confidence_components(q, p, texts=["a"])
    with pytest.raises(TypeError, match="fixed_log_rank"):
        RankRouting(fixed_log_rank="low")
    with pytest.raises(ValueError, match="fixed_log_rank"):
        LanguageRouting([None, ("en",)], identifier=None, fixed_log_rank=float("nan"))
    with pytest.raises(TypeError, match="routing_check"):
        UECEnsemble([e], routing_check={"routed": 1.0})
    assert RoutingCheck(0.5, 0.4, 0.01, 2.0, 10).kept and not RoutingCheck(0.5, 0.49, 0.01, 2.0, 10).kept


def test_a_query_with_several_positives_is_right_on_any_of_them():
    from crossembed.uec.crossfit import _Relevance

    # pairs 0 and 1 share one query (a word with two glosses, collection rows 0 and 1); pair 2 is alone (row 2)
    rel = _Relevance.of(np.array([0, 1, 2]), np.array([0, 0, 1]), 3)
    idx = np.array([[1, 0, 2], [1, 2, 0], [0, 1, 2]])
    np.testing.assert_array_equal(rel.hits(np.arange(3), idx[:, :1])[:, 0], [True, True, False])
    ndcg = rel.ndcg(np.arange(3), idx)
    assert ndcg[0] == pytest.approx(1.0) and ndcg[1] == pytest.approx((1 + 0.5) / (1 + 1 / np.log2(3)))
    assert ndcg[2] == pytest.approx(0.5)
