"""Curvature of an in-batch InfoNCE loss w.r.t. an identity-initialised linear head.

The closed-form GEMM expressions behind the posterior forms of
:mod:`crossembed.uec.posteriors` (all float64, no per-pair Jacobians).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

__all__ = ["diag_curvature", "kron_factors", "normalize_rows"]


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero), float64."""
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def diag_curvature(A: np.ndarray, P: np.ndarray, *, tau: float, curvature: str = "ggn") -> np.ndarray:
    """Diagonal curvature of one in-batch InfoNCE batch w.r.t. the identity head.

    Parameters
    ----------
    A, P : ndarray, shape (B, D)
        Normalised anchor and positive embeddings (row ``b`` of each is a pair).
    tau : float
        InfoNCE temperature.
    curvature : {"ggn", "ef"}

    Returns
    -------
    ndarray, shape (D, D), float64
        ``H[i, j]`` for weight ``W[i, j]`` (output ``i``, input ``j``).

    Notes
    -----
    At ``W = I`` the logit Jacobian is ``ds_bc / dW_ij = (p_c[i] a_b[j] +
    a_b[i] p_c[j]) / tau`` and the per-pair gradient is ``g_b a_b^T + a_b
    g_b^T`` with ``g_b = (sum_c p_bc p_c - p_b) / tau``; both squares expand
    into a few GEMMs.
    """
    A = np.asarray(A, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    probs = _softmax_rows(A @ P.T / tau)
    if curvature == "ef":
        g = (probs @ P - P) / tau
        return _sym_square_sum(g, A)
    if curvature != "ggn":
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    B, D = A.shape
    # E_c[J_c^2] part: sum_c p_bc (p_c[i] a[j] + a[i] p_c[j])^2
    m = probs @ (P * P)  # (B, D): sum_c p_bc p_c[i]^2
    term = m.T @ (A * A)
    first = term + term.T
    x = (np.sqrt(probs)[:, :, None] * A[:, None, :] * P[None, :, :]).reshape(B * B, D)
    first += 2.0 * (x.T @ x)
    # minus (E_c[J_c])^2 with E_c[J_c] = pbar a^T + a pbar^T
    pbar = probs @ P
    return (first - _sym_square_sum(pbar, A)) / tau**2


def _sym_square_sum(g: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``sum_b (g_b a_b^T + a_b g_b^T)**2`` elementwise, as GEMMs."""
    t = (g * g).T @ (a * a)
    ga = g * a
    return t + t.T + 2.0 * (ga.T @ ga)


def kron_factors(
    A: np.ndarray, P: np.ndarray, *, tau: float, curvature: str = "ggn"
) -> Tuple[np.ndarray, np.ndarray, int]:
    """K-FAC factors of one InfoNCE batch for the shared head.

    Both the anchors and the positives pass through the head, so each batch
    contributes ``2B`` layer inputs.

    Returns
    -------
    input_sum : ndarray (D, D)
        ``sum_u h_u h_u^T`` over the ``2B`` inputs.
    output_sum : ndarray (D, D)
        ``sum_u G_u`` with ``G_u`` the output-side curvature of input ``u``:
        the outer product of the loss gradient w.r.t. ``z_u`` (``"ef"``) or
        ``J_u^T Lambda J_u`` with ``J_u = d logits / d z_u`` (``"ggn"``).
    count : int
        Number of inputs (``2B``).
    """
    A = np.asarray(A, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    probs = _softmax_rows(A @ P.T / tau)
    input_sum = A.T @ A + P.T @ P
    if curvature == "ef":
        g_a = (probs @ P - P) / tau
        resid = probs - np.eye(len(A))
        g_p = resid.T @ A / tau
        output_sum = g_a.T @ g_a + g_p.T @ g_p
    elif curvature == "ggn":
        pbar = probs @ P
        col = probs.sum(axis=0)
        out_a = (P * col[:, None]).T @ P - pbar.T @ pbar  # sum_b P^T (diag p_b - p_b p_b^T) P
        w = (probs * (1.0 - probs)).sum(axis=1)  # per anchor b: sum_c p_bc (1 - p_bc)
        out_p = (A * w[:, None]).T @ A
        output_sum = (out_a + out_p) / tau**2
    else:
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    return input_sum, output_sum, 2 * len(A)
