"""GEH final passes: after the last round, what the pool becomes.

A final pass is a :class:`FinalPass`: ``run(fit, propose) -> info`` and a
class attribute ``links_every_row`` (whether it links every row from the
pool alone, so the rounds may run on a row sample); a promotion rule
(:class:`~crossembed.linking.promotion.ValidatedPromotion`) calls it once,
and it hands its links to the fit through :func:`replace_links`.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from crossembed._config import Configured, check_plugin, set_checked
from crossembed._validation import check_fraction, check_int, check_positive
from crossembed.linking._fit import FitState
from crossembed.linking.decoys import decoy_links
from crossembed.linking.maps import CCAMap
from crossembed.linking.pairs import contains, positions
from crossembed.linking.proposers import Proposer
from crossembed.linking.refine import map_links
from crossembed.linking.verify import CrossFitRelink

__all__ = ["DecoyPass", "FinalPass", "MapPass", "replace_links"]

Info = Dict[str, Any]


@dataclass(frozen=True)
class FinalPass(Configured):
    """The interface of a final pass (module docstring): subclass it as a frozen dataclass whose fields
    are its settings, and implement :meth:`run`."""

    #: whether :meth:`run` links every row from the pool alone (no signatures, no proposer), so the
    #: rounds may run on a row sample (``GEHLinker(sample=RowSample(...))``)
    links_every_row = False

    def run(self, fit: FitState, propose: Proposer) -> Info:
        """Replace ``fit``'s links (:func:`replace_links`); returns the pass's history entry. ``propose``
        (the last round's proposer, built on first use) scores views of signatures, for a pass that
        proposes."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class MapPass(FinalPass):
    """Final pass: relink every row through a ridge map fitted on the pool (:func:`~crossembed.linking.refine.map_links`).

    Parameters
    ----------
    lam : float
        Ridge penalty, ``> 0`` (default 1.0).
    score_filter : bool
        Drop links whose CSLS score falls in the lower Otsu class: rows whose
        object is missing on the other side still find a mutual neighbour,
        with lower scores (default True).
    probes : int
        Above 30,000 rows a side (cells): the cells of B's space each mapped
        A row is scored in, ``>= 1`` (default 8; the cost of the pass grows
        with it).
    copies : int
        With cells: the most cells a B row sits in, ``>= 1`` (default 1:
        its nearest cell only). More reach partners across a cell's border,
        for as many more pairs scored as more probes would need.
    margin : float
        With cells and ``copies > 1``: a B row also sits in its next nearest
        cells whose cosine to it is at least the nearest's minus ``margin``,
        in ``[0, 2]`` (default 0.02, which copies about 3 rows in 10; 2:
        always ``copies`` cells).
    """

    kind = "map"
    links_every_row = True
    lam: float = 1.0
    score_filter: bool = True
    probes: int = 8
    copies: int = 1
    margin: float = 0.02

    def __post_init__(self):
        margin = check_positive(self.margin, "margin", allow_zero=True)
        if margin > 2:
            raise ValueError(f"margin must be in [0, 2] (a difference of cosines), got {margin}")
        set_checked(
            self,
            lam=check_positive(self.lam, "lam"),
            score_filter=bool(self.score_filter),
            probes=check_int(self.probes, "probes", low=1),
            copies=check_int(self.copies, "copies", low=1),
            margin=margin,
        )

    def run(self, fit: FitState, propose: Proposer) -> Info:
        """Replace ``fit``'s links by those of the map fitted on the pool; returns the pass's history
        entry (``propose`` is unused)."""
        return self.relink(fit, fit.pool())

    def relink(self, fit: FitState, anchors: np.ndarray) -> Info:
        """Replace ``fit``'s links by those of the map fitted on the pairs ``anchors`` (seeds included);
        returns the pass's history entry."""
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
            copies=self.copies,
            margin=self.margin,
            num_threads=fit.num_threads,
        )
        return replace_links(fit, final, views=1, anchors=len(anchors), final_pass="map", threshold=thr)


@dataclass(frozen=True, kw_only=True)
class DecoyPass(FinalPass):
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
        only drops the links it does not re-find); None: the whole pool. A check that keeps no link leaves no
        decoys, and the pass then keeps no link.
    scorer : CCAMap or RidgeMap
        Scores a candidate link, fitted on each fold's anchors (default
        ``CCAMap(n_components=128)``; :mod:`crossembed.linking.maps`).
    cells_pass : MapPass
        The pass of fits whose map pass links within cells (above 30,000
        rows a side by default), where a pass per fold would cost
        ``2 x folds`` map passes over every row (default :class:`MapPass`).
    """

    kind = "decoys"
    links_every_row = True
    precision: float = 0.85
    folds: int = 5
    check: Optional[Any] = CrossFitRelink()
    scorer: Any = CCAMap(n_components=128)
    cells_pass: Any = MapPass()

    def __post_init__(self):
        precision = check_fraction(self.precision, "precision")
        if precision >= 1.0:
            raise ValueError(f"precision must be below 1, got {self.precision!r}")
        set_checked(self, precision=precision, folds=check_int(self.folds, "folds", low=2))
        check_plugin(self.check, "check", ("__call__",), "CrossFitRelink()", optional=True)
        check_plugin(self.scorer, "scorer", ("rows",), "CCAMap()")
        check_plugin(self.cells_pass, "cells_pass", ("run",), "MapPass()")

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
        return replace_links(
            fit,
            final,
            views=self.folds,
            anchors=len(anchors) + fit.n_seeds,
            final_pass="decoys",
            threshold=found["threshold"],
            partnered=found["partnered"],
        )


def replace_links(fit: FitState, final: np.ndarray, *, views: int, anchors: int, new_post=0.5, **fields) -> Info:
    """Replace ``fit``'s links by a final pass's links ``final`` and return the pass's history entry.

    A link already in the pool keeps its round posterior and votes; a new one
    gets ``new_post`` (one number, or one per link of ``final``) and no votes.
    The entry holds the pool before (``pool``), ``views``, ``anchors``,
    ``proposals`` (``len(final)`` unless ``fields`` gives it), ``fields``, and
    the links ``promoted`` (new) and ``dropped``.
    """
    confirmed = contains(fit.links, final, fit.n_b)
    at_link = positions(fit.links, final[confirmed], fit.n_b)
    post = np.broadcast_to(np.asarray(new_post, np.float64), (len(final),)).copy()
    post[confirmed] = fit.link_post[at_link]
    votes = np.zeros(len(final), np.int64)
    votes[confirmed] = fit.link_votes[at_link]
    n_confirmed = int(confirmed.sum())
    info: Info = {
        "pool": len(fit.links) + fit.n_seeds,
        "views": views,
        "anchors": anchors,
        "proposals": len(final),
        **fields,
        "promoted": len(final) - n_confirmed,
        "dropped": len(fit.links) - n_confirmed,
    }
    fit.set_links(final, post, votes)
    return info
