"""How the decoy pass scores a candidate link: rows of both sides, fitted on anchor pairs, whose dot
products are the scores.

* :class:`CCAMap` (the default): regularised canonical correlation analysis.
  Each side is whitened by its anchors' covariance, shrunk toward a multiple
  of the identity; the cross-covariance of the whitened anchors gives the
  canonical directions, and a row becomes its coordinates along them, each
  scaled by its canonical correlation. Both sides are mapped, into
  ``min(D_A, D_B)`` dimensions, and directions the anchors hardly agree on
  count little.
* :class:`RidgeMap`: a ridge map from A to B.

A scorer is any object with ``rows(A, B, pairs) -> (XA, XB)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from crossembed._config import Configured, set_checked
from crossembed._validation import check_fraction, check_int, check_positive
from crossembed.linking.preprocess import unit_rows
from crossembed.linking.refine import ridge_map_rows

__all__ = ["CCAMap", "RidgeMap"]

Rows = Tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True, kw_only=True)
class CCAMap(Configured):
    """Scores of regularised CCA fitted on anchor pairs (module docstring).

    Parameters
    ----------
    shrinkage : float
        Weight in (0, 1] of the identity in each side's covariance
        ``(1 - s) C + s tr(C) / D I``: the anchors are few against the
        dimensions, and their raw covariance whitens noise into signal
        (default 0.5).
    n_components : int or None
        Canonical directions kept, the most correlated first; fewer make
        every score cheaper, and the weak directions count little anyway
        (default None: all ``min(D_A, D_B)``).
    """

    kind = "cca"
    shrinkage: float = 0.5
    n_components: Optional[int] = None

    def __post_init__(self):
        n = self.n_components
        set_checked(
            self,
            shrinkage=check_fraction(self.shrinkage, "shrinkage"),
            n_components=None if n is None else check_int(n, "n_components", low=1),
        )

    def rows(self, A: np.ndarray, B: np.ndarray, pairs: np.ndarray) -> Rows:
        """float32 C-contiguous unit rows of A and of B, ``min(D_A, D_B, n_components)`` wide: row ``i``
        of the first dotted with row ``j`` of the second is the score of linking A row ``i`` to B row ``j``.

        With ``C_A = V_A W_A V_A'`` (shrunk, eigendecomposed) and likewise for B, the whitened
        cross-covariance ``C_A^(-1/2) C_AB C_B^(-1/2)`` is ``V_A N V_B'`` with ``N = W_A^(-1/2) V_A'
        C_AB V_B W_B^(-1/2)``; the canonical directions scaled by their correlations are ``N V``
        and ``V S`` for ``N'N = V S^2 V'``. That takes one small symmetric eigendecomposition
        instead of an SVD of ``N`` (``D_A x D_B``), and divides by no
        correlation, so directions the anchors hardly agree on stay finite."""
        PA = np.asarray(A[pairs[:, 0]], np.float64)
        PB = np.asarray(B[pairs[:, 1]], np.float64)
        n = len(pairs)
        wa, VA = _shrunk_eigh(PA.T @ PA / n, self.shrinkage)
        wb, VB = _shrunk_eigh(PB.T @ PB / n, self.shrinkage)
        ha, hb = VA / np.sqrt(wa), VB / np.sqrt(wb)  # C^(-1/2) = h V', so h' C_AB h_B = N
        N = ha.T @ (PA.T @ PB / n) @ hb
        flip = N.shape[0] < N.shape[1]  # the eigendecomposition of the smaller Gram matrix
        G = N @ N.T if flip else N.T @ N
        s2, V = np.linalg.eigh(G)
        keep = slice(None, None, -1) if self.n_components is None else slice(None, -self.n_components - 1, -1)
        s2, V = s2[keep], V[:, keep]  # most correlated first
        scaled = V * np.sqrt(np.maximum(s2, 0.0))  # the canonical directions of the small side, times S
        other = (N.T @ V) if flip else (N @ V)  # the other side's, times S
        ua, ub = (scaled, other) if flip else (other, scaled)
        XA = unit_rows(A @ (ha @ ua).astype(np.float32))
        XB = unit_rows(B @ (hb @ ub).astype(np.float32))
        return np.ascontiguousarray(XA, np.float32), np.ascontiguousarray(XB, np.float32)


@dataclass(frozen=True, kw_only=True)
class RidgeMap(Configured):
    """Scores through ridge maps fitted on anchor pairs: ``cos(A W, B)``, ``W`` the map from A to B.

    Parameters
    ----------
    lam : float
        Ridge penalty, ``> 0`` (default 1.0).
    """

    kind = "ridge"
    lam: float = 1.0

    def __post_init__(self):
        set_checked(self, lam=check_positive(self.lam, "lam"))

    def rows(self, A: np.ndarray, B: np.ndarray, pairs: np.ndarray) -> Rows:
        """float32 C-contiguous rows of A and of B: row ``i`` of the first dotted with row ``j`` of
        the second is the score of linking A row ``i`` to B row ``j``."""
        W = ridge_map_rows(A, B, pairs, lam=self.lam)
        return np.ascontiguousarray(unit_rows(A @ W), np.float32), np.ascontiguousarray(B, np.float32)


def _shrunk_eigh(gram: np.ndarray, shrinkage: float) -> Tuple[np.ndarray, np.ndarray]:
    """Eigenvalues and eigenvectors of ``C = (1 - s) gram + s tr(gram) / D I`` (eigenvalues floored
    at a tiny multiple of the largest so that a zero side still inverts)."""
    d = len(gram)
    C = (1.0 - shrinkage) * gram + shrinkage * np.trace(gram) / d * np.eye(d)
    w, V = np.linalg.eigh(C)
    return np.maximum(w, 1e-12 * max(float(w[-1]), 1e-300)), V
