"""Retrieval metrics of a ranking (nDCG@10, recall, MRR, hits) and of a confidence (ROC AUC, ECE)."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

__all__ = ["expected_calibration_error", "ranking_metrics", "roc_auc"]


def ranking_metrics(top_idx: np.ndarray, relevant: Sequence[Sequence[int]]) -> Dict[str, np.ndarray]:
    """Per-query nDCG@10, Recall@10, Recall@100, MRR, hit@1 and hit@10 (binary relevance).

    ``top_idx`` is (Q, >= 10) ranked document indices, ``relevant[q]`` the
    relevant documents of query ``q``. MRR counts the first relevant document
    within the given ranking (0 when none).
    """
    top_idx = np.asarray(top_idx)
    if top_idx.ndim != 2 or top_idx.shape[0] != len(relevant):
        raise ValueError(f"top_idx must be (Q, k) with Q = len(relevant) = {len(relevant)}, got {top_idx.shape}")
    Q, depth = top_idx.shape
    discounts = 1.0 / np.log2(np.arange(2, 12))
    out = {name: np.zeros(Q) for name in ("ndcg@10", "recall@10", "recall@100", "mrr", "hit@1", "hit@10")}
    for q in range(Q):
        rel = set(int(j) for j in relevant[q])
        if not rel:
            raise ValueError(f"query {q} has no relevant document")
        hits = np.fromiter((int(j) in rel for j in top_idx[q]), dtype=bool, count=depth)
        h10 = hits[:10]
        out["ndcg@10"][q] = (discounts[: h10.size][h10]).sum() / discounts[: min(len(rel), 10)].sum()
        out["recall@10"][q] = h10.sum() / len(rel)
        out["recall@100"][q] = hits[:100].sum() / len(rel)
        first = np.flatnonzero(hits)
        out["mrr"][q] = 1.0 / (first[0] + 1) if first.size else 0.0
        out["hit@1"][q] = float(hits[0])
        out["hit@10"][q] = float(h10.any())
    return out


def roc_auc(scores, labels) -> float:
    """ROC AUC of ``scores`` for binary ``labels`` (Mann-Whitney, ties averaged); NaN with one class."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries but labels has {y.size}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def expected_calibration_error(confidence, correct, *, bins: int = 15) -> float:
    """``sum_b |B_b|/n * |acc(B_b) - conf(B_b)|`` over equal-width confidence bins on [0, 1]."""
    c = np.asarray(confidence, dtype=np.float64).ravel()
    y = np.asarray(correct, dtype=np.float64).ravel()
    if c.shape != y.shape or c.size == 0:
        raise ValueError("confidence and correct must be non-empty and of equal length")
    if ((c < 0) | (c > 1)).any():
        raise ValueError("confidence must lie in [0, 1]")
    which = np.minimum((c * bins).astype(int), bins - 1)
    ece = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            ece += m.mean() * abs(y[m].mean() - c[m].mean())
    return float(ece)
