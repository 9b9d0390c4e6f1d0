"""Candidate sources: which pairs a GEH fit's views score, as ``GEHLinker(candidates=...)``.

A candidate source gives each fit its per-round proposers
(:meth:`CandidateSource.for_fit`): a callable the fit calls once per round
(and once more for a final pass that proposes), returning that round's
:class:`~crossembed.linking.proposers.Proposer`.

:class:`ExactCandidates`
    Every view scores all N_A x N_B pairs (C++ tiled top-k).
:class:`PoolCandidates`
    Once per round each row gets its ``k`` nearest rows on the other side
    by signatures against (up to ``anchors`` of) the whole pool, each
    anchor's own column left out; every view scores only those pairs.
:class:`CellCandidates`
    The same lists restricted to pairs whose rows share one of their
    nearest list anchors (:mod:`crossembed.linking.cells`); the map pass
    links over such lists too.
:class:`AutoCandidates` (the default)
    Exact, pool or cells by the fit's size.

:class:`crossembed.distributed.DaskCandidates` (the pool path with B
sharded over Dask workers) and
:class:`crossembed.distributed.DaskExactCandidates` (the exact path,
sharded) give the same links as their local twins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, check_plugin, set_checked
from crossembed._validation import check_fraction, check_int
from crossembed.linking._fit import FitState
from crossembed.linking.cells import CELLS_PER_ROW, cell_candidate_lists, pad_lists, top_cells
from crossembed.linking.preprocess import unit_rows
from crossembed.linking.proposers import ExactProposer, PoolProposer, Proposer, pool_candidate_lists
from crossembed.linking.stopping import turnover

__all__ = [
    "AutoCandidates",
    "CandidateSource",
    "CellCandidates",
    "ExactCandidates",
    "PoolCandidates",
    "RoundProposers",
    "check_source",
    "lists_still_serve",
    "without_own_anchor",
]

#: called once per round with the fit, returns that round's proposer
RoundProposers = Callable[[FitState], Proposer]


@dataclass(frozen=True)
class CandidateSource(Configured):
    """The interface of a candidate source (see the module docstring): subclass it as a frozen
    dataclass (its fields are its settings; a fit's state lives in what :meth:`for_fit` returns)."""

    def for_fit(self, fit: FitState, *, every_row: bool) -> RoundProposers:
        """The per-round proposers of one fit; ``every_row=False`` when its rounds run on a row sample."""
        raise NotImplementedError

    def map_cells(self, n_a: int, n_b: int) -> bool:
        """Whether a final map pass over N_A x N_B rows links within cells (default False)."""
        return False


@dataclass(frozen=True)
class ExactCandidates(CandidateSource):
    """Every view scores all N_A x N_B pairs (:class:`~crossembed.linking.proposers.ExactProposer`)."""

    kind = "exact"

    def for_fit(self, fit: FitState, *, every_row: bool) -> RoundProposers:
        proposer = ExactProposer(num_threads=fit.num_threads)  # one for every round
        return lambda _fit: proposer


@dataclass(frozen=True, kw_only=True)
class PoolCandidates(CandidateSource):
    """Per-round candidate lists from signatures against the whole pool.

    Subclasses change where the lists are built (:meth:`candidate_lists`)
    and what scores a view over them (:meth:`lists_proposer`).

    Parameters
    ----------
    k : int
        Candidates per row (default 64).
    anchors : int
        Most pool anchors (a random subset) the lists' signatures use, ``>= 2`` (default 512).
    refresh : float
        The lists are rebuilt once more than this share of the pool they
        came from has changed, or the pool has grown by more (default 0.1).
        When the rounds run on every row, the lists also serve the round
        after they were built while the pool has grown by at most this,
        however many of its pairs were swapped.
    """

    kind = "pool"
    k: int = 64
    anchors: int = 512
    refresh: float = 0.1

    def __post_init__(self):
        set_checked(
            self,
            k=check_int(self.k, "k", low=1),
            anchors=check_int(self.anchors, "anchors", low=2),
            refresh=check_fraction(self.refresh, "refresh", allow_zero=True),
        )

    def candidate_lists(self, SA, SB, m: int, *, num_threads=None) -> Tuple[np.ndarray, np.ndarray]:
        """``(cand_a, cand_b)``: each row's ``m`` best rows on the other side (:func:`pool_candidate_lists`)."""
        return pool_candidate_lists(SA, SB, m, num_threads=num_threads)

    def lists_proposer(self, cand_a, cand_b, *, num_threads=None) -> Proposer:
        """The per-view proposer over one round's lists (:class:`~crossembed.linking.proposers.PoolProposer`)."""
        return PoolProposer(cand_a, cand_b, num_threads=num_threads)

    def for_fit(self, fit: FitState, *, every_row: bool) -> RoundProposers:
        return _ListRounds(self, 1 if every_row else 0)


@dataclass(frozen=True, kw_only=True)
class CellCandidates(PoolCandidates):
    """Pool lists among rows sharing one of their ``cells_per_row`` nearest list anchors.

    A row's nearest anchors are its largest signature entries, so the cells
    cost nothing beyond the signatures. While the anchors are few (the first
    rounds) the exact lists are built instead
    (:func:`~crossembed.linking.cells.cell_candidate_lists`). A final map
    pass links within cells too, its own in B's space (:mod:`~crossembed.linking.mapcells`).

    Parameters
    ----------
    cells_per_row : int
        The cells each row belongs to (default 4).
    k, anchors, refresh
        As for :class:`PoolCandidates`.
    """

    kind = "cells"
    cells_per_row: int = CELLS_PER_ROW

    def __post_init__(self):
        super().__post_init__()
        set_checked(self, cells_per_row=check_int(self.cells_per_row, "cells_per_row", low=1))

    def candidate_lists(self, SA, SB, m: int, *, num_threads=None) -> Tuple[np.ndarray, np.ndarray]:
        r, n_cells = self.cells_per_row, np.shape(SA)[1]
        return cell_candidate_lists(
            SA, SB, top_cells(SA, r), top_cells(SB, r), m, n_cells=n_cells, num_threads=num_threads
        )

    def map_cells(self, n_a: int, n_b: int) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class AutoCandidates(CandidateSource):
    """``exact`` up to ``pool_above`` row pairs (N_A x N_B), ``pool`` up to ``cells_above``, ``cells`` above.

    Parameters
    ----------
    exact, pool, cells : CandidateSource
        The sources per size (defaults :class:`ExactCandidates`,
        :class:`PoolCandidates`, :class:`CellCandidates` with their defaults).
    pool_above : int
        Row pairs above which ``pool`` is used (default 4,000,000: 2,000 rows a side).
    cells_above : int
        Row pairs above which ``cells`` is used (default 900,000,000: 30,000 rows a side).
    """

    kind = "auto"
    exact: CandidateSource = ExactCandidates()
    pool: CandidateSource = PoolCandidates()
    cells: CandidateSource = CellCandidates()
    pool_above: int = 4_000_000
    cells_above: int = 900_000_000

    def __post_init__(self):
        for name in ("exact", "pool", "cells"):
            check_source(getattr(self, name), name)
        set_checked(
            self,
            pool_above=check_int(self.pool_above, "pool_above", low=0),
            cells_above=check_int(self.cells_above, "cells_above", low=0),
        )

    def choose(self, n_a: int, n_b: int) -> CandidateSource:
        """The source used for a fit of N_A x N_B rows."""
        if n_a * n_b > self.cells_above:
            return self.cells
        return self.pool if n_a * n_b > self.pool_above else self.exact

    def for_fit(self, fit: FitState, *, every_row: bool) -> RoundProposers:
        return self.choose(fit.n_a, fit.n_b).for_fit(fit, every_row=every_row)

    def map_cells(self, n_a: int, n_b: int) -> bool:
        return self.choose(n_a, n_b).map_cells(n_a, n_b)


def check_source(source, name: str = "candidates"):
    """``source`` if it has the methods of a :class:`CandidateSource`, else ``TypeError`` naming ``name``."""
    return check_plugin(source, name, ("for_fit", "map_cells"), "AutoCandidates() or PoolCandidates(k=64)")


class _ListRounds:
    """The per-round lists of one fit over a :class:`PoolCandidates`: rebuilt when the pool moved.

    The lists of an earlier round are reused while the pool is still mostly
    the one they were built from, or for ``reuse`` rounds while it has not
    grown by more than ``refresh``: they are a superset of what the views
    pick, and rebuilding them every round is a large share of a fit's time.
    """

    def __init__(self, source: PoolCandidates, reuse: int):
        self.source, self.reuse = source, reuse
        self.pool: Optional[np.ndarray] = None
        self.age = 0
        self.proposer: Optional[Proposer] = None

    def __call__(self, fit: FitState) -> Proposer:
        src = self.source
        anchors = fit.pool()
        if self.pool is not None and lists_still_serve(anchors, self.pool, self.age, fit.n_b, src.refresh, self.reuse):
            self.age += 1
            return self.proposer
        self.pool, self.age = anchors, 0
        if len(anchors) > src.anchors:
            anchors = anchors[np.sort(fit.rng.choice(len(anchors), size=src.anchors, replace=False))]
        # an anchor's own column spikes in its signature, and in its partner's: drop it for the
        # other rows' lists; the anchor rows themselves are relisted without their own pairing
        SA0, SB0 = fit.signatures(anchors)
        SA, SB = without_own_anchor(SA0, anchors[:, 0]), without_own_anchor(SB0, anchors[:, 1])
        cand_a, cand_b = src.candidate_lists(SA, SB, src.k, num_threads=fit.num_threads)
        _cross_fit_anchor_lists(cand_a, cand_b, SA0, SB0, anchors, fit.rng, num_threads=fit.num_threads)
        self.proposer = src.lists_proposer(cand_a, cand_b, num_threads=fit.num_threads)
        return self.proposer


def lists_still_serve(
    pool: np.ndarray, old: np.ndarray, age: int, n_b: int, change: float = 0.1, reuse: int = 0
) -> bool:
    """Whether lists built from the pool ``old`` and reused ``age`` rounds since still serve ``pool``:
    it grew by at most ``change``, and either ``age < reuse`` or at most ``change`` of its pairs are new."""
    if len(pool) > (1.0 + change) * len(old):
        return False
    return age < reuse or turnover(pool, old, n_b) <= change


def _cross_fit_anchor_lists(cand_a, cand_b, SA0, SB0, anchors, rng, *, num_threads=None) -> None:
    """Relist the anchor rows (in place) from the signatures of the other half of the anchors.

    Zeroing an anchor's own column is not enough: both rows of an anchor pair
    then share a hole at the same column, a pattern no other row has, so each
    was still listed as the other's best candidate, and held-out seeds and
    pool links were "found" through that leak rather than their geometry.
    Here the anchors are split in two halves; the rows of one half get their
    lists from signatures against the other half only, so nothing in them
    knows their own pairing. Lists wider than the other side (the cell lists
    are ``-1`` padded to ``k``) keep their padding.
    """
    if len(anchors) < 4:
        return
    half = rng.permutation(len(anchors)) % 2
    m_a, m_b = cand_a.shape[1], cand_b.shape[1]  # clipped to the other side's rows by the kernel
    for h in (0, 1):
        other = np.flatnonzero(half != h)
        SA = without_own_anchor(unit_rows(SA0[:, other]), anchors[other, 0])
        SB = without_own_anchor(unit_rows(SB0[:, other]), anchors[other, 1])
        rows_a, rows_b = anchors[half == h, 0], anchors[half == h, 1]
        _, best_a, _, _ = kernels.topk_rows_and_columns(SA[rows_a], SB, m_a, 1, num_threads=num_threads)
        _, best_b, _, _ = kernels.topk_rows_and_columns(SB[rows_b], SA, m_b, 1, num_threads=num_threads)
        cand_a[rows_a] = pad_lists(best_a, m_a)
        cand_b[rows_b] = pad_lists(best_b, m_b)


def without_own_anchor(S: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Signatures with each anchor row's own column zeroed, those rows re-normalised."""
    S = np.array(S, dtype=np.float32)
    S[rows, np.arange(len(rows))] = 0.0
    S[rows] = unit_rows(S[rows])
    return S
