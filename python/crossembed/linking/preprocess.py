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

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from crossembed._config import Configured
from crossembed._validation import check_fraction, default_num_threads
from crossembed.linking._inputs import ROW_CHUNK, unit_rows

__all__ = ["Center", "Whiten", "centred_unit_rows"]


def centred_unit_rows(X: np.ndarray) -> np.ndarray:
    """Unit rows of ``X``, minus their column mean, as unit rows again (float64 before the last step)."""
    C = unit_rows(X).astype(np.float64)
    C -= C.mean(axis=0)
    return C


def _wide(X: np.ndarray) -> np.ndarray:
    """float16 rows as float32 (numpy's float16 arithmetic is slow and rounds the norms); others as they are."""
    return X.astype(np.float32) if X.dtype == np.float16 else X


class Center(Configured):
    """Unit rows, minus each side's own column mean, unit rows again (the default).

    Parameters
    ----------
    copy : bool
        True (default): a new array. False: the rows are centred in place
        when the input is a writable float32 or float16 array (a large fit
        then holds no second copy of either side); otherwise a new array.
    """

    kind = "center"

    def __init__(self, *, copy: bool = True):
        self.copy = bool(copy)

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``(N, D)`` unit rows of ``X`` after centring (zero rows stay zero): float16 for float16
        input, else float32. Computed in chunks of rows; the mean is summed in float64 per chunk."""
        if len(X) < 2:
            return unit_rows(X)
        starts = range(0, len(X), ROW_CHUNK)
        with ThreadPoolExecutor(max_workers=default_num_threads()) as pool:  # numpy releases the GIL
            # the chunks' sums are added in chunk order: the mean does not depend on the threads
            mean = np.zeros(X.shape[1])
            for part in pool.map(
                lambda s: unit_rows(_wide(X[s : s + ROW_CHUNK])).astype(np.float64).sum(axis=0), starts
            ):
                mean += part
            mean /= len(X)
            dtype = np.float16 if X.dtype == np.float16 else np.float32
            in_place = not self.copy and X.dtype == dtype and X.flags.writeable and X.flags.c_contiguous
            out = X if in_place else np.empty(X.shape, dtype)

            def centre(s: int) -> None:
                C = unit_rows(_wide(X[s : s + ROW_CHUNK])).astype(np.float64)
                C -= mean
                out[s : s + ROW_CHUNK] = unit_rows(C)

            list(pool.map(centre, starts))
        return out


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
