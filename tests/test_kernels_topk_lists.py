"""topk_rows_and_columns (GEH's one-sweep candidate lists) against its float64 reference."""

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref


def _check(SA, SB, k_row, k_col=None, **kw):
    got = ce.kernels.topk_rows_and_columns(SA, SB, k_row, k_col, **kw)
    exp = ref.topk_rows_and_columns(SA, SB, k_row, k_col)
    for g, e in zip(got[1::2], exp[1::2]):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, e)
    for g, e in zip(got[::2], exp[::2]):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    return got


@pytest.mark.parametrize(
    "n_a,n_b,d,k_row,k_col",
    [
        (70, 50, 24, 8, 5),
        (300, 257, 13, 16, 64),
        (1, 9, 5, 4, 1),
        (9, 1, 5, 1, 4),
        (33, 40, 17, 40, 33),
        (600, 5, 3, 5, 2),
    ],
)
def test_matches_reference(n_a, n_b, d, k_row, k_col):
    rng = np.random.default_rng(n_a * 7 + n_b)
    SA = rng.standard_normal((n_a, d)).astype(np.float32)
    SB = rng.standard_normal((n_b, d)).astype(np.float32)
    _check(SA, SB, k_row, k_col)


def test_ties_go_to_the_lower_index():
    SA = np.ones((6, 4), np.float32)
    SB = np.ones((7, 4), np.float32)
    _, ri, _, ci = _check(SA, SB, 3, 2)
    assert (ri == np.arange(3)).all() and (ci == np.arange(2)).all()


def test_many_ties_across_buffer_compactions():
    # the lists keep 2k admitted items before cutting back to k: values on a coarse grid tie
    # across many cuts, and the kept set must still be the lowest indices among equals
    rng = np.random.default_rng(5)
    SA = rng.integers(-1, 2, (200, 6)).astype(np.float32)
    SB = rng.integers(-1, 2, (150, 6)).astype(np.float32)
    _check(SA, SB, 16, 24)
    _check(SA, SB, 1, 1)


def test_zeros_huge_and_tiny_values():
    rng = np.random.default_rng(1)
    SA = rng.standard_normal((40, 9)).astype(np.float32)
    SB = rng.standard_normal((30, 9)).astype(np.float32)
    SA[3] = 0.0
    SB[5] = 0.0
    _check(SA * 1e6, SB * 1e6, 7, 7)
    _check(SA * 1e-6, SB * 1e-6, 7, 7)
    _check(SA, SB, 7, 7)


def test_k_is_clipped_and_equals_two_top_k_calls():
    rng = np.random.default_rng(2)
    SA = rng.standard_normal((120, 32)).astype(np.float32)
    SB = rng.standard_normal((90, 32)).astype(np.float32)
    rs, ri, cs, ci = ce.kernels.topk_rows_and_columns(SA, SB, 500)
    assert ri.shape == (120, 90) and ci.shape == (90, 120)
    _, ri2, _, ci2 = ce.kernels.topk_rows_and_columns(SA, SB, 10, 12)
    np.testing.assert_array_equal(ri2, ri[:, :10])
    np.testing.assert_array_equal(ci2, ci[:, :12])


def test_threads_do_not_change_the_lists():
    rng = np.random.default_rng(3)
    SA = rng.standard_normal((700, 40)).astype(np.float32)
    SB = rng.standard_normal((650, 40)).astype(np.float32)
    one = ce.kernels.topk_rows_and_columns(SA, SB, 16, num_threads=1)
    two = ce.kernels.topk_rows_and_columns(SA, SB, 16, num_threads=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_empty_sides():
    rs, ri, cs, ci = ce.kernels.topk_rows_and_columns(np.zeros((0, 3), np.float32), np.ones((4, 3), np.float32), 2)
    assert ri.shape == (0, 2) and ci.shape == (4, 0)


@pytest.mark.parametrize(
    "args,kwargs,err,match",
    [
        ((np.ones((3, 2)), np.ones((3, 3)), 2), {}, ValueError, "columns"),
        ((np.ones((3, 2)), np.ones((3, 2)), 0), {}, ValueError, "k_row"),
        ((np.ones((3, 2)), np.ones((3, 2)), 2, 0), {}, ValueError, "k_col"),
        ((np.ones((3, 2)), np.ones((3, 2)), 2.5), {}, TypeError, "k_row"),
        ((np.full((3, 2), np.nan), np.ones((3, 2)), 2), {}, ValueError, "SA"),
    ],
)
def test_bad_input_names_the_argument(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        ce.kernels.topk_rows_and_columns(*args, **kwargs)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_ties_across_row_blocks_and_threads(threads):
    # several row blocks per thread: the column lists of the worker slots share their bars
    # between blocks, and ties on a coarse grid must still go to the lowest indices
    rng = np.random.default_rng(9)
    SA = rng.integers(-1, 2, (1100, 4)).astype(np.float32)
    SB = rng.integers(-1, 2, (530, 4)).astype(np.float32)
    SB[[255, 256, 511, 512]] = SB[0]
    for k_row, k_col in ((1, 1), (7, 33), (530, 1100)):
        _check(SA, SB, k_row, k_col, num_threads=threads)
