"""GEH promotion rules: how a round's views vote and which pairs join the pool.

A rule is an object with ``grow(fit, propose) -> info`` (one round) and
``finish(fit, propose) -> info or None`` (after the last round). The linker
owns the loop, the per-fit state (:class:`~crossembed.linking._fit.FitState`)
and builds each round's proposer (exact kernel, candidate lists or Dask),
which it passes in; a rule never builds one.

:class:`ValidatedPromotion`
    The default. Each round re-votes from scratch on views of a
    random ``subsample`` of the pool; a pair only collects votes in views
    where neither of its rows is an anchor (no link can vote for itself);
    held-out seeds measure the proposal precision, which sets how fast the
    pool may grow (growth pauses only on a significant drop against the
    smoothed precision of earlier rounds); after the last round a final pass
    (:mod:`crossembed.linking.final_pass`, :class:`~crossembed.linking.final_pass.DecoyPass`
    by default) decides what the pool becomes.

``posterior=False`` is the fixed-vote ablation: promote pairs
proposed by at least ``vote_fraction`` of the views instead of the
Otsu-thresholded posterior.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, check_plugin, set_checked
from crossembed._validation import check_fraction, check_int, resolve_num_threads
from crossembed.linking._fit import FitState
from crossembed.linking.final_pass import DecoyPass
from crossembed.linking.pairs import count_new, greedy_one_to_one, merge_views, positions, rank_by, row_positions
from crossembed.linking.proposers import Proposer

__all__ = ["PromotionRule", "ValidatedPromotion"]

Info = Dict[str, Any]


@dataclass(frozen=True)
class PromotionRule(Configured):
    """The interface of a GEH growth rule (module docstring): subclass it as a frozen dataclass whose
    fields are its settings; what a rule keeps across the rounds of one fit lives on the fit
    (:class:`~crossembed.linking._fit.FitState`), never on the rule."""

    #: the rule's name in the progress bar
    name = "rule"

    def grow(self, fit: FitState, propose: Proposer) -> Info:
        """Run one round: vote, then update ``fit``'s links. Returns the round's history entry."""
        raise NotImplementedError

    #: whether :meth:`finish` does anything (the linker builds no proposer for it otherwise)
    has_final_pass = False
    #: whether :meth:`finish` links every row from the pool alone (no signatures, no proposer), so
    #: the rounds may run on a sample of the rows (``GEHLinker(sample=RowSample(...))``)
    links_every_row = False

    def finish(self, fit: FitState, propose: Proposer) -> Optional[Info]:
        """After the last round; ``None`` when the rule has no final step."""
        return None


@dataclass(frozen=True, kw_only=True)
class ValidatedPromotion(PromotionRule):
    """The default growth rule (module docstring).

    Parameters
    ----------
    subsample : float
        Fraction of the pool per view (default 0.7).
    min_views : int
        Views per round at least (default 20).
    max_view_anchors : int
        Anchors per view at most; farthest-point sampling thins larger views (default 256).
    posterior : bool
        True (default): promote by the Otsu-thresholded posterior; False:
        the fixed-vote ablation (``vote_fraction`` of the views).
    vote_fraction : float
        Share of the views that must propose a pair when ``posterior=False`` (default 0.5).
    final_pass : FinalPass or None
        After the last round (:mod:`~crossembed.linking.final_pass`):
        :class:`DecoyPass` (default) links every row through scores fitted
        without its fold's anchors and keeps the links its decoys say are
        right often enough; :class:`MapPass` relinks every row through one
        ridge map fitted on the pool; None keeps the pool.
    smoothing : float
        Discount of earlier rounds in the smoothed held-out precision that a
        round's precision is tested against; growth pauses on a significant
        drop (default 0.5).
    """

    name = kind = "validated"
    subsample: float = 0.7
    min_views: int = 20
    max_view_anchors: int = 256
    posterior: bool = True
    vote_fraction: float = 0.5
    final_pass: Optional[Any] = DecoyPass()
    smoothing: float = 0.5

    def __post_init__(self):
        set_checked(
            self,
            subsample=check_fraction(self.subsample, "subsample"),
            min_views=check_int(self.min_views, "min_views", low=1),
            max_view_anchors=check_int(self.max_view_anchors, "max_view_anchors", low=2),
            posterior=bool(self.posterior),
            vote_fraction=check_fraction(self.vote_fraction, "vote_fraction"),
            smoothing=check_fraction(self.smoothing, "smoothing", allow_zero=True),
        )
        check_plugin(self.final_pass, "final_pass", ("run",), "DecoyPass() or MapPass()", optional=True)

    @property
    def has_final_pass(self) -> bool:
        return self.final_pass is not None

    @property
    def links_every_row(self) -> bool:
        return self.final_pass is not None and bool(self.final_pass.links_every_row)

    def finish(self, fit: FitState, propose: Proposer) -> Optional[Info]:
        """The ``final_pass`` (None without one or with an empty pool)."""
        if self.final_pass is None or not len(fit.links):
            return None
        return self.final_pass.run(fit, propose)

    def grow(self, fit: FitState, propose: Proposer) -> Info:
        pool = fit.pool()
        P, S = len(pool), fit.n_seeds
        geo = fit.geometry(pool)
        views, in_view = self._views(fit, geo, max(fit.schedule(P)[0], self.min_views))
        proposals = _propose_views(fit, propose, pool, views, geo, fit.view_cosines(geo, views))
        kept_pairs, kept_scores, correct, wrong = _without_seed_proposals(fit, proposals)
        uniq, mean_csls, votes = merge_views(kept_pairs, kept_scores, fit.n_b)
        est_precision = correct / (correct + wrong) if correct + wrong else 0.0
        info: Info = {
            "pool": P,
            "views": len(views),
            "anchors": int(np.median([len(view) for view in views])),
            "proposals": len(uniq),
            "holdout_precision": round(est_precision, 4),
            "holdout_recall": round(float(correct / max(1, (~in_view[:, :S]).sum())), 4),
        }
        if len(uniq) == 0:
            info.update(promoted=0, threshold=None)
            return info
        post, keep, thr = self._vote(fit, pool, in_view, uniq, votes)
        limit = len(fit.links) + self._growth(fit, correct, wrong, est_precision, P)
        new = greedy_one_to_one(
            uniq[keep],
            rank_by(post[keep], mean_csls[keep]),
            exclude_a=fit.seeds[:, 0],
            exclude_b=fit.seeds[:, 1],
            limit=limit,
        )
        info.update(threshold=float(thr), promoted=count_new(new, fit.links, fit.n_b), limit=int(limit))
        if len(new):
            idx = positions(uniq, new, fit.n_b)
            fit.set_links(new, post[idx], votes[idx])
        return info

    def _views(self, fit: FitState, geo, m: int):
        """The round's ``m`` views (pool positions) and the ``(m, P)`` mask of each view's anchors.

        Views keep a fixed fraction of the pool: shrinking them (the paper's
        ``s_t``) starves weak encoder pairs of anchors; beyond
        ``max_view_anchors`` farthest-point sampling thins the view for speed.
        """
        P = len(geo.pool)
        sub_size = max(2, math.ceil(self.subsample * P))
        size = min(sub_size, max(self.max_view_anchors, fit.n_seeds))
        views = [fit.view(geo, size, fit.rng.choice(P, size=sub_size, replace=False)) for _ in range(m)]
        in_view = np.zeros((m, P), bool)
        for v, view in enumerate(views):
            in_view[v, view] = True
        return views, in_view

    def _vote(self, fit: FitState, pool: np.ndarray, in_view: np.ndarray, uniq: np.ndarray, votes: np.ndarray):
        """Posterior means, the promotable mask and the threshold of the round's unique pairs.

        A pair's posterior counts only the views in which it could vote:
        those where neither of its rows was an anchor.
        """
        m = len(in_view)
        pa, pb = row_positions(pool[:, 0], fit.n_a)[uniq[:, 0]], row_positions(pool[:, 1], fit.n_b)[uniq[:, 1]]
        blocked = (in_view[:, np.maximum(pa, 0)] & (pa >= 0)) | (in_view[:, np.maximum(pb, 0)] & (pb >= 0))
        n_elig = m - blocked.sum(axis=0)
        post = (1.0 + votes) / (2.0 + n_elig)
        if self.posterior:
            thr = kernels.otsu_threshold(post)
            return post, (post > thr) & (votes >= 2), thr
        return post, votes >= self.vote_fraction * np.maximum(n_elig, 1), self.vote_fraction

    def _growth(self, fit: FitState, correct: int, wrong: int, est_precision: float, P: int) -> int:
        """How many links the pool may gain this round, and the held-out tally updated.

        Growth follows the measured precision: ``precision x pool`` unless
        this round's held-out precision fell significantly below the smoothed
        one of the earlier rounds; then the size is kept and links only
        swap. A running maximum instead would freeze growth for good on one
        noisy dip.
        """
        holding = _significant_drop(correct, correct + wrong, fit.holdout_hits, fit.holdout_trials)
        fit.holdout_hits = self.smoothing * fit.holdout_hits + correct
        fit.holdout_trials = self.smoothing * fit.holdout_trials + correct + wrong
        return 0 if holding else max(fit.n_seeds, math.ceil(est_precision * P))


def _without_seed_proposals(fit: FitState, proposals):
    """Each view's proposals without those touching a seed row, and the held-out seed hits and misses.

    A proposal touching a seed row is right only if it is the seed pair.
    """
    seed_pos_a = row_positions(fit.seeds[:, 0], fit.n_a)
    seed_pos_b = row_positions(fit.seeds[:, 1], fit.n_b)
    kept_pairs, kept_scores = [], []
    correct = wrong = 0
    for pairs, scores in proposals:
        sa, sb = seed_pos_a[pairs[:, 0]], seed_pos_b[pairs[:, 1]]
        touch = (sa >= 0) | (sb >= 0)
        ok = touch & (sa == sb)
        correct += int(ok.sum())
        wrong += int((touch & ~ok).sum())
        kept_pairs.append(pairs[~touch])
        kept_scores.append(scores[~touch])
    return kept_pairs, kept_scores, correct, wrong


def _propose_views(fit: FitState, propose: Proposer, pool, views, geo, cosines):
    """Each view's ``(pairs, scores)``, in view order.

    A proposer that offers a one-thread copy (:meth:`Proposer.one_thread`)
    runs the views side by side on one kernel thread each when the fit has
    more than one: its kernels are bound by memory and scale poorly, and the
    Python between them overlaps another view's kernels. The views are drawn
    before, so the result is the same either way.
    """

    def one(v: int, run: Proposer, threads: Optional[int]):
        view = views[v]
        SA, SB = fit.signatures(pool[view], geometry=geo, view=view, cosines=cosines, num_threads=threads)
        return run(SA, SB, k=fit.k, csls_k=fit.csls_k, exclude_a=pool[view, 0], exclude_b=pool[view, 1])

    workers = min(resolve_num_threads(fit.num_threads), len(views))
    single = propose.one_thread() if workers > 1 else None
    if single is None:
        return [one(v, propose, None) for v in range(len(views))]
    with ThreadPoolExecutor(workers) as pool_of_views:
        return list(pool_of_views.map(lambda v: one(v, single, 1), range(len(views))))


def _significant_drop(hits: float, trials: float, ref_hits: float, ref_trials: float, *, z: float = 2.0) -> bool:
    """Whether ``hits / trials`` is below the reference rate by more than ``z`` standard errors.

    Both rates get a Beta(1, 1) prior, so a reference of 100/100 is 0.99, not
    a certainty that any miss contradicts.
    """
    if trials <= 0 or ref_trials <= 0:
        return False
    p, q = (hits + 1) / (trials + 2), (ref_hits + 1) / (ref_trials + 2)
    se = math.sqrt(p * (1 - p) / (trials + 2) + q * (1 - q) / (ref_trials + 2))
    return q - p > z * se
