"""Linearisation of a pooled, normalised sentence embedding in the last FFN output dense.

A BERT-style output block computes, per token ``t``,

    u_t = W a_t + b + r_t,    y_t = gamma * (u_t - mean(u_t)) / sigma_t + beta,

(``a_t`` the FFN activations, ``r_t`` the residual, ``sigma_t = sqrt(var(u_t) + eps)``)
and the sentence embedding is ``e = m / |m|`` with ``m = sum_t w_t y_t`` (``w_t``
the pooling weights: mask / n for mean pooling). A weight change ``dW`` (the
bias as the last column, layer input ``x_t = [a_t; 1]``) moves ``e`` by

    de = K sum_t (w_t / sigma_t) gamma * Pi_t dW x_t,
    K = (I - e e^T) / |m|,   Pi_t = I - 1 1^T / D - xh_t xh_t^T / D,

(``xh_t = (u_t - mean) / sigma_t``). The only per-token factor that does not
factor out of the sum is the rank-one ``xh_t xh_t^T / D`` of ``Pi_t``;
replacing ``Pi_t`` by its weighted token average ``Pi = sum_t wt_t Pi_t``
(``wt_t`` proportional to ``w_t / sigma_t``) gives the pooled linearisation

    de ~= M dW x,    M = K diag(gamma) Pi,    x = sum_t (w_t / sigma_t) x_t,

exact in the 1/sigma_t scaling, the mean-centring and the normalisation,
approximate only in that rank-one term (the average is kept to ``rank``
directions by an SVD). This is the official UEC code's "pool the FFN
activations, then apply the dense" with the LayerNorm and the L2
normalisation linearised instead of dropped.

:class:`PooledLinearisation` holds ``e``, ``|m|``, ``x`` and the directions of
``Pi`` for ``n`` inputs and applies ``M`` and ``M^T`` without forming ``M``
for more than a chunk of inputs at a time. All float64, numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

__all__ = ["PooledLinearisation"]


@dataclass(frozen=True)
class PooledLinearisation:
    """Per-input first-order model ``e(W + dW) ~= e + M dW x`` (see the module docstring).

    Parameters
    ----------
    embeddings : ndarray (n, D)
        The normalised embeddings ``e`` at the pretrained weights (the mean).
    norms : ndarray (n,)
        ``|m|``, the pooled embedding's norm before normalisation.
    inputs : ndarray (n, D_in)
        The pooled, ``1/sigma``-weighted layer inputs ``x`` (bias coordinate last).
    ln_weight : ndarray (D,)
        The LayerNorm's ``gamma``.
    ln_dirs : ndarray (n, r, D)
        Rows ``v`` with ``sum_v v v^T`` the token-averaged ``xh xh^T / D``.
    """

    embeddings: np.ndarray
    norms: np.ndarray
    inputs: np.ndarray
    ln_weight: np.ndarray
    ln_dirs: np.ndarray

    def __post_init__(self):
        n, D = self.embeddings.shape
        if self.norms.shape != (n,) or self.inputs.shape[0] != n or self.ln_dirs.shape[::2] != (n, D):
            raise ValueError(
                f"inconsistent shapes: embeddings {self.embeddings.shape}, norms {self.norms.shape}, "
                f"inputs {self.inputs.shape}, ln_dirs {self.ln_dirs.shape}"
            )
        if self.ln_weight.shape != (D,):
            raise ValueError(f"ln_weight has shape {self.ln_weight.shape}, expected ({D},)")

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def in_dim(self) -> int:
        return int(self.inputs.shape[1])

    def __getitem__(self, idx) -> PooledLinearisation:
        idx = np.atleast_1d(np.arange(len(self))[idx])
        return PooledLinearisation(
            self.embeddings[idx], self.norms[idx], self.inputs[idx], self.ln_weight, self.ln_dirs[idx]
        )

    @staticmethod
    def concatenate(parts: Sequence[PooledLinearisation]) -> PooledLinearisation:
        """Stack several linearisations of the same layer (``ln_dirs`` padded to the largest rank)."""
        parts = list(parts)
        if not parts:
            raise ValueError("parts must not be empty")
        r = max(p.ln_dirs.shape[1] for p in parts)
        dirs = [np.pad(p.ln_dirs, ((0, 0), (0, r - p.ln_dirs.shape[1]), (0, 0))) for p in parts]
        return PooledLinearisation(
            np.concatenate([p.embeddings for p in parts]),
            np.concatenate([p.norms for p in parts]),
            np.concatenate([p.inputs for p in parts]),
            parts[0].ln_weight,
            np.concatenate(dirs),
        )

    # ------------------------------------------------------------------ the Jacobian M = K diag(gamma) Pi
    def _k(self, Z: np.ndarray, axis: int) -> np.ndarray:
        """``K z = (z - e (e . z)) / |m|`` along ``axis`` (1 or 2) of ``Z`` (n, ., .)."""
        e = self.embeddings
        if axis == 2:
            return (Z - e[:, None, :] * np.matmul(Z, e[:, :, None])) / self.norms[:, None, None]
        return (Z - e[:, :, None] * np.matmul(e[:, None, :], Z)) / self.norms[:, None, None]

    def rmatvec(self, V: np.ndarray) -> np.ndarray:
        """``M_u^T v`` for every vector ``V[u, k]`` (shape (n, k, D)): the gradient w.r.t. the layer output."""
        Y = self._k(np.asarray(V, dtype=np.float64), 2) * self.ln_weight
        Y -= Y.mean(axis=-1, keepdims=True)
        dirs = np.ascontiguousarray(self.ln_dirs)
        return Y - np.matmul(np.matmul(Y, np.ascontiguousarray(dirs.transpose(0, 2, 1))), dirs)  # Pi is symmetric

    def jacobian(self, basis: Optional[np.ndarray] = None) -> np.ndarray:
        """``M_u @ basis`` for every input (shape (n, D, D')); ``basis=None`` gives ``M_u`` itself."""
        n, D = self.embeddings.shape
        U = np.eye(D) if basis is None else np.asarray(basis, dtype=np.float64)
        r = self.ln_dirs.shape[1]
        dU = (np.ascontiguousarray(self.ln_dirs).reshape(n * r, D) @ U).reshape(n, r, -1)  # dirs U
        Z = np.matmul(np.ascontiguousarray(self.ln_dirs.transpose(0, 2, 1)), dU)  # dirs^T dirs U
        np.subtract(U - U.mean(axis=0, keepdims=True), Z, out=Z)  # Pi U
        Z *= self.ln_weight[None, :, None]
        return self._k(Z, 1)

    def propagate(self, basis: Optional[np.ndarray], weights: np.ndarray) -> np.ndarray:
        """Diagonal of ``M_u C_u M_u^T`` for ``C_u = basis diag(weights[u]) basis^T`` (identity basis if None).

        ``C_u`` is the covariance of ``dW x_u``; the result is the variance of the
        normalised embedding, shape (n, D).

        Notes
        -----
        With ``Q = Pi U = Ubar - V^T (V U)`` (``Ubar`` = ``U`` with centred
        columns, shared; ``V`` the ``r`` LayerNorm directions) and
        ``c = (e * gamma)^T Q``, ``(M U)_kg = (gamma_k Q_kg - e_k c_g) / |m|``, so
        ``|m|^2 v_k = gamma_k^2 sum_g w_g Q_kg^2 - 2 gamma_k e_k sum_g w_g c_g Q_kg
        + e_k^2 sum_g w_g c_g^2``; every sum is a GEMM over all inputs or
        ``O(r D)`` per input (``M`` is never formed).
        """
        w = np.asarray(weights, dtype=np.float64)
        n, D = self.embeddings.shape
        U = np.eye(D) if basis is None else np.asarray(basis, dtype=np.float64)
        Ub = U - U.mean(axis=0, keepdims=True)
        V = np.ascontiguousarray(self.ln_dirs)  # (n, r, D)
        r = V.shape[1]
        dU = (V.reshape(n * r, D) @ U).reshape(n, r, -1)  # V U, (n, r, D')
        wdU = w[:, None, :] * dU
        # sum_g w_g Q_kg^2 = (Ubar^2 w)_k - 2 sum_r V_rk (Ubar (w dU_r))_k + sum_rs V_rk V_sk (dU_r . w dU_s)
        q2 = w @ (Ub * Ub).T
        q2 -= 2.0 * np.einsum("nrk,nrk->nk", V, (wdU.reshape(n * r, -1) @ Ub.T).reshape(n, r, D))
        G = np.matmul(dU, wdU.transpose(0, 2, 1))  # (n, r, r)
        q2 += np.einsum("nrk,nrk->nk", V, np.matmul(G, V))
        eg = self.embeddings * self.ln_weight
        c = eg @ Ub - np.einsum("nr,nrg->ng", np.einsum("nrk,nk->nr", V, eg), dU)  # (n, D')
        wc = w * c
        cq = wc @ Ub.T - np.einsum("nrk,nr->nk", V, np.einsum("nrg,ng->nr", dU, wc))  # sum_g w_g c_g Q_kg
        e, g = self.embeddings, self.ln_weight
        var = g * g * q2 - 2.0 * g * e * cq + e * e * np.sum(wc * c, axis=1, keepdims=True)
        return var / (self.norms**2)[:, None]
