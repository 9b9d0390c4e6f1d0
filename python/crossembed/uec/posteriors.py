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
head, so their inputs are the normalised embeddings and the MAP is ``I``.
``LastDenseDiagPosterior`` and ``LastDenseKronPosterior`` are the same forms
on the transformer's last FFN output dense ``[W b]`` (``D x (D_ff + 1)``):
their batches are :class:`~crossembed.uec.linearisation.PooledLinearisation`
objects (the curvature of :func:`~crossembed.uec.curvature.linearised_diag_curvature`
and :func:`~crossembed.uec.curvature.linearised_kron_factors`), the covariance
of the layer output ``dW x`` is pushed through the per-input Jacobian to the
normalised embedding, and :attr:`Posterior.map_sq_norm` is ``|[W b]|_F^2`` of
the pretrained weights (zero-mean prior, as in laplace-torch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Dict, Optional, Tuple, Type, Union

import numpy as np

from crossembed._validation import check_int, check_positive, check_random_state
from crossembed.uec.curvature import diag_curvature, kron_factors, linearised_diag_curvature, linearised_kron_factors

__all__ = [
    "DiagPosterior",
    "KronPosterior",
    "LastDenseDiagPosterior",
    "LastDenseKronPosterior",
    "Posterior",
    "last_dense_class",
    "posterior_class",
]

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
    def output_covariance(self, X: np.ndarray, prior_precision: float) -> Tuple[Optional[np.ndarray], np.ndarray]:
        """Covariance of the layer output ``dW x`` for inputs ``X`` (n, D_in) in a shared basis.

        Returns ``(U, w)`` with ``Cov_n = U diag(w[n]) U^T`` (``U`` (D, D) or
        ``None`` for the identity; ``w`` (n, D)).
        """

    def predictive_variance(self, H: np.ndarray, prior_precision: float) -> np.ndarray:
        """Diagonal variance ``(n, D)`` of the layer's output for normalised inputs ``H`` (float64)."""
        U, w = self.output_covariance(H, prior_precision)
        return w if U is None else w @ (U * U).T

    @abstractmethod
    def sample(self, prior_precision: float, *, size: int = 1, random_state=None) -> np.ndarray:
        """Weight perturbations ``W - W_MAP`` drawn from the posterior, shape (size, D, D_in)."""

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

    def output_covariance(self, X, prior_precision):
        return None, (X * X) @ (1.0 / (self.H + prior_precision)).T

    def sample(self, prior_precision, *, size=1, random_state=None):
        rng = check_random_state(random_state)
        sd = 1.0 / np.sqrt(self.H + check_positive(prior_precision, "prior_precision"))
        return rng.standard_normal((check_int(size, "size", low=1),) + sd.shape) * sd


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

    def output_covariance(self, X, prior_precision):
        proj = (X @ self.u_in) ** 2  # (n, D_in): (u_a . x)^2
        coef = 1.0 / (np.outer(self.s_in, self.s_out) + prior_precision)  # (a, g)
        return self.u_out, proj @ coef

    def sample(self, prior_precision, *, size=1, random_state=None):
        # vec dW = (U_in (x) U_out) diag(s_in s_out + lambda)^-1/2 eps, i.e. dW = U_out E^T U_in^T
        rng = check_random_state(random_state)
        sd = 1.0 / np.sqrt(np.outer(self.s_out, self.s_in) + check_positive(prior_precision, "prior_precision"))
        eps = rng.standard_normal((check_int(size, "size", low=1),) + sd.shape) * sd
        return self.u_out @ eps @ self.u_in.T


class _LastDense:
    """Mixin: a head posterior form moved to the last FFN output dense ``[W b]`` (``D x D_in``).

    Batches and prediction inputs are
    :class:`~crossembed.uec.linearisation.PooledLinearisation` objects;
    ``weight_sq_norm`` (``|[W b]|_F^2`` of the pretrained weights) and
    ``in_dim_`` are set before fitting and saved with the form.
    """

    layer = "last_dense"

    def __init__(self, *, weight_sq_norm: float = 0.0):
        super().__init__()
        self.weight_sq_norm = np.float64(check_positive(weight_sq_norm, "weight_sq_norm", allow_zero=True))
        self.in_dim_ = 0

    @property
    def n_params(self) -> int:
        return self.dim_ * self.in_dim_

    @property
    def map_sq_norm(self) -> float:
        return float(self.weight_sq_norm)

    def predictive_variance(self, H, prior_precision):
        """Variance (n, D) of the normalised embedding for a ``PooledLinearisation`` ``H``."""
        U, w = self.output_covariance(np.asarray(H.inputs, dtype=np.float64), prior_precision)
        return H.propagate(U, w)

    @classmethod
    def from_arrays(cls, arrays, dim):
        obj = cls(weight_sq_norm=float(arrays["weight_sq_norm"]))
        for k in cls.array_names:
            a = np.asarray(arrays[k])
            if k != "weight_sq_norm" and (a.ndim not in (1, 2) or a.size == 0):
                raise ValueError(f"array {k} has shape {a.shape}")
            setattr(obj, k, a)
        obj.dim_ = int(dim)
        obj.in_dim_ = obj._in_dim_of_arrays()
        return obj


class LastDenseDiagPosterior(_LastDense, DiagPosterior):
    """:class:`DiagPosterior` over the last FFN output dense: ``H`` is (D, D_ff + 1)."""

    array_names = ("H", "weight_sq_norm")

    def batch_statistics(self, A, P, *, tau, curvature):
        return {"H": linearised_diag_curvature(A, P, tau=tau, curvature=curvature)}

    def fit(self, totals):
        super().fit(totals)
        self.in_dim_ = int(self.H.shape[1])
        return self

    def _in_dim_of_arrays(self):
        if self.H.shape[0] != self.dim_:
            raise ValueError(f"array H has shape {self.H.shape}, expected ({self.dim_}, D_in)")
        return int(self.H.shape[1])


class LastDenseKronPosterior(_LastDense, KronPosterior):
    """:class:`KronPosterior` over the last FFN output dense: input factor (D_ff + 1)^2, output D^2.

    The bias is the input's constant last coordinate, so it shares the K-FAC
    block of ``W`` (laplace-torch keeps a bias in a block of its own; without
    a bias the two agree, see tests/test_uec_laplace_torch.py).
    """

    array_names = ("s_in", "u_in", "s_out", "u_out", "weight_sq_norm")

    def batch_statistics(self, A, P, *, tau, curvature):
        in_sum, out_sum, count = linearised_kron_factors(A, P, tau=tau, curvature=curvature)
        return {"in_sum": in_sum, "out_sum": out_sum, "count": np.array(float(count))}

    def fit(self, totals):
        super().fit(totals)
        self.in_dim_ = int(self.u_in.shape[0])
        return self

    def _in_dim_of_arrays(self):
        d_in = self.s_in.shape[0]
        if self.u_in.shape != (d_in, d_in) or self.s_out.shape != (self.dim_,) or self.u_out.shape != (self.dim_,) * 2:
            raise ValueError(
                f"inconsistent kron arrays: s_in {self.s_in.shape}, u_in {self.u_in.shape}, u_out {self.u_out.shape}"
            )
        return int(d_in)


_FORMS: Dict[str, Type[Posterior]] = {cls.name: cls for cls in (KronPosterior, DiagPosterior)}
_LAST_DENSE: Dict[Type[Posterior], Type[Posterior]] = {
    DiagPosterior: LastDenseDiagPosterior,
    KronPosterior: LastDenseKronPosterior,
}


def last_dense_class(cls: Type[Posterior]) -> Type[Posterior]:
    """The last-dense version of a posterior form (a last-dense class is returned as it is)."""
    if issubclass(cls, _LastDense):
        return cls
    if cls in _LAST_DENSE:
        return _LAST_DENSE[cls]
    raise ValueError(f"hessian {cls.__name__} has no layer='last_dense' version (use 'diag' or 'kron')")


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
