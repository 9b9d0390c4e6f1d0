"""Retrieval metrics of a ranking: nDCG@10, recall, MRR, hits."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

__all__ = ["ranking_metrics"]


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
