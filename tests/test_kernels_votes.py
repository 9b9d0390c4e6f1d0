"""VoteTable, VoteTable.promote and otsu_threshold against crossembed.reference (all exact: integers and float64)."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crossembed as ce
from crossembed import reference as ref

# CROSSEMBED_HYPOTHESIS_EXAMPLES=600 runs the property tests 10x deeper (default 60: the fast suite)
EXAMPLES = int(os.environ.get("CROSSEMBED_HYPOTHESIS_EXAMPLES", "60"))


def _random_views(rng, n_views, n_pairs, hi):
    """One-to-one proposals per view (as csls_mutual_topk makes them), drawn from a small pool so pairs recur."""
    views = []
    for _ in range(n_views):
        m = rng.integers(0, n_pairs + 1)
        i = rng.choice(hi, size=m, replace=False)
        j = rng.choice(hi, size=m, replace=False)
        views.append(np.stack([i, j], axis=1).astype(np.int64))
    return views


def test_vote_table_matches_reference(rng):
    table, twin = ce.kernels.VoteTable(), ref.VoteTable()
    for view in _random_views(rng, 30, 12, 15):
        table.add(view)
        twin.add(view)
    assert table.n_views == twin.n_views == 30 and len(table) == len(twin)
    pairs, votes = table.items()
    r_pairs, r_votes = twin.items()
    np.testing.assert_array_equal(pairs, r_pairs)
    np.testing.assert_array_equal(votes, r_votes)
    assert pairs.dtype == np.int64 and pairs.shape[1] == 2
    np.testing.assert_allclose(table.posterior_mean(), twin.posterior_mean(), rtol=1e-15)
    probe = np.array([[0, 0], [3, 4], [14, 14], [100, 100]])
    np.testing.assert_array_equal(table.votes(probe), twin.votes(probe))
    np.testing.assert_allclose(table.posterior_mean(probe), twin.posterior_mean(probe), rtol=1e-15)


def test_vote_table_counts_a_pair_once_per_view():
    table, twin = ce.kernels.VoteTable(), ref.VoteTable()
    for view in ([[1, 2], [1, 2], [3, 4]], [[1, 2]]):
        table.add(view)
        twin.add(view)
    assert table.items()[1].tolist() == twin.items()[1].tolist() == [2, 1]
    assert (table.posterior_mean() <= 1).all()  # v <= n keeps Beta(1 + v, 1 + n - v) proper


def test_vote_table_empty_views_and_large_indices():
    table = ce.kernels.VoteTable()
    table.add(np.zeros((0, 2), dtype=np.int64))
    table.add([])
    assert table.n_views == 2 and len(table) == 0
    assert table.items()[0].shape == (0, 2)
    # keys that a narrower packing ((i << 16) | j, i * N + j, int32) would collide or truncate
    top = 2**32 - 1
    big = np.array(
        [[1, 2**31], [2, 0], [2**31 + 5, 7], [0, top], [top, 0], [top, top], [65536, 1], [1, 65536]], dtype=np.int64
    )
    table.add(big)
    table.add(big[:2])
    pairs, votes = table.items()
    assert pairs.tolist() == sorted(big.tolist())
    assert dict(zip(map(tuple, pairs.tolist()), votes.tolist())) == {
        tuple(p): 2 if n < 2 else 1 for n, p in enumerate(big.tolist())
    }
    np.testing.assert_allclose(table.posterior_mean([[1, 2**31], [1, 2]]), [3 / 6, 1 / 6])
    # the table keys pairs by two 32-bit halves: larger indices are refused, not wrapped
    with pytest.raises(ValueError, match="pair"):
        table.add(np.array([[2**32, 0]]))
    assert table.n_views == 4


@settings(max_examples=EXAMPLES * 150 // 60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n=st.integers(0, 40))
def test_promote_matches_reference(data, n):
    """Random pairs with shared endpoints and heavily tied scores: identical promotion order."""
    pairs = np.array(
        data.draw(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=n, max_size=n, unique=True)),
        dtype=np.int64,
    ).reshape(-1, 2)
    scores = np.array(
        data.draw(st.lists(st.sampled_from([0.1, 0.25, 0.5, 0.5000000000000001, 0.75, 1.0]), min_size=n, max_size=n))
    )
    threshold = data.draw(st.sampled_from([0.0, 0.25, 0.5, 0.9]))
    ex_a = data.draw(st.lists(st.integers(0, 8), max_size=3))
    ex_b = data.draw(st.lists(st.integers(0, 8), max_size=3))
    limit = data.draw(st.sampled_from([None, 0, 1, 3]))
    got = ce.kernels.VoteTable().promote(
        pairs, scores, threshold=threshold, exclude_a=ex_a, exclude_b=ex_b, limit=limit
    )
    expect = ref.greedy_one_to_one(pairs, scores, threshold, ex_a, ex_b, limit)
    assert got.dtype == np.int64
    assert got.reshape(-1, 2).tolist() == expect.tolist()


def test_promote_hand_worked():
    pairs = np.array([[5, 1], [0, 1], [0, 0], [1, 0], [2, 2]])
    scores = np.array([0.9, 0.9, 0.9, 0.8, 0.95])
    got = ce.kernels.VoteTable().promote(pairs, scores, threshold=0.5)
    # 0.95 first; then the three 0.9 ties by lower i ([0,0] before [0,1]) then j; [5,1] still free
    assert got.tolist() == [[2, 2], [0, 0], [5, 1]]
    assert ce.kernels.VoteTable().promote(pairs, scores, threshold=0.9).tolist() == [[2, 2]]  # strictly above


def _bimodal(rng, n):
    return np.concatenate([rng.normal(0.2, 0.05, n // 2), rng.normal(0.7, 0.1, n - n // 2)])


@pytest.mark.parametrize("bins", [2, 10, 100, 257])
def test_otsu_matches_reference(rng, bins):
    for values in (
        _bimodal(rng, 500),
        rng.random(1000),
        rng.exponential(size=300),
        -1e6 + rng.random(50),
        (rng.beta(0.5, 0.5, 2000) * 1e-9),
    ):
        width = (values.max() - values.min()) / bins
        got = ce.kernels.otsu_threshold(values, bins=bins)
        assert got == pytest.approx(ref.otsu_threshold(values, bins=bins), abs=1e-9 * width)


def test_otsu_separates_and_handles_degenerate_inputs(rng):
    values = _bimodal(rng, 400)
    t = ce.kernels.otsu_threshold(values)
    assert 0.3 < t < 0.6
    assert ce.kernels.otsu_threshold(np.full(7, 0.25)) == 0.25
    assert ce.kernels.otsu_threshold([0.4]) == 0.4
    assert ce.kernels.otsu_threshold(np.array([0.0, 1.0]), bins=10) == pytest.approx(
        ref.otsu_threshold(np.array([0.0, 1.0]), bins=10)
    )
    posterior = np.array([1 / 3] * 50 + [2 / 3] * 5)  # Beta means: two levels
    assert ce.kernels.otsu_threshold(posterior) == pytest.approx(ref.otsu_threshold(posterior), rel=1e-12)
    assert ce.kernels.otsu_threshold(np.float32([0.1, 0.2, 0.9]), bins=4) == pytest.approx(
        ref.otsu_threshold(np.float32([0.1, 0.2, 0.9]), bins=4)
    )
