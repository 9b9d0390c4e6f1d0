"""Per-side preprocessing before GEH: unit rows, each cloud centred on its own rows.

Contrastive encoders are anisotropic: their vectors share a large common
component, so cosine and kernel similarities are dominated by it and every
row looks like every other. Subtracting each side's own column mean removes
it; this needs no correspondence between the sides, so it is legal on
black-box outputs.

``GEHLinker(center=...)`` takes :class:`Center` (default), any object with
``apply(X) -> unit rows``, or None (:func:`unit_rows` only, the paper as written).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from crossembed._config import Configured, set_checked
from crossembed._rows import unit_rows as _unit_rows
from crossembed._validation import default_num_threads
from crossembed.linking._inputs import ROW_CHUNK

__all__ = ["Center", "unit_rows"]


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in ``X``'s own dtype (zero rows stay zero), as C-contiguous float32."""
    return np.ascontiguousarray(_unit_rows(X, dtype=None), dtype=np.float32)


def _wide(X: np.ndarray) -> np.ndarray:
    """float16 rows as float32 (numpy's float16 arithmetic is slow and rounds the norms); others as they are."""
    return X.astype(np.float32) if X.dtype == np.float16 else X


@dataclass(frozen=True, kw_only=True)
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
    copy: bool = True

    def __post_init__(self):
        set_checked(self, copy=bool(self.copy))

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
