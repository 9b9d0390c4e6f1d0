"""GEH final passes: after the last round, what the pool becomes.

A final pass is an object with ``run(fit, propose) -> info`` and a class
attribute ``links_every_row`` (whether it links every row from the pool
alone, so the rounds may run on a row sample); a promotion rule
(:class:`~crossembed.linking.promotion.ValidatedPromotion`) calls it once.

:class:`DecoyPass`
    The default: the pool is rebuilt out of sample
    (:class:`~crossembed.linking.verify.CrossFitRelink`), every row is
    relinked by scores fitted without its fold's anchors, and the links kept
    are those that decoys (anchors with their partner hidden) say are right
    often enough (:mod:`crossembed.linking.decoys`).
:class:`MapPass`
    Every row relinked through one ridge map fitted on the pool
    (:mod:`crossembed.linking.refine`); the decoy pass's pass above 30,000
    rows a side, where the rows are linked within cells.
:class:`FoldPass`
    Ablation: cross-validated relinking with anchor signatures.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, check_plugin
from crossembed._validation import check_fraction, check_int, check_positive
from crossembed.linking._fit import FitState
from crossembed.linking.decoys import decoy_links
from crossembed.linking.maps import CCAMap
from crossembed.linking.pairs import contains, greedy_one_to_one, merge_views, positions, rank_by
from crossembed.linking.proposers import Proposer
from crossembed.linking.refine import map_links
from crossembed.linking.verify import CrossFitRelink

__all__ = ["DecoyPass", "FoldPass", "MapPass"]

Info = Dict[str, Any]


class MapPass(Configured):
    """Final pass: relink every row through a ridge map fitted on the pool (:func:`~crossembed.linking.refine.map_links`).

    Parameters
    ----------
    lam : float
        Ridge penalty, ``> 0`` (default 1.0).
    score_filter : bool
        Drop links whose CSLS score falls in the lower Otsu class: rows whose
        object is missing on the other side still find a mutual neighbour,
        with lower scores (default True).
    check : CrossFitCheck or None
        The no-partner decision on the pool before the map is fitted: only
        links that a map fitted without them re-finds are kept
        (:class:`~crossembed.linking.verify.CrossFitCheck`: at low overlap it
        drops most links between rows that both lack a partner, docs/linking.md);
        None (default) fits the map on the whole pool.
    probes : int
        Above 30,000 rows a side (cells): the cells of B's space each mapped
        A row is scored in, ``>= 1`` (default 8; the cost of the pass grows
        with it, docs/linking.md).
    """

    kind = "map"
    #: links every row from the pool alone, so the rounds may run on a row sample
    links_every_row = True

    def __init__(self, *, lam: float = 1.0, score_filter: bool = True, check: Optional[Any] = None, probes: int = 8):
        self.lam = check_positive(lam, "lam")
        self.probes = check_int(probes, "probes", low=1)
        self.score_filter = bool(score_filter)
        self.check = check_plugin(check, "check", ("__call__",), "CrossFitCheck()", optional=True)

    def run(self, fit: FitState, propose: Proposer) -> Info:
        """Replace ``fit``'s links by the map's; returns the pass's history entry (``propose`` is unused)."""
        links = fit.links
        anchors = fit.pool()
        if self.check is not None:
            kept = self.check(fit.A, fit.B, links, fit.seeds, fit.rng, num_threads=fit.num_threads)
            anchors = np.concatenate([fit.seeds, kept]) if len(kept) else anchors
        final, _, thr = map_links(
            fit.A,
            fit.B,
            anchors,
            exclude_a=fit.seeds[:, 0],
            exclude_b=fit.seeds[:, 1],
            lam=self.lam,
            score_filter=self.score_filter,
            cells=fit.cells,
            probes=self.probes,
            num_threads=fit.num_threads,
        )
        return _relinked(fit, final, views=1, anchors=len(anchors), final_pass="map", threshold=thr)


# DecoyPass's default pool check, scores and pass above the cells size (settings only, shared)
_RELINK, _MAP_PASS, _CCA_128 = CrossFitRelink(), MapPass(), CCAMap(n_components=128)


class DecoyPass(Configured):
    """Final pass (the default): every row linked out of sample, links kept at the best F1 whose
    precision, estimated on decoys, reaches a floor (:func:`~crossembed.linking.decoys.decoy_links`).

    Parameters
    ----------
    precision : float
        Least estimated share of right links among those kept, in (0, 1) (default 0.85).
    folds : int
        Parts of A's rows, ``>= 2``; each is linked by the scores fitted without
        its anchors, and its anchors are the decoys (default 5).
    check : CrossFitRelink, CrossFitCheck or None
        Makes the anchors out of the pool (default ``CrossFitRelink()``,
        which relinks every row out of sample until the links settle and
        recovers pools that are mostly wrong; ``CrossFitCheck(max_rounds=2)``
        only drops the links it does not re-find; docs/linking.md compares
        them); None: the whole pool. A check that keeps no link leaves no
        decoys, and the pass then keeps no link.
    scorer : CCAMap or RidgeMap
        Scores a candidate link, fitted on each fold's anchors (default
        ``CCAMap(n_components=128)``; :mod:`crossembed.linking.maps`, and
        docs/linking.md compares them).
    cells_pass : MapPass
        The pass of fits whose map pass links within cells (above 30,000
        rows a side by default), where a pass per fold would cost
        ``2 x folds`` map passes over every row (default :class:`MapPass`).
    """

    kind = "decoys"
    links_every_row = True

    def __init__(
        self,
        *,
        precision: float = 0.85,
        folds: int = 5,
        check: Optional[Any] = _RELINK,
        scorer: Any = _CCA_128,
        cells_pass: Any = _MAP_PASS,
    ):
        self.precision = check_fraction(precision, "precision")
        if self.precision >= 1.0:
            raise ValueError(f"precision must be below 1, got {precision!r}")
        self.folds = check_int(folds, "folds", low=2)
        self.check = check_plugin(check, "check", ("__call__",), "CrossFitRelink()", optional=True)
        self.scorer = check_plugin(scorer, "scorer", ("rows",), "CCAMap()")
        self.cells_pass = check_plugin(cells_pass, "cells_pass", ("run",), "MapPass()")

    def run(self, fit: FitState, propose: Proposer) -> Info:
        """Replace ``fit``'s links by the kept out-of-sample links; returns the pass's history entry."""
        if fit.cells:
            return self.cells_pass.run(fit, propose)
        links = fit.links
        anchors = links
        if self.check is not None:
            anchors = self.check(fit.A, fit.B, links, fit.seeds, fit.rng, num_threads=fit.num_threads)
        final, _, found = decoy_links(
            fit.A,
            fit.B,
            anchors,
            fit.seeds,
            fit.rng,
            precision=self.precision,
            folds=self.folds,
            scorer=self.scorer,
            num_threads=fit.num_threads,
        )
        return _relinked(
            fit,
            final,
            views=self.folds,
            anchors=len(anchors) + fit.n_seeds,
            final_pass="decoys",
            threshold=found["threshold"],
            partnered=found["partnered"],
        )


class FoldPass(Configured):
    """Final pass (ablation): cross-validated relinking with the whole pool.

    The pool links are split into ``folds`` parts; view ``f`` uses every
    anchor except part ``f`` (seeds always), so each link is judged once by
    anchors that do not contain it and must be re-proposed there to survive.
    Rows outside the pool are judged by all views and linked when a majority
    proposes the same partner.

    Parameters
    ----------
    folds : int
        Parts of the pool, ``>= 2`` (default 3).
    score_filter : bool
        As for :class:`MapPass` (default True).
    """

    kind = "folds"
    links_every_row = False

    def __init__(self, *, folds: int = 3, score_filter: bool = True):
        self.folds = check_int(folds, "folds", low=2)
        self.score_filter = bool(score_filter)

    def run(self, fit: FitState, propose: Proposer) -> Info:
        """Replace ``fit``'s links by the folds' verdict; returns the pass's history entry."""
        folds, S, links = self.folds, fit.n_seeds, fit.links
        uniq, mean_score, votes = self._propose_folds(fit, propose)
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

    def _propose_folds(self, fit: FitState, propose: Proposer):
        """Each fold's proposals with every anchor but that fold's links, merged: pairs, mean score, votes."""
        links = fit.links
        fold = fit.rng.permutation(len(links)) % self.folds
        proposals, fold_scores = [], []
        for f in range(self.folds):
            anchors = np.concatenate([fit.seeds, links[fold != f]])
            SA, SB = fit.signatures(anchors)
            pairs, scores = propose(
                SA, SB, k=fit.k, csls_k=fit.csls_k, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1]
            )
            proposals.append(pairs)
            fold_scores.append(scores)
        return merge_views(proposals, fold_scores, fit.n_b)


def _relinked(fit: FitState, final: np.ndarray, *, views: int, anchors: int, **fields) -> Info:
    """Replace ``fit``'s links by a final pass's ``final`` (a new link gets posterior 0.5 and no
    votes); returns the pass's history entry: the pool before, ``fields``, and what changed."""
    post, vts, n_confirmed = _carry_over(fit, final, np.full(len(final), 0.5))
    info: Info = {
        "pool": len(fit.links) + fit.n_seeds,
        "views": views,
        "anchors": anchors,
        "proposals": len(final),
        **fields,
        "promoted": len(final) - n_confirmed,
        "dropped": len(fit.links) - n_confirmed,
    }
    fit.set_links(final, post, vts)
    return info


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
