"""Baselines: exact on noise-free isometries, same output type, validated inputs."""

import numpy as np
import pytest

from _linking_data import linking_problem
from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes, procrustes_link, relative_link
from crossembed.linking.protocol import evaluate_links
from crossembed.linking.result import LinkResult


def test_procrustes_recovers_a_rotation():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 8))
    Q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    W = procrustes(X, X @ Q)
    np.testing.assert_allclose(W, Q, atol=1e-4)


@pytest.mark.parametrize("dims", [(24, 24), (32, 24), (24, 32)])
def test_procrustes_link_exact_on_noise_free_rotation(dims):
    # the latent fills each side's space only when latent >= dim; use a full-rank square case
    # for equal dims and an isometric embedding (padded) otherwise
    A, B, split = linking_problem(400, noise=0.0, latent=24, dim_a=dims[0], dim_b=dims[1], n_seeds=30)
    res = procrustes_link(A, B, split.seeds)
    assert isinstance(res, LinkResult)
    m = evaluate_links(res.links, split.truth)
    assert m["recall"] == 1.0
    # non-overlap rows can still be mutual neighbours; every true pair is found with cosine 1
    correct = set(map(tuple, split.truth.tolist()))
    sims = {tuple(p): s for p, s in zip(res.links.tolist(), res.posterior)}
    assert all(abs(sims[p] - 1) < 1e-4 for p in correct)


def test_relative_link_exact_on_noise_free_rotation():
    A, B, split = linking_problem(400, noise=0.0, n_seeds=30)
    res = relative_link(A, B, split.seeds)
    assert evaluate_links(res.links, split.truth)["recall"] == 1.0


def test_bootstrap_improves_on_one_shot_procrustes():
    A, B, split = linking_problem(600, noise=0.15, n_seeds=15, latent=16, dim_a=16, dim_b=16)
    one = evaluate_links(procrustes_link(A, B, split.seeds).links, split.truth)
    boot = bootstrap_procrustes_link(A, B, split.seeds, n_iter=5)
    many = evaluate_links(boot.links, split.truth)
    assert many["recall"] >= one["recall"]
    assert many["recall"] > 0.9
    assert len(boot.history) == 6


def test_seeds_are_never_links():
    A, B, split = linking_problem(300, noise=0.05)
    for fn in (procrustes_link, relative_link):
        res = fn(A, B, split.seeds)
        assert not np.isin(res.links[:, 0], split.seeds[:, 0]).any()
        assert not np.isin(res.links[:, 1], split.seeds[:, 1]).any()
        assert len(np.unique(res.links[:, 0])) == len(res.links)


@pytest.mark.parametrize("fn", [procrustes_link, relative_link, bootstrap_procrustes_link])
def test_baselines_reject_bad_input(fn):
    A = np.ones((10, 4), np.float32)
    B = np.ones((12, 3), np.float32)
    with pytest.raises(ValueError, match="seeds"):
        fn(A, B, np.array([[0, 0], [0, 1]]))  # not one-to-one
    with pytest.raises(ValueError, match="out of range"):
        fn(A, B, np.array([[0, 0], [11, 1]]))
    with pytest.raises(TypeError, match="seeds"):
        fn(A, B, np.array([[0.0, 0.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="A must be finite"):
        fn(np.full((10, 4), np.nan, np.float32), B, np.array([[0, 0], [1, 1]]))
