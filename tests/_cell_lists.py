"""The float64 brute force of cell candidate lists, shared by the anchor-cell and B-space-cell tests."""

import numpy as np


def best_sharing(S: np.ndarray, share: np.ndarray, m: int) -> np.ndarray:
    """Each row's ``m`` best columns of ``S`` among those ``share`` marks (score desc, then lower column), -1 padded."""
    out = np.full((len(S), m), -1, np.int64)
    for i in range(len(S)):
        cand = np.flatnonzero(share[i])
        cand = cand[np.lexsort((cand, -S[i, cand]))][:m]
        out[i, : len(cand)] = cand
    return out
