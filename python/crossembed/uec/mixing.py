"""Mixing: how an ensemble turns K routed per-model Gaussians into one Gaussian to score.

:class:`ScoreMixing` (default)
    The K spaces side by side (direct sum): a query becomes the blocks
    ``[w_1 mu_1 | ... | w_K mu_K]`` with variances ``w_k^2 v_k``, a document
    the unweighted unit blocks ``[mu_1 | ... | mu_K]``. Their probit
    similarity is exactly the probit of ``s = sum_k w_k(q) s_k`` with
    independent per-model similarities: the coefficients mix per-model
    *scores*, never vectors of unrelated spaces, and models of different
    dimensions need no projection. ``w_k = pi_k c_k`` with ``c_k`` the
    calibration of the model's score scale. Document hubness enters as K extra
    coordinates, ``r_k(d)`` on a document and ``-beta w_k(q)`` on a query (zero
    variance), so the score of model ``k`` becomes ``s_k(q, d) - beta r_k(d)``
    (``beta = 1/2`` ranks as CSLS, Conneau et al., 2018) and an inner-product
    index ranks it unchanged. Query heads map each model's query means after
    the routing has read them; documents are never mapped.
:class:`EmbeddingMixing` (the paper)
    ``mu = sum_k pi_k mu_k``, ``v = sum_k pi_k^2 v_k`` in one space; models of
    different dimensions are first mapped to the smallest by a fixed random
    orthonormal projection ``R`` (``mu' = R^T mu``, the diagonal of
    ``R^T diag(v) R``). Queries and documents are convolved with their own
    coefficients.

Each object has ``bind(heads, scoring)`` (checks and resolves its defaults
against the models and the scoring; returns the object the ensemble keeps),
``dim(dims)``, ``mix(components, pi, heads, *, role, scoring)``,
``symmetric()`` (the mixing for texts compared with texts),
``hub_dims(n_models)`` (trailing coordinates that only a document side
has) and ``get_config()`` (:func:`mixing_from_config` rebuilds it).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from crossembed._config import Registered, from_config, set_checked
from crossembed._validation import as_matrix, check_bool, check_int, check_positive, check_random_state
from crossembed.uec._random import int_seed
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads

__all__ = ["EmbeddingMixing", "Mixing", "ScoreMixing", "convolve", "mixing_from_config"]


def convolve(components: Sequence[GaussianEmbedding], weights) -> GaussianEmbedding:
    """Gaussian convolution ``N(sum_k pi_k mu_k, sum_k pi_k^2 v_k)`` (same ``D``), float64 sums."""
    w = as_matrix(weights, "weights", dtype=np.float64, allow_float64=True, nonnegative=True)
    if w.shape != (len(components[0]), len(components)):
        raise ValueError(f"weights must have shape {(len(components[0]), len(components))}, got {w.shape}")
    mu = sum(w[:, k : k + 1] * c.mean.astype(np.float64) for k, c in enumerate(components))
    var = sum((w[:, k : k + 1] ** 2) * c.var.astype(np.float64) for k, c in enumerate(components))
    return GaussianEmbedding(mu.astype(np.float32), var.astype(np.float32), w.astype(np.float32))


@dataclass(frozen=True)
class Mixing(Registered):
    """Base of the mixing objects (module docstring): a frozen dataclass whose fields are its config;
    a subclass sets ``kind`` (it is then registered: :func:`mixing_from_config` rebuilds it)."""

    registry = {}
    kind = ""


@dataclass(frozen=True)
class ScoreMixing(Mixing):
    """Mix per-model scores (module docstring).

    Parameters
    ----------
    calibrate : bool
        Divide each model's score by its cosine spread between unrelated fit
        texts (relative to their geometric mean; default True), so an
        anisotropic model is not drowned out by models with a wider score range.
    hubness : float or None
        ``beta >= 0``, the weight of each document's hubness taken off its
        per-model scores (0 turns it off). None: 1/2 (CSLS) when the scoring
        decomposes over blocks (the probit), else 0.
    hubness_k : int
        A document's hubness is the mean of its ``hubness_k`` best cosines to
        the fit anchors (default 10, as CSLS).
    query_head : bool or None
        Map each model's queries by its query head before scoring. None: on
        when the scoring decomposes over blocks and every model has a head.
    """

    _: KW_ONLY
    calibrate: bool = True
    hubness: Optional[float] = None
    hubness_k: int = 10
    query_head: Optional[bool] = None
    kind = "score"

    def __post_init__(self):
        set_checked(
            self,
            calibrate=check_bool(self.calibrate, "calibrate"),
            hubness=None if self.hubness is None else check_positive(self.hubness, "hubness", allow_zero=True),
            hubness_k=check_int(self.hubness_k, "hubness_k", low=1),
            query_head=check_bool(self.query_head, "query_head", optional=True),
        )

    def bind(self, heads: Sequence[ModelHeads], scoring) -> ScoreMixing:
        """A copy with ``hubness`` and ``query_head`` resolved for these models and this scoring."""
        decomposes = bool(scoring.decomposes)
        hubness = (0.5 if decomposes else 0.0) if self.hubness is None else self.hubness
        if hubness > 0 and not decomposes:
            raise ValueError(f"hubness > 0 needs a scoring that decomposes over blocks (the probit), not {scoring!r}")
        missing = [k for k, h in enumerate(heads) if h.query_head is None]
        query_head = self.query_head
        if self.query_head is None:
            query_head = decomposes and not missing
        elif self.query_head and not decomposes:
            raise ValueError(f"query_head=True needs a scoring that decomposes over blocks, not {scoring!r}")
        elif self.query_head and missing:
            raise ValueError(
                f"embedders[{missing[0]}] has no query head (fitted with query_head=False): refit it, "
                "or pass query_head=False"
            )
        return replace(self, hubness=hubness, query_head=query_head)

    def dim(self, dims: Sequence[int]) -> int:
        """``sum D_k``, plus K hubness coordinates when hubness is on."""
        return sum(dims) + (len(dims) if self.hubness and self.hubness > 0 else 0)

    def symmetric(self) -> ScoreMixing:
        """This mixing for texts compared with texts: no query heads (they map queries toward documents)."""
        return replace(self, query_head=False)

    def hub_dims(self, n_models: int) -> int:
        """How many trailing coordinates are hubness coordinates (K when hubness is on, else 0)."""
        return n_models if self.hubness and self.hubness > 0 else 0

    def score_scales(self, heads: Sequence[ModelHeads]) -> np.ndarray:
        """Per-model factors ``c_k = g / s_k`` (``s_k`` the score scale, ``g`` their geometric mean), or ones."""
        if not self.calibrate:
            return np.ones(len(heads))
        s = np.array([h.score_scale for h in heads])
        return np.exp(np.log(s).mean()) / s

    def mix(self, components, pi: np.ndarray, heads: Sequence[ModelHeads], *, role: str, scoring=None):
        """The direct-sum Gaussian (weights ``pi``) of the K routed Gaussians."""
        comps = list(components)
        if self.query_head and role == "query":  # after the routing: the rank head reads the encoder's own query
            comps = [GaussianEmbedding(h.map_queries(c.mean), c.var) for h, c in zip(heads, comps)]
        w = pi * self.score_scales(heads)[None, :] if role == "query" else np.ones_like(pi)
        means = [w[:, k : k + 1] * c.mean for k, c in enumerate(comps)]
        var = [(w[:, k : k + 1] ** 2) * c.var for k, c in enumerate(comps)]
        if self.hubness > 0:  # <[-beta w(q) | r(d)]> = -beta sum_k w_k(q) r_k(d)
            means.append(self._hub_coordinates(comps, w, heads, role))
            var.append(np.zeros((len(comps[0]), len(comps))))
        mean, var = np.concatenate(means, axis=1), np.concatenate(var, axis=1)
        return GaussianEmbedding(mean.astype(np.float32), var.astype(np.float32), pi.astype(np.float32))

    def _hub_coordinates(self, comps, w: np.ndarray, heads: Sequence[ModelHeads], role: str) -> np.ndarray:
        """The K hubness coordinates: ``-beta w_k(q)`` on a query, ``r_k(d)`` on a document."""
        if role == "query":
            return -self.hubness * w
        return np.stack(
            [h.hubness(c.mean, k=self.hubness_k, mapped_queries=self.query_head) for h, c in zip(heads, comps)],
            axis=1,
        )


def _projection(d_from: int, d_to: int, seed: int) -> np.ndarray:
    """A fixed random ``d_from x d_to`` matrix with orthonormal columns."""
    q, _ = np.linalg.qr(check_random_state(seed).normal(size=(d_from, d_to)))
    q.flags.writeable = False  # held by a frozen mixing
    return q


@dataclass(frozen=True)
class EmbeddingMixing(Mixing):
    """Convolve the K Gaussians in one embedding space (the paper; module docstring).

    Parameters
    ----------
    random_state : int, Generator or None
        Seed of the projections used when the models' dimensions differ
        (default 0; a Generator or None draws one int seed, which is kept so a
        saved ensemble rebuilds the same projections).
    """

    _: KW_ONLY
    random_state: Any = 0
    #: model k's projection onto the smallest dimension (None where it has that dimension); set by :meth:`bind`
    _projections: Tuple[Optional[np.ndarray], ...] = field(default=(), init=False, repr=False, compare=False)
    kind = "embedding"

    def __post_init__(self):
        set_checked(self, random_state=int_seed(self.random_state))

    def bind(self, heads: Sequence[ModelHeads], scoring) -> EmbeddingMixing:
        """A copy holding the projections of the larger models onto the smallest dimension."""
        dims = [h.dim for h in heads]
        d = min(dims)
        out = replace(self)
        set_checked(
            out,
            _projections=tuple(
                _projection(dk, d, self.random_state + k) if dk != d else None for k, dk in enumerate(dims)
            ),
        )
        return out

    def dim(self, dims: Sequence[int]) -> int:
        """The smallest ``D_k``."""
        return min(dims)

    def symmetric(self) -> EmbeddingMixing:
        """This mixing for texts compared with texts (unchanged)."""
        return self

    def hub_dims(self, n_models: int) -> int:
        """No hubness coordinates."""
        return 0

    def _project(self, k: int, c: GaussianEmbedding) -> GaussianEmbedding:
        R = self._projections[k]
        if R is None:
            return c
        return GaussianEmbedding((c.mean @ R).astype(np.float32), (c.var @ (R * R)).astype(np.float32))

    def mix(self, components, pi: np.ndarray, heads: Sequence[ModelHeads], *, role: str, scoring):
        """The convolution ``N(sum_k pi_k mu_k, sum_k pi_k^2 v_k)``, normalised as ``scoring`` scores it."""
        comps = [self._project(k, c) for k, c in enumerate(components)]
        return scoring.normalize_mixture(convolve(comps, pi))


def mixing_from_config(config: Dict[str, Any]) -> Mixing:
    """The mixing object a ``get_config()`` dict describes (any registered :class:`Mixing` kind)."""
    return from_config(config, Mixing.registry, "mixing")
