"""Out-of-sample links and the decoy-calibrated no-partner threshold (crossembed.linking.decoys)."""

import numpy as np
import pytest

from _linking_data import linear_problem
from crossembed.linking import (
    CCAMap,
    CrossFitCheck,
    DecoyPass,
    GEHLinker,
    MapPass,
    RidgeMap,
    ValidatedPromotion,
    evaluate_links,
)
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.decoys import decoy_links, decoy_threshold
from experiments.linking_rules import TwoWayRidgeMap


def _reference_threshold(scores, right, linked, decoys, n_rows, precision):
    """float64 brute force of decoy_threshold: every candidate cut tried one by one."""
    share = lambda values, t: sum(1 for v in values if v >= t) / len(values)  # noqa: E731
    cuts = sorted(scores, reverse=True)
    best_spread, m = np.inf, 0.0
    for t in cuts:  # m from the cut where its binomial spread is least (first such cut)
        f0, g = share(decoys, t), share(linked, t)
        if g - f0 <= 0:
            continue
        est = min(max((share(scores, t) * len(scores) - n_rows * f0) / (g - f0), 0.0), n_rows)
        spread = (n_rows**2 * f0 * (1 - f0) / len(decoys) + est**2 * g * (1 - g) / len(linked)) / (g - f0) ** 2
        if spread < best_spread:
            best_spread, m = spread, est
    # of the cuts reaching the precision, the best estimated F1 (ties: the higher cut); m = 0: the lowest cut
    best, best_f1 = np.inf, -np.inf
    for t in cuts:
        n_above = sum(1 for s in scores if s >= t)
        wrong = (n_rows - m) * share(decoys, t) + m * (share(linked, t) - share(right, t))
        if wrong / n_above > 1 - precision:
            continue
        f1 = 2 * (n_above - wrong) / (n_above + m) if m > 0 else -t
        if f1 > best_f1:
            best, best_f1 = t, f1
    return best, m


@pytest.mark.parametrize("seed", range(6))
def test_threshold_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_rows = int(rng.integers(200, 600))
    scores = np.round(rng.normal(0.2, 0.15, int(rng.integers(50, n_rows))), 2)  # rounded: ties on the cut
    linked = np.where(rng.random(80) < 0.95, np.round(rng.normal(0.3, 0.1, 80), 2), -np.inf)
    right = np.where(rng.random(80) < 0.9, linked, -np.inf)  # some anchors re-found with another partner
    decoys = np.where(rng.random(80) < 0.4, np.round(rng.normal(0.05, 0.1, 80), 2), -np.inf)
    for precision in (0.5, 0.85, 0.99):
        got = decoy_threshold(scores, right, linked, decoys, n_rows, precision)
        want, m = _reference_threshold(scores, right, linked, decoys, n_rows, precision)
        assert got["threshold"] == want
        assert got["partnered"] == pytest.approx(m, abs=0.05)


def test_threshold_without_decoys_or_signal():
    scores = np.array([0.5, 0.4, 0.3])
    one = np.array([0.5])
    assert decoy_threshold(scores, one, one, np.zeros(0), 10, 0.85)["threshold"] == np.inf
    # decoys linked like the anchors at every score: no partnered row can be told apart, m = 0
    half = np.array([0.5, -np.inf])
    assert decoy_threshold(scores, half, half, half, 10, 0.85)["partnered"] == 0.0
    # every decoy below every score and every anchor re-found: no wrong link expected, all are kept
    both = np.array([0.5, 0.45])
    assert decoy_threshold(scores, both, both, np.array([-0.2, -np.inf]), 10, 0.85)["threshold"] == 0.3


def _low_overlap(seed, n=2400, alpha=0.15):
    """Unit rows of a noisy linear pair at low overlap and a pool: 60 % of the true pairs."""
    A, B, split, _, rng = linear_problem(n, alpha=alpha, noise=0.35, seed=seed)
    pool = split.truth[rng.permutation(len(split.truth))[: int(0.6 * len(split.truth))]]
    return A, B, split, pool


@pytest.mark.parametrize("scorer", [CCAMap(), RidgeMap(), TwoWayRidgeMap()], ids=repr)
@pytest.mark.parametrize("precision", [0.75, 0.9])
def test_kept_links_reach_the_target_precision(precision, scorer):
    got = []
    for seed in range(3):
        A, B, split, pool = _low_overlap(seed)
        rng = np.random.default_rng(seed)
        links, scores, info = decoy_links(A, B, pool, split.seeds, rng, precision=precision, scorer=scorer)
        m = evaluate_links(links, split.truth)
        got.append(m["precision"])
        assert m["recall"] > 0.3, m
        assert abs(info["partnered"] - (len(split.truth) - 15)) < 0.25 * len(split.truth), info
        assert np.all(scores >= info["threshold"]) and len(np.unique(links[:, 1])) == len(links)
    assert np.mean(got) >= precision - 0.05, got
    assert np.mean(got) <= 0.995  # the threshold is not simply the top few links


def test_links_do_not_depend_on_threads_and_repeat_with_the_seed():
    A, B, split, pool = _low_overlap(3, n=1200)
    runs = [decoy_links(A, B, pool, split.seeds, np.random.default_rng(7), num_threads=t)[0] for t in (1, 2, 1)]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    assert not np.isin(runs[0][:, 0], split.seeds[:, 0]).any()
    assert not np.isin(runs[0][:, 1], split.seeds[:, 1]).any()


def test_decoy_pass_in_a_fit_and_its_arguments():
    A, B, split, _ = _low_overlap(4, n=1500, alpha=0.3)
    res = GEHLinker(
        random_state=0, max_iter=6, show_progress_bar=False, promotion=ValidatedPromotion(final_pass=DecoyPass())
    ).link(A, B, split.seeds)
    assert res.history[-1]["final_pass"] == "decoys"
    assert evaluate_links(res.links, split.truth)["precision"] > 0.75
    both = ValidatedPromotion(final_pass=DecoyPass(scorer=TwoWayRidgeMap()))
    res = GEHLinker(random_state=0, max_iter=6, show_progress_bar=False, promotion=both).link(A, B, split.seeds)
    assert evaluate_links(res.links, split.truth)["precision"] > 0.75
    assert DecoyPass().get_config()["check"]["kind"] == "relink"
    assert DecoyPass(check=None).check is None
    for kw, exc in (
        (dict(precision=1.0), ValueError),
        (dict(precision=0.0), ValueError),
        (dict(folds=1), ValueError),
        (dict(check="crossfit"), TypeError),
        (dict(scorer="cca"), TypeError),
        (dict(scorer=CCAMap), TypeError),
    ):
        with pytest.raises(exc, match=next(iter(kw))):
            DecoyPass(**kw)
    assert isinstance(DecoyPass(check=CrossFitCheck(folds=3)).check, CrossFitCheck)
    # a fit whose map pass links within cells (above 30,000 rows a side) goes through the cells pass
    celled = GEHLinker(
        random_state=0,
        max_iter=2,
        show_progress_bar=False,
        candidates=CellCandidates(),
        promotion=ValidatedPromotion(final_pass=DecoyPass(cells_pass=MapPass(probes=3))),
    )
    assert celled.link(A, B, split.seeds).history[-1]["final_pass"] == "map"
    with pytest.raises(TypeError, match="cells_pass"):
        DecoyPass(cells_pass="map")
