"""GEH's no-partner check of the map pass (crossembed.linking.verify)."""

import numpy as np
import pytest

from _linking_data import linear_problem
from crossembed.linking import CCAMap, CrossFitCheck, MapPass, RidgeMap, evaluate_links


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


def test_map_pass_check_is_an_object_and_off_by_default():
    assert MapPass().check is None  # the default fits the map on the whole pool
    assert isinstance(MapPass(check=CrossFitCheck()).check, CrossFitCheck)
    assert MapPass(check=CrossFitCheck()).get_config()["check"]["kind"] == "crossfit"
    for bad in (CrossFitCheck, "crossfit", 5):
        with pytest.raises(TypeError, match="check"):
            MapPass(check=bad)
    for kw in (dict(folds=1), dict(max_rounds=0), dict(tol=1.5)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            CrossFitCheck(**kw)
    for bad in ("cca", CCAMap):
        with pytest.raises(TypeError, match="scorer"):
            CrossFitCheck(scorer=bad)
