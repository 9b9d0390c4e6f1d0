"""Uncertainty-driven convolution of K Gaussian embedders (UEC steps 2-4).

Per input ``x`` and model ``k`` the coefficient is

    pi_k(x) = softmax_k(-t_k(x) / T),

with ``t_k(x) = tr(Sigma_k(x))`` (raw) or that trace standardised by the
model's fit-set trace mean and std (``standardize=True``), because raw traces
of different models live on unrelated scales and would hand every input to
the model with the smallest posterior.

Two ways of mixing, both closed-form Gaussian and both scored with the probit
similarity (:func:`crossembed.probit_scores`) on L2-normalised means:

``mixing="embedding"`` (the paper)
    ``mu = sum_k pi_k mu_k``, ``v = sum_k pi_k^2 v_k`` in one ``D``-dimensional
    space, then ``mu`` is L2-normalised (``v`` scaled alike). Queries and
    documents are convolved with their own coefficients. Models with
    different ``D`` are first mapped to the smallest ``D`` by a fixed random
    orthonormal projection ``R`` (seeded), ``mu' = R^T mu`` and the diagonal of
    ``R^T diag(v) R``.
``mixing="score"``
    The K spaces are kept side by side (direct sum): a query becomes the
    blocks ``[pi_1 mu_1 | ... | pi_K mu_K]`` with variances ``pi_k^2 v_k``, a
    document the unweighted unit blocks ``[mu_1 | ... | mu_K]``. Their probit
    similarity is exactly the probit of ``s = sum_k pi_k(q) s_k`` with
    independent per-model similarities ``s_k ~ N(mu_sk, sig2_sk)``: the
    coefficients mix per-model *scores*, never vectors of unrelated spaces.
    Different ``D`` need no projection. Encode documents with
    ``role="passage"`` and queries with ``role="query"``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed._validation import as_matrix, check_choice, check_positive, check_random_state
from crossembed.uec._random import int_seed
from crossembed.uec.gaussian import GaussianEmbedding, normalize_gaussian
from crossembed.uec.laplace import LaplaceEmbedder

__all__ = ["UECEnsemble", "uncertainty_coefficients", "convolve"]

_MIXINGS = ("score", "embedding")
_ROLES = ("query", "passage")


def uncertainty_coefficients(traces, *, temperature: float, center=None, scale=None) -> np.ndarray:
    """``softmax_k(-t_k / T)`` row-wise, with ``t = (traces - center) / scale`` when given.

    Parameters
    ----------
    traces : array_like, shape (n, K)
        ``tr(Sigma_k(x))`` per input and model.
    temperature : float
        ``T > 0``; small ``T`` picks the least uncertain model, large ``T`` is uniform.
    center, scale : array_like, shape (K,), optional
        Per-model standardisation.

    Returns
    -------
    ndarray, shape (n, K), float64, rows sum to 1
    """
    t = as_matrix(traces, "traces", dtype=np.float64, allow_float64=True)
    T = check_positive(temperature, "temperature")
    if center is not None:
        t = t - np.asarray(center, dtype=np.float64)[None, :]
    if scale is not None:
        t = t / np.asarray(scale, dtype=np.float64)[None, :]
    z = -t / T
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def convolve(components: Sequence[GaussianEmbedding], weights) -> GaussianEmbedding:
    """Gaussian convolution ``N(sum_k pi_k mu_k, sum_k pi_k^2 v_k)`` (same ``D``), float64 sums."""
    w = as_matrix(weights, "weights", dtype=np.float64, allow_float64=True, nonnegative=True)
    if w.shape != (len(components[0]), len(components)):
        raise ValueError(f"weights must have shape {(len(components[0]), len(components))}, got {w.shape}")
    mu = sum(w[:, k : k + 1] * c.mean.astype(np.float64) for k, c in enumerate(components))
    var = sum((w[:, k : k + 1] ** 2) * c.var.astype(np.float64) for k, c in enumerate(components))
    return GaussianEmbedding(mu.astype(np.float32), var.astype(np.float32), w.astype(np.float32))


def _projection(d_from: int, d_to: int, seed: int) -> np.ndarray:
    """A fixed random ``d_from x d_to`` matrix with orthonormal columns."""
    q, _ = np.linalg.qr(check_random_state(seed).normal(size=(d_from, d_to)))
    return q


class UECEnsemble:
    """Uncertainty-weighted ensemble of :class:`LaplaceEmbedder` s.

    Parameters
    ----------
    embedders : sequence of LaplaceEmbedder
        Fitted embedders (K >= 1).
    temperature : float
        ``T`` of the coefficients (in units of the standardised trace). The
        default 10.0 is what the dev halves chose for the kron posterior with
        score mixing on both real tasks (grid 0.1-10, ``docs/uec.md``); it
        is the top of the grid and gives near-uniform coefficients, because
        on those tasks the traces did not predict which model is right. Tune
        it on your own dev split.
    mixing : {"score", "embedding"}
        See the module docstring. ``"score"`` is the default (+0.45 and +1.67
        nDCG@10 over embedding mixing on the two real tasks, ``docs/uec.md``);
        ``"embedding"`` is the paper's form.
    weights : {"uncertainty", "uniform"} or sequence of K floats
        Per-input uncertainty coefficients (UEC), ``1/K`` (uniform ensemble,
        the "- Unc Conv" ablation) or fixed global weights (weighted ensemble).
    standardize : bool
        Standardise each model's trace by its fit-set mean and std first.
    use_variance : bool
        Score with the probit similarity (True) or the plain dot product of
        the means (False, the "- Unc Sim" ablation).
    calibrate_scores : bool
        Score mixing only: divide each model's similarity by its cosine spread
        between unrelated fit texts (:attr:`LaplaceEmbedder.score_scale_`),
        so an anisotropic model (e5: unrelated texts at ~0.78) is not drowned
        out by models with a wider score range. Measured in ``docs/uec.md``.
    random_state : int, Generator or None
        Seed of the projections used when ``mixing="embedding"`` and the
        models' dimensions differ (None or a Generator: one int seed is
        drawn and kept, so a saved ensemble rebuilds the same projections).
    """

    def __init__(
        self,
        embedders: Sequence[LaplaceEmbedder],
        *,
        temperature: float = 10.0,
        mixing: str = "score",
        weights: Union[str, Sequence[float]] = "uncertainty",
        standardize: bool = True,
        use_variance: bool = True,
        calibrate_scores: bool = True,
        random_state=0,
    ):
        embedders = list(embedders) if not isinstance(embedders, LaplaceEmbedder) else [embedders]
        if not embedders:
            raise ValueError("embedders must hold at least one LaplaceEmbedder")
        for e in embedders:
            if not isinstance(e, LaplaceEmbedder):
                raise TypeError(f"embedders must hold LaplaceEmbedder objects, got {type(e).__name__}")
            if not e.is_fitted:
                raise ValueError("every embedder must be fitted (call fit() or load())")
        self.embedders = embedders
        self.temperature = check_positive(temperature, "temperature")
        self.mixing = check_choice(mixing, "mixing", _MIXINGS)
        if isinstance(weights, str):
            if weights not in ("uncertainty", "uniform"):
                raise ValueError(f"weights must be 'uncertainty', 'uniform' or K numbers, got {weights!r}")
            self.weights = weights
        else:
            w = as_matrix(weights, "weights", ndim=1, dtype=np.float64, nonnegative=True)
            if w.shape[0] != len(embedders) or w.sum() <= 0:
                raise ValueError(f"weights must hold {len(embedders)} non-negative numbers with a positive sum")
            self.weights = w / w.sum()
        self.standardize = bool(standardize)
        self.use_variance = bool(use_variance)
        self.calibrate_scores = bool(calibrate_scores)
        self.random_state = int_seed(random_state)
        dims = [e.dim for e in embedders]
        self._proj: Dict[int, np.ndarray] = {}
        if mixing == "embedding" and len(set(dims)) > 1:
            d = min(dims)
            self._proj = {k: _projection(dk, d, self.random_state + k) for k, dk in enumerate(dims) if dk != d}

    @property
    def n_models(self) -> int:
        return len(self.embedders)

    @property
    def dim(self) -> int:
        """Dimension of the encoded means (``sum D_k`` for score mixing)."""
        dims = [e.dim for e in self.embedders]
        return sum(dims) if self.mixing == "score" else min(dims)

    # ------------------------------------------------------------------ maths
    def coefficients(self, components: Sequence[GaussianEmbedding]) -> np.ndarray:
        """``pi`` of shape (n, K) for per-model Gaussians of the same inputs."""
        n = len(components[0])
        if isinstance(self.weights, np.ndarray):
            return np.tile(self.weights, (n, 1))
        if self.weights == "uniform":
            return np.full((n, self.n_models), 1.0 / self.n_models)
        traces = np.stack([c.trace() for c in components], axis=1)
        if self.standardize:
            center = [e.trace_mean_ for e in self.embedders]
            scale = [e.trace_std_ for e in self.embedders]
            return uncertainty_coefficients(traces, temperature=self.temperature, center=center, scale=scale)
        return uncertainty_coefficients(traces, temperature=self.temperature)

    def combine(self, components: Sequence[GaussianEmbedding], *, role: str = "query") -> GaussianEmbedding:
        """Ensemble Gaussians from the K models' Gaussians of the same inputs.

        Parameters
        ----------
        components : sequence of K GaussianEmbedding
            Model ``k``'s output for the same ``n`` inputs (e.g. from
            :meth:`LaplaceEmbedder.transform` of cached embeddings).
        role : {"query", "passage"}
            Only matters for ``mixing="score"`` (documents stay unweighted).
        """
        check_choice(role, "role", _ROLES)
        comps = list(components)
        if len(comps) != self.n_models:
            raise ValueError(f"components must hold {self.n_models} GaussianEmbeddings, got {len(comps)}")
        n = len(comps[0])
        for k, c in enumerate(comps):
            if not isinstance(c, GaussianEmbedding):
                raise TypeError(f"components[{k}] must be a GaussianEmbedding, got {type(c).__name__}")
            if len(c) != n:
                raise ValueError(f"components[{k}] has {len(c)} rows but components[0] has {n}")
            if c.dim != self.embedders[k].dim:
                raise ValueError(f"components[{k}] has dimension {c.dim} but embedder {k} has {self.embedders[k].dim}")
        comps = [normalize_gaussian(c) for c in comps]
        pi = self.coefficients(comps)
        if self.mixing == "score":
            w = pi * self._score_scales()[None, :] if role == "query" else np.ones_like(pi)
            mean = np.concatenate([w[:, k : k + 1] * c.mean for k, c in enumerate(comps)], axis=1)
            var = np.concatenate([(w[:, k : k + 1] ** 2) * c.var for k, c in enumerate(comps)], axis=1)
            return GaussianEmbedding(mean.astype(np.float32), var.astype(np.float32), pi.astype(np.float32))
        comps = [self._project(k, c) for k, c in enumerate(comps)]
        return normalize_gaussian(convolve(comps, pi))

    def _score_scales(self) -> np.ndarray:
        """Per-model factors putting the K cosine scales on one footing (score mixing).

        ``c_k = g / s_k`` with ``s_k`` the model's cosine spread between
        unrelated fit texts and ``g`` their geometric mean (so the overall
        magnitude, and with it the probit's shrinkage, stays as before).
        """
        if not self.calibrate_scores:
            return np.ones(self.n_models)
        s = np.array([e.score_scale_ for e in self.embedders])
        return np.exp(np.log(s).mean()) / s

    def _project(self, k: int, c: GaussianEmbedding) -> GaussianEmbedding:
        R = self._proj.get(k)
        if R is None:
            return c
        return GaussianEmbedding((c.mean @ R).astype(np.float32), (c.var @ (R * R)).astype(np.float32))

    # ------------------------------------------------------------------ text API
    def encode(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = True
    ) -> GaussianEmbedding:
        """Encode texts with every model and convolve: ``GaussianEmbedding(mean, var, weights)``."""
        check_choice(role, "role", _ROLES)
        bar = tqdm(self.embedders, desc=f"UEC encode ({role})", disable=not show_progress_bar, unit="model")
        comps = [e.encode(texts, role=role, batch_size=batch_size, show_progress_bar=False) for e in bar]
        return self.combine(comps, role=role)

    def _scoring_inputs(self, g: GaussianEmbedding, name: str) -> Tuple[np.ndarray, np.ndarray]:
        if not isinstance(g, GaussianEmbedding):
            raise TypeError(f"{name} must be a GaussianEmbedding (from encode()), got {type(g).__name__}")
        if g.dim != self.dim:
            raise ValueError(f"{name} has dimension {g.dim} but this ensemble produces {self.dim}")
        return g.mean, (g.var if self.use_variance else np.zeros_like(g.var))

    def similarity(self, a, b, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Probit similarity matrix ``(len(a), len(b))`` between encoded queries ``a`` and documents ``b``.

        Strings are encoded first (``a`` as queries, ``b`` as passages). With
        ``use_variance=False`` this is the dot product of the means.
        """
        if isinstance(a, (list, tuple)) and (not a or isinstance(a[0], str)):
            a = self.encode(list(a), role="query", show_progress_bar=False)
        if isinstance(b, (list, tuple)) and (not b or isinstance(b[0], str)):
            b = self.encode(list(b), role="passage", show_progress_bar=False)
        mq, vq = self._scoring_inputs(a, "a")
        mc, vc = self._scoring_inputs(b, "b")
        return kernels.probit_scores(mq, vq, mc, vc, num_threads=num_threads)

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays (prefixed ``m{k}.``) and JSON metadata of the whole ensemble."""
        arrays: Dict[str, np.ndarray] = {}
        metas = []
        for k, e in enumerate(self.embedders):
            arr, meta = e.get_state()
            arrays.update({f"m{k}.{name}": v for name, v in arr.items()})
            metas.append(meta)
        weights = self.weights if isinstance(self.weights, str) else [float(x) for x in self.weights]
        meta = {
            "embedders": metas,
            "temperature": self.temperature,
            "mixing": self.mixing,
            "weights": weights,
            "standardize": self.standardize,
            "use_variance": self.use_variance,
            "calibrate_scores": self.calibrate_scores,
            "random_state": self.random_state,
        }
        return arrays, meta

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], meta: Dict[str, Any], *, encoders=None) -> UECEnsemble:
        """Rebuild from :meth:`get_state`; ``encoders`` (K items) override the stored names."""
        metas = meta["embedders"]
        if encoders is not None and len(encoders) != len(metas):
            raise ValueError(f"encoders must hold {len(metas)} items, got {len(encoders)}")
        embedders = []
        for k, m in enumerate(metas):
            prefix = f"m{k}."
            arr = {name[len(prefix) :]: v for name, v in arrays.items() if name.startswith(prefix)}
            embedders.append(LaplaceEmbedder.from_state(arr, m, encoder=None if encoders is None else encoders[k]))
        return cls(
            embedders,
            temperature=meta["temperature"],
            mixing=meta["mixing"],
            weights=meta["weights"],
            standardize=meta["standardize"],
            use_variance=meta["use_variance"],
            calibrate_scores=meta.get("calibrate_scores", False),
            random_state=meta["random_state"] if "random_state" in meta else meta["projection_seed"],  # older files
        )

    def __repr__(self) -> str:
        names = [e.encoder_name or type(e.encoder).__name__ for e in self.embedders]
        return f"UECEnsemble({names}, temperature={self.temperature:g}, mixing={self.mixing!r}, weights={self.weights if isinstance(self.weights, str) else list(np.round(self.weights, 3))!r})"
