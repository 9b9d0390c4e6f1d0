"""GEHLinker on small generated problems: recovery, rules, determinism, validation."""
import numpy as np
import pytest

from crossembed.linking.geh import GEHLinker, farthest_point_sampling
from crossembed.linking.protocol import evaluate_links
from crossembed.linking.result import LinkResult

from _linking_data import linking_problem


@pytest.fixture(scope="module")
def problem():
    return linking_problem(500, noise=0.05, seed=0)


@pytest.fixture(scope="module")
def validated(problem):
    A, B, split = problem
    return GEHLinker(random_state=0, max_iter=10, progress=False).fit(A, B, split.seeds)


def _fit(problem, **kw):
    A, B, split = problem
    kw.setdefault("random_state", 0)
    kw.setdefault("max_iter", 12)
    return GEHLinker(progress=False, **kw).fit(A, B, split.seeds)


def test_validated_recovers_most_links(problem, validated):
    res = validated
    m = evaluate_links(res.links, problem[2].truth)
    assert m["recall"] > 0.85, m
    assert m["precision"] > 0.85, m
    assert isinstance(res, LinkResult)
    assert res.links.dtype == np.int64 and res.links.shape[1] == 2
    assert np.all((res.posterior >= 0) & (res.posterior <= 1))
    assert res.history[-1].get("final_pass")


@pytest.mark.parametrize("promotion", ["paper", "capped"])
def test_paper_and_capped_rules_find_the_overlap(problem, promotion):
    res = _fit(problem, promotion=promotion, max_iter=8)
    m = evaluate_links(res.links, problem[2].truth)
    # without a score filter rows missing on the other side still get partners, so only recall is high
    assert m["recall"] > 0.8, m


def test_links_are_one_to_one_and_exclude_seeds(problem, validated):
    res = validated
    seeds = problem[2].seeds
    assert len(np.unique(res.links[:, 0])) == len(res.links)
    assert len(np.unique(res.links[:, 1])) == len(res.links)
    assert not np.isin(res.links[:, 0], seeds[:, 0]).any()
    assert not np.isin(res.links[:, 1], seeds[:, 1]).any()
    for h in res.history:
        assert {"round", "pool", "views", "anchors", "proposals", "promoted", "threshold", "links"} <= set(h)


def test_paper_rule_promotes_every_proposal_in_round_zero(problem):
    # SPEC's measured failure mode: while the pool has < 50 anchors every view is identical,
    # every proposal gets the same votes, and Otsu cannot separate them
    res = _fit(problem, promotion="paper", max_iter=1)
    h = res.history[0]
    assert h["pool"] == 15 and h["anchors"] == 15
    assert h["promoted"] == h["proposals"] == len(res.links)


def test_capped_rule_limits_growth(problem):
    res = _fit(problem, promotion="capped", max_iter=2)
    for before, h in zip([0] + [r["links"] for r in res.history], res.history):
        assert h["links"] <= before + h["pool"]


def test_deterministic_across_thread_counts(problem):
    a = _fit(problem, max_iter=3, min_views=6, num_threads=1)
    b = _fit(problem, max_iter=3, min_views=6, num_threads=2)
    np.testing.assert_array_equal(a.links, b.links)
    np.testing.assert_array_equal(a.votes, b.votes)
    c = _fit(problem, max_iter=3, min_views=6, random_state=1)
    assert not np.array_equal(a.links, c.links) or len(a.links) == 0


@pytest.mark.parametrize("kw", [dict(kernel=False), dict(sampling="random"), dict(posterior=False)])
def test_ablations_run(problem, kw):
    res = _fit(problem, max_iter=3, min_views=6, **kw)
    assert evaluate_links(res.links, problem[2].truth)["recall"] > 0.3


def test_ann_candidates_match_the_exact_kernel(problem):
    from crossembed import kernels
    from crossembed.linking.candidates import AnnProposer

    A, B, split = problem
    anchors = split.seeds
    SA = kernels.anchor_signatures(A, A[anchors[:, 0]])
    SB = kernels.anchor_signatures(B, B[anchors[:, 1]])
    exact, _ = kernels.csls_mutual_topk(SA, SB, k=5, csls_k=20, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1])
    # with every row a candidate the ANN path is exact
    ann, _ = AnnProposer(ann_k=400, num_threads=1)(SA, SB, k=5, csls_k=20, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1])
    same = len(set(map(tuple, exact.tolist())) & set(map(tuple, ann.tolist())))
    assert same >= 0.98 * len(exact)
    res = _fit(problem, max_iter=2, min_views=4, candidates="ann", num_threads=1)
    assert len(res.links) > 0


def test_farthest_point_sampling_spreads_out():
    X = np.array([[1, 0], [0.99, 0.141], [0, 1], [-1, 0]], np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_array_equal(farthest_point_sampling(X, 3, 0), [0, 3, 2])


@pytest.mark.parametrize(
    "kw, exc",
    [
        (dict(promotion="best"), ValueError),
        (dict(sampling="grid"), ValueError),
        (dict(k=0), ValueError),
        (dict(k=2.5), TypeError),
        (dict(rho0=1.5), ValueError),
        (dict(candidates="magic"), ValueError),
        (dict(proposer=3), TypeError),
    ],
)
def test_bad_options(kw, exc):
    with pytest.raises(exc):
        GEHLinker(**kw)


def test_bad_inputs():
    A = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    B = A[:, :3].copy()
    geh = GEHLinker(progress=False)
    with pytest.raises(ValueError, match="at least 2"):
        geh.fit(A, B, np.array([[0, 0]]))
    with pytest.raises(ValueError, match="one-to-one"):
        geh.fit(A, B, np.array([[0, 0], [1, 0]]))
    with pytest.raises(ValueError, match="B index"):
        geh.fit(A, B, np.array([[0, 0], [1, 25]]))
    with pytest.raises(ValueError, match="B must be 2-dimensional"):
        geh.fit(A, B[0], np.array([[0, 0], [1, 1]]))
    with pytest.raises(TypeError, match="A must hold real numbers"):
        geh.fit(A.astype(str), B, np.array([[0, 0], [1, 1]]))
