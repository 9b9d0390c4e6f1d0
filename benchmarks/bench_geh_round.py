"""One GEH round (the default validated rule) at 10k rows a side: C++ kernels against numpy.

Regime: the middle of a real fit - 10,000 rows a side, D = 384, a pool of
600 anchor pairs, so a round builds candidate lists once (signatures
against up to 512 pool anchors, top-64 per row each way (the defaults)) and runs 20
views of up to 256 anchors (signatures, candidate-restricted CSLS mutual
top-5). The numpy round runs the same rule with numpy signatures, an
argpartition top-k for the candidate lists and the numpy candidate CSLS,
so the ratio is what the C++ core buys a whole round. Both rounds start
from the same generator state and must promote the same links.
"""

import numpy as np
import pytest

from _bench import run, size
from crossembed import kernels
from crossembed.cli.kernel_peers import numpy_csls_mutual_topk_candidates, numpy_signatures
from crossembed.linking import ValidatedPromotion
from crossembed.linking._fit import FitSetup, FitState
from crossembed.linking.candidates import without_own_anchor
from crossembed.linking.proposers import PoolProposer, Proposer, pool_candidate_lists
from crossembed.linking.views import KernelSignatures

N, D, POOL = size("geh_rows", 10_000, 1_500), 384, size("geh_pool", 600, 150)
POOL_K, POOL_ANCHORS = 64, 512


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    Z = rng.standard_normal((N, D)).astype(np.float32)
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0].astype(np.float32)
    A = Z + 0.3 * rng.standard_normal(Z.shape, dtype=np.float32)
    B = (Z @ Q) + 0.3 * rng.standard_normal(Z.shape, dtype=np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    perm = rng.permutation(N)
    B = np.ascontiguousarray(B[perm])
    inv = np.argsort(perm)
    pool = np.stack([np.arange(POOL), inv[:POOL]], axis=1)
    return A, B, pool


class _NumpySignatures:
    """The kernel signatures in numpy (from the rows: no round cosines)."""

    reads_cosines = False

    def __call__(self, X, anchors, *, sigma=None, num_threads=None):
        return numpy_signatures(X, anchors, kernels.median_anchor_distance(anchors) if sigma is None else sigma)

    def from_cosines(self, cosines, cols, *, sigma, num_threads=None):
        raise NotImplementedError


def _numpy_candidates(SA, SB, m):
    def top(X, Y):
        S = X @ Y.T
        idx = np.argpartition(-S, m - 1, axis=1)[:, :m]
        return np.take_along_axis(idx, np.argsort(-np.take_along_axis(S, idx, axis=1), axis=1), axis=1)

    return top(SA, SB), top(SB, SA)


class _NumpyPoolProposer(Proposer):
    def __init__(self, cand_a, cand_b):
        self.cand_a, self.cand_b = cand_a, cand_b

    def __call__(self, SA, SB, *, k, csls_k, exclude_a=None, exclude_b=None):
        SA, SB = SA.copy(), SB.copy()
        SA[exclude_a] = 0.0  # an excluded row scores 0 with everything: it is never mutual
        SB[exclude_b] = 0.0
        pairs, scores = numpy_csls_mutual_topk_candidates(SA, SB, self.cand_a, self.cand_b, k, csls_k)
        keep = ~np.isin(pairs[:, 0], exclude_a) & ~np.isin(pairs[:, 1], exclude_b)
        return pairs[keep], scores[keep]


def _round(problem, *, numpy: bool):
    A, B, pool = problem
    setup = FitSetup(signatures=_NumpySignatures() if numpy else KernelSignatures())
    fit = FitState(A=A, B=B, seeds=pool[:15], rng=np.random.default_rng(0), setup=setup)
    fit.set_links(pool[15:], np.full(POOL - 15, 0.9), np.full(POOL - 15, 5))
    anchors = fit.pool()[:POOL_ANCHORS]
    SA, SB = fit.signatures(anchors)
    SA, SB = without_own_anchor(SA, anchors[:, 0]), without_own_anchor(SB, anchors[:, 1])
    if numpy:
        proposer = _NumpyPoolProposer(*_numpy_candidates(SA, SB, POOL_K))
    else:
        proposer = PoolProposer(*pool_candidate_lists(SA, SB, POOL_K))
    info = ValidatedPromotion().grow(fit, proposer)
    return info, fit.links


@pytest.mark.benchmark(group="geh_round")
def test_geh_round_cpp(benchmark, problem):
    info, _ = run(benchmark, _round, problem, numpy=False, role="kernel", flops=0.0, primary=True)
    assert info["promoted"] > 0


@pytest.mark.benchmark(group="geh_round")
def test_geh_round_numpy_baseline(benchmark, problem):
    info, links = run(benchmark, _round, problem, numpy=True, role="numpy", flops=0.0)
    _, ref = _round(problem, numpy=False)
    # same rule on the same generator: nearly the same links (float32 ties may differ)
    common = len({tuple(p) for p in links.tolist()} & {tuple(p) for p in ref.tolist()})
    assert common >= 0.95 * max(len(ref), 1), (common, len(ref))
