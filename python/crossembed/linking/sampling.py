"""Which rows a large GEH fit grows its pool on: ``GEHLinker(sample=RowSample(...))``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from crossembed._config import Configured, set_checked
from crossembed._validation import check_int
from crossembed.linking._inputs import ROW_CHUNK

__all__ = ["RowSample"]


@dataclass(frozen=True, kw_only=True)
class RowSample(Configured):
    """Above ``rows`` rows a side, the rounds run on a sample of that side; the final pass links every row.

    Only a growth rule whose final pass links every row from the pool
    (``ValidatedPromotion`` with its decoy or map pass) samples; the other
    rules always run on every row. ``GEHLinker(sample=None)``: every round
    on every row.

    Parameters
    ----------
    rows : int
        Rows a side in the sample, the seeds included, ``>= 2`` (default 20,000).
    near_seeds : bool
        True (default): the rows most similar to any seed row of their side,
        so a row's partner is far more often in the other side's sample;
        False: random rows.
    """

    kind = "rows"
    rows: int = 20_000
    near_seeds: bool = True

    def __post_init__(self):
        set_checked(self, rows=check_int(self.rows, "rows", low=2), near_seeds=bool(self.near_seeds))

    def draw(self, X: np.ndarray, keep: np.ndarray, rng: np.random.Generator) -> Optional[np.ndarray]:
        """Sorted rows of ``X``: ``keep`` plus ``rows - len(keep)`` others; None when ``X`` has no more
        rows than that (every row). Nearest rows: largest cosine to any kept row, ties to the lower row."""
        n = len(X)
        size = max(self.rows, len(keep))
        if n <= size:
            return None
        if self.near_seeds:
            K = np.asarray(X[keep], np.float32).T
            near = np.empty(n, np.float32)
            for s in range(0, n, ROW_CHUNK):  # chunks: X may be float16 or memory-mapped
                near[s : s + ROW_CHUNK] = np.max(np.asarray(X[s : s + ROW_CHUNK], np.float32) @ K, axis=1)
            near[keep] = np.inf
            return np.sort(np.argsort(-near, kind="stable")[:size])
        rest = np.setdiff1d(np.arange(n), keep)
        return np.sort(np.concatenate([keep, rng.choice(rest, size - len(keep), replace=False)]))
