"""GEH's no-partner decision: keep only the pool links that a map fitted without them re-finds.

The map pass fits a ridge map on the pool and links every row through it.
A ridge map of a few thousand anchors in a few hundred dimensions reproduces
its own anchors: a false pool link is a mutual pair of the map fitted on it
almost as surely as a right one, so the pass keeps the pool's false links.
At low overlap the pool is mostly false (rows whose object is absent on the
other side still find a mutual neighbour, and the rounds promote them), and
the map pass could not remove them.

:class:`CrossFitCheck` judges each link out of sample: the links are split
into folds, a map is fitted on the fixed pairs and every other fold, and a
link of the held-out fold is kept only if it is a mutual CSLS pair of that
map. The kept links are a cleaner pool; the map fitted on them links the
rows again, and those links are checked the same way until the kept set
settles. The check runs on at most ``rows`` rows a side (every row a link
touches, then a random share of the others), so its cost does not grow with
the index beyond that.

:class:`CrossFitRelink` (the decoy pass's default) grows a clean pool out of a
dirty one instead of only filtering it: every row is relinked by the scores
fitted without its fold's links (one fold split for the whole run), the
links scored above the Otsu cut of those scores become the next anchors, and
that repeats until they settle. Out of sample, a wrong link cannot confirm
itself, while a right one is re-found by maps fitted on other right links;
regularised CCA (:class:`~crossembed.linking.maps.CCAMap`) still learns the
right directions from a pool that is mostly wrong, so the right share grows
relink by relink. Every link of the last relink then goes through a
:class:`CrossFitCheck`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, check_plugin, set_checked
from crossembed._validation import check_fraction, check_int
from crossembed.linking.maps import CCAMap, RidgeMap
from crossembed.linking.pairs import contains, count_new, greedy_one_to_one, positions, row_positions

__all__ = ["CrossFitCheck", "CrossFitRelink", "relink_out_of_fold"]


class _PoolCheck(Configured):
    """What both checks share: their settings' checks and the call on a pool, restricted to at most
    ``rows`` rows a side."""

    folds: int
    max_rounds: int
    tol: float
    rows: int
    scorer: Any

    def _check_settings(self, scorer_example: str) -> None:
        set_checked(
            self,
            folds=check_int(self.folds, "folds", low=2),
            max_rounds=check_int(self.max_rounds, "max_rounds", low=1),
            tol=check_fraction(self.tol, "tol", allow_zero=True),
            rows=check_int(self.rows, "rows", low=2),
        )
        check_plugin(self.scorer, "scorer", ("rows",), scorer_example)

    def __call__(
        self,
        A: np.ndarray,
        B: np.ndarray,
        links: np.ndarray,
        fixed: np.ndarray,
        rng: np.random.Generator,
        *,
        num_threads: Optional[int] = None,
    ) -> np.ndarray:
        """The links ``(L', 2)`` (rows of A and B) made from the pool ``links`` and the ``fixed`` pairs (seeds);
        a pool of fewer links than folds comes back as it is."""
        links = np.asarray(links, np.int64).reshape(-1, 2)
        if len(links) < self.folds:
            return links
        rows_a, rows_b, sub_a, sub_b, sub_fixed, sub_links = _restricted(A, B, links, fixed, self.rows, rng)
        return _unrestricted(rows_a, rows_b, self._on_rows(sub_a, sub_b, sub_links, sub_fixed, rng, num_threads))

    def _on_rows(self, sub_a, sub_b, cur, sub_fixed, rng, num_threads) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class CrossFitCheck(_PoolCheck):
    """Out-of-sample check of pool links against the scores fitted without them (module docstring).

    Parameters
    ----------
    folds : int
        Parts the links are split into; each is judged by the map of the
        others (default 5).
    max_rounds : int
        Check / relink rounds at most (default 4).
    tol : float
        Stop once the kept set changes by less than this fraction of its
        links (default 0.02).
    rows : int
        Rows a side the check runs on at most (default 20,000).
    scorer : RidgeMap or CCAMap
        Scores the check links by, fitted on the fixed pairs and the other
        folds (default ``RidgeMap()``, the ridge map of :class:`MapPass`;
        :mod:`crossembed.linking.maps`).
    """

    kind = "crossfit"
    folds: int = 5
    max_rounds: int = 4
    tol: float = 0.02
    rows: int = 20_000
    scorer: Any = RidgeMap()

    def __post_init__(self):
        self._check_settings("RidgeMap()")

    def _on_rows(self, sub_a, sub_b, cur, sub_fixed, rng, num_threads) -> np.ndarray:
        """The kept links of ``cur`` (positions in the restricted rows)."""
        kept = cur
        for check in range(self.max_rounds):
            kept_now = cur[self._confirmed(sub_a, sub_b, cur, sub_fixed, rng, num_threads)]
            changed = count_new(kept_now, kept, len(sub_b)) + count_new(kept, kept_now, len(sub_b))
            settled = changed <= self.tol * max(len(kept_now), 1)
            kept = kept_now
            if settled or len(kept) < self.folds or check == self.max_rounds - 1:
                break
            # relink through the scores of the kept links: right pairs the pool missed join the next check
            pairs, scores = _mutual_pairs(self.scorer, sub_a, sub_b, sub_fixed, kept, num_threads)
            if len(pairs) > 1:
                pairs = pairs[scores > kernels.otsu_threshold(scores.astype(np.float64))]
            cur = pairs
        return kept

    def _confirmed(self, A, B, links, fixed, rng, num_threads) -> np.ndarray:
        """Mask of ``links`` that are mutual CSLS pairs of the map fitted on ``fixed`` and the other folds.

        The rows of the other folds are mapped by a map fitted on them: they
        sit on their own partners and leave the held-out rows to compete
        with the rows no link touches. (Mapping every row out of sample
        instead, one CSLS pass a check, kept almost no right link at alpha
        0.1: a map of a few hundred anchors generalises too little.)
        """
        fold = rng.permutation(len(links)) % self.folds
        ok = np.zeros(len(links), bool)
        for f in range(self.folds):
            held = fold == f
            pairs, _ = _mutual_pairs(self.scorer, A, B, fixed, links[~held], num_threads)
            ok[held] = contains(pairs, links[held], len(B))
        return ok


@dataclass(frozen=True, kw_only=True)
class CrossFitRelink(_PoolCheck):
    """Pool rebuilt by relinking every row out of sample until the links settle (module docstring).

    Parameters
    ----------
    folds : int
        Parts of A's rows; a row is linked by the scores fitted on the fixed
        pairs and the links of the other parts (default 5).
    max_rounds : int
        Relinks at most (default 12; a clean pool settles in 2-3, one that
        is a few percent right takes 6-10).
    tol : float
        Stop once the next anchors differ from the last by less than this
        fraction of their links: rows without a partner keep some links
        turning over at a low overlap (default 0.15).
    rows : int
        Rows a side the relinking runs on at most (default 20,000).
    scorer : CCAMap or RidgeMap
        The scores, fitted per fold (default ``CCAMap(n_components=128)``).
    check : CrossFitCheck or None
        Judges the last relink's links, the ones under the Otsu cut
        included, before they are returned (default
        ``CrossFitCheck(max_rounds=2)``: one round lets links between rows without a partner
        through on a near-exact map); None returns them all.
    """

    kind = "relink"
    folds: int = 5
    max_rounds: int = 12
    tol: float = 0.15
    rows: int = 20_000
    scorer: Any = CCAMap(n_components=128)
    check: Optional[Any] = CrossFitCheck(max_rounds=2)

    def __post_init__(self):
        self._check_settings("CCAMap()")
        check_plugin(self.check, "check", ("__call__",), "CrossFitCheck()", optional=True)

    def _on_rows(self, sub_a, sub_b, cur, sub_fixed, rng, num_threads) -> np.ndarray:
        """The rebuilt pool (positions in the restricted rows) from the links ``cur``."""
        # one split for every relink: a pool that has settled then maps to itself
        fold_of = rng.integers(0, self.folds, len(sub_a))
        for _ in range(self.max_rounds):
            relinked, scores = relink_out_of_fold(
                self.scorer, sub_a, sub_b, sub_fixed, cur, fold_of, self.folds, num_threads=num_threads
            )
            top = relinked[scores > kernels.otsu_threshold(scores)] if len(relinked) > 1 else relinked
            changed = count_new(top, cur, len(sub_b)) + count_new(cur, top, len(sub_b))
            cur = top
            if changed <= self.tol * len(cur) or len(cur) < self.folds:
                break
        # the links under the cut go to the check too: anchors of the clean top alone make decoys
        # that over-read the null, and the pass then keeps too few links
        if self.check is not None:
            relinked = self.check(sub_a, sub_b, relinked, sub_fixed, rng, num_threads=num_threads)
        return relinked


def relink_out_of_fold(
    scorer: Any,
    A: np.ndarray,
    B: np.ndarray,
    fixed: np.ndarray,
    links: np.ndarray,
    fold_of: np.ndarray,
    folds: int,
    *,
    num_threads: Optional[int] = None,
):
    """One-to-one links of every A row and their float64 scores, each row linked by mutual CSLS
    through ``scorer`` fitted on ``fixed`` and the ``links`` whose A row is not in its fold.

    Parameters
    ----------
    scorer : CCAMap or RidgeMap
        The scores (:mod:`crossembed.linking.maps`).
    A, B : ndarray
        Unit rows of both sides.
    fixed : ndarray, shape (S, 2)
        Pairs in every fit (the seeds); their rows are linked to nothing.
    links : ndarray, shape (L, 2)
        Pairs a fold's scores are fitted on when their A row lies in another fold.
    fold_of : ndarray of int, shape (len(A),)
        Fold of each A row, in ``[0, folds)``.
    folds : int
        Number of folds.
    num_threads : int, optional
        Kernel threads; None: all cores.
    """
    found, found_scores = [], []
    for f in range(folds):
        pairs, scores = _mutual_pairs(scorer, A, B, fixed, links[fold_of[links[:, 0]] != f], num_threads)
        mine = fold_of[pairs[:, 0]] == f
        found.append(pairs[mine])
        found_scores.append(scores[mine])
    pairs, scores = np.concatenate(found), np.concatenate(found_scores).astype(np.float64)
    # rows of different folds may claim one B row: the better score keeps it
    kept = greedy_one_to_one(pairs, scores)
    return kept, scores[positions(pairs, kept, len(B))]


def _mutual_pairs(scorer, A, B, fixed, links, num_threads):
    """Mutual CSLS pairs and scores of every row under ``scorer`` fitted on ``fixed`` and ``links``
    (the fixed pairs' rows linked to nothing)."""
    XA, XB = scorer.rows(A, B, np.concatenate([fixed, links]))
    return kernels.csls_mutual_topk(
        XA, XB, k=1, csls_k=10, exclude_a=fixed[:, 0], exclude_b=fixed[:, 1], num_threads=num_threads
    )


def _restricted(A, B, links, fixed, at_most: int, rng: np.random.Generator):
    """The rows a check runs on (:func:`_rows` per side), those rows of A and B, and ``fixed`` and
    ``links`` in their positions: ``(rows_a, rows_b, sub_a, sub_b, sub_fixed, sub_links)``."""
    rows_a = _rows(len(A), np.concatenate([fixed[:, 0], links[:, 0]]), at_most, rng)
    rows_b = _rows(len(B), np.concatenate([fixed[:, 1], links[:, 1]]), at_most, rng)
    pos_a, pos_b = row_positions(rows_a, len(A)), row_positions(rows_b, len(B))
    sub_fixed = np.stack([pos_a[fixed[:, 0]], pos_b[fixed[:, 1]]], 1)
    sub_links = np.stack([pos_a[links[:, 0]], pos_b[links[:, 1]]], 1)
    return rows_a, rows_b, A[rows_a], B[rows_b], sub_fixed, sub_links


def _unrestricted(rows_a: np.ndarray, rows_b: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """``pairs`` of restricted positions as rows of A and B."""
    return np.stack([rows_a[pairs[:, 0]], rows_b[pairs[:, 1]]], 1) if len(pairs) else np.zeros((0, 2), np.int64)


def _rows(n: int, must: np.ndarray, at_most: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted rows: every row of ``must``, then random others up to ``at_most`` (all rows when ``n <= at_most``)."""
    if n <= at_most:
        return np.arange(n)
    must = np.unique(must)
    rest = np.setdiff1d(np.arange(n), must)
    extra = rng.choice(rest, size=max(0, min(len(rest), at_most - len(must))), replace=False)
    return np.sort(np.concatenate([must, extra]))
