"""The Dask-sharded "pool" path of GEH equals the single-process one bit for bit."""

import numpy as np
import pytest

distributed = pytest.importorskip("dask.distributed")

from _linking_data import linking_problem  # noqa: E402
from crossembed import kernels  # noqa: E402
from crossembed.distributed import DaskCandidates  # noqa: E402
from crossembed.linking import GEHLinker, PoolCandidates  # noqa: E402
from crossembed.linking.csls import csls_from_candidate_dots  # noqa: E402
from crossembed.linking.proposers import pool_candidate_lists  # noqa: E402


def _lists(rng, n_rows, n_other, m, pad=0.2):
    cand = np.stack([rng.choice(n_other, size=m, replace=False) for _ in range(n_rows)])
    cand[rng.random(cand.shape) < pad] = -1
    return cand


@pytest.mark.parametrize("case", ["random", "ties", "excluded", "k_large", "one_row"])
def test_merge_of_candidate_dots_is_the_kernel(case):
    rng = np.random.default_rng(hash(case) % 2**32)
    n_a, n_b, d, m = (1, 9, 7, 5) if case == "one_row" else (80, 60, 13, 12)
    SA = rng.standard_normal((n_a, d)).astype(np.float32)
    SB = rng.standard_normal((n_b, d)).astype(np.float32)
    if case == "ties":  # repeated rows and a grid of values: many exactly equal similarities
        SA = np.round(SA * 2) / 2
        SB = np.round(SB * 2) / 2
        SB[1::2] = SB[::2][: len(SB[1::2])]
    cand_a, cand_b = _lists(rng, n_a, n_b, min(m, n_b)), _lists(rng, n_b, n_a, min(m, n_a))
    opts = dict(k=5, csls_k=4)
    if case == "excluded":
        opts.update(exclude_a=[0, 3, 7], exclude_b=[1, 2])
    if case == "k_large":
        opts.update(k=50, csls_k=50)
    want_p, want_s = kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, **opts)
    dots_a, dots_b = kernels.candidate_dots(SA, SB, cand_a), kernels.candidate_dots(SB, SA, cand_b)
    got_p, got_s = csls_from_candidate_dots(dots_a, cand_a, dots_b, cand_b, **opts)
    np.testing.assert_array_equal(got_p, want_p)
    np.testing.assert_array_equal(got_s, want_s)
    assert len(want_p) > 0


def test_candidate_dots_match_float64():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((20, 19)).astype(np.float32), rng.standard_normal((30, 19)).astype(np.float32)
    cand = _lists(rng, 20, 30, 6)
    got = kernels.candidate_dots(X, Y, cand)
    want = np.einsum("id,imd->im", X.astype(np.float64), Y[np.maximum(cand, 0)].astype(np.float64))
    np.testing.assert_allclose(got[cand >= 0], want[cand >= 0], rtol=1e-5, atol=1e-5)
    assert np.isnan(got[cand < 0]).all()
    with pytest.raises(ValueError, match="cand"):
        kernels.candidate_dots(X, Y, np.full((20, 2), 30))
    with pytest.raises(ValueError, match="cand"):
        kernels.candidate_dots(X, Y, np.zeros((3, 2), np.int64))


@pytest.mark.parametrize("n_shards", [1, 3])
def test_sharded_candidate_lists_equal_the_local_ones(client, n_shards):
    rng = np.random.default_rng(n_shards)
    SA, SB = rng.random((70, 16), dtype=np.float32), rng.random((50, 16), dtype=np.float32)
    SB[5] = SB[6]  # a tie across what may be a shard boundary
    want = pool_candidate_lists(SA, SB, 9)
    got = DaskCandidates(client, n_shards=n_shards).candidate_lists(SA, SB, 9)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_geh_on_a_local_cluster_gives_the_local_links(client):
    A, B, split = linking_problem(700, noise=0.05, seed=4)
    kw = dict(random_state=0, max_iter=4, show_progress_bar=False)
    local = GEHLinker(candidates=PoolCandidates(k=24), **kw).link(A, B, split.seeds)
    sharded = GEHLinker(candidates=DaskCandidates(client, n_shards=3, k=24), **kw).link(A, B, split.seeds)
    assert len(local.links) > 50
    np.testing.assert_array_equal(sharded.links, local.links)
    np.testing.assert_array_equal(sharded.votes, local.votes)


def test_dask_candidates_reject_a_non_client():
    with pytest.raises(TypeError, match="client"):
        DaskCandidates(object())
    with pytest.raises(TypeError, match="^candidates must be"):
        GEHLinker(candidates=object())
    with pytest.raises(TypeError, match="^candidates must be"):
        GEHLinker(candidates=DaskCandidates)  # the class, not an object
