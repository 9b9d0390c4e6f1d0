"""The ridge-map final pass of GEH (crossembed.linking.refine)."""

import numpy as np
import pytest

from _linking_data import linear_problem
from crossembed.linking import DecoyPass, GEHLinker, MapPass, ValidatedPromotion, evaluate_links
from crossembed.linking.refine import map_links, ridge_map_rows
from experiments.linking_rules import FoldPass


def test_ridge_map_matches_the_float64_normal_equations():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((50, 7)), rng.standard_normal((50, 5))
    lam, rows = 0.3, np.repeat(np.arange(50)[:, None], 2, axis=1)
    ref = np.linalg.solve(X.T @ X + lam * np.eye(7), X.T @ Y)
    np.testing.assert_allclose(ridge_map_rows(X, Y, rows, lam=lam), ref, rtol=1e-5, atol=1e-6)
    # lam -> 0 on a well-posed problem is least squares
    np.testing.assert_allclose(ridge_map_rows(X, Y, rows, lam=1e-12), np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-5)


def _partial_problem(n=1200, d=24, d_b=32, alpha=0.4, seed=0, noise=0.15):
    A, B, split, _, _ = linear_problem(n, d=d, d_b=d_b, alpha=alpha, noise=noise, seed=seed)
    return A, B, split


def test_map_links_recovers_a_linear_map_and_filters_absent_rows():
    A, B, split = _partial_problem()
    # a pool of half the truth, 10% of it wrong
    rng = np.random.default_rng(1)
    pool = split.truth[rng.permutation(len(split.truth))[: len(split.truth) // 2]].copy()
    wrong = rng.choice(len(pool), size=len(pool) // 10, replace=False)
    pool[wrong, 1] = pool[np.roll(wrong, 1), 1]
    anchors = np.concatenate([split.seeds, pool])
    kw = dict(exclude_a=split.seeds[:, 0], exclude_b=split.seeds[:, 1])
    links, scores, thr = map_links(A, B, anchors, **kw)
    m = evaluate_links(links, split.truth)
    assert m["recall"] > 0.9 and m["precision"] > 0.9, m
    assert np.all(scores > thr)
    # without the score filter the absent rows' mutual neighbours come back: precision falls
    unfiltered, _, thr0 = map_links(A, B, anchors, score_filter=False, **kw)
    assert thr0 == -np.inf and len(unfiltered) > len(links)
    assert evaluate_links(unfiltered, split.truth)["precision"] < m["precision"] - 0.2
    # seeds never appear in the links
    assert not np.isin(links[:, 0], split.seeds[:, 0]).any()
    assert not np.isin(links[:, 1], split.seeds[:, 1]).any()


def test_final_pass_choices_and_their_history():
    A, B, split = _partial_problem(n=800, seed=2)
    kw = dict(random_state=0, max_iter=6, show_progress_bar=False)
    res = {}
    for fp, final_pass in (("map", MapPass()), ("folds", FoldPass()), ("none", None)):
        res[fp] = GEHLinker(promotion=ValidatedPromotion(final_pass=final_pass), **kw).link(A, B, split.seeds)
    assert res["map"].history[-1]["final_pass"] == "map"
    assert res["folds"].history[-1]["final_pass"] == "folds"
    assert "final_pass" not in res["none"].history[-1]
    f1 = {k: evaluate_links(r.links, split.truth)["f1"] for k, r in res.items()}
    assert f1["map"] >= f1["none"] and f1["map"] > 0.8, f1
    assert isinstance(ValidatedPromotion().final_pass, DecoyPass)  # the default
    assert ValidatedPromotion().links_every_row and not ValidatedPromotion(final_pass=FoldPass()).links_every_row
    assert not ValidatedPromotion(final_pass=None).has_final_pass
    for bad in ("procrustes", True, MapPass):
        with pytest.raises(TypeError, match="final_pass"):
            ValidatedPromotion(final_pass=bad)
    with pytest.raises(ValueError, match="lam"):
        MapPass(lam=0)
    with pytest.raises(ValueError, match="folds"):
        FoldPass(folds=1)
