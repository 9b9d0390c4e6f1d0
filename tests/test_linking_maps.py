"""The decoy pass's scores (crossembed.linking.maps): float64 references, invariances and bad input."""

import numpy as np
import pytest
import scipy.linalg

from _linking_data import linear_problem
from crossembed.linking import CCAMap, RidgeMap
from experiments.linking_rules import TwoWayRidgeMap


def _pairs_problem(seed, *, wider_b=True, n=600):
    """Unit rows of a noisy linear pair and 60 % of its true pairs with the seeds (A and B swapped
    when ``wider_b`` is False)."""
    A, B, split, _, rng = linear_problem(n, alpha=0.4, noise=0.35, seed=seed)
    pairs = np.concatenate([split.seeds, split.truth[rng.permutation(len(split.truth))[: int(0.6 * len(split.truth))]]])
    if not wider_b:
        A, B, pairs = B, A, pairs[:, ::-1].copy()
    return A, B, pairs


def _cos(X, Y):
    return (X / np.linalg.norm(X, axis=1, keepdims=True)) @ (Y / np.linalg.norm(Y, axis=1, keepdims=True)).T


def _ridge(X, Y, lam=1.0):
    return np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ Y)


def _psd_sqrt(M):
    w, V = np.linalg.eigh(M)
    return (V * np.sqrt(np.clip(w, 0, None))) @ V.T


def _cca_reference(A, B, pairs, s):
    """float64 scores of regularised CCA written another way: with ``T = K_A C_AB K_B`` (``K`` the
    inverse square roots of the shrunk covariances, by scipy), row i of A and row j of B score
    ``a K_A (T T')^(1/2) T K_B b`` over the norms of ``a K_A (T T')^(1/2)`` and ``b K_B (T' T)^(1/2)``:
    what the canonical directions scaled by their correlations give, without an SVD."""
    PA, PB = A[pairs[:, 0]].astype(np.float64), B[pairs[:, 1]].astype(np.float64)
    n = len(pairs)

    def inv_sqrt(C):
        C = (1 - s) * C + s * np.trace(C) / len(C) * np.eye(len(C))
        return np.real(scipy.linalg.inv(scipy.linalg.sqrtm(C)))

    KA, KB = inv_sqrt(PA.T @ PA / n), inv_sqrt(PB.T @ PB / n)
    T = KA @ (PA.T @ PB / n) @ KB
    SA, SB = _psd_sqrt(T @ T.T), _psd_sqrt(T.T @ T)
    A64, B64 = A.astype(np.float64) @ KA, B.astype(np.float64) @ KB
    num = (A64 @ SA @ T) @ B64.T
    na = np.linalg.norm(A64 @ SA, axis=1)
    nb = np.linalg.norm(B64 @ SB, axis=1)
    return num / na[:, None] / nb[None, :]


@pytest.mark.parametrize("wider_b", [True, False])
@pytest.mark.parametrize("shrinkage", [0.5, 0.1, 1.0])
def test_cca_rows_dot_to_the_float64_reference(wider_b, shrinkage):
    A, B, pairs = _pairs_problem(1, wider_b=wider_b)
    XA, XB = CCAMap(shrinkage=shrinkage).rows(A, B, pairs)
    assert XA.dtype == XB.dtype == np.float32 and XA.flags.c_contiguous and XB.flags.c_contiguous
    assert XA.shape == (len(A), min(A.shape[1], B.shape[1])) and XB.shape == (len(B), XA.shape[1])
    want = _cca_reference(A, B, pairs, shrinkage)
    np.testing.assert_allclose(XA.astype(np.float64) @ XB.T.astype(np.float64), want, atol=2e-4)


def test_cca_components_are_the_most_correlated_directions_of_the_full_rows():
    """``n_components=r`` keeps the first r canonical directions: the full rows' first r coordinates,
    re-normalised; above ``min(D_A, D_B)`` it changes nothing."""
    A, B, pairs = _pairs_problem(1)
    full_a, full_b = CCAMap().rows(A, B, pairs)
    r = 5
    XA, XB = CCAMap(n_components=r).rows(A, B, pairs)
    assert XA.shape == (len(A), r) and XB.shape == (len(B), r)
    unit = lambda X: X / np.linalg.norm(X, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(XA, unit(full_a[:, :r]), atol=1e-5)
    np.testing.assert_allclose(XB, unit(full_b[:, :r]), atol=1e-5)
    wide_a, wide_b = CCAMap(n_components=10_000).rows(A, B, pairs)
    np.testing.assert_array_equal(wide_a, full_a)
    np.testing.assert_array_equal(wide_b, full_b)


def test_cca_scores_do_not_change_when_either_side_is_rotated():
    A, B, pairs = _pairs_problem(2)
    rng = np.random.default_rng(0)
    QA = np.linalg.qr(rng.standard_normal((A.shape[1],) * 2))[0].astype(np.float32)
    QB = np.linalg.qr(rng.standard_normal((B.shape[1],) * 2))[0].astype(np.float32)
    base = np.dot(*(lambda a, b: (a, b.T))(*CCAMap().rows(A, B, pairs)))
    turned = np.dot(*(lambda a, b: (a, b.T))(*CCAMap().rows(A @ QA, B @ QB, pairs)))
    np.testing.assert_allclose(turned, base, atol=1e-4)


def test_cca_with_fewer_pairs_than_dimensions_and_a_dead_coordinate():
    """Few anchors, a coordinate that is zero on every row, repeated pairs: the shrinkage keeps the
    whitening finite and the rows are still unit (a zero row stays zero)."""
    A, B, pairs = _pairs_problem(3)
    A = A.copy()
    A[:, 0] = 0.0
    A[5] = 0.0
    few = np.concatenate([pairs[:10], pairs[:10]])
    XA, XB = CCAMap().rows(A, B, few)
    assert np.isfinite(XA).all() and np.isfinite(XB).all()
    norms = np.linalg.norm(XA, axis=1)
    assert norms[5] == 0.0
    np.testing.assert_allclose(np.delete(norms, 5), 1.0, atol=1e-5)


def test_cca_links_the_true_pairs_better_than_one_ridge_map():
    """On a noisy linear pair the right partner is the best-scoring B row more often under CCA."""
    hits = {"cca": [], "ridge": []}
    for seed in range(3):
        A, B, split, _, rng = linear_problem(1500, alpha=0.4, noise=0.5, seed=seed)
        truth = split.truth
        train = truth[rng.permutation(len(truth))[: len(truth) // 2]]
        test = truth[~np.isin(truth[:, 0], train[:, 0])]
        for name, scorer in (("cca", CCAMap()), ("ridge", RidgeMap())):
            XA, XB = scorer.rows(A, B, train)
            hits[name].append(np.mean(np.argmax(XA[test[:, 0]] @ XB.T, axis=1) == test[:, 1]))
    assert np.mean(hits["cca"]) > np.mean(hits["ridge"]), hits


@pytest.mark.parametrize("wider_b", [True, False])
def test_ridge_rows_dot_to_the_cosines_of_one_map_or_two(wider_b):
    """float64 reference: one map's rows dot to cos(A_i W, B_j); two maps' to cos(A_i W, B_j) +
    cos(A_i, B_j V), in 2 min(D_A, D_B) dimensions whichever side is wider."""
    A, B, pairs = _pairs_problem(5, wider_b=wider_b)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    W, V = _ridge(A64[pairs[:, 0]], B64[pairs[:, 1]], 2.0), _ridge(B64[pairs[:, 1]], A64[pairs[:, 0]], 2.0)
    XA, XB = RidgeMap(lam=2.0).rows(A, B, pairs)
    np.testing.assert_allclose(XA.astype(np.float64) @ XB.T.astype(np.float64), _cos(A64 @ W, B64), atol=2e-5)
    XA, XB = TwoWayRidgeMap(lam=2.0).rows(A, B, pairs)
    assert XA.dtype == XB.dtype == np.float32 and XA.flags.c_contiguous and XB.flags.c_contiguous
    assert XA.shape[1] == XB.shape[1] == 2 * min(A.shape[1], B.shape[1])
    want = _cos(A64 @ W, B64) + _cos(A64, B64 @ V)
    np.testing.assert_allclose(XA.astype(np.float64) @ XB.T.astype(np.float64), want, atol=2e-5)


@pytest.mark.parametrize(
    "make, exc, name",
    [
        (lambda: CCAMap(shrinkage=0.0), ValueError, "shrinkage"),
        (lambda: CCAMap(shrinkage=1.5), ValueError, "shrinkage"),
        (lambda: CCAMap(shrinkage="0.5"), TypeError, "shrinkage"),
        (lambda: CCAMap(n_components=0), ValueError, "n_components"),
        (lambda: CCAMap(n_components=2.5), TypeError, "n_components"),
        (lambda: RidgeMap(lam=0.0), ValueError, "lam"),
        (lambda: RidgeMap(lam="1"), TypeError, "lam"),
        (lambda: TwoWayRidgeMap(lam=0), ValueError, "lam"),
    ],
)
def test_bad_arguments_name_themselves(make, exc, name):
    with pytest.raises(exc, match=name):
        make()


def test_configs():
    assert CCAMap().get_config() == {"kind": "cca", "shrinkage": 0.5, "n_components": None}
    assert RidgeMap(lam=2.0).get_config() == {"kind": "ridge", "lam": 2.0}
