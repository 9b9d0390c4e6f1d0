"""Posterior forms of the Laplace approximation, one class each behind one interface.

As in laplace-torch (``DiagLaplace``, ``KronLaplace``), a form decides how the
curvature is summarised and what follows from that summary; the fitting loop
(:class:`~crossembed.uec.LaplaceEmbedder`) is the same for all of them:

1. :meth:`Posterior.batch_statistics` of every InfoNCE batch, summed
   (statistics are additive, so held-out batches can be added later);
2. :meth:`Posterior.fit` turns the sums into the posterior's arrays;
3. :meth:`Posterior.curvature_eigenvalues` (with :attr:`Posterior.n_params` and
   :attr:`Posterior.map_sq_norm`) give the Laplace marginal likelihood,
   :meth:`Posterior.predictive_variance` the Gaussian embedding;
4. :meth:`Posterior.to_arrays` / :meth:`Posterior.from_arrays` save and load.

``DiagPosterior`` and ``KronPosterior`` live on an identity-initialised ``D x D``
head, so their inputs are the normalised embeddings and the MAP is ``I``. A
posterior on another layer (e.g. the last dense layer of the transformer)
implements the same methods on that layer's inputs and overrides
:attr:`Posterior.map_sq_norm` with the norm of its pretrained weights.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Dict, Tuple, Type, Union

import numpy as np

from crossembed.uec.curvature import diag_curvature, kron_factors

__all__ = ["DiagPosterior", "KronPosterior", "Posterior", "posterior_class"]

Statistics = Dict[str, np.ndarray]


class Posterior(ABC):
    """A Gaussian posterior over a layer's weights, from summed batch curvature.

    Subclasses set :attr:`name` (the ``hessian=`` string and the saved form)
    and :attr:`array_names` (the arrays :meth:`to_arrays` writes; saved files
    depend on them, so they never change for a released form).
    """

    name: ClassVar[str]
    array_names: ClassVar[Tuple[str, ...]]

    def __init__(self):
        self.dim_: int = 0  # output dimension, known once fitted

    # ------------------------------------------------------------------ fitting
    @abstractmethod
    def batch_statistics(self, A: np.ndarray, P: np.ndarray, *, tau: float, curvature: str) -> Statistics:
        """Additive curvature statistics of one batch of normalised pairs ``(A[b], P[b])``."""

    @abstractmethod
    def fit(self, totals: Statistics) -> Posterior:
        """Set the posterior from statistics summed over batches; returns ``self``."""

    @property
    def is_fitted(self) -> bool:
        return self.dim_ > 0

    # ------------------------------------------------------------------ what follows from it
    @abstractmethod
    def curvature_eigenvalues(self) -> np.ndarray:
        """Every eigenvalue of the (approximate) curvature, one per parameter."""

    @property
    def n_params(self) -> int:
        """Number of weights the posterior covers (``D^2`` for a ``D x D`` head)."""
        return self.dim_ * self.dim_

    @property
    def map_sq_norm(self) -> float:
        """``|W_MAP|_F^2`` under the zero-mean prior: ``D`` for the identity head."""
        return float(self.dim_)

    @abstractmethod
    def predictive_variance(self, H: np.ndarray, prior_precision: float) -> np.ndarray:
        """Diagonal variance ``(n, D)`` of the layer's output for normalised inputs ``H`` (float64)."""

    # ------------------------------------------------------------------ persistence
    def to_arrays(self) -> Dict[str, np.ndarray]:
        """The fitted arrays under :attr:`array_names`."""
        return {k: getattr(self, k) for k in self.array_names}

    @classmethod
    def from_arrays(cls, arrays: Dict[str, np.ndarray], dim: int) -> Posterior:
        """Rebuild from :meth:`to_arrays`; a missing array raises KeyError, a wrong shape ValueError."""
        obj = cls()
        for k in cls.array_names:
            if arrays[k].shape not in ((dim,), (dim, dim)):
                raise ValueError(f"array {k} has shape {arrays[k].shape}")
            setattr(obj, k, arrays[k])
        obj.dim_ = int(dim)
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim_ or None})"


class DiagPosterior(Posterior):
    """Diagonal curvature ``H_ij``; precision ``H + lambda``; ``v_i(x) = sum_j h_j^2 / P_ij`` (the paper's form)."""

    name = "diag"
    array_names = ("H",)

    def batch_statistics(self, A, P, *, tau, curvature):
        return {"H": diag_curvature(A, P, tau=tau, curvature=curvature)}

    def fit(self, totals):
        self.H = np.maximum(totals["H"], 0.0)
        self.dim_ = int(self.H.shape[0])
        return self

    def curvature_eigenvalues(self):
        return self.H.ravel()

    def predictive_variance(self, H, prior_precision):
        return (H * H) @ (1.0 / (self.H + prior_precision)).T


class KronPosterior(Posterior):
    """K-FAC ``A (x) G`` (input second moment (x) summed output curvature), inverted exactly.

    With ``A = U_A S_A U_A^T`` and ``G = U_G S_G U_G^T``,
    ``v_i(x) = sum_{a,g} (u_a . h)^2 U_G[i, g]^2 / (s_a s_g + lambda)``: the
    variance grows for inputs outside the span the fit inputs cover.
    """

    name = "kron"
    array_names = ("s_in", "u_in", "s_out", "u_out")

    def batch_statistics(self, A, P, *, tau, curvature):
        in_sum, out_sum, count = kron_factors(A, P, tau=tau, curvature=curvature)
        return {"in_sum": in_sum, "out_sum": out_sum, "count": np.array(float(count))}

    def fit(self, totals):
        # H ~ sum_u (h h^T) (x) G_u  ~  E[h h^T] (x) sum_u G_u  (K-FAC expectation split)
        s_in, u_in = np.linalg.eigh(totals["in_sum"] / float(totals["count"]))
        s_out, u_out = np.linalg.eigh(totals["out_sum"])
        self.s_in, self.u_in = np.maximum(s_in, 0.0), u_in
        self.s_out, self.u_out = np.maximum(s_out, 0.0), u_out
        self.dim_ = int(u_out.shape[0])
        return self

    def curvature_eigenvalues(self):
        return np.outer(self.s_in, self.s_out).ravel()

    def predictive_variance(self, H, prior_precision):
        proj = (H @ self.u_in) ** 2  # (n, D): (u_a . h)^2
        coef = 1.0 / (np.outer(self.s_in, self.s_out) + prior_precision)  # (a, g)
        return (proj @ coef) @ (self.u_out**2).T


_FORMS: Dict[str, Type[Posterior]] = {cls.name: cls for cls in (KronPosterior, DiagPosterior)}


def posterior_class(hessian: Union[str, Posterior, Type[Posterior]]) -> Type[Posterior]:
    """The :class:`Posterior` subclass for ``"kron"``/``"diag"``, a subclass or an instance."""
    if isinstance(hessian, str):
        if hessian not in _FORMS:
            raise ValueError(f"hessian must be one of {', '.join(map(repr, _FORMS))}, got {hessian!r}")
        return _FORMS[hessian]
    if isinstance(hessian, Posterior):
        return type(hessian)
    if isinstance(hessian, type) and issubclass(hessian, Posterior):
        return hessian
    raise TypeError(f"hessian must be 'kron', 'diag' or a Posterior, got {type(hessian).__name__}")
