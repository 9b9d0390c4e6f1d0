"""The partial-overlap protocol and the link metrics."""

import numpy as np
import pytest

from crossembed.linking.protocol import evaluate_links, make_partial_overlap


def test_overlap_sizes_and_truth_are_consistent():
    n, alpha, s = 1000, 0.3, 15
    sp = make_partial_overlap(n, alpha=alpha, n_seeds=s, random_state=3)
    n_overlap = 300
    assert len(sp.rows_a) == n_overlap + 350 and len(sp.rows_b) == n_overlap + 350
    assert sp.seeds.shape == (s, 2) and sp.truth.shape == (n_overlap - s, 2)
    # every seed/truth pair points at the same object on both sides
    pairs = np.concatenate([sp.seeds, sp.truth])
    np.testing.assert_array_equal(sp.rows_a[pairs[:, 0]], sp.rows_b[pairs[:, 1]])
    # objects present on both sides are exactly the overlap, one-to-one
    shared = np.intersect1d(sp.rows_a, sp.rows_b)
    assert len(shared) == n_overlap
    assert len(np.unique(pairs[:, 0])) == n_overlap and len(np.unique(pairs[:, 1])) == n_overlap
    # each side holds every object once and the two one-sided parts are disjoint
    assert len(np.unique(sp.rows_a)) == len(sp.rows_a)
    assert len(np.union1d(sp.rows_a, sp.rows_b)) == n


def test_rows_are_shuffled_and_draws_reproducible():
    a = make_partial_overlap(500, random_state=1)
    b = make_partial_overlap(500, random_state=1)
    c = make_partial_overlap(500, random_state=2)
    np.testing.assert_array_equal(a.rows_a, b.rows_a)
    np.testing.assert_array_equal(a.truth, b.truth)
    assert not np.array_equal(a.rows_a, c.rows_a)
    # the overlap is not simply the first rows
    assert not np.array_equal(np.sort(a.seeds[:, 0]), np.arange(15))


def test_evaluate_links_counts():
    truth = np.array([[0, 0], [1, 1], [2, 2], [3, 3]])
    links = np.array([[0, 0], [1, 2], [3, 3]])
    m = evaluate_links(links, truth)
    assert m["correct"] == 2 and m["n_links"] == 3
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    empty = evaluate_links(np.zeros((0, 2), np.int64), truth)
    assert empty["precision"] == 0 and empty["f1"] == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_objects=100, alpha=0.0), "alpha"),
        (dict(n_objects=100, alpha=1.5), "alpha"),
        (dict(n_objects=100, n_seeds=0), "n_seeds"),
        (dict(n_objects=40, alpha=0.3, n_seeds=15), "overlap"),
        (dict(n_objects=1), "n_objects"),
    ],
)
def test_protocol_rejects_bad_arguments(kwargs, match):
    n = kwargs.pop("n_objects")
    with pytest.raises(ValueError, match=match):
        make_partial_overlap(n, **kwargs)


def test_evaluate_links_rejects_bad_shapes():
    with pytest.raises(ValueError, match="truth"):
        evaluate_links(np.zeros((1, 2), np.int64), np.zeros((0, 2), np.int64))
    with pytest.raises(ValueError):
        evaluate_links(np.zeros((2, 3), np.int64), np.zeros((2, 2), np.int64))
