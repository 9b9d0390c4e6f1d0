"""GEH promotion rules: how a round's views vote and which pairs join the pool.

A rule is an object with ``grow(fit, propose) -> info`` (one round) and
``finish(fit, propose) -> info or None`` (after the last round). The linker
owns the loop, the per-fit state (:class:`~crossembed.linking._fit.FitState`)
and builds each round's proposer (exact kernel, candidate lists, ANN or
Dask), which it passes in; a rule never builds one.

:class:`PaperPromotion`
    The paper as written: all anchors in every view while the pool has
    < ``small_pool``, cumulative votes, Otsu threshold on posterior means
    (values on the threshold count as above, so identical votes promote
    everything - the round-0 collapse SPEC measured), greedy one-to-one.
:class:`CappedPromotion`
    SPEC's robust variant: views of ``subsample`` of the anchors (>=
    ``min_views`` views) while the pool is small, and at most as many new
    links per round as the pool holds, ranked by posterior then CSLS.
:class:`ValidatedPromotion`
    Ours (docs/linking.md). Each round re-votes from scratch on views of a
    random ``subsample`` of the pool; a pair only collects votes in views
    where neither of its rows is an anchor (no link can vote for itself);
    held-out seeds measure the proposal precision, which sets how fast the
    pool may grow (growth pauses only on a significant drop against the
    smoothed precision of earlier rounds); a final pass relinks every row
    through a ridge map fitted on the pool (:mod:`crossembed.linking.refine`).

``posterior=False`` (every rule) is the fixed-vote ablation: promote pairs
proposed by at least ``vote_fraction`` of the views instead of the
Otsu-thresholded posterior.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Optional, Union

import numpy as np

from crossembed import kernels
from crossembed._validation import check_choice, check_fraction, check_int, check_positive, resolve_num_threads
from crossembed.linking._fit import FitState
from crossembed.linking.pairs import contains, count_new, greedy_one_to_one, merge_views, positions, rank_by
from crossembed.linking.proposers import PoolProposer, Proposer
from crossembed.linking.refine import map_links

__all__ = [
    "PROMOTIONS",
    "CappedPromotion",
    "PaperPromotion",
    "PromotionRule",
    "ValidatedPromotion",
    "make_rule",
    "rule_class",
]

Info = Dict[str, Any]

#: the final passes of :class:`ValidatedPromotion`
FINAL_PASSES = ("map", "folds", "none")


class PromotionRule:
    """Interface of a GEH growth rule (see the module docstring)."""

    name = "rule"

    def grow(self, fit: FitState, propose: Proposer) -> Info:
        """Run one round: vote, then update ``fit``'s links. Returns the round's history entry."""
        raise NotImplementedError

    #: whether :meth:`finish` does anything (the linker builds no proposer for it otherwise)
    has_final_pass = False
    #: whether :meth:`finish` links every row from the pool alone (no signatures, no proposer), so
    #: the rounds may run on a sample of the rows (``GEHLinker(sample_rows=...)``)
    links_every_row = False

    def finish(self, fit: FitState, propose: Proposer) -> Optional[Info]:
        """After the last round; ``None`` when the rule has no final step."""
        return None

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({opts})"


class PaperPromotion(PromotionRule):
    """The paper's rule (module docstring).

    Parameters
    ----------
    small_pool : int
        Below this pool size every view uses every anchor.
    posterior : bool
        ``False``: the fixed-vote ablation (``vote_fraction`` of the views).
    vote_fraction : float
    """

    name = "paper"
    _capped = False

    def __init__(self, *, small_pool: int = 50, posterior: bool = True, vote_fraction: float = 0.5):
        self.small_pool = check_int(small_pool, "small_pool", low=1)
        self.posterior = bool(posterior)
        self.vote_fraction = check_fraction(vote_fraction, "vote_fraction")

    def _views(self, fit: FitState, pool: np.ndarray):
        """The round's anchor positions per view (the paper: all anchors while the pool is small)."""
        P, S = len(pool), fit.n_seeds
        m, size = fit.schedule(P)
        if P < self.small_pool:
            for _ in range(m):
                yield np.arange(P)
        else:
            geo = fit.geometry(pool)
            for _ in range(m):  # FPS view, seeds always kept
                yield np.union1d(fit.view(geo, size), np.arange(S))

    def grow(self, fit: FitState, propose: Proposer) -> Info:
        pool = fit.pool()
        P = len(pool)
        round_pairs, round_scores, sizes = [], [], []
        for view in self._views(fit, pool):
            sizes.append(len(view))
            SA, SB = fit.signatures(pool[view])
            pairs, scores = propose(
                SA, SB, k=fit.k, csls_k=fit.csls_k, exclude_a=fit.seeds[:, 0], exclude_b=fit.seeds[:, 1]
            )
            fit.table.add(pairs)
            round_pairs.append(pairs)
            round_scores.append(scores)
        m = len(sizes)
        uniq, mean_csls, round_votes = merge_views(round_pairs, round_scores, fit.n_b)
        info: Info = {"pool": P, "views": m, "anchors": int(np.median(sizes)), "proposals": len(uniq)}
        if len(uniq) == 0:
            info.update(promoted=0, threshold=None)
            return info
        post = fit.table.posterior_mean(uniq)
        if self.posterior:
            thr = kernels.otsu_threshold(post)
            keep = post > thr if self._capped else post >= thr
            if self._capped and not keep.any():  # all equal: nothing separates
                keep = post >= thr
        else:
            thr = self.vote_fraction * m
            keep = round_votes >= thr
        cand, cpost, ccsls = uniq[keep], post[keep], mean_csls[keep]
        ex_a, ex_b = fit.seeds[:, 0], fit.seeds[:, 1]
        if self._capped:
            new = greedy_one_to_one(
                cand, rank_by(cpost, ccsls), exclude_a=ex_a, exclude_b=ex_b, limit=len(fit.links) + P
            )
        else:
            new = greedy_one_to_one(cand, cpost, exclude_a=ex_a, exclude_b=ex_b)
        info.update(threshold=float(thr), promoted=count_new(new, fit.links, fit.n_b))
        if len(new):
            fit.set_links(new, fit.table.posterior_mean(new), fit.table.votes(new))
        return info


class CappedPromotion(PaperPromotion):
    """SPEC's capped rule (module docstring).

    Parameters
    ----------
    small_pool : int
        Below this pool size views are random ``subsample`` subsets.
    subsample : float
        Fraction of the pool per view while the pool is small.
    min_views : int
        Views per round at least while the pool is small.
    posterior, vote_fraction
        As for :class:`PaperPromotion`.
    """

    name = "capped"
    _capped = True

    def __init__(
        self,
        *,
        small_pool: int = 50,
        subsample: float = 0.7,
        min_views: int = 20,
        posterior: bool = True,
        vote_fraction: float = 0.5,
    ):
        super().__init__(small_pool=small_pool, posterior=posterior, vote_fraction=vote_fraction)
        self.subsample = check_fraction(subsample, "subsample")
        self.min_views = check_int(min_views, "min_views", low=1)

    def _views(self, fit: FitState, pool: np.ndarray):
        P = len(pool)
        if P >= self.small_pool:
            yield from super()._views(fit, pool)
            return
        m, _ = fit.schedule(P)
        subset_size = max(2, math.ceil(self.subsample * P))
        geo = fit.geometry(pool)
        for _ in range(max(m, self.min_views)):
            sub = fit.rng.choice(P, size=subset_size, replace=False)
            yield fit.view(geo, subset_size, sub)


class ValidatedPromotion(PromotionRule):
    """Our default rule (module docstring).

    Parameters
    ----------
    subsample : float
        Fraction of the pool per view.
    min_views : int
        Views per round at least.
    max_view_anchors : int
        Anchors per view at most (farthest-point sampling thins larger views).
    posterior, vote_fraction
        As for :class:`PaperPromotion`.
    final_pass : {"map", "folds", "none"} or bool
        After the last round: ``"map"`` (default, ``True``) relinks every row
        through a ridge map fitted on the pool
        (:func:`~crossembed.linking.refine.map_links`); ``"folds"`` is the
        earlier cross-validated relinking with signatures (:meth:`finish`);
        ``"none"`` (``False``) keeps the pool.
    score_filter : bool
        In the final pass drop links whose CSLS score falls in the lower Otsu
        class (rows whose object is missing on the other side still find a
        mutual neighbour, with lower scores).
    folds : int
        Folds of the ``"folds"`` final pass.
    map_lam : float
        Ridge penalty of the ``"map"`` final pass.
    decoy_fraction : float
        Fraction of each view's held-out pool pairs used as decoys: their B
        row is hidden, so what their A row is proposed with is a false link
        of a row without a partner; ``0`` (default) turns the null off.
    fdr : float
        Target false-discovery rate of a view's proposals under the decoy
        null: proposals scoring below the threshold it sets cast no vote.
    smoothing : float
        Discount of earlier rounds in the smoothed held-out precision that a
        round's precision is tested against (growth pauses on a significant drop).
    """

    name = "validated"

    def __init__(
        self,
        *,
        subsample: float = 0.7,
        min_views: int = 20,
        max_view_anchors: int = 256,
        posterior: bool = True,
        vote_fraction: float = 0.5,
        final_pass: Union[str, bool] = "map",
        score_filter: bool = True,
        folds: int = 3,
        map_lam: float = 1.0,
        smoothing: float = 0.5,
        decoy_fraction: float = 0.0,
        fdr: float = 0.1,
    ):
        self.decoy_fraction = check_fraction(decoy_fraction, "decoy_fraction", allow_zero=True)
        self.fdr = check_fraction(fdr, "fdr")
        self.smoothing = check_fraction(smoothing, "smoothing", allow_zero=True)
        self.subsample = check_fraction(subsample, "subsample")
        self.min_views = check_int(min_views, "min_views", low=1)
        self.max_view_anchors = check_int(max_view_anchors, "max_view_anchors", low=2)
        self.posterior = bool(posterior)
        self.vote_fraction = check_fraction(vote_fraction, "vote_fraction")
        if isinstance(final_pass, (bool, np.bool_)):
            final_pass = "map" if final_pass else "none"
        self.final_pass = check_choice(final_pass, "final_pass", FINAL_PASSES)
        self.map_lam = check_positive(map_lam, "map_lam")
        self.score_filter = bool(score_filter)
        self.folds = check_int(folds, "folds", low=2)

    def grow(self, fit: FitState, propose: Proposer) -> Info:
        pool = fit.pool()
        P, S = len(pool), fit.n_seeds
        m, _ = fit.schedule(P)
        m = max(m, self.min_views)
        # views keep a fixed fraction of the pool: shrinking them (the paper's s_t) starves weak
        # encoder pairs of anchors; beyond max_view_anchors FPS thins the view for speed
        sub_size = max(2, math.ceil(self.subsample * P))
        size = min(sub_size, max(self.max_view_anchors, S))
        in_view = np.zeros((m, P), bool)
        decoy = np.zeros((m, P), bool)
        kept_pairs, kept_scores, sizes, decoy_scores = [], [], [], []
        correct = wrong = n_trials = 0
        seed_pos_a = _positions_of(fit.seeds[:, 0], fit.n_a)
        seed_pos_b = _positions_of(fit.seeds[:, 1], fit.n_b)
        pos_a, pos_b = _positions_of(pool[:, 0], fit.n_a), _positions_of(pool[:, 1], fit.n_b)
        geo = fit.geometry(pool)
        views = []
        for v in range(m):
            sub = fit.rng.choice(P, size=sub_size, replace=False)
            view = fit.view(geo, size, sub)
            views.append(view)
            in_view[v, view] = True
            sizes.append(len(view))
            # decoys: held-out pool pairs whose B row is hidden, so their A row is an object with
            # no partner - exactly what 70% of the rows are at alpha 0.3, and what held-out seeds
            # (always present on both sides) cannot show. What they are proposed with is the null.
            # Off by default: at 10k objects the early pools were already mostly false links that
            # the few decoy trials could not see, and later the null emptied the pool (docs/linking.md).
            if self.decoy_fraction > 0:
                out = np.flatnonzero(~in_view[v])
                decoy[v, out[fit.rng.random(len(out)) < self.decoy_fraction]] = True
        cosines = fit.view_cosines(geo, views)
        exclude_b = [np.concatenate([pool[view, 1], pool[decoy[v], 1]]) for v, view in enumerate(views)]
        proposals = _propose_views(fit, propose, pool, views, exclude_b, geo, cosines)
        for v, (pairs, scores) in enumerate(proposals):
            at = pos_a[pairs[:, 0]]
            hit = (at >= 0) & decoy[v, np.maximum(at, 0)]
            decoy_scores.append(scores[hit])
            n_trials += int(decoy[v].sum())
            # held-out seeds: a proposal touching a seed row is right only if it is the seed pair
            sa, sb = seed_pos_a[pairs[:, 0]], seed_pos_b[pairs[:, 1]]
            touch = ((sa >= 0) | (sb >= 0)) & ~hit
            ok = touch & (sa == sb)
            correct += int(ok.sum())
            wrong += int((touch & ~ok).sum())
            keep = ~touch & ~hit
            kept_pairs.append(pairs[keep])
            kept_scores.append(scores[keep])
        null_thr = _null_threshold(
            kept_scores, np.concatenate(decoy_scores), n_trials, fit.n_a - float(np.mean(sizes)), self.fdr
        )
        for v in range(m):
            keep_v = kept_scores[v] >= null_thr
            kept_pairs[v], kept_scores[v] = kept_pairs[v][keep_v], kept_scores[v][keep_v]
        uniq, mean_csls, votes = merge_views(kept_pairs, kept_scores, fit.n_b)
        est_precision = correct / (correct + wrong) if correct + wrong else 0.0
        out_of_play = in_view | decoy
        info: Info = {
            "pool": P,
            "views": m,
            "anchors": int(np.median(sizes)),
            "proposals": len(uniq),
            "holdout_precision": round(est_precision, 4),
            "holdout_recall": round(float(correct / max(1, (~out_of_play[:, :S]).sum())), 4),
            "null_threshold": float(null_thr),
            "decoy_rate": round(sum(map(len, decoy_scores)) / max(n_trials, 1), 4),
        }
        if len(uniq) == 0:
            info.update(promoted=0, threshold=None)
            return info
        # views in which a pair could vote: neither of its rows was an anchor or a decoy there
        pa, pb = pos_a[uniq[:, 0]], pos_b[uniq[:, 1]]
        blocked = (out_of_play[:, np.maximum(pa, 0)] & (pa >= 0)) | (out_of_play[:, np.maximum(pb, 0)] & (pb >= 0))
        n_elig = m - blocked.sum(axis=0)
        post = (1.0 + votes) / (2.0 + n_elig)
        if self.posterior:
            thr = kernels.otsu_threshold(post)
            keep = (post > thr) & (votes >= 2)
        else:
            thr = self.vote_fraction
            keep = votes >= self.vote_fraction * np.maximum(n_elig, 1)
        # growth follows the measured precision: grow by (precision x pool) unless this round's
        # held-out precision fell significantly below the smoothed one of the earlier rounds; then
        # keep the size and only re-rank (swap links). Comparing with the running maximum instead
        # froze growth for good on one noisy dip (1.0 -> 0.96 at 6k objects).
        holding = _significant_drop(correct, correct + wrong, fit.holdout_hits, fit.holdout_trials)
        fit.holdout_hits = self.smoothing * fit.holdout_hits + correct
        fit.holdout_trials = self.smoothing * fit.holdout_trials + correct + wrong
        limit = len(fit.links) + (0 if holding else max(S, math.ceil(est_precision * P)))
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

    @property
    def has_final_pass(self) -> bool:
        return self.final_pass != "none"

    @property
    def links_every_row(self) -> bool:
        return self.final_pass == "map"

    def finish(self, fit: FitState, propose: Proposer) -> Optional[Info]:
        """The final pass chosen by ``final_pass`` (None for ``"none"`` or an empty pool)."""
        if self.final_pass == "none" or not len(fit.links):
            return None
        if self.final_pass == "map":
            return self._map_pass(fit)
        return self._fold_pass(fit, propose)

    def _map_pass(self, fit: FitState) -> Info:
        """Relink every row through a ridge map fitted on the pool (:mod:`crossembed.linking.refine`)."""
        links = fit.links
        final, _, thr = map_links(
            fit.A,
            fit.B,
            fit.pool(),
            exclude_a=fit.seeds[:, 0],
            exclude_b=fit.seeds[:, 1],
            lam=self.map_lam,
            score_filter=self.score_filter,
            cells=fit.cells,
            num_threads=fit.num_threads,
        )
        post, vts, n_confirmed = _carry_over(fit, final, np.full(len(final), 0.5))  # new links: no votes
        info: Info = {
            "pool": len(links) + fit.n_seeds,
            "views": 1,
            "anchors": len(links) + fit.n_seeds,
            "proposals": len(final),
            "final_pass": "map",
            "threshold": thr,
            "promoted": len(final) - n_confirmed,
            "dropped": len(links) - n_confirmed,
        }
        fit.set_links(final, post, vts)
        return info

    def _fold_pass(self, fit: FitState, propose: Proposer) -> Info:
        """Cross-validated relinking with the whole pool.

        The pool links are split into ``folds`` parts; view ``f`` uses every
        anchor except part ``f`` (seeds always), so each link is judged once
        by anchors that do not contain it and must be re-proposed there to
        survive. Rows outside the pool are judged by all views and linked
        when a majority proposes the same partner.
        """
        folds, S, links = self.folds, fit.n_seeds, fit.links
        fold = fit.rng.permutation(len(links)) % folds
        proposals, fold_scores = [], []
        for f in range(folds):
            anchors = np.concatenate([fit.seeds, links[fold != f]])
            SA, SB = fit.signatures(anchors)
            pairs, scores = propose(
                SA, SB, k=fit.k, csls_k=fit.csls_k, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1]
            )
            proposals.append(pairs)
            fold_scores.append(scores)
        uniq, mean_score, votes = merge_views(proposals, fold_scores, fit.n_b)
        touches_pool = np.isin(uniq[:, 0], links[:, 0]) | np.isin(uniq[:, 1], links[:, 1])
        is_link = contains(links, uniq, fit.n_b)
        keep = np.where(touches_pool, is_link, votes * 2 > folds)
        # rows without a partner on the other side still find a mutual neighbour; their CSLS
        # scores sit in a lower mode, which Otsu separates when the overlap is partial
        thr = kernels.otsu_threshold(mean_score[keep]) if keep.sum() > 1 and self.score_filter else -np.inf
        keep &= mean_score > thr
        # confirmed pool links first, then new majority pairs; greedy keeps it one-to-one
        rank = rank_by(is_link[keep].astype(np.float64), votes[keep].astype(np.float64))
        final = greedy_one_to_one(uniq[keep], rank, exclude_a=fit.seeds[:, 0], exclude_b=fit.seeds[:, 1])
        # a new link gets its fold share as posterior
        post, vts, n_confirmed = _carry_over(fit, final, votes[positions(uniq, final, fit.n_b)] / folds)
        info: Info = {
            "pool": len(links) + S,
            "views": folds,
            "anchors": int(len(links) * (folds - 1) / folds) + S,
            "proposals": len(uniq),
            "final_pass": "folds",
            "threshold": float(thr),
            "promoted": len(final) - n_confirmed,
            "dropped": len(links) - n_confirmed,
        }
        fit.set_links(final, post, vts)
        return info


def _propose_views(fit: FitState, propose: Proposer, pool, views, exclude_b, geo, cosines):
    """Each view's ``(pairs, scores)``, in view order.

    Over the pool path's candidate lists, with more than one thread, the views
    run side by side on one kernel thread each: a view's kernels are bound by
    memory and scale poorly on two threads (the CSLS of 6,500 x 64 lists: 44 ms
    on one, 25 ms on two), and the Python between them overlaps another view's
    kernels. The views are drawn before, so the result is the same either way.
    """
    pool_path = isinstance(propose, PoolProposer)

    def one(v: int, run: Proposer, threads: Optional[int]):
        view = views[v]
        SA, SB = fit.signatures(pool[view], geometry=geo, view=view, cosines=cosines, num_threads=threads)
        return run(SA, SB, k=fit.k, csls_k=fit.csls_k, exclude_a=pool[view, 0], exclude_b=exclude_b[v])

    workers = min(resolve_num_threads(fit.num_threads), len(views)) if pool_path else 1
    if workers <= 1:
        return [one(v, propose, None) for v in range(len(views))]
    propose.checked_lists(fit.n_a, fit.n_b)  # once per lists (rounds reuse them), before the views share them
    single = propose.with_threads(1)
    with ThreadPoolExecutor(workers) as pool_of_views:
        return list(pool_of_views.map(lambda v: one(v, single, 1), range(len(views))))


def _carry_over(fit: FitState, final: np.ndarray, new_post: np.ndarray):
    """Posteriors, votes and the confirmed count of a final pass's links ``final``.

    A link already in the pool keeps its round posterior and votes; a new one
    gets ``new_post`` and no votes.
    """
    confirmed = contains(fit.links, final, fit.n_b)
    at_link = positions(fit.links, final[confirmed], fit.n_b)
    post = np.asarray(new_post, np.float64).copy()
    post[confirmed] = fit.link_post[at_link]
    votes = np.zeros(len(final), np.int64)
    votes[confirmed] = fit.link_votes[at_link]
    return post, votes, int(confirmed.sum())


def _null_threshold(view_scores, decoy_scores: np.ndarray, n_trials: int, n_rows: float, fdr: float) -> float:
    """The lowest per-view score whose estimated false-discovery rate is at most ``fdr``.

    At threshold ``t`` a view proposes ``N(t)`` pairs on average (over
    ``view_scores``, one array per view); a row without a partner is proposed
    at ``>= t`` with the decoys' rate ``#(decoy_scores >= t) / n_trials``, so
    the ``n_rows`` active rows (all taken as partnerless: the conservative
    pi_0 = 1) give ``n_rows * rate(t)`` false ones. Returns -inf without
    decoy trials (nothing to estimate from) and +inf when no threshold passes.
    """
    if n_trials == 0:
        return -np.inf
    scores = np.sort(np.concatenate(view_scores))[::-1] if len(view_scores) else np.zeros(0)
    if len(scores) == 0:
        return np.inf
    decoys = np.sort(np.asarray(decoy_scores, np.float64))
    n_at = np.arange(1, len(scores) + 1) / len(view_scores)  # proposals per view at >= scores[i]
    false_at = n_rows * (len(decoys) - np.searchsorted(decoys, scores, side="left")) / n_trials
    ok = np.flatnonzero(false_at <= fdr * n_at)
    return float(scores[ok[-1]]) if len(ok) else np.inf


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


def _positions_of(rows: np.ndarray, n: int) -> np.ndarray:
    """``pos[row] = index of row in rows``, -1 for rows not listed."""
    pos = np.full(n, -1, np.int64)
    pos[rows] = np.arange(len(rows))
    return pos


_RULES = {"paper": PaperPromotion, "capped": CappedPromotion, "validated": ValidatedPromotion}
PROMOTIONS = tuple(_RULES)


def rule_class(name: str) -> type:
    """The rule class called ``name`` (``"paper"``, ``"capped"``, ``"validated"``)."""
    if not isinstance(name, str):
        raise TypeError(f"promotion must be a rule name or a PromotionRule, got {type(name).__name__}")
    return _RULES[check_choice(name, "promotion", PROMOTIONS)]


def make_rule(promotion: Union[str, PromotionRule]) -> PromotionRule:
    """A rule object from its name (with the rule's defaults) or the object itself."""
    return promotion if isinstance(promotion, PromotionRule) else rule_class(promotion)()
