"""The probit variance term's two paths (whole-tile pair_dots, per-pair tree dot) and probit_topk's documents.

top_k computes sig2 for a whole tile at once when many candidates survive
pruning (wide variances) and one pair at a time when few do (tight
variances); rerank always goes pair by pair and the dense scores always by
tile. All of them must give the same bits, for every SIMD remainder of D.
"""

import numpy as np
import pytest

import crossembed as ce
from _probit_paths import assert_paths_agree
from crossembed import kernels
from crossembed import reference as ref
from crossembed._native import core as native_core


def _docs(rng, n, d, lo, hi):
    mu = rng.standard_normal((n, d)).astype(np.float32)
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    return mu, rng.uniform(lo, hi, (n, d)).astype(np.float32)


@pytest.mark.parametrize("D", [1, 3, 8, 15, 16, 17, 33, 100, 384])
@pytest.mark.parametrize("variances", [(0.0, 0.5), (0.008, 0.024), (0.0, 0.0)], ids=["wide", "kron", "zero"])
def test_tile_and_pair_paths_agree_bitwise(rng, D, variances):
    mu_c, v_c = _docs(rng, 700, D, *variances)
    mu_q, v_q = _docs(rng, 70, D, *variances)
    docs = ce.ProbitDocs(mu_c, v_c)
    k = 9
    scores, _, _ = assert_paths_agree(docs, mu_q, v_q, k)
    # and the values are the probit scores (the float64 reference picks the same best set up to near-ties)
    exact = ref.probit_scores(mu_q, v_q, mu_c, v_c)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage", ["float32", "float16"])
@pytest.mark.parametrize("D", [3, 17, 384])
def test_docs_without_variance_score_as_stored_zero_rows(rng, storage, D):
    """Docs whose variances are all 0 keep no stacked rows: a query with variance gets rows rebuilt
    from the means, bit for bit what stored zero rows give (compared on docs where one extra row has
    a variance, so the stacked rows are stored), and a query without variance scores mu_s exactly."""
    mu_c, _ = _docs(rng, 600, D, 0.0, 0.0)
    none = np.zeros_like(mu_c)
    stored = none.copy()
    stored[-1] = 0.25  # one doc with a variance: every row is stored
    mu_q, v_q = _docs(rng, 40, D, 0.0, 0.5)
    v_q[::3] = 0.0  # a mixed batch: plain queries among queries with variance
    lean = ce.ProbitDocs(mu_c, none, storage=storage)
    full = ce.ProbitDocs(mu_c, stored, storage=storage)
    assert lean.nbytes < full.nbytes / 2
    dense = lean.scores(mu_q, v_q)
    np.testing.assert_array_equal(dense[:, :-1], full.scores(mu_q, v_q)[:, :-1])
    np.testing.assert_array_equal(dense[::3], lean.scores(mu_q[::3], v_q[::3], return_moments=True)[1])
    scores, idx, _ = assert_paths_agree(lean, mu_q, v_q, 7)
    exact = ref.probit_scores(mu_q, v_q, mu_c, none)
    tol = 1e-5 if storage == "float32" else 2e-3
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :7], rtol=tol, atol=tol)


def test_plain_inner_product_top_k_keeps_ties_to_the_lower_index(rng):
    mu = np.repeat(_docs(rng, 50, 16, 0.0, 0.0)[0], 4, axis=0)  # every doc four times: ties everywhere
    docs = ce.ProbitDocs(mu, np.zeros_like(mu))
    mu_q = _docs(rng, 9, 16, 0.0, 0.0)[0]
    scores, idx, _ = assert_paths_agree(docs, mu_q, np.zeros_like(mu_q), 10)
    exact = ref.probit_scores(mu_q, np.zeros_like(mu_q), mu, np.zeros_like(mu)).astype(np.float32)
    np.testing.assert_allclose(scores, np.take_along_axis(exact, idx, axis=1), rtol=1e-6, atol=1e-6)
    order = np.lexsort((np.broadcast_to(np.arange(len(mu)), exact.shape), -exact), axis=1)[:, :10]
    np.testing.assert_array_equal(idx // 4, order // 4)
    assert (np.diff(idx, axis=1)[np.diff(scores, axis=1) == 0] > 0).all()


def test_k_equals_n_and_n_equals_one_on_the_tile_path(rng):
    mu_c, v_c = _docs(rng, 300, 17, 0.0, 0.5)
    mu_q, v_q = _docs(rng, 5, 17, 0.0, 0.5)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 300)
    exact = ref.probit_scores(mu_q, v_q, mu_c, v_c)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1), rtol=1e-5, atol=1e-6)
    one_s, one_i = ce.probit_topk(mu_q, v_q, mu_c[:1], v_c[:1], 1)
    assert (one_i == 0).all()
    np.testing.assert_allclose(one_s[:, 0], exact[:, 0], rtol=1e-5, atol=1e-6)


def test_huge_and_tiny_values_on_both_paths(rng):
    mu_c, v_c = _docs(rng, 400, 33, 0.0, 0.5)
    mu_c[::7] *= 1e6
    v_c[::5] *= 1e-30
    mu_q, v_q = _docs(rng, 12, 33, 0.0, 0.5)
    docs = ce.ProbitDocs(mu_c, v_c)
    scores, idx = docs.top_k(mu_q, v_q, 40)
    np.testing.assert_array_equal(np.take_along_axis(docs.scores(mu_q, v_q), idx, axis=1), scores)
    exact = ref.probit_scores(mu_q, v_q, mu_c, v_c)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :40], rtol=1e-5)


def _expected_order(dense, k):
    """Best k of each row of the kernel's own dense scores: higher first, ties to the lower index."""
    cols = np.broadcast_to(np.arange(dense.shape[1]), dense.shape)
    return np.lexsort((cols, -dense), axis=1)[:, :k]


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_centred_bound_at_equality_prunes_nothing_it_should_keep(rng, storage):
    """The centred lower bound on sig2 (d xb yb - xr yr per half) is an equality when the rows'
    deviations from their means point in opposite directions. Here every mean entry is +-1/sqrt(D)
    (mu^2 constant), every variance row is m + s z with one shared zero-mean z, queries with s < 0
    and docs with s > 0: the bound is exact for every pair. The docs share three means, so within a
    mean the order is decided by sig2 alone and each doc's score sits on its own bound: top_k must
    still be the top k of the dense scores, on every path (a bound 10 % too tight fails this)."""
    n, q, D, k = 900, 24, 64, 12
    z = rng.standard_normal(D)
    z = (z - z.mean()) / np.abs(z - z.mean()).max()
    signs = rng.choice([-1.0, 1.0], (3, D))
    mu_c = (signs[rng.integers(0, 3, n)] / np.sqrt(D)).astype(np.float32)
    mu_q = (signs[rng.integers(0, 3, q)] / np.sqrt(D)).astype(np.float32)
    v_c = (0.2 + rng.uniform(0.05, 0.19, (n, 1)) * z).astype(np.float32)
    v_q = (0.2 - rng.uniform(0.05, 0.19, (q, 1)) * z).astype(np.float32)
    docs = ce.ProbitDocs(mu_c, v_c, storage=storage)
    scores, idx, dense = assert_paths_agree(docs, mu_q, v_q, k)
    np.testing.assert_array_equal(idx, _expected_order(dense, k))
    if storage == "float32":
        exact = ref.probit_scores(mu_q, v_q, mu_c, v_c)
        np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spread", [0.0, 0.5, 2.0], ids=["equal", "uniform", "skewed"])
def test_wide_variance_top_k_on_clustered_means_is_the_dense_top_k(rng, spread):
    """Clustered means and variances that differ per doc (wide, skewed: a few docs with large
    variances) give tiles with very different shared bounds; several tiles (256 docs) per chunk."""
    n, q, D, k = 3000, 40, 48, 10
    centres = rng.standard_normal((6, D))
    mu_c = (centres[rng.integers(0, 6, n)] + 0.4 * rng.standard_normal((n, D))).astype(np.float32)
    mu_c /= np.linalg.norm(mu_c, axis=1, keepdims=True)
    mu_q = mu_c[rng.integers(0, n, q)] + np.float32(0.05) * rng.standard_normal((q, D)).astype(np.float32)
    scale = np.exp(spread * rng.standard_normal((n, 1)))
    v_c = (rng.uniform(0.0, 0.5, (n, D)) * scale).astype(np.float32)
    v_q = rng.uniform(0.0, 0.5, (q, D)).astype(np.float32)
    docs = ce.ProbitDocs(mu_c, v_c)
    scores, idx, dense = assert_paths_agree(docs, mu_q, v_q, k)
    np.testing.assert_array_equal(idx, _expected_order(dense, k))


def test_probit_topk_prepares_per_call_and_probit_docs_is_the_reusable_form(rng):
    mu_c, v_c = _docs(rng, 500, 24, 0.0, 0.1)
    mu_q, v_q = _docs(rng, 6, 24, 0.0, 0.1)
    docs = ce.ProbitDocs(mu_c, v_c)
    first = ce.probit_topk(mu_q, v_q, mu_c, v_c, 5)
    for got in (docs.top_k(mu_q, v_q, 5), ce.probit_topk(mu_q, v_q, docs, None, 5)):
        np.testing.assert_array_equal(got[0], first[0])
        np.testing.assert_array_equal(got[1], first[1])
    # an in-place edit is seen by the next call: nothing is kept between calls
    mu_c[first[1][0, 0]] *= -1
    edited = ce.probit_topk(mu_q, v_q, mu_c, v_c, 5)
    assert first[1][0, 0] not in edited[1][0]
    np.testing.assert_array_equal(edited[1], ce.ProbitDocs(mu_c, v_c).top_k(mu_q, v_q, 5)[1])
    # the ProbitDocs holds its own copy: it still answers for the documents it was built from
    np.testing.assert_array_equal(docs.top_k(mu_q, v_q, 5)[1], first[1])


def test_probit_topk_leaves_no_module_level_state(rng):
    def containers():
        return {
            name: repr(value)
            for name, value in vars(kernels).items()
            if isinstance(value, (dict, list, set, bytearray)) and not name.startswith("__")
        }

    before = containers()
    mu_c, v_c = _docs(rng, 50, 8, 0.0, 0.1)
    ce.probit_topk(mu_c[:2], v_c[:2], mu_c, v_c, 3)
    assert containers() == before


def test_content_hash_sees_one_bit_and_ignores_threads(rng):
    x = rng.standard_normal((3000, 129)).astype(np.float32)  # > 1 MiB: several blocks, a ragged tail
    core = native_core()
    h = core.content_hash(x, 1)
    assert h == core.content_hash(x, 2) == core.content_hash(x, 0)
    y = x.copy()
    y.view(np.uint32)[2999, 128] ^= 1
    assert core.content_hash(y, 0) != h
    assert core.content_hash(x[:0], 0) != core.content_hash(x[:1], 0)
