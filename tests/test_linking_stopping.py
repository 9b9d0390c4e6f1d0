"""The GEH stop rule: a fit whose link count oscillates at its size must stop."""

import numpy as np
import pytest

from crossembed.linking import GEHLinker
from crossembed.linking.stopping import StopRule, turnover

# rounds 19-26 of a 10k minilm <-> e5 fit (docs/linking.md): growth over, +-4 % swaps
OSCILLATING = [800, 1500, 2100, 2512, 2604, 2604, 2509, 2602, 2515, 2600, 2520, 2601]


def _stop_round(counts, saturated=None, **kw):
    stop = StopRule(patience=kw.get("patience", 3), tol=kw.get("tol", 0.02), turnover=None).counter()
    for t, n in enumerate(counts):
        if stop.update(n, saturated=True if saturated is None else saturated[t]):
            return t
    return None


def test_an_oscillating_fit_stops_at_its_best_count():
    # 2604 at round 4 is the best; rounds 5, 6, 7 do not beat it by 2 %
    assert _stop_round(OSCILLATING) == 7


def test_growing_fit_does_not_stop():
    growing = [int(100 * 1.05**t) for t in range(30)]
    assert _stop_round(growing) is None


def test_growth_just_above_tol_resets_the_count():
    counts = [1000, 1000, 1000 * 1.021, 1000 * 1.021**2, 1000 * 1.021**3]
    assert _stop_round(counts) is None
    assert _stop_round([1000, 1000, 1010, 1015]) == 3  # +1.5 % total: stale


def test_rounds_held_at_the_growth_limit_never_count():
    flat = [500] * 8
    assert _stop_round(flat, saturated=[False] * 8) is None
    assert _stop_round(flat, saturated=[True] * 8) == 3
    # a round at the limit in between restarts the count
    assert _stop_round(flat, saturated=[True, True, True, False, True, True, True, True]) == 6


def test_patience_and_tol_are_honoured():
    assert _stop_round(OSCILLATING, patience=5) == 9
    assert _stop_round(OSCILLATING, tol=0.0) == 7  # no later round exceeds 2604
    assert _stop_round([100, 100], patience=1) == 1


def test_bad_stop_rules_are_refused():
    with pytest.raises(TypeError, match="^stop must be"):
        GEHLinker(stop="best")
    with pytest.raises(TypeError, match="^stop must be"):
        GEHLinker(stop=StopRule)  # the class, not an object
    for kw, name in (
        (dict(patience=0), "patience"),
        (dict(tol=-0.1), "tol"),
        (dict(unsettled_patience=0), "unsettled_patience"),
    ):
        with pytest.raises(ValueError, match=name):
            StopRule(**kw)
    with pytest.raises(TypeError, match="patience"):
        StopRule(patience=2.5)


def test_linker_ends_at_the_round_its_stop_rule_names():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((400, 16)).astype(np.float32)
    A = np.tanh(Z @ rng.standard_normal((16, 32)).astype(np.float32))
    B = Z @ rng.standard_normal((16, 24)).astype(np.float32)
    seeds = np.stack([np.arange(15), np.arange(15)], axis=1)
    for stop in (StopRule(), StopRule(patience=2, tol=0.05)):
        res = GEHLinker(stop=stop, random_state=0, max_iter=40, show_progress_bar=False).link(A, B, seeds)
        rounds = [h for h in res.history if "final_pass" not in h]
        counter = stop.counter()
        said = [
            counter.update(
                h["links"], saturated=h.get("limit") is None or h["links"] < h["limit"], turnover=h["turnover"]
            )
            for h in rounds
        ]
        assert not any(said[:-1])  # it did not run past a stop
        assert said[-1] or rounds[-1]["promoted"] == 0 or len(rounds) == 40


def test_a_flat_count_with_a_churning_link_set_does_not_stop():
    # minilm <-> e5 draw 4: ~1,900 links for 10 rounds at 40 % turnover, precision 5-15 %
    counts = [1866, 1817, 1855, 1875, 1817, 1929, 1889, 1912]
    churn = [0.45, 0.43, 0.43, 0.41, 0.41, 0.44, 0.41, 0.40]
    counter = StopRule().counter()
    assert not any(counter.update(n, turnover=x) for n, x in zip(counts, churn))
    settled = StopRule(unsettled_patience=None).counter()
    assert [settled.update(n, turnover=0.12) for n in counts][3]  # the same counts, settled: stops
    # on a row sample the turnover is not applied: the churning counts stop too
    sampled = StopRule().counter(every_row=False)
    assert [sampled.update(n, turnover=x) for n, x in zip(counts, churn)][3]


def test_a_churning_fit_stops_after_unsettled_patience_stale_rounds():
    # minilm <-> e5 at 1,500 objects: ~540 links at 17-23 % turnover from round 20 to 86
    counter = StopRule(unsettled_patience=15).counter()
    said = [counter.update(530 + (r % 3), turnover=0.22) for r in range(20)]
    assert said.index(True) == 15  # the first round sets the best; the next 15 are stale
    # a round that beats the best by more than tol starts the count again
    counter = StopRule(unsettled_patience=15).counter()
    counts = [530] * 10 + [560] + [560] * 15
    said = [counter.update(n, turnover=0.22) for n in counts]
    assert not any(said[:-1]) and said[-1]
    # held rounds (growth limit) never count, settled or not
    counter = StopRule(unsettled_patience=2).counter()
    assert not any(counter.update(530, saturated=False, turnover=0.3) for _ in range(5))


def test_turnover_counts_new_pairs():
    old = np.array([[0, 1], [2, 3], [4, 5]])
    assert turnover(old, old, 10) == 0.0
    assert turnover(np.array([[0, 1], [2, 4]]), old, 10) == 0.5
    assert turnover(old, np.zeros((0, 2), np.int64), 10) == 1.0
    assert turnover(np.zeros((0, 2), np.int64), old, 10) == 0.0
    # (1, 0) and (0, 10) must not collide at n_b = 10
    assert turnover(np.array([[1, 0]]), np.array([[0, 9]]), 10) == 1.0


def test_stop_turnover_is_validated():
    with pytest.raises(ValueError, match="turnover"):
        StopRule(turnover=1.5)
    assert StopRule(turnover=None).counter().max_turnover is None
    assert StopRule().get_config() == {
        "kind": "best",
        "patience": 3,
        "tol": 0.02,
        "turnover": 0.2,
        "unsettled_patience": 20,
    }
