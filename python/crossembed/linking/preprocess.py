"""Per-side preprocessing before GEH: centre (and optionally whiten) each cloud on its own rows.

Contrastive encoders are anisotropic: their vectors share a large common
component, so cosine and kernel similarities are dominated by it and every
row looks like every other. Subtracting each side's own column mean removes
it; this needs no correspondence between the sides, so it is legal on
black-box outputs (docs/linking.md measures what it changes).

``GEHLinker(center=...)`` takes :class:`Center` (default), :class:`Whiten`
or None (unit rows only, the paper as written).
"""

from __future__ import annotations

import numpy as np

from crossembed._config import Configured
from crossembed._validation import check_fraction
from crossembed.linking._inputs import unit_rows

__all__ = ["Center", "Whiten", "centred_unit_rows"]


def centred_unit_rows(X: np.ndarray) -> np.ndarray:
    """Unit rows of ``X``, minus their column mean, as unit rows again (float64 before the last step)."""
    C = unit_rows(X).astype(np.float64)
    C -= C.mean(axis=0)
    return C


class Center(Configured):
    """Unit rows, minus each side's own column mean, unit rows again (the default)."""

    kind = "center"

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``(N, D)`` float32 unit rows of ``X`` after centring (zero rows stay zero)."""
        if len(X) < 2:
            return unit_rows(X)
        return unit_rows(centred_unit_rows(X))


class Whiten(Configured):
    """As :class:`Center`, then PCA-whitened with eigenvalues shrunk towards their mean.

    Parameters
    ----------
    shrinkage : float
        Weight of the mean eigenvalue in the whitening denominator, in
        ``[0, 1]`` (default 0.1): near-null directions are not blown up.
    """

    kind = "whiten"

    def __init__(self, *, shrinkage: float = 0.1):
        self.shrinkage = check_fraction(shrinkage, "shrinkage", allow_zero=True)

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``(N, D)`` float32 unit rows of ``X`` after centring and whitening."""
        if len(X) < 2:
            return unit_rows(X)
        C = centred_unit_rows(X)
        evals, evecs = np.linalg.eigh(C.T @ C / len(C))
        evals = np.maximum(evals, 0.0)
        denom = np.sqrt((1.0 - self.shrinkage) * evals + self.shrinkage * evals.mean() + 1e-12)
        return unit_rows((C @ evecs) / denom)
