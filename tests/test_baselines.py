"""crossembed.baselines: mini-vec2vec and VecMap, with no seeds and with 15."""

import numpy as np
import pytest

from crossembed.baselines import MiniVec2Vec, VecMap
from crossembed.linking import LinkResult, evaluate_links


def _rotated_pair(n=400, dim=16, noise=0.02, seed=0, width_b=None):
    """Clusters of unequal sizes; B is A rotated (zero-padded to ``width_b``), plus noise, rows shuffled."""
    rng = np.random.default_rng(seed)
    sizes = np.array([3, 5, 8, 12, 20, 32]) * n // 80
    centres = rng.normal(size=(len(sizes), dim)) * 3
    X = np.concatenate([c + rng.normal(size=(s, dim)) for c, s in zip(centres, sizes)])
    width_b = width_b or dim
    Q, _ = np.linalg.qr(rng.normal(size=(width_b, width_b)))
    Y = np.pad(X, ((0, 0), (0, width_b - dim))) @ Q + noise * rng.normal(size=(len(X), width_b))
    order = rng.permutation(len(X))
    truth = np.stack([np.arange(len(X)), np.argsort(order)], 1)
    return X.astype(np.float32), Y[order].astype(np.float32), truth


def _top1(XA, XB, truth):
    return float(np.mean(np.argmax(XA[truth[:, 0]] @ XB.T, axis=1) == truth[:, 1]))


@pytest.mark.parametrize("method", [MiniVec2Vec(random_state=0), VecMap(random_state=0)])
def test_no_seeds_recover_a_rotation(method):
    A, B, truth = _rotated_pair()
    XA, XB = method.rows(A, B)
    assert _top1(XA, XB, truth) >= 0.75  # chance: 1 / 400
    res = method.link(A, B)
    assert isinstance(res, LinkResult) and res.seeds_found is None
    assert evaluate_links(res.links, truth)["f1"] >= 0.7


@pytest.mark.parametrize("method", [MiniVec2Vec(random_state=0), VecMap(random_state=0)])
def test_fifteen_seeds_recover_a_rotation_and_stay_out_of_the_links(method):
    A, B, truth = _rotated_pair(width_b=20)
    seeds = truth[:15]
    XA, XB = method.rows(A, B, seeds)
    assert _top1(XA, XB, truth) >= 0.9
    res = method.link(A, B, seeds)
    assert not np.isin(res.links[:, 0], seeds[:, 0]).any() and not np.isin(res.links[:, 1], seeds[:, 1]).any()
    assert evaluate_links(res.links, truth[15:])["f1"] >= 0.8


def test_unrelated_sides_link_almost_nothing_right():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(300, 12)), rng.normal(size=(300, 12))
    truth = np.stack([np.arange(300), np.arange(300)], 1)
    for method in (MiniVec2Vec(random_state=0, iterations=3), VecMap(random_state=0, max_iter=5)):
        assert evaluate_links(method.link(A, B).links, truth)["precision"] < 0.05


def test_a_fit_repeats_with_its_random_state():
    A, B, _ = _rotated_pair(n=240)
    for method in (MiniVec2Vec(random_state=3, iterations=3), VecMap(random_state=3, max_iter=5)):
        np.testing.assert_array_equal(method.link(A, B).links, method.link(A, B).links)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MiniVec2Vec(clusters=2),
        lambda: MiniVec2Vec(smoothing=1.0),
        lambda: MiniVec2Vec(iterations=-1),
        lambda: VecMap(keep=0.0),
        lambda: VecMap(max_iter=0),
        lambda: VecMap(patience=0),
    ],
)
def test_bad_settings_are_refused(make):
    with pytest.raises((ValueError, TypeError)):
        make()


def test_bad_seeds_are_refused():
    A, B, _ = _rotated_pair(n=80)
    with pytest.raises(ValueError, match="seeds"):
        VecMap().link(A, B, [[0, 0]])
    with pytest.raises(ValueError, match="seeds"):
        MiniVec2Vec().rows(A, B, [[0, 0], [0, 1]])
