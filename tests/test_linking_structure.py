"""GEH's pieces as objects: reentrant fits, rule choices that matter, the pair helpers, mutual NN."""

import dataclasses
import json
import threading
import types

import numpy as np
import pytest

from _linking_data import linking_problem
from crossembed import reference
from crossembed.cli.kernel_peers import numpy_greedy_one_to_one
from crossembed.kernels import greedy_one_to_one
from crossembed.linking import (
    AutoCandidates,
    CCAMap,
    CrossFitCheck,
    CrossFitRelink,
    DecoyPass,
    ExactCandidates,
    GEHLinker,
    MapPass,
    PoolCandidates,
    RidgeMap,
    RowSample,
    Schedule,
    StopRule,
    ValidatedPromotion,
)
from crossembed.linking._inputs import mutual_nearest
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.pairs import count_new, merge_views, pair_keys, positions, rank_by
from crossembed.linking.views import FarthestPointViews
from experiments.linking_rules import CappedPromotion, CheckedMapPass, PaperPromotion


@pytest.fixture(scope="module")
def problem():
    return linking_problem(400, noise=0.05, seed=3)


def _link(problem, **kw):
    A, B, split = problem
    kw.setdefault("random_state", 0)
    kw.setdefault("max_iter", 3)
    return GEHLinker(show_progress_bar=False, **kw).link(A, B, split.seeds)


def test_fit_returns_self_and_is_reentrant(problem):
    A, B, split = problem
    A2, B2, split2 = linking_problem(300, noise=0.05, seed=4)
    linker = GEHLinker(random_state=0, max_iter=3, show_progress_bar=False)
    assert linker.fit(A, B, split.seeds) is linker
    first = linker.result_
    alone = linker.link(A2, B2, split2.seeds)
    out = {}

    def run(name, a, b, s):
        out[name] = linker.link(a, b, s)

    threads = [
        threading.Thread(target=run, args=("1", A, B, split.seeds)),
        threading.Thread(target=run, args=("2", A2, B2, split2.seeds)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(out["1"].links, first.links)
    np.testing.assert_array_equal(out["2"].links, alone.links)
    # a second fit starts from scratch: the same links as the first
    np.testing.assert_array_equal(linker.fit(A, B, split.seeds).result_.links, first.links)


def _reachable(obj, seen=None):
    """Every object reachable from ``obj`` through attributes and container items, by id."""
    seen = {} if seen is None else seen
    if id(obj) in seen or isinstance(obj, (type, types.FunctionType, types.MethodType)):
        return seen
    seen[id(obj)] = obj
    if isinstance(obj, dict):
        children = [*obj.keys(), *obj.values()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    for child in children:
        _reachable(child, seen)
    return seen


def _immutable(obj) -> bool:
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, frozenset)):
        return True
    if isinstance(obj, tuple):
        return all(_immutable(x) for x in obj)
    return dataclasses.is_dataclass(obj) and type(obj).__dataclass_params__.frozen


def test_two_default_linkers_share_no_mutable_object():
    a, b = GEHLinker(), GEHLinker()
    ra, rb = _reachable(a), _reachable(b)
    shared = [ra[i] for i in ra.keys() & rb.keys()]
    assert any(isinstance(x, DecoyPass) for x in shared)  # the defaults are shared: they are frozen
    assert [x for x in shared if not _immutable(x)] == []
    rules = [x for x in ra.values() if dataclasses.is_dataclass(x)]
    assert len(rules) >= 16
    for rule in rules:
        for f in dataclasses.fields(rule)[:1]:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(rule, f.name, getattr(rule, f.name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.promotion.final_pass.folds = 1
    assert b.promotion.final_pass.folds == 5 and a.promotion == b.promotion == ValidatedPromotion()


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: DecoyPass(folds=1), "folds"),
        (lambda: DecoyPass(precision=1.0), "precision"),
        (lambda: MapPass(probes=0), "probes"),
        (lambda: MapPass(copies=0), "copies"),
        (lambda: MapPass(margin=2.5), "margin"),
        (lambda: MapPass(margin=-0.1), "margin"),
        (lambda: CrossFitRelink(tol=2.0), "tol"),
        (lambda: CrossFitCheck(rows=1), "rows"),
        (lambda: CCAMap(shrinkage=0.0), "shrinkage"),
        (lambda: RidgeMap(lam=0), "lam"),
        (lambda: StopRule(patience=0), "patience"),
        (lambda: RowSample(rows=1), "rows"),
        (lambda: Schedule(rho0=1.5), "rho0"),
        (lambda: PoolCandidates(anchors=1), "anchors"),
        (lambda: CellCandidates(cells_per_row=0), "cells_per_row"),
        (lambda: AutoCandidates(pool_above=-1), "pool_above"),
        (lambda: FarthestPointViews(max_candidates=1), "max_candidates"),
        (lambda: ValidatedPromotion(smoothing=1.5), "smoothing"),
    ],
)
def test_a_rule_checks_its_arguments_once_when_built(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_rules_rebuild_from_their_config_by_kind():
    from crossembed._config import from_config

    rules = (ValidatedPromotion, DecoyPass, MapPass, CrossFitRelink, CrossFitCheck, CCAMap, RidgeMap)
    registry = {cls.kind: cls for cls in rules}
    rule = ValidatedPromotion(min_views=7, final_pass=DecoyPass(precision=0.9, scorer=RidgeMap(lam=2.0)))
    config = json.loads(json.dumps(rule.get_config()))
    assert from_config(config, registry, "promotion") == rule
    sources = {cls.kind: cls for cls in (AutoCandidates, ExactCandidates, PoolCandidates, CellCandidates)}
    auto = AutoCandidates(pool=PoolCandidates(k=32), pool_above=10)
    assert from_config(auto.get_config(), sources, "candidates") == auto


def test_rules_have_kinds_and_check_their_types():
    assert (PaperPromotion().kind, CappedPromotion().kind, ValidatedPromotion().kind) == (
        "paper",
        "capped",
        "validated",
    )
    rule = ValidatedPromotion(min_views=7)
    assert GEHLinker(promotion=rule).promotion is rule
    assert type(GEHLinker().promotion) is ValidatedPromotion  # the default
    with pytest.raises(TypeError, match="promotion"):
        GEHLinker(promotion="best")
    with pytest.raises(ValueError, match="min_views"):
        ValidatedPromotion(min_views=0)
    with pytest.raises(ValueError, match="subsample"):
        CappedPromotion(subsample=1.5)


def test_objects_report_their_config():

    linker = GEHLinker(candidates=PoolCandidates(k=32), stop=StopRule(patience=4), random_state=0)
    assert "PoolCandidates(k=32, anchors=512, refresh=0.1)" in repr(linker)
    assert "StopRule(patience=4" in repr(linker) and "random_state=0" in repr(linker)
    config = AutoCandidates().get_config()
    assert config["kind"] == "auto" and config["pool"] == {
        "kind": "pool",
        "k": 64,
        "anchors": 512,
        "refresh": 0.1,
    }
    ridge = {"kind": "ridge", "lam": 1.0}
    cca_128 = {"kind": "cca", "shrinkage": 0.5, "n_components": 128}
    map_pass = {"kind": "map", "lam": 1.0, "score_filter": True, "probes": 8, "copies": 1, "margin": 0.02}
    assert ValidatedPromotion().get_config()["final_pass"] == {
        "kind": "decoys",
        "precision": 0.85,
        "folds": 5,
        "check": {
            "kind": "relink",
            "folds": 5,
            "max_rounds": 12,
            "tol": 0.15,
            "rows": 20_000,
            "scorer": cca_128,
            "check": {"kind": "crossfit", "folds": 5, "max_rounds": 2, "tol": 0.02, "rows": 20_000, "scorer": ridge},
        },
        "scorer": cca_128,
        "cells_pass": map_pass,
    }
    assert MapPass().get_config() == map_pass
    checked = CheckedMapPass().get_config()["check"]
    assert checked == {"kind": "crossfit", "folds": 5, "max_rounds": 4, "tol": 0.02, "rows": 20_000, "scorer": ridge}


def test_paper_promotes_on_the_threshold_capped_does_not(problem):
    # round 0, pool 15 < small_pool: every paper view is identical, so every proposal has the same
    # posterior and `>=` promotes them all; the capped rule's `>` keeps the upper Otsu class only
    paper = _link(problem, promotion=PaperPromotion(), max_iter=1).history[0]
    capped = _link(problem, promotion=CappedPromotion(), max_iter=1).history[0]
    assert paper["promoted"] == paper["proposals"]
    assert capped["promoted"] < capped["proposals"]
    assert capped["promoted"] <= capped["pool"]  # the cap: at most as many new links as the pool


def test_validated_growth_follows_the_holdout_precision(problem):
    res = _link(problem, promotion=ValidatedPromotion(min_views=6, final_pass=None), max_iter=4)
    links_before = 0
    best = 0.0
    for h in res.history:
        p = h["holdout_precision"]
        # grow by max(seeds, precision x pool) while precision does not fall, else not at all
        grow = max(15, int(np.ceil(p * h["pool"]))) if p >= best else 0
        assert h["limit"] == links_before + grow
        assert h["links"] <= h["limit"]
        best = max(best, p)
        links_before = h["links"]
    assert "final_pass" not in res.history[-1]


def test_final_pass_switch_and_score_filter_change_the_result(problem):
    on = _link(problem, max_iter=4)
    off = _link(problem, max_iter=4, promotion=ValidatedPromotion(final_pass=None))
    unfiltered = _link(problem, max_iter=4, promotion=ValidatedPromotion(final_pass=MapPass(score_filter=False)))
    assert on.history[-1].get("final_pass") and not off.history[-1].get("final_pass")
    assert len(unfiltered) >= len(on)
    assert on.history[-1]["threshold"] > -np.inf and unfiltered.history[-1]["threshold"] == -np.inf


def test_pair_helpers():
    pairs = np.array([[2, 1], [0, 3], [2, 1], [1, 0]])
    uniq, mean, votes = merge_views([pairs[:2], pairs[2:]], [np.array([1.0, 2.0]), np.array([3.0, 4.0])], n_b=5)
    np.testing.assert_array_equal(uniq, [[0, 3], [1, 0], [2, 1]])
    np.testing.assert_allclose(mean, [2.0, 4.0, 2.0])
    np.testing.assert_array_equal(votes, [1, 1, 2])
    np.testing.assert_array_equal(positions(uniq, np.array([[2, 1], [0, 3]]), 5), [2, 0])
    shuffled = uniq[[2, 0, 1]]  # any order: the positions refer to the array as given
    np.testing.assert_array_equal(positions(shuffled, np.array([[2, 1], [0, 3], [1, 0]]), 5), [0, 1, 2])
    np.testing.assert_array_equal(pair_keys(uniq, 5), [3, 5, 11])
    assert count_new(np.array([[0, 3], [4, 4]]), uniq, 5) == 1
    # rank_by: primary desc, then secondary desc
    r = rank_by(np.array([1.0, 1.0, 2.0]), np.array([0.1, 0.5, 0.0]))
    assert list(np.argsort(-r)) == [2, 1, 0]


@pytest.mark.parametrize("seed", range(5))
def test_greedy_one_to_one_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, 12, size=(60, 2))
    scores = rng.integers(0, 4, size=60).astype(np.float64)  # many ties
    kw = dict(exclude_a=[3], exclude_b=[5, 7], limit=6)
    got = greedy_one_to_one(pairs, scores, threshold=0.5, **kw)
    np.testing.assert_array_equal(got, reference.greedy_one_to_one(pairs, scores, 0.5, [3], [5, 7], 6))
    with pytest.raises(ValueError, match="limit"):
        greedy_one_to_one(pairs, scores, limit=-1)
    # the numpy baseline of the benchmarks is the same matcher
    np.testing.assert_array_equal(
        numpy_greedy_one_to_one(pairs, scores), reference.greedy_one_to_one(pairs, scores, -np.inf)
    )


def test_mutual_nearest_needs_both_directions():
    # row 0 of X likes column 0 best, but column 0 likes row 1 better: not mutual
    X = np.array([[1.0, 0.0], [0.99, 0.141], [0.0, 1.0]], np.float32)
    Y = np.array([[0.995, 0.0998], [0.0, 1.0]], np.float32)
    pairs, sims = mutual_nearest(X, Y)
    assert {tuple(p) for p in pairs.tolist()} == {(1, 0), (2, 1)}
    assert (np.diff(sims) <= 0).all()
    # excluding row 1 leaves column 0 to row 0
    pairs, _ = mutual_nearest(X, Y, exclude_a=[1])
    assert {tuple(p) for p in pairs.tolist()} == {(0, 0), (2, 1)}
    # tiles do not change the answer
    big = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    other = big + 0.3 * np.random.default_rng(1).standard_normal((50, 8)).astype(np.float32)
    np.testing.assert_array_equal(mutual_nearest(big, other, tile=7)[0], mutual_nearest(big, other)[0])


def test_small_fits_run_on_one_thread_by_default(monkeypatch):
    # a 300-row fit with all cores was 8x slower than one thread on a loaded machine
    monkeypatch.delenv("CROSSEMBED_NUM_THREADS", raising=False)
    assert GEHLinker().fit_threads(300, 300) == 1
    assert GEHLinker().fit_threads(5000, 5000) is None  # large: the kernels' all-cores default
    assert GEHLinker(num_threads=2).fit_threads(300, 300) == 2  # an explicit choice wins


def test_the_default_runs_fifteen_rounds_and_the_table_keeps_the_thirty_round_default(monkeypatch):
    from crossembed.linking.geh import DEFAULT_MAX_ITER
    from experiments import link_table

    assert GEHLinker().max_iter == DEFAULT_MAX_ITER == 15
    asked = {}

    class Recorder:
        def __init__(self, *, max_iter, **_):
            self.max_iter = max_iter

        def link(self, A, B, seeds):
            return self.max_iter

    monkeypatch.setattr(link_table, "GEHLinker", Recorder)
    for name in ("geh-validated", "geh-30-rounds"):
        asked[name] = [link_table.run_method(name, None, None, None, max_iter=m) for m in (10, 30)]
    assert asked == {"geh-validated": [10, 15], "geh-30-rounds": [10, 30]}
