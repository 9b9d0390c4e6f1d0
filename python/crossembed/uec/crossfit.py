"""Cross-fitting what an ensemble calibrates on its own fit pairs.

The heads an ensemble routes and scores with (query, rank and hubness heads) were fitted on the
fit pairs, so those pairs search better under them than any new query does: a confidence
calibrated on them is over-confident, and a routing judged on them looks better than it is.
:func:`held_out_searches` splits the pairs into folds, refits every model's heads on the other
folds (:meth:`LaplaceEmbedder.refit_heads <crossembed.uec.LaplaceEmbedder.refit_heads>`; the
posteriors and probe heads are shared) and searches each held-out fold's queries among all the
distinct fit positives and any extra documents. The searches are made twice: with the routing's
rank heads, and with every model's log-rank fixed to one number (the models' mean prediction over
their fit anchors: uniform weights wherever every model reads the query). They give

* the routing check (:class:`RoutingCheck`): held-out nDCG@10 of both; the rank heads are kept
  only when they win by more than two standard errors of the paired per-query difference;
* the features and labels the top-hit confidence is fitted on
  (:func:`~crossembed.uec.confidence.fit_top_hit_confidence`), from the searches of the routing kept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from crossembed._validation import check_int, check_random_state
from crossembed.uec.confidence import DEPTH
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = ["FOLDS", "HeldOut", "RoutingCheck", "held_out_searches"]

#: folds of the fit pairs (each fold's queries are searched by heads fitted on the other folds)
FOLDS = 5
#: the rank heads are kept when they beat the fixed log-rank by this many standard errors
_MARGIN_SE = 2.0
_NDCG_AT = 10


@dataclass(frozen=True)
class RoutingCheck:
    """Held-out fit pairs' nDCG@10 with the rank heads and with a fixed log-rank (module docstring).

    Parameters
    ----------
    routed, fixed : float
        Mean nDCG@10 (0-1) of the held-out fit queries' own positives, with the rank heads and with
        ``fixed_log_rank``.
    std_error : float
        Standard error of the mean per-query difference ``routed - fixed``.
    fixed_log_rank : float
        The log-rank the fallback routes with.
    n_queries : int
        Held-out queries searched.
    """

    routed: float
    fixed: float
    std_error: float
    fixed_log_rank: float
    n_queries: int

    @property
    def kept(self) -> bool:
        """True when the rank heads win by more than two standard errors (else the routing falls back)."""
        return self.routed - self.fixed > _MARGIN_SE * self.std_error

    def get_config(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in ("routed", "fixed", "std_error", "fixed_log_rank", "n_queries")}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> RoutingCheck:
        """Rebuild from :meth:`get_config` (``KeyError`` names a missing field)."""
        return cls(
            routed=float(config["routed"]),
            fixed=float(config["fixed"]),
            std_error=float(config["std_error"]),
            fixed_log_rank=float(config["fixed_log_rank"]),
            n_queries=int(config["n_queries"]),
        )


@dataclass(frozen=True)
class HeldOut:
    """What :func:`held_out_searches` returns: ``routing`` (the routing to ship), ``check`` (None when the
    routing has no rank heads to check), and the confidence's ``features`` (Q, F) and ``correct`` (Q,)
    from the held-out searches of that routing."""

    routing: Any
    check: Optional[RoutingCheck]
    features: np.ndarray
    correct: np.ndarray


def _checkable(routing) -> bool:
    """A routing with rank heads that a fixed log-rank can stand in for (RankRouting, LanguageRouting)."""
    return hasattr(routing, "fixed_log_rank") and routing.fixed_log_rank is None


def _fold_ensemble(ens, train: np.ndarray, queries, positives):
    embedders = [e.refit_heads(q.mean[train], p.mean[train]) for e, q, p in zip(ens.embedders, queries, positives)]
    return type(ens)(embedders, routing=ens.routing, mixing=ens.mixing, scoring=ens.scoring, reference=ens.reference_)


@dataclass(frozen=True)
class _Relevance:
    """Which collection rows answer a query: the positives of every pair with the query's group."""

    groups: np.ndarray  # (n,) int: pairs with the same query share a group
    keys: np.ndarray  # sorted group * N + collection row of every (group, positive)
    counts: np.ndarray  # distinct positives per group
    n: int  # collection rows

    @classmethod
    def of(cls, owner: np.ndarray, groups: np.ndarray, n: int) -> _Relevance:
        keys = np.unique(groups.astype(np.int64) * n + owner)
        return cls(groups.astype(np.int64), keys, np.bincount(keys // n, minlength=groups.max() + 1), n)

    def hits(self, rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return np.isin(self.groups[rows, None] * self.n + idx, self.keys)

    def ndcg(self, rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
        discount = 1.0 / np.log2(np.arange(2, idx.shape[1] + 2))
        gain = np.where(self.hits(rows, idx), discount[None, :], 0.0).sum(axis=1)
        ideal = np.cumsum(discount)[np.minimum(self.counts[self.groups[rows]], idx.shape[1]) - 1]
        return gain / ideal


def _search(fold, routing, q_comps, texts, d, rows: np.ndarray, relevance: _Relevance):
    """(features, correct, nDCG@10 per query) of one held-out fold's queries (``rows``) under ``routing``."""
    ens = type(fold)(
        fold.embedders, routing=routing, mixing=fold.mixing, scoring=fold.scoring, reference=fold.reference_
    )
    q = ens.combine(q_comps, role="query", texts=texts)
    scores, idx = ens.topk(q, d, min(max(DEPTH, _NDCG_AT), len(d)))
    feats = np.concatenate(
        [
            ens.search_features(q[s : s + 512], scores[s : s + 512, :DEPTH], d.mean[idx[s : s + 512, :DEPTH]])
            for s in range(0, len(q), 512)
        ]
    )
    return feats, relevance.hits(rows, idx[:, :1])[:, 0], relevance.ndcg(rows, idx[:, :_NDCG_AT])


def _routing_check(routed: np.ndarray, fixed: np.ndarray, log_rank: float) -> RoutingCheck:
    """The check from per-query nDCG@10 with the rank heads and with ``log_rank`` fixed."""
    diff = routed - fixed
    return RoutingCheck(
        routed=float(routed.mean()),
        fixed=float(fixed.mean()),
        std_error=float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("inf"),
        fixed_log_rank=log_rank,
        n_queries=len(diff),
    )


def held_out_searches(
    ens,
    queries: Sequence[GaussianEmbedding],
    positives: Sequence[GaussianEmbedding],
    collection: Sequence[GaussianEmbedding],
    owner: np.ndarray,
    rows: np.ndarray,
    *,
    texts: Optional[List[str]] = None,
    groups: Optional[np.ndarray] = None,
    folds: int = FOLDS,
    random_state=0,
) -> HeldOut:
    """Cross-fitted searches of the fit pairs (module docstring).

    Parameters
    ----------
    ens : UECEnsemble
        The ensemble fitted on every pair.
    queries, positives : K GaussianEmbeddings each
        The fit pairs per model (row ``i`` of both pair up): the heads are refitted on their means.
    collection : K GaussianEmbeddings
        What the queries are searched among (the distinct positives, then any other documents).
    owner : array (n,) of int
        The collection row of each pair's positive.
    rows : array of int
        The pairs whose queries are searched (all of them are fitted on).
    texts : list of str or None
        Every pair's query text (for a routing that reads them).
    groups : array (n,) of int or None
        Pairs with the same query share a group: a top hit is right when it is the positive of any
        pair of the query's group (a word with several glosses); None: each pair alone.
    folds : int
        Folds of the pairs (default 5, at least 2).
    random_state : int, Generator or None
        Assigns the pairs to folds.
    """
    folds = check_int(folds, "folds", low=2)
    n = len(queries[0])
    if n < 2 * folds:
        raise ValueError(f"cross-fitting over {folds} folds needs at least {2 * folds} pairs, got {n}")
    fold_of = check_random_state(random_state).permutation(n) % folds
    relevance = _Relevance.of(
        np.asarray(owner), np.arange(n) if groups is None else np.asarray(groups), len(collection[0])
    )
    fixed = float(np.mean([h.predicted_log_rank(h.hub_reference).mean() for h in ens.heads]))
    routings = {"routed": ens.routing}
    if _checkable(ens.routing):
        routings["fixed"] = replace(ens.routing, fixed_log_rank=fixed)
    got: Dict[str, List] = {name: [] for name in routings}
    for f in range(folds):
        test = rows[fold_of[rows] == f]
        if not len(test):
            continue
        fold = _fold_ensemble(ens, np.flatnonzero(fold_of != f), queries, positives)
        d = fold.combine(collection, role="passage")
        q_comps = [GaussianEmbedding(c.mean[test], c.var[test]) for c in queries]
        fold_texts = None if texts is None else [texts[i] for i in test]
        for name, routing in routings.items():
            got[name].append(_search(fold, routing, q_comps, fold_texts, d, test, relevance))
    out = {name: [np.concatenate(parts) for parts in zip(*v)] for name, v in got.items()}
    check = _routing_check(out["routed"][2], out["fixed"][2], fixed) if "fixed" in out else None
    chosen = "routed" if check is None or check.kept else "fixed"
    feats, correct, _ = out[chosen]
    return HeldOut(routing=routings[chosen], check=check, features=feats, correct=correct)
