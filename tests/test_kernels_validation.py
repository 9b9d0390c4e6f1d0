"""Bad input to every public kernel: a ValueError or TypeError that names the argument, never a crash."""

import numpy as np
import pytest

import crossembed as ce

rng = np.random.default_rng(3)
MU = rng.standard_normal((4, 6)).astype(np.float32)
VAR = rng.random((4, 6)).astype(np.float32)
DOCS = rng.standard_normal((9, 6)).astype(np.float32)
DVAR = rng.random((9, 6)).astype(np.float32)


def _with(arr, index, value):
    out = np.array(arr, dtype=np.float64)
    out[index] = value
    return out


def _probit_calls():
    """(name of the bad argument, callable(mu_q, v_q, mu_c, v_c)) for every probit entry point."""
    return [
        ("probit_topk", lambda q, vq, c, vc: ce.probit_topk(q, vq, c, vc, 2)),
        ("probit_scores", lambda q, vq, c, vc: ce.probit_scores(q, vq, c, vc)),
        ("ProbitDocs.top_k", lambda q, vq, c, vc: ce.ProbitDocs(c, vc).top_k(q, vq, 2)),
    ]


@pytest.mark.parametrize("call", [c for _, c in _probit_calls()], ids=[n for n, _ in _probit_calls()])
@pytest.mark.parametrize("position,name", [(0, "mu_q"), (1, "v_q"), (2, "mu_c"), (3, "v_c")])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_probit_non_finite(call, position, name, bad):
    args = [MU, VAR, DOCS, DVAR]
    args[position] = _with(args[position], (1, 2), bad)
    with pytest.raises(ValueError, match=name):
        call(*args)


@pytest.mark.parametrize("position,name", [(1, "v_q"), (3, "v_c")])
def test_probit_negative_variance(position, name):
    args = [MU, VAR, DOCS, DVAR]
    args[position] = _with(args[position], (0, 0), -1e-6)
    with pytest.raises(ValueError, match=name):
        ce.probit_topk(*args, 2)


@pytest.mark.parametrize("storage", ["float32", "float16"])
@pytest.mark.parametrize("name", ["mu_c", "v_c"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0, 1e18, 7e4])
def test_probit_docs_checks_from_the_packing_pass(storage, name, bad):
    """ProbitDocs checks its documents from the packing pass's summary: a bad entry anywhere (here in the
    last row of a large batch, which the pass takes in blocks on several threads) names the argument."""
    mu, v = np.ones((9000, 6), np.float32) * 0.1, np.full((9000, 6), 0.5, np.float32)
    arrays = {"mu_c": mu, "v_c": v}
    if bad == -1.0 and name == "mu_c" or bad == 7e4 and storage == "float32":
        arrays[name][-1, 3] = bad
        ce.ProbitDocs(mu, v, storage=storage)  # a negative mean, or a float32 value within range, is fine
        return
    arrays[name][-1, 3] = bad
    with pytest.raises(ValueError, match=f"^{name} "):
        ce.ProbitDocs(mu, v, storage=storage)


@pytest.mark.parametrize(
    "args,name",
    [
        ((MU, VAR[:, :5], DOCS, DVAR), "v_q"),
        ((MU, VAR, DOCS, DVAR[:8]), "v_c"),
        ((MU[:, :5], VAR[:, :5], DOCS, DVAR), "mu_q"),
        ((MU[0], VAR[0], DOCS, DVAR), "mu_q"),
        ((MU, VAR, DOCS[None], DVAR[None]), "mu_c"),
    ],
)
def test_probit_shape_mismatch(args, name):
    with pytest.raises(ValueError, match=name):
        ce.probit_topk(*args, 2)
    with pytest.raises(ValueError, match=name):
        ce.probit_scores(*args)


@pytest.mark.parametrize(
    "k,exc",
    [(0, ValueError), (-1, ValueError), (10, ValueError), (2.0, TypeError), (True, TypeError), ("3", TypeError)],
)
def test_probit_bad_k(k, exc):
    with pytest.raises(exc, match="k"):
        ce.probit_topk(MU, VAR, DOCS, DVAR, k)


@pytest.mark.parametrize(
    "bad", [np.ones((4, 6), bool), np.full((4, 6), None, object), np.full((4, 6), "a"), np.ones((4, 6), complex)]
)
def test_probit_wrong_dtype(bad):
    with pytest.raises(TypeError, match="mu_q"):
        ce.probit_topk(bad, VAR, DOCS, DVAR, 2)
    with pytest.raises(TypeError, match="v_c"):
        ce.probit_scores(MU, VAR, DOCS, np.resize(bad, (9, 6)))


def test_probit_empty_and_none():
    with pytest.raises(ValueError, match="mu_c"):
        ce.probit_topk(MU, VAR, DOCS[:0], DVAR[:0], 1)
    with pytest.raises(ValueError, match="mu_c"):
        ce.probit_topk(MU, VAR, DOCS[:, :0], DVAR[:, :0], 1)
    with pytest.raises(TypeError, match="v_c"):
        ce.probit_topk(MU, VAR, DOCS, None, 1)
    with pytest.raises(ValueError, match="v_c"):
        ce.probit_topk(MU, VAR, ce.ProbitDocs(DOCS, DVAR), DVAR, 1)


_BAD_DOCS = {
    "nan mean": (_with(DOCS, (1, 2), np.nan), DVAR),
    "inf variance": (DOCS, _with(DVAR, (1, 2), np.inf)),
    "negative variance": (DOCS, _with(DVAR, (0, 0), -1e-6)),
    "shape mismatch": (DOCS, DVAR[:8]),
    "1-d means": (DOCS[0], DVAR[0]),
    "3-d means": (DOCS[None], DVAR[None]),
    "bool means": (np.ones((9, 6), bool), DVAR),
    "complex variances": (DOCS, np.ones((9, 6), complex)),
    "string means": (np.full((9, 6), "a"), DVAR),
    "no rows": (DOCS[:0], DVAR[:0]),
    "no columns": (DOCS[:, :0], DVAR[:, :0]),
    "no variances": (DOCS, None),
    "no means": (None, DVAR),
    "float32 overflow": (_with(DOCS, (2, 3), 1e18), DVAR),
    "float32 overflow of variances": (DOCS, _with(DVAR, (2, 3), 1e18)),
}


def _error(call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return info.type, str(info.value)


@pytest.mark.parametrize("docs", list(_BAD_DOCS.values()), ids=list(_BAD_DOCS))
def test_probit_docs_constructor_validates_like_the_functions(docs):
    mu_c, v_c = docs
    expected = _error(lambda: ce.ProbitDocs(mu_c, v_c))
    assert _error(lambda: ce.probit_topk(MU, VAR, mu_c, v_c, 1)) == expected
    assert _error(lambda: ce.probit_scores(MU, VAR, mu_c, v_c)) == expected


def test_probit_docs_moment_overflow_matches_the_functions():
    # Each value passes the magnitude check; their float32 moments would not.
    big_mu = np.full((9, 6), 1e17, np.float32)
    docs = ce.ProbitDocs(big_mu, DVAR)
    big_v = np.full_like(VAR, 100.0)
    expected = _error(lambda: ce.probit_topk(MU, big_v, big_mu, DVAR, 1))
    assert "too large for float32" in expected[1]
    assert _error(lambda: docs.top_k(MU, big_v, 1)) == expected
    assert _error(lambda: docs.scores(MU, big_v)) == expected
    assert _error(lambda: ce.probit_scores(MU, big_v, big_mu, DVAR)) == expected


@pytest.mark.parametrize(
    "cand,match",
    [
        (np.array([[0, 1, 1]] * 4), "repeated"),
        (np.array([[0, 1, 9]] * 4), "candidates"),
        (np.array([[0, 1, -2]] * 4), "candidates"),
        (np.array([[0, 1, 2]] * 3), "candidates"),
        (np.array([0, 1, 2]), "candidates"),
    ],
)
def test_probit_bad_candidates(cand, match):
    with pytest.raises(ValueError, match=match):
        ce.probit_topk(MU, VAR, DOCS, DVAR, 2, candidates=cand)


def test_probit_candidates_type_and_k():
    with pytest.raises(TypeError, match="candidates"):
        ce.probit_topk(MU, VAR, DOCS, DVAR, 2, candidates=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="k"):
        ce.probit_topk(MU, VAR, DOCS, DVAR, 4, candidates=np.array([[0, 1, 2]] * 4))
    # padding that repeats -1 is fine
    s, i = ce.probit_topk(MU, VAR, DOCS, DVAR, 3, candidates=np.array([[0, -1, -1]] * 4))
    assert (i[:, 1:] == -1).all() and np.isneginf(s[:, 1:]).all()


@pytest.mark.parametrize("nt,exc", [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_num_threads_everywhere(nt, exc):
    calls = [
        lambda: ce.probit_topk(MU, VAR, DOCS, DVAR, 2, num_threads=nt),
        lambda: ce.probit_scores(MU, VAR, DOCS, DVAR, num_threads=nt),
        lambda: ce.anchor_signatures(DOCS, MU, num_threads=nt),
        lambda: ce.csls_mutual_topk(DOCS, MU, num_threads=nt),
        lambda: ce.lorentz_pairwise(DOCS, MU, num_threads=nt),
        lambda: ce.lorentz_topk(DOCS, MU, 2, num_threads=nt),
    ]
    for call in calls:
        with pytest.raises(exc, match="num_threads"):
            call()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300])
def test_signatures_bad_values(bad):
    with pytest.raises(ValueError, match="X"):
        ce.anchor_signatures(_with(DOCS, (0, 0), bad), MU)
    # the kernel finds X's non-finite entries in its own norm pass: any row, any block, any thread count
    many = np.tile(DOCS, (300, 1))
    for row in (0, 137, len(many) - 1):
        for threads in (1, 2):
            with pytest.raises(ValueError, match="^X must be finite"):
                ce.anchor_signatures(_with(many, (row, 5), bad), MU, sigma=0.5, num_threads=threads)
    with pytest.raises(ValueError, match="anchors"):
        ce.anchor_signatures(DOCS, _with(MU, (0, 0), bad))
    with pytest.raises(ValueError, match="anchors"):
        ce.kernels.median_anchor_distance(_with(MU, (0, 0), bad))


def test_signatures_bad_arguments():
    with pytest.raises(ValueError, match="anchors"):
        ce.anchor_signatures(DOCS, MU[:, :5])
    with pytest.raises(ValueError, match="anchors"):
        ce.anchor_signatures(DOCS, MU[:0])
    with pytest.raises(ValueError, match="sigma"):
        ce.anchor_signatures(DOCS, MU, sigma=0.0)
    with pytest.raises(ValueError, match="sigma"):
        ce.anchor_signatures(DOCS, MU, sigma=np.nan)
    with pytest.raises(TypeError, match="sigma"):
        ce.anchor_signatures(DOCS, MU, sigma="1")
    with pytest.raises(ValueError, match="metric"):
        ce.anchor_signatures(DOCS, MU, metric="euclidean")
    with pytest.raises(TypeError, match="X"):
        ce.anchor_signatures(DOCS.astype(bool), MU)
    with pytest.raises(ValueError, match="X"):
        ce.anchor_signatures(DOCS[0], MU)


def test_csls_bad_arguments():
    with pytest.raises(ValueError, match="SB"):
        ce.csls_mutual_topk(DOCS, MU[:, :5])
    with pytest.raises(ValueError, match="SA"):
        ce.csls_mutual_topk(_with(DOCS, (2, 2), np.nan), MU)
    with pytest.raises(ValueError, match="SB"):
        ce.csls_mutual_topk(DOCS, _with(MU, (2, 2), -np.inf))
    with pytest.raises(ValueError, match="SA"):
        ce.csls_mutual_topk(DOCS * 1e16, MU)
    for kw in ("k", "csls_k"):
        with pytest.raises(ValueError, match=kw):
            ce.csls_mutual_topk(DOCS, MU, **{kw: 0})
        with pytest.raises(TypeError, match=kw):
            ce.csls_mutual_topk(DOCS, MU, **{kw: 2.5})
    with pytest.raises(ValueError, match="exclude_a"):
        ce.csls_mutual_topk(DOCS, MU, exclude_a=[9])
    with pytest.raises(ValueError, match="exclude_b"):
        ce.csls_mutual_topk(DOCS, MU, exclude_b=[-1])
    with pytest.raises(TypeError, match="exclude_a"):
        ce.csls_mutual_topk(DOCS, MU, exclude_a=[0.5])
    with pytest.raises(TypeError, match="SA"):
        ce.csls_mutual_topk(DOCS.astype(str), MU)


def test_votes_bad_arguments():
    table = ce.kernels.VoteTable()
    with pytest.raises(ValueError, match="pairs"):
        table.add(np.zeros((3, 3), np.int64))
    with pytest.raises(TypeError, match="pairs"):
        table.add(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="pairs"):
        table.add(np.array([[0, -1]]))
    with pytest.raises(ValueError, match="scores"):
        table.promote(np.zeros((3, 2), np.int64), np.zeros(2), threshold=0.5)
    with pytest.raises(ValueError, match="scores"):
        table.promote(np.zeros((1, 2), np.int64), np.array([np.nan]), threshold=0.5)
    assert table.n_views == 0  # failed adds record nothing


@pytest.mark.parametrize(
    "values,bins,exc,match",
    [
        ([], 100, ValueError, "values"),
        ([0.1, np.nan], 100, ValueError, "values"),
        ([[0.1, 0.2]], 100, ValueError, "values"),
        ([0.1, 0.2], 1, ValueError, "bins"),
        ([0.1, 0.2], 2.5, TypeError, "bins"),
        (np.array([True, False]), 10, TypeError, "values"),
    ],
)
def test_otsu_bad_arguments(values, bins, exc, match):
    with pytest.raises(exc, match=match):
        ce.kernels.otsu_threshold(values, bins=bins)


def test_lorentz_bad_arguments():
    with pytest.raises(ValueError, match="Y"):
        ce.lorentz_pairwise(DOCS, MU[:, :5])
    with pytest.raises(ValueError, match="X"):
        ce.lorentz_pairwise(_with(DOCS, (0, 0), np.nan).astype(np.float32), MU)
    with pytest.raises(ValueError, match="Y"):
        ce.lorentz_topk(DOCS, _with(MU, (0, 0), np.inf), 1)
    with pytest.raises(ValueError, match="Y"):
        ce.lorentz_pairwise(DOCS, MU[:0])
    for c in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="curvature"):
            ce.lorentz_pairwise(DOCS, MU, curvature=c)
    with pytest.raises(TypeError, match="curvature"):
        ce.lorentz_pairwise(DOCS, MU, curvature="1")
    for k, exc in ((0, ValueError), (5, ValueError), (1.0, TypeError)):
        with pytest.raises(exc, match="k"):
            ce.lorentz_topk(DOCS, MU, k)
    with pytest.raises(TypeError, match="X"):
        ce.lorentz_topk(np.ones((2, 6), bool), MU, 1)
    with pytest.raises(ValueError, match="X"):
        ce.lorentz_pairwise(np.full((2, 6), 1e18, np.float32), MU)


# --------------------------------------------------------------------------- integers too large for C, ragged arrays
SIG = (np.random.default_rng(4).integers(0, 9, size=(7, 3)) / 8).astype(np.float32)
CAND = np.tile(np.arange(7), (7, 1))


@pytest.mark.parametrize("big", [2**63, 2**64, 2**70, 10**40])
def test_counts_beyond_c_mean_all_rows(big):
    """k, csls_k, k_row, k_col and limit are clipped like any count above the rows, not refused by pybind11."""
    for call in (
        lambda k: ce.csls_mutual_topk(SIG, SIG, k=k, csls_k=3),
        lambda k: ce.csls_mutual_topk(SIG, SIG, k=2, csls_k=k),
        lambda k: ce.kernels.csls_mutual_topk_candidates(SIG, SIG, CAND, CAND, k=k),
        lambda k: ce.kernels.csls_mutual_topk_candidates(SIG, SIG, CAND, CAND, csls_k=k),
        lambda k: ce.kernels.topk_rows_and_columns(SIG, SIG, k, k),
    ):
        for got, same in zip(call(big), call(7)):
            np.testing.assert_array_equal(got, same)
    pairs, scores = np.array([[0, 1], [2, 3], [0, 3]]), np.array([0.9, 0.5, 0.7])
    expect = ce.kernels.greedy_one_to_one(pairs, scores)
    np.testing.assert_array_equal(ce.kernels.VoteTable().promote(pairs, scores, threshold=-1.0, limit=big), expect)
    np.testing.assert_array_equal(ce.kernels.greedy_one_to_one(pairs, scores, limit=big), expect)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda v: ce.csls_mutual_topk(SIG, SIG, k=v), "k"),
        (lambda v: ce.csls_mutual_topk(SIG, SIG, csls_k=v), "csls_k"),
        (lambda v: ce.kernels.csls_mutual_topk_candidates(SIG, SIG, CAND, CAND, k=v), "k"),
        (lambda v: ce.kernels.topk_rows_and_columns(SIG, SIG, 2, v), "k_col"),
        (lambda v: ce.kernels.greedy_one_to_one([[0, 1]], [0.5], limit=v), "limit"),
        (lambda v: ce.kernels.otsu_threshold([0.1, 0.2], bins=v), "bins"),
        (lambda v: ce.lorentz_topk(SIG, SIG, v), "k"),
        (lambda v: ce.probit_topk(SIG, SIG * 0, SIG, SIG * 0, v), "k"),
    ],
)
@pytest.mark.parametrize("value", [-(2**64), -1, -(2**70)])
def test_negative_counts_name_the_argument(call, name, value):
    with pytest.raises(ValueError, match=rf"^{name}\b.*>= ") as info:
        call(value)
    assert "incompatible" not in str(info.value)


@pytest.mark.parametrize("bins", [2**24 + 1, 2**31, 2**40, 2**64])
def test_otsu_bins_beyond_its_range(bins):
    with pytest.raises(ValueError, match=r"^bins must be <= 16777216, got "):
        ce.kernels.otsu_threshold([0.1, 0.2, 0.9], bins=bins)
    assert ce.kernels.otsu_threshold([0.1, 0.2, 0.9], bins=2**10) == pytest.approx(0.2, abs=1e-3)


@pytest.mark.parametrize(
    "pairs",
    [
        [[0, 1], [2]],
        [[0, [1, 2]], [2, 3]],
        [np.zeros(2, np.int64), np.zeros(3, np.int64)],
        [[[0, 1]], [[2, 3], [4, 5]]],
    ],
)
def test_ragged_pairs_name_the_argument(pairs):
    table = ce.kernels.VoteTable()
    for call in (table.add, table.votes, lambda p: ce.kernels.greedy_one_to_one(p, [0.5, 0.5])):
        with pytest.raises(ValueError, match=r"^pairs must be a rectangular array") as info:
            call(pairs)
        assert "inhomogeneous" not in str(info.value)
    assert table.n_views == 0


def test_ids_beyond_int64_are_out_of_range_not_wrapped():
    table = ce.kernels.VoteTable()
    with pytest.raises(ValueError, match=r"^pairs has an entry out of the int64 range"):
        table.add([[0, 2**70]])
    with pytest.raises(ValueError, match=r"^pairs has an entry out of the int64 range"):
        table.add(np.array([[0, 2**63]], np.uint64))  # would wrap to -2**63 in int64
    table.add(np.array([[1, 2]], dtype=object))  # Python ints in an object array are ints
    assert table.votes([[1, 2]]).tolist() == [1]
