"""GEHLinker without seeds (crossembed.linking.seedless): the search, its confidence, the seeded path untouched."""

import numpy as np
import pytest

from _linking_data import clustered_pair
from crossembed.linking import GEHLinker, evaluate_links
from crossembed.linking.seedless import SeedSearch, match_centres, spherical_kmeans


def test_seeds_given_never_search_and_keep_the_result():
    A, B, truth = clustered_pair()
    seeds = truth[:15]
    base = GEHLinker(random_state=0, show_progress_bar=False).link(A, B, seeds)
    assert base.history[0].get("seed_search") is None
    assert base.seeds_found is None and base.seed_confidence is None
    assert "seeds_found" not in base.as_dict()


def test_no_seeds_finds_right_seeds_and_says_so():
    A, B, truth = clustered_pair()
    res = GEHLinker(random_state=0, show_progress_bar=False).link(A, B, SeedSearch(rows=480))
    assert res.seeds_found.shape == (15, 2)
    right = evaluate_links(res.seeds_found, truth)["precision"]
    assert right >= 0.9
    assert res.seed_confidence >= 0.8
    assert res.history[0]["seed_search"] and res.history[0]["seeds"] == 15
    # the found seeds are not repeated among the links
    assert not set(map(tuple, res.seeds_found)) & set(map(tuple, res.links))
    assert res.as_dict()["seed_confidence"] == res.seed_confidence


def test_unrelated_sides_get_low_confidence():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(300, 12)), rng.normal(size=(300, 12))
    seeds, confidence, info = SeedSearch(rows=300, runs=2).find(
        (A / np.linalg.norm(A, axis=1, keepdims=True)).astype(np.float32),
        (B / np.linalg.norm(B, axis=1, keepdims=True)).astype(np.float32),
        np.random.default_rng(0),
    )
    assert len(seeds) == 15 and confidence <= 0.2 and info["confidence"] == round(confidence, 4)


def test_unsure_seeds_give_no_links_and_a_warning():
    """Below min_confidence the rounds do not run from seeds two searches disagree on."""
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(300, 12)).astype(np.float32), rng.normal(size=(300, 12)).astype(np.float32)
    linker = GEHLinker(random_state=0, show_progress_bar=False)
    with pytest.warns(RuntimeWarning, match="pass seeds="):
        res = linker.link(A, B, SeedSearch(rows=300, runs=2))
    assert len(res.links) == 0 and res.seed_confidence < 0.5 and res.seeds_found.shape == (15, 2)
    assert len(res.history) == 1 and res.history[0]["seed_search"]


def test_kmeans_and_centre_matching_recover_a_permutation():
    rng = np.random.default_rng(2)
    C = rng.normal(size=(6, 8))
    G = np.corrcoef(C)
    perm = rng.permutation(6)
    found, cost = match_centres(G, G[np.ix_(perm, perm)], rng, starts=30)
    np.testing.assert_array_equal(np.argsort(perm), found)
    assert cost == pytest.approx(0.0, abs=1e-9)
    X = np.concatenate([c + 0.01 * rng.normal(size=(20, 8)) for c in C]).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    centres, labels = spherical_kmeans(X, 6, np.random.default_rng(0))
    assert centres.shape == (6, 8) and len(np.unique(labels)) == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_seeds": 1},
        {"clusters": 2},
        {"runs": 0},
        {"rows": 2},
        {"refine": 0},
        {"dictionary": 0.0},
        {"min_confidence": 1.5},
    ],
)
def test_seed_search_rejects_bad_settings(kwargs):
    with pytest.raises((ValueError, TypeError)):
        SeedSearch(**kwargs)


def test_seeds_of_another_type_are_refused():
    A, B, _ = clustered_pair(n=80)
    with pytest.raises(TypeError, match="seeds"):
        GEHLinker(show_progress_bar=False).link(A, B, object())
