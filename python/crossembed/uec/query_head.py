"""A linear map of each model's queries fitted on the fit pairs (``ScoreMixing(query_head=...)``).

The Laplace posterior treats the frozen encoder's last layer as the MAP of
its own training loss: its mean is the pretrained embedding. The fit pairs
say how queries *of this task* should land near their documents, and a
frozen encoder ignores that (a WordNet example sentence is not written like
its gloss; a German word is not where minilm puts English ones). The query
head is the MAP of a ``D x D`` map ``W`` under the same in-batch InfoNCE loss
the posterior is built on, applied to the anchors only, with a Gaussian prior
centred at the identity::

    min_W  sum_i -log softmax_j(cos(a_i W, p_j) / tau)[i]  +  (c n / 2) |W - I|_F^2

(``p_j`` the distinct fit positives, so a repeated document is no negative of
itself). The penalty per pair ``c`` is chosen on 20 % of the pairs held out
(mean reciprocal rank of their positives among the held-out positives),
from :data:`PENALTIES` and the identity itself, then the head is refitted on
every pair; so a task whose pairs teach nothing keeps ``W = I``. Documents
are never mapped, so an index built before stays valid for any head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import numpy as np
from scipy.optimize import minimize
from tqdm.auto import tqdm

from crossembed._rows import row_norms, unit_rows

__all__ = ["PENALTIES", "QueryHead", "fit_query_head", "query_head_objective"]

#: penalties per pair searched on the held-out pairs (strongest first: each fit warm-starts the next)
PENALTIES = (0.3, 0.1, 0.03)
#: a cap on the pairs one fit sees (the loss is O(n^2 D) per step)
MAX_PAIRS = 4096
_HOLDOUT = 0.2
_MAX_ITER = 150


@dataclass
class QueryHead:
    """``q -> normalize(q W)`` for unit query means of one model."""

    weight: np.ndarray  # (D, D) float32; the identity when no penalty beat it on the held-out pairs
    penalty: float  # chosen penalty per pair (inf: the identity was kept)
    holdout_mrr: Dict[float, float]  # held-out MRR per penalty tried (inf: the identity)

    @property
    def is_identity(self) -> bool:
        return not np.isfinite(self.penalty)

    def apply(self, means: np.ndarray) -> np.ndarray:
        """(n, D) float32 unit mapped queries from (n, D) query means."""
        m = unit_rows(np.asarray(means, dtype=np.float32))
        if self.is_identity:
            return m.astype(np.float32)
        return unit_rows(m @ self.weight).astype(np.float32)


def query_head_objective(
    W: np.ndarray, A: np.ndarray, P: np.ndarray, labels: np.ndarray, *, tau: float, penalty: float
):
    """Loss and gradient of the module docstring's objective, per pair.

    ``A`` (n, D) unit anchors, ``P`` (m, D) unit distinct positives, ``labels``
    (n,) the row of ``P`` that answers each anchor; ``penalty`` is ``c``. The
    products run in ``A``'s dtype (the fit passes float32: twice as fast, and
    L-BFGS needs no more); the loss is summed and the gradient returned in float64.
    """
    n, D = A.shape
    W = np.asarray(W, dtype=np.float64)
    Qr = A @ W.astype(A.dtype)
    r = np.maximum(row_norms(Qr), 1e-12)
    Q = Qr / r
    L = (Q @ P.T) / tau
    L -= L.max(axis=1, keepdims=True)
    E = np.exp(L)
    Z = E.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    diff = W - np.eye(D)
    loss = float((np.log(Z[:, 0]) - L[rows, labels]).sum(dtype=np.float64)) / n
    loss += 0.5 * penalty * float((diff * diff).sum())
    G = E / Z
    G[rows, labels] -= 1.0
    dQ = (G @ P) / (tau * n)
    dQr = (dQ - Q * (Q * dQ).sum(axis=1, keepdims=True)) / r  # through the L2 normalisation
    grad = (A.T @ dQr).astype(np.float64) + penalty * diff
    return loss, grad


def _fit(A, P, labels, *, tau: float, penalty: float, start: np.ndarray) -> np.ndarray:
    D = A.shape[1]

    def f(w):
        loss, grad = query_head_objective(w.reshape(D, D), A, P, labels, tau=tau, penalty=penalty)
        return loss, grad.ravel()

    res = minimize(f, start.ravel(), jac=True, method="L-BFGS-B", options={"maxiter": _MAX_ITER})
    return res.x.reshape(D, D)


def _distinct(P: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Distinct positive rows and each pair's row among them."""
    unique, labels = np.unique(P, axis=0, return_inverse=True)
    return unique, labels.reshape(-1)


def _mrr(Q: np.ndarray, P: np.ndarray, labels: np.ndarray) -> float:
    S = Q @ P.T
    own = S[np.arange(len(Q)), labels]
    return float((1.0 / (1.0 + (S > own[:, None]).sum(axis=1))).mean())


def fit_query_head(
    anchors: np.ndarray,
    positives: np.ndarray,
    *,
    tau: float = 0.05,
    penalties: Sequence[float] = PENALTIES,
    random_state: int = 0,
    select: bool = True,
    show_progress_bar: bool = False,
) -> QueryHead:
    """Fit the query head on unit pair embeddings of one model (module docstring).

    Parameters
    ----------
    anchors, positives : (n, D) arrays
        Unit query and document embeddings of the fit pairs (row ``i`` pairs up).
    tau : float
        InfoNCE temperature (the posterior's ``loss_temperature``).
    penalties : sequence of float
        Penalties per pair tried on the held-out pairs, besides the identity.
    random_state : int
        Seed of the held-out split and of the subsample above :data:`MAX_PAIRS`.
    select : bool
        Choose the penalty on the held-out pairs (default True); False fits at the one penalty given on
        every pair, no identity compared (a refit at a penalty chosen before; the identity for none).
    show_progress_bar : bool
        One step per penalty tried, and the final fit.
    """
    A = np.asarray(anchors, dtype=np.float32)
    P = np.asarray(positives, dtype=np.float32)
    n, D = A.shape
    rng = np.random.default_rng(random_state)
    order = rng.permutation(n)[:MAX_PAIRS]
    n_hold = int(round(_HOLDOUT * len(order)))
    identity = np.eye(D)
    if not select:
        if len(penalties) > 1:
            raise ValueError(f"select=False fits at one penalty, got {len(penalties)}")
        if not penalties:
            return QueryHead(identity.astype(np.float32), float("inf"), {})
        Pa, la = _distinct(P[order])
        W = _fit(A[order], Pa, la, tau=tau, penalty=float(penalties[0]), start=identity)
        return QueryHead(W.astype(np.float32), float(penalties[0]), {})
    if n_hold < 2 or len(order) - n_hold < 2:  # too few pairs to tell a head from the identity
        return QueryHead(identity.astype(np.float32), float("inf"), {})
    hold, train = order[:n_hold], order[n_hold:]
    Pt, lt = _distinct(P[train])
    Ph, lh = _distinct(P[hold])
    scores = {float("inf"): _mrr(A[hold], Ph, lh)}
    W, fitted = identity, {}
    grid = sorted((float(c) for c in penalties), reverse=True)
    for c in tqdm(grid, desc="query head", disable=not show_progress_bar, leave=False):
        W = _fit(A[train], Pt, lt, tau=tau, penalty=c, start=W)
        fitted[c] = W
        scores[c] = _mrr(unit_rows(A[hold] @ W), Ph, lh)
    best = max(scores, key=lambda c: (scores[c], c))  # ties: the stronger penalty
    if not np.isfinite(best):
        return QueryHead(identity.astype(np.float32), best, scores)
    Pa, la = _distinct(P[order])
    W = _fit(A[order], Pa, la, tau=tau, penalty=best, start=fitted[best])
    return QueryHead(W.astype(np.float32), best, scores)
