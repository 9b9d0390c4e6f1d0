"""The embedding-translation protocol beside the link table's: full overlap, every row has a partner.

vec2vec (Jha et al. 2025) scores a translation in chunks of 8,192 rows: each
translated A row ranks the chunk's B rows by cosine; top-1 accuracy is the
share of rows whose partner ranks first, mean rank the mean 1-based rank of
the partner. FOSCTTM (Schnaus et al. 2026; "fraction of samples closer than
the true match") is, per row, the share of the chunk's other rows scored
above its partner, averaged over the rows of both directions (0 is perfect,
0.5 chance).

All three take rows already in one space (``XA[i] . XB[j]`` is the score of
linking A row ``i`` to B row ``j``) with row ``i`` of one the partner of row
``i`` of the other.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

__all__ = ["CHUNK", "translation_metrics"]

#: rows per evaluation chunk (vec2vec's batch)
CHUNK = 8192


def translation_metrics(XA: np.ndarray, XB: np.ndarray, *, chunk: int = CHUNK) -> Dict[str, float]:
    """Top-1 accuracy, mean rank and FOSCTTM of partnered rows ``XA[i] <-> XB[i]`` in chunks of ``chunk``.

    Each chunk is scored on its own (a last short chunk too); the figures are means over rows.
    """
    XA, XB = np.asarray(XA, np.float32), np.asarray(XB, np.float32)
    if XA.shape != XB.shape or XA.ndim != 2:
        raise ValueError(f"XA and XB must be matrices of one shape, got {XA.shape} and {XB.shape}")
    if chunk < 2:
        raise ValueError(f"chunk must be >= 2, got {chunk}")
    hits, ranks, fos = [], [], []
    for s in range(0, len(XA), chunk):
        S = XA[s : s + chunk] @ XB[s : s + chunk].T
        true = np.diag(S)[:, None]
        above_row = (S > true).sum(1)  # B rows scored above the A row's partner
        above_col = (S > true.T).sum(0)  # A rows scored above the B row's partner
        hits.append(above_row == 0)
        ranks.append(above_row + 1)
        n = max(len(S) - 1, 1)
        fos.append((above_row + above_col) / (2 * n))
    return {
        "top1": float(np.mean(np.concatenate(hits))),
        "mean_rank": float(np.mean(np.concatenate(ranks))),
        "foscttm": float(np.mean(np.concatenate(fos))),
    }
