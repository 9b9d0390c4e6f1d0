"""GEH's no-partner check of the map pass (crossembed.linking.verify)."""

import numpy as np
import pytest

from _linking_data import linear_problem
from crossembed.linking import CCAMap, CrossFitCheck, CrossFitRelink, DecoyPass, RidgeMap, evaluate_links
from experiments.linking_rules import CheckedMapPass


def _low_overlap_pool(seed=0, n=900, d=24, d_b=32, noise=0.3):
    """Unit rows of a noisy linear pair at alpha 0.2, and a pool like GEH's at low overlap: 60 % of
    the true pairs plus as many links between rows that have no partner (their nearest such row)."""
    A, B, split, Z, rng = linear_problem(n, d=d, d_b=d_b, alpha=0.2, noise=noise, seed=seed)
    truth = split.truth[rng.permutation(len(split.truth))[: int(0.6 * len(split.truth))]]
    lone_a = np.setdiff1d(np.arange(len(A)), np.concatenate([split.truth[:, 0], split.seeds[:, 0]]))
    lone_b = np.setdiff1d(np.arange(len(B)), np.concatenate([split.truth[:, 1], split.seeds[:, 1]]))
    # a partnerless A row linked to the partnerless B row whose object is nearest (the plausible false link)
    ZA, ZB = Z[split.rows_a], Z[split.rows_b]
    pick_a = rng.choice(lone_a, size=len(truth), replace=False)
    near = np.argsort(-(ZA[pick_a] @ ZB[lone_b].T), axis=1)
    used, false = set(), []
    for i, a in enumerate(pick_a):
        b = next(lone_b[j] for j in near[i] if lone_b[j] not in used)
        used.add(b)
        false.append((a, b))
    pool = np.concatenate([truth, np.array(false, np.int64)])
    return A, B, split, pool[rng.permutation(len(pool))]


@pytest.mark.parametrize("scorer", [RidgeMap(), CCAMap()], ids=repr)
def test_check_removes_links_between_rows_without_partners(scorer):
    A, B, split, pool = _low_overlap_pool()
    assert evaluate_links(pool, split.truth)["precision"] == pytest.approx(0.5, abs=0.01)
    kept = CrossFitCheck(scorer=scorer)(A, B, pool, split.seeds, np.random.default_rng(0), num_threads=1)
    m = evaluate_links(kept, split.truth)
    assert m["precision"] > 0.8, m
    assert m["recall"] > 0.4, m  # most of the pool's right links survive (the pool holds 60 % of the truth)
    # (on real encoders the map of the whole pool keeps the false links; a linear toy map does not: docs/linking.md)


def test_check_keeps_rows_in_its_row_cap_and_small_pools_pass_through():
    A, B, split, pool = _low_overlap_pool(seed=1, n=700)
    rng = np.random.default_rng(0)
    capped = CrossFitCheck(rows=350)(A, B, pool, split.seeds, rng, num_threads=1)
    assert len(capped) and np.isin(capped[:, 0], pool[:, 0]).mean() > 0.5  # rows are mapped back to A and B
    assert capped[:, 0].max() < len(A) and capped[:, 1].max() < len(B)
    tiny = pool[:3]
    np.testing.assert_array_equal(CrossFitCheck(folds=5)(A, B, tiny, split.seeds, rng), tiny)


def test_checked_map_pass_and_the_check_arguments():
    assert isinstance(CheckedMapPass().check, CrossFitCheck)
    assert CheckedMapPass().get_config()["check"]["kind"] == "crossfit"
    for kw in (dict(folds=1), dict(max_rounds=0), dict(tol=1.5)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            CrossFitCheck(**kw)
    for bad in ("cca", CCAMap):
        with pytest.raises(TypeError, match="scorer"):
            CrossFitCheck(scorer=bad)


def _dirty_pool(seed, *, right_share, size=300):
    """A noisy linear pair at alpha 0.2 and a pool of ``size`` links of which ``right_share`` are
    true pairs, the rest random pairs of rows (rows with and without a partner alike)."""
    A, B, split, _, rng = linear_problem(1500, d=24, d_b=32, alpha=0.2, noise=0.3, seed=seed)
    n_right = int(right_share * size)
    truth = split.truth[rng.permutation(len(split.truth))[:n_right]]
    free_a = np.setdiff1d(np.arange(len(A)), np.concatenate([truth[:, 0], split.seeds[:, 0]]))
    free_b = np.setdiff1d(np.arange(len(B)), np.concatenate([truth[:, 1], split.seeds[:, 1]]))
    wrong = np.stack(
        [rng.choice(free_a, size - n_right, replace=False), rng.choice(free_b, size - n_right, replace=False)], 1
    )
    pool = np.concatenate([truth, wrong])
    return A, B, split, pool[rng.permutation(len(pool))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relink_recovers_a_pool_that_is_mostly_wrong_where_the_check_keeps_nothing(seed):
    A, B, split, pool = _dirty_pool(seed, right_share=0.1)  # 30 right links of 300, 285 true pairs in all
    rng = np.random.default_rng(0)
    rebuilt = evaluate_links(CrossFitRelink()(A, B, pool, split.seeds, rng, num_threads=1), split.truth)
    # nearly every true pair, at a precision far above the pool's 0.1 (the rows without a partner
    # that the check lets through are the decoy pass's to drop)
    assert rebuilt["recall"] > 0.9 and rebuilt["precision"] > 0.5, rebuilt
    checked = CrossFitCheck()(A, B, pool, split.seeds, np.random.default_rng(0), num_threads=1)
    assert len(checked) < 10  # filtering alone: too few right links agree to re-find each other


def test_relink_is_reproducible_caps_its_rows_and_passes_small_pools_through():
    A, B, split, pool = _dirty_pool(0, right_share=0.3)
    relink = CrossFitRelink(max_rounds=3)
    first = relink(A, B, pool, split.seeds, np.random.default_rng(5), num_threads=1)
    np.testing.assert_array_equal(first, relink(A, B, pool, split.seeds, np.random.default_rng(5), num_threads=2))
    capped = CrossFitRelink(rows=700)(A, B, pool, split.seeds, np.random.default_rng(0), num_threads=1)
    assert len(capped) and capped[:, 0].max() < len(A) and capped[:, 1].max() < len(B)
    assert evaluate_links(capped, split.truth)["recall"] > 0.5
    tiny = pool[:3]
    np.testing.assert_array_equal(CrossFitRelink(folds=5)(A, B, tiny, split.seeds, np.random.default_rng(0)), tiny)


def test_relink_is_the_decoy_pass_default_and_checks_its_arguments():
    assert isinstance(DecoyPass().check, CrossFitRelink)
    assert DecoyPass().get_config()["check"]["kind"] == "relink"
    assert isinstance(CrossFitRelink(scorer=RidgeMap()).scorer, RidgeMap)
    for kw in (dict(folds=1), dict(max_rounds=0), dict(tol=-0.1), dict(rows=1)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            CrossFitRelink(**kw)
    for bad in (CCAMap, "cca", 1.0):
        with pytest.raises(TypeError, match="scorer"):
            CrossFitRelink(scorer=bad)
