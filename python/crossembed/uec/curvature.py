"""Curvature of an in-batch InfoNCE loss w.r.t. a linear layer's weights.

The closed-form GEMM expressions behind the posterior forms of
:mod:`crossembed.uec.posteriors` (all float64, no per-pair Jacobians):

* :func:`diag_curvature`, :func:`kron_factors` - an identity-initialised head
  on normalised embeddings (``e = W h``, ``W = I``);
* :func:`linearised_diag_curvature`, :func:`linearised_kron_factors` - any
  layer whose effect on the normalised embedding is linearised per input as
  ``de_u = M_u dW x_u`` (e.g. the last FFN dense of a transformer,
  :class:`~crossembed.uec.linearisation.PooledLinearisation`). With
  ``M_u = I`` and ``x_u = e_u`` they reduce to the head functions.
"""

from __future__ import annotations

from typing import Protocol, Tuple

import numpy as np

from crossembed._rows import softmax_rows

__all__ = [
    "diag_curvature",
    "kron_factors",
    "linearised_diag_curvature",
    "linearised_kron_factors",
]


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
    probs = softmax_rows(A @ P.T / tau)
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
    probs = softmax_rows(A @ P.T / tau)
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


class Linearised(Protocol):
    """Per-input first-order model of the normalised embedding: ``e_u(W + dW) ~= e_u + M_u dW x_u``."""

    embeddings: np.ndarray  # (n, D) e_u
    inputs: np.ndarray  # (n, D_in) x_u

    def rmatvec(self, V: np.ndarray) -> np.ndarray:
        """``M_u^T V[u, k]`` for ``V`` of shape (n, k, D); shape (n, k, D_out)."""


def _logit_jacobian_parts(A: Linearised, P: Linearised, tau: float):
    """Softmax probabilities and the two output-side factors of ``d s_bc / d W``.

    ``s_bc = e_{a_b} . e_{p_c} / tau``; ``tau d s_bc = r_bc x_{a_b}^T + q_bc x_{p_c}^T`` with
    ``r_bc = M_{a_b}^T e_{p_c}`` and ``q_bc = M_{p_c}^T e_{a_b}`` (both (B, B, D_out), index [b, c]).
    """
    Ea, Ep = A.embeddings, P.embeddings
    B = len(Ea)
    probs = softmax_rows(Ea @ Ep.T / tau)
    r = A.rmatvec(np.broadcast_to(Ep, (B,) + Ep.shape))
    q = P.rmatvec(np.broadcast_to(Ea, (B,) + Ea.shape)).transpose(1, 0, 2)
    return probs, r, q


def _pair_products(Xa: np.ndarray, Xp: np.ndarray) -> np.ndarray:
    """``(B*B, D_in)``: row ``b*B + c`` is ``Xa[b] * Xp[c]``."""
    return (Xa[:, None, :] * Xp[None, :, :]).reshape(len(Xa) * len(Xp), -1)


def _column_square_sum(alpha: np.ndarray, q: np.ndarray, Xp: np.ndarray) -> np.ndarray:
    """``sum_b (sum_c alpha_bc q_bc x_c^T)**2`` elementwise = ``sum_{c,k} S_ck (x_c * x_k)^T``.

    ``S_ck = sum_b alpha_bc alpha_bk q_bc * q_bk``, batched over the output dimension.
    """
    B = len(Xp)
    aq = np.ascontiguousarray((alpha[:, :, None] * q).transpose(2, 0, 1))  # (D_out, b, c)
    S = np.matmul(aq.transpose(0, 2, 1), aq).transpose(1, 2, 0).reshape(B * B, -1)  # [c, k] -> (D_out,)
    return S.T @ _pair_products(Xp, Xp)


def linearised_diag_curvature(A: Linearised, P: Linearised, *, tau: float, curvature: str = "ggn") -> np.ndarray:
    """Diagonal InfoNCE curvature of one batch w.r.t. a linearised layer's weights.

    Parameters
    ----------
    A, P : Linearised
        Anchors and positives of ``B`` pairs (row ``b`` of each is a pair).
    tau : float
    curvature : {"ggn", "ef"}
        GGN: ``sum_b J_b^T (diag p_b - p_b p_b^T) J_b`` with ``J_b = d s_b / d W``;
        EF: sum of squared per-pair gradients (as :func:`diag_curvature`).

    Returns
    -------
    ndarray (D_out, D_in), float64

    Notes
    -----
    With ``tau J_bc = r_bc x_{a_b}^T + q_bc x_{p_c}^T`` both forms are
    ``sum_b (g_b x_{a_b}^T + sum_c alpha_bc q_bc x_{p_c}^T)**2`` (EF: ``alpha =
    p - I``, ``g_b = sum_c alpha_bc r_bc``), the GGN minus it with ``alpha = p``
    after ``E_c[J_bc**2]``; the ``x_a * x_p`` cross terms share one GEMM, the
    ``x_p * x_p`` terms another.
    """
    if curvature not in ("ggn", "ef"):
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    probs, r, q = _logit_jacobian_parts(A, P, tau)
    Xa, Xp = np.asarray(A.inputs, dtype=np.float64), np.asarray(P.inputs, dtype=np.float64)
    B = len(Xa)
    if curvature == "ef":
        alpha = probs - np.eye(B)
        g = np.einsum("bc,bcd->bd", alpha, r)
        out = (g * g).T @ (Xa * Xa)
        cross = (alpha[:, :, None] * g[:, None, :] * q).reshape(B * B, -1)
        out += 2.0 * (cross.T @ _pair_products(Xa, Xp))
        return (out + _column_square_sum(alpha, q, Xp)) / tau**2
    # E_c[J_bc**2] = r^2 x_a^2 + 2 r q x_a x_p + q^2 x_p^2, minus (E_c J_bc)^2 = (rbar x_a^T + sum_c p q x_p^T)^2
    rbar = np.einsum("bc,bcd->bd", probs, r)
    out = (np.einsum("bc,bcd->bd", probs, r * r) - rbar * rbar).T @ (Xa * Xa)
    out += np.einsum("bc,bcd->cd", probs, q * q).T @ (Xp * Xp)
    cross = (probs[:, :, None] * (r - rbar[:, None, :]) * q).reshape(B * B, -1)
    out += 2.0 * (cross.T @ _pair_products(Xa, Xp))
    return (out - _column_square_sum(probs, q, Xp)) / tau**2


def linearised_kron_factors(
    A: Linearised, P: Linearised, *, tau: float, curvature: str = "ggn"
) -> Tuple[np.ndarray, np.ndarray, int]:
    """K-FAC factors of one InfoNCE batch for a linearised layer (see :func:`kron_factors`).

    The output side of input ``u`` is ``d s / d z_u`` with ``z_u = W x_u``:
    ``r_bc / tau`` for anchor ``b`` (row ``b`` of the logits), ``q_bc / tau``
    for positive ``c`` (column ``c``).
    """
    if curvature not in ("ggn", "ef"):
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    probs, r, q = _logit_jacobian_parts(A, P, tau)
    Xa, Xp = np.asarray(A.inputs, dtype=np.float64), np.asarray(P.inputs, dtype=np.float64)
    B = len(Xa)
    input_sum = Xa.T @ Xa + Xp.T @ Xp
    if curvature == "ef":
        alpha = probs - np.eye(B)
        g_a = np.einsum("bc,bcd->bd", alpha, r) / tau
        g_p = np.einsum("bc,bcd->cd", alpha, q) / tau
        output_sum = g_a.T @ g_a + g_p.T @ g_p
    else:
        rs = (np.sqrt(probs)[:, :, None] * r).reshape(B * B, -1)
        rbar = np.einsum("bc,bcd->bd", probs, r)
        qs = (np.sqrt(probs * (1.0 - probs))[:, :, None] * q).reshape(B * B, -1)
        output_sum = (rs.T @ rs - rbar.T @ rbar + qs.T @ qs) / tau**2
    return input_sum, output_sum, 2 * B
