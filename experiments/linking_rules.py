"""The GEH rules the link table ablates, written on crossembed.linking's public extension points.

They are not part of the library: the supported method is ``GEHLinker()``'s
defaults. Each is a frozen dataclass, as the library's rules are.

:class:`PaperPromotion`
    The paper's growth rule as written: all anchors in every view while the
    pool has < ``small_pool``, cumulative votes, Otsu threshold on posterior
    means (values on the threshold count as above, so identical votes promote
    everything: the round-0 collapse of the rule as written), greedy one-to-one.
:class:`CappedPromotion`
    A robust variant of the paper's rule: views of ``subsample`` of the
    anchors (>= ``min_views`` views) while the pool is small, and at most as
    many new links per round as the pool holds, ranked by posterior then CSLS.
:class:`FoldPass`
    A final pass: cross-validated relinking with anchor signatures.
:class:`CheckedMapPass`
    The map pass fitted on the pool links a no-partner check keeps.
:class:`TwoWayRidgeMap`
    Decoy-pass scores through a ridge map each way.
:class:`AnnCandidates`
    HNSW candidates rebuilt per view (:class:`AnnProposer`).
:class:`CosineSignatures`, :class:`RandomViews`, :class:`Whiten`
    Raw cosine signatures, random view anchors, whitened sides.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from crossembed import kernels
from crossembed.ann import MeanGraph
from crossembed.linking import AutoCandidates, CrossFitCheck, ExactCandidates, MapPass, PoolCandidates
from crossembed.linking.candidates import CandidateSource, CellCandidates
from crossembed.linking.final_pass import FinalPass, replace_links
from crossembed.linking.pairs import contains, count_new, greedy_one_to_one, merge_views, positions, rank_by
from crossembed.linking.preprocess import unit_rows
from crossembed.linking.promotion import PromotionRule
from crossembed.linking.proposers import Proposer
from crossembed.linking.refine import ridge_map_rows

__all__ = [
    "CANDIDATE_SOURCES",
    "AnnCandidates",
    "AnnProposer",
    "CappedPromotion",
    "CheckedMapPass",
    "CosineSignatures",
    "FoldPass",
    "PaperPromotion",
    "RandomViews",
    "TwoWayRidgeMap",
    "Whiten",
]

Info = Dict[str, Any]


def _check(ok: bool, name: str, value, want: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {want}, got {value!r}")


def _check_count(value, name: str, low: int) -> None:
    is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    _check(is_int and value >= low, name, value, f"an integer >= {low}")


@dataclass(frozen=True, kw_only=True)
class PaperPromotion(PromotionRule):
    """The paper's rule (module docstring).

    Parameters
    ----------
    small_pool : int
        Below this pool size every view uses every anchor (default 50).
    posterior : bool
        True (default): promote by the Otsu-thresholded posterior; False:
        the fixed-vote ablation (``vote_fraction`` of the views).
    vote_fraction : float
        Share of the views that must propose a pair when ``posterior=False``, in (0, 1] (default 0.5).
    """

    name = kind = "paper"
    _capped = False
    small_pool: int = 50
    posterior: bool = True
    vote_fraction: float = 0.5

    def __post_init__(self):
        _check_count(self.small_pool, "small_pool", 1)
        _check(0 < self.vote_fraction <= 1, "vote_fraction", self.vote_fraction, "in (0, 1]")

    def _views(self, fit, pool: np.ndarray):
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

    def grow(self, fit, propose: Proposer) -> Info:
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


@dataclass(frozen=True, kw_only=True)
class CappedPromotion(PaperPromotion):
    """The capped rule (module docstring).

    Parameters
    ----------
    small_pool : int
        Below this pool size views are random ``subsample`` subsets (default 50).
    subsample : float
        Fraction of the pool per view while the pool is small, in (0, 1] (default 0.7).
    min_views : int
        Views per round at least while the pool is small (default 20).
    posterior, vote_fraction
        As for :class:`PaperPromotion`.
    """

    name = kind = "capped"
    _capped = True
    subsample: float = 0.7
    min_views: int = 20

    def __post_init__(self):
        super().__post_init__()
        _check(0 < self.subsample <= 1, "subsample", self.subsample, "in (0, 1]")
        _check_count(self.min_views, "min_views", 1)

    def _views(self, fit, pool: np.ndarray):
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


@dataclass(frozen=True, kw_only=True)
class CheckedMapPass(MapPass):
    """:class:`~crossembed.linking.MapPass` fitted on the pool links that ``check`` keeps (a map
    fitted without them re-finds them) instead of the whole pool; the pool when it keeps none.

    Parameters
    ----------
    check : CrossFitCheck
        The no-partner decision (default ``CrossFitCheck()``).
    lam, score_filter, probes, copies, margin
        As for :class:`~crossembed.linking.MapPass`.
    """

    kind = "map-checked"
    check: Any = CrossFitCheck()

    def run(self, fit, propose: Proposer) -> Info:
        kept = self.check(fit.A, fit.B, fit.links, fit.seeds, fit.rng, num_threads=fit.num_threads)
        return self.relink(fit, np.concatenate([fit.seeds, kept]) if len(kept) else fit.pool())


@dataclass(frozen=True, kw_only=True)
class TwoWayRidgeMap:
    """Scores through two ridge maps fitted on anchor pairs: ``cos(A W, B) + cos(A, B V)``, ``W`` the
    map from A to B and ``V`` the one from B to A (each shrinks toward its own target side and errs
    differently).

    Parameters
    ----------
    lam : float
        Ridge penalty, ``> 0`` (default 1.0).
    """

    kind = "ridge-two-way"
    lam: float = 1.0

    def __post_init__(self):
        _check(self.lam > 0, "lam", self.lam, "> 0")

    def rows(self, A: np.ndarray, B: np.ndarray, pairs: np.ndarray):
        """float32 C-contiguous rows of A and of B whose dot products are the scores.

        ``A W`` lies in the row space of ``W``, of at most ``min(D_A, D_B)`` dimensions, so its dot
        products with ``B`` are taken there (the same for ``B V``), for rows ``2 min(D_A, D_B)`` wide."""
        W = ridge_map_rows(A, B, pairs, lam=self.lam)
        V = ridge_map_rows(B, A, pairs[:, ::-1], lam=self.lam)
        QW, QV = _row_basis(W), _row_basis(V)
        XA = np.hstack([_onto(unit_rows(A @ W), QW), _onto(A, QV)])
        XB = np.hstack([_onto(B, QW), _onto(unit_rows(B @ V), QV)])
        return np.ascontiguousarray(XA, np.float32), np.ascontiguousarray(XB, np.float32)


def _row_basis(W: np.ndarray) -> Optional[np.ndarray]:
    """Orthonormal columns spanning the rows of ``W``; None when they may span all of its columns' space."""
    if W.shape[0] >= W.shape[1]:
        return None
    return np.linalg.qr(W.T.astype(np.float64))[0].astype(np.float32)


def _onto(X: np.ndarray, basis: Optional[np.ndarray]) -> np.ndarray:
    """``X`` in the coordinates of ``basis`` (None: ``X`` itself)."""
    return X if basis is None else X @ basis


@dataclass(frozen=True, kw_only=True)
class FoldPass(FinalPass):
    """Final pass: cross-validated relinking with the whole pool.

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
        Drop links in the lower Otsu class of scores (default True).
    """

    kind = "folds"
    folds: int = 3
    score_filter: bool = True

    def __post_init__(self):
        _check_count(self.folds, "folds", 2)

    def run(self, fit, propose: Proposer) -> Info:
        """Replace ``fit``'s links by the folds' verdict; returns the pass's history entry."""
        folds, links = self.folds, fit.links
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
        return replace_links(
            fit,
            final,
            views=folds,
            anchors=int(len(links) * (folds - 1) / folds) + fit.n_seeds,
            new_post=votes[positions(uniq, final, fit.n_b)] / folds,  # a new link: its fold share
            proposals=len(uniq),
            final_pass="folds",
            threshold=float(thr),
        )

    def _propose_folds(self, fit, propose: Proposer):
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


def _active(exclude, n: int) -> np.ndarray:
    """The rows of ``range(n)`` not listed in ``exclude`` (None or empty: all)."""
    keep = np.ones(n, bool)
    if exclude is not None and np.size(exclude):
        keep[np.asarray(exclude, dtype=np.int64).reshape(-1)] = False
    return np.flatnonzero(keep)


def _knn(data: np.ndarray, queries: np.ndarray, k: int, *, M: int, ef: int, num_threads: Optional[int]):
    """The ``k`` rows of ``data`` of largest inner product with each query, by an HNSW graph: labels and
    inner products. A query the graph finds fewer than ``k`` rows for gets its list by brute force."""
    graph = MeanGraph(data.shape[1], max_elements=len(data), M=M, ef_construction=max(ef, k), random_seed=0)
    graph.add(data, np.arange(len(data)), num_threads=num_threads)
    labels, dist = graph.knn(queries, k, ef=max(ef, k), num_threads=num_threads)
    sim = 1.0 - dist.astype(np.float64)  # the graph's distance is 1 - <x, y>
    for i in np.flatnonzero((labels < 0).any(axis=1)):
        ip = data @ queries[i]
        labels[i] = np.lexsort((np.arange(len(data)), -ip))[:k]
        sim[i] = ip[labels[i]]
    return labels, sim


def _top_per_group(group: np.ndarray, score: np.ndarray, other: np.ndarray, k: int) -> np.ndarray:
    """Mask of each group's ``k`` best edges (score descending, then lower ``other``)."""
    order = np.lexsort((other, -score, group))
    g = group[order]
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    mask = np.zeros(len(group), bool)
    mask[order[rank < k]] = True
    return mask


class AnnProposer(Proposer):
    """Approximate CSLS mutual top-``k`` over HNSW candidate lists (:class:`crossembed.ann.MeanGraph`).

    One HNSW index (inner product) per side over the view's signatures keeps
    each row's ``ann_k`` approximate neighbours. The hubness terms are the
    means of the best ``csls_k`` retrieved similarities, CSLS is computed on
    the candidate edges only, and a pair is proposed when each end is in the
    other's CSLS top-``k`` among its candidates. With ``ann_k >= csls_k`` and
    a good recall it matches the exact kernel.

    Parameters
    ----------
    ann_k : int
        Candidates retrieved per row on each side.
    M, ef : int
        HNSW graph degree and search breadth.
    num_threads : int, optional
        Graph threads (default: all cores). HNSW insertion order depends on
        threads, so results are reproducible only with ``num_threads=1``.
    """

    def __init__(self, *, ann_k: int = 64, M: int = 16, ef: int = 128, num_threads: Optional[int] = None):
        self.ann_k, self.M, self.ef = int(ann_k), int(M), int(ef)
        self.num_threads = num_threads

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        SA = np.ascontiguousarray(SA, dtype=np.float32)
        SB = np.ascontiguousarray(SB, dtype=np.float32)
        rows, cols = _active(exclude_a, len(SA)), _active(exclude_b, len(SB))
        if rows.size == 0 or cols.size == 0:
            return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
        ka = min(max(self.ann_k, csls_k, k), cols.size)
        kb = min(max(self.ann_k, csls_k, k), rows.size)
        lab_ab, sim_ab = _knn(SB[cols], SA[rows], ka, M=self.M, ef=self.ef, num_threads=self.num_threads)
        lab_ba, sim_ba = _knn(SA[rows], SB[cols], kb, M=self.M, ef=self.ef, num_threads=self.num_threads)
        r_a = sim_ab[:, : min(csls_k, ka)].mean(axis=1)
        r_b = sim_ba[:, : min(csls_k, kb)].mean(axis=1)
        # candidate edges from both directions, deduplicated, scored exactly
        ei = np.concatenate([np.repeat(np.arange(rows.size), ka), lab_ba.reshape(-1)])
        ej = np.concatenate([lab_ab.reshape(-1), np.repeat(np.arange(cols.size), kb)])
        key = np.unique(ei * cols.size + ej)
        ei, ej = key // cols.size, key % cols.size
        sim = np.einsum("ij,ij->i", SA[rows[ei]].astype(np.float64), SB[cols[ej]].astype(np.float64))
        csls = 2.0 * sim - r_a[ei] - r_b[ej]
        mutual = _top_per_group(ei, csls, ej, k) & _top_per_group(ej, csls, ei, k)
        pairs = np.stack([rows[ei[mutual]], cols[ej[mutual]]], axis=1)
        scores = csls[mutual]
        if len(pairs) == 0:
            return pairs.reshape(0, 2), scores.astype(np.float32)
        chosen = greedy_one_to_one(pairs, scores)
        return chosen, scores[positions(pairs, chosen, len(SB))].astype(np.float32)


@dataclass(frozen=True, kw_only=True)
class AnnCandidates(CandidateSource):
    """HNSW candidates rebuilt per view (:class:`AnnProposer`).

    Parameters
    ----------
    k : int
        Candidates retrieved per row on each side (default 64).
    M, ef : int
        HNSW graph degree and search breadth (defaults 16, 128).
    """

    kind = "ann"
    k: int = 64
    M: int = 16
    ef: int = 128

    def __post_init__(self):
        for name, low in (("k", 1), ("M", 2), ("ef", 1)):
            _check_count(getattr(self, name), name, low)

    def for_fit(self, fit, *, every_row: bool):
        proposer = AnnProposer(ann_k=self.k, M=self.M, ef=self.ef, num_threads=fit.num_threads)
        return lambda _fit: proposer


@dataclass(frozen=True)
class CosineSignatures:
    """Raw cosine distances to the anchors, with the same scale-free row normalisation (no kernel)."""

    kind = "cosine"
    reads_cosines = False

    def __call__(self, X: np.ndarray, anchors: np.ndarray, *, sigma: Optional[float] = None, num_threads=None):
        return unit_rows(1.0 - X @ anchors.T)  # sigma: unused, there is no kernel

    def from_cosines(self, cosines, cols: np.ndarray, *, sigma: float, num_threads=None):
        raise NotImplementedError("CosineSignatures are computed from the rows (reads_cosines is False)")


@dataclass(frozen=True)
class RandomViews:
    """A uniformly random anchor subset per view."""

    kind = "random"

    def __call__(self, pool_a, n_seeds, size, rng, subset=None, *, gram=None):
        cand = np.arange(len(pool_a)) if subset is None else np.sort(subset)
        return np.sort(rng.choice(cand, size=min(size, len(cand)), replace=False))


@dataclass(frozen=True, kw_only=True)
class Whiten:
    """Centred unit rows (as :class:`~crossembed.linking.Center`), then PCA-whitened with eigenvalues
    shrunk towards their mean.

    Parameters
    ----------
    shrinkage : float
        Weight of the mean eigenvalue in the whitening denominator, in
        ``[0, 1]`` (default 0.1): near-null directions are not blown up.
    """

    kind = "whiten"
    shrinkage: float = 0.1

    def __post_init__(self):
        _check(0 <= self.shrinkage <= 1, "shrinkage", self.shrinkage, "in [0, 1]")

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``(N, D)`` float32 unit rows of ``X`` after centring and whitening."""
        if len(X) < 2:
            return unit_rows(X)
        C = unit_rows(X).astype(np.float64)
        C -= C.mean(axis=0)
        evals, evecs = np.linalg.eigh(C.T @ C / len(C))
        evals = np.maximum(evals, 0.0)
        denom = np.sqrt((1.0 - self.shrinkage) * evals + self.shrinkage * evals.mean() + 1e-12)
        return unit_rows((C @ evecs) / denom)


#: the candidate sources by name, built with their defaults (``python -m experiments link-scale --candidates``)
CANDIDATE_SOURCES = {
    "auto": AutoCandidates,
    "exact": ExactCandidates,
    "pool": PoolCandidates,
    "cells": CellCandidates,
    "ann": AnnCandidates,
}
