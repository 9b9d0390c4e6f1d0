"""The Dask-sharded proposal step equals the single-machine computation."""

import numpy as np
import pytest

distributed = pytest.importorskip("dask.distributed")

from _linking_data import linking_problem  # noqa: E402
from crossembed import reference  # noqa: E402
from crossembed.distributed import DaskExactCandidates, DaskProposer, sharded_csls_mutual_topk  # noqa: E402
from crossembed.linking import ExactCandidates, GEHLinker, ValidatedPromotion  # noqa: E402


def _sigs(rng, n_a, n_b, dim=12):
    SA = rng.random((n_a, dim))
    SB = np.concatenate(
        [SA[: n_b // 2] + 0.01 * rng.standard_normal((n_b // 2, dim)), rng.random((n_b - n_b // 2, dim))]
    )
    SA /= np.linalg.norm(SA, axis=1, keepdims=True)
    SB /= np.linalg.norm(SB, axis=1, keepdims=True)
    return SA, SB


@pytest.mark.parametrize("n_shards", [1, 3, 7])
def test_sharded_equals_reference(client, n_shards):
    rng = np.random.default_rng(n_shards)
    SA, SB = _sigs(rng, 90, 70)
    ex_a, ex_b = [0, 5, 9], [3, 4]
    want_p, want_s = reference.csls_mutual_topk(SA, SB, k=5, csls_k=10, exclude_a=ex_a, exclude_b=ex_b)
    got_p, got_s = sharded_csls_mutual_topk(
        client, SA, SB, k=5, csls_k=10, exclude_a=ex_a, exclude_b=ex_b, n_shards=n_shards
    )
    np.testing.assert_array_equal(got_p, want_p)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-12, atol=1e-12)


def test_dask_proposer_drives_geh(client):
    A, B, split = linking_problem(300, noise=0.05)
    kw = dict(random_state=0, max_iter=2, promotion=ValidatedPromotion(min_views=4), show_progress_bar=False)
    local = GEHLinker(candidates=ExactCandidates(), **kw).link(A, B, split.seeds)  # the sharded path is exact too
    sharded = GEHLinker(candidates=DaskExactCandidates(client, n_shards=3), **kw).link(A, B, split.seeds)
    # float32 kernel vs float64 shards: the links must agree almost entirely
    same = len(set(map(tuple, local.links.tolist())) & set(map(tuple, sharded.links.tolist())))
    assert same >= 0.95 * max(len(local.links), len(sharded.links)) and len(local.links) > 0


def test_dask_proposer_rejects_non_client():
    with pytest.raises(TypeError, match="client"):
        DaskProposer(object())
    with pytest.raises(TypeError, match="client"):
        DaskExactCandidates(object())
