"""The diagonal Gaussian embedding container shared by every UEC part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from crossembed._rows import row_norms
from crossembed._validation import as_matrix

__all__ = ["GaussianEmbedding", "normalize_gaussian"]


@dataclass(frozen=True)
class GaussianEmbedding:
    """``n`` diagonal Gaussians ``N(mean[i], diag(var[i]))``.

    Attributes
    ----------
    mean : ndarray, shape (n, D), float32
    var : ndarray, shape (n, D), float32, >= 0
    weights : ndarray, shape (n, K), float32, optional
        Per-input ensemble coefficients (rows sum to 1) when produced by
        :class:`~crossembed.uec.UECEnsemble`.
    """

    mean: np.ndarray
    var: np.ndarray
    weights: Optional[np.ndarray] = None

    def __post_init__(self):
        mean = as_matrix(self.mean, "mean", allow_empty=True)
        var = as_matrix(self.var, "var", nonnegative=True, allow_empty=True)
        if var.shape != mean.shape:
            raise ValueError(f"var has shape {var.shape} but mean has shape {mean.shape}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "var", var)
        if self.weights is not None:
            w = as_matrix(self.weights, "weights", nonnegative=True, allow_empty=True)
            if w.shape[0] != mean.shape[0]:
                raise ValueError(f"weights has {w.shape[0]} rows but mean has {mean.shape[0]}")
            object.__setattr__(self, "weights", w)

    def __len__(self) -> int:
        return self.mean.shape[0]

    @property
    def dim(self) -> int:
        return self.mean.shape[1]

    def __getitem__(self, rows) -> GaussianEmbedding:
        """Select rows (int, slice, index array or boolean mask)."""
        if isinstance(rows, (int, np.integer)):
            rows = [int(rows)]
        w = None if self.weights is None else self.weights[rows]
        return GaussianEmbedding(self.mean[rows], self.var[rows], w)

    def trace(self) -> np.ndarray:
        """``tr(Sigma)`` per row, float64 (the uncertainty UEC weights by)."""
        return self.var.sum(axis=1, dtype=np.float64)

    def normalized(self) -> GaussianEmbedding:
        """Means scaled to unit length, variances by the same factor squared.

        ``x / |mu|`` is a linear map, so the diagonal variance scales by
        ``1 / |mu|^2``; a zero mean stays zero.
        """
        return normalize_gaussian(self)


def normalize_gaussian(g: GaussianEmbedding) -> GaussianEmbedding:
    """See :meth:`GaussianEmbedding.normalized`."""
    norm = row_norms(g.mean.astype(np.float64))
    scale = np.where(norm > 0, 1.0 / np.maximum(norm, 1e-300), 1.0)
    return GaussianEmbedding((g.mean * scale).astype(np.float32), (g.var * scale**2).astype(np.float32), g.weights)
