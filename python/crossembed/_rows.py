"""Row-wise maths every layer shares: L2 norms, unit rows and the softmax of a score matrix."""

from __future__ import annotations

import numpy as np

__all__ = ["row_norms", "softmax_rows", "unit_rows"]


def row_norms(x: np.ndarray) -> np.ndarray:
    """``|x_i|_2`` as an ``(n, 1)`` column, in ``x``'s own dtype."""
    return np.linalg.norm(x, axis=1, keepdims=True)


def unit_rows(x, dtype=np.float64) -> np.ndarray:
    """Rows scaled to unit L2 norm, computed in ``dtype`` (default float64; None: ``x``'s own); a zero row
    stays zero."""
    x = np.asarray(x, dtype=dtype)
    n = row_norms(x)
    return x / np.where(n > 0, n, 1.0)


def softmax_rows(z) -> np.ndarray:
    """Row-wise softmax ``exp(z_ij) / sum_j exp(z_ij)`` in float64 (the row maximum subtracted first)."""
    z = np.asarray(z, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
