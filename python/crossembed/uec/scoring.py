"""How an ensemble scores a query Gaussian against a document Gaussian.

A scoring object puts each model's Gaussians into its score space
(``normalize``; ``normalize_mixture`` after an embedding-space convolution),
scores (``similarity``), prepares the document side once for repeated top-k
searches (``prepare``, what an index holds) and saves its config
(``get_config`` / :func:`scoring_from_config`).

:class:`ProbitScoring` (the paper)
    ``mu_s / sqrt(1 + pi/8 sig2_s)`` with ``mu_s = <mu_q, mu_c>`` and
    ``sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>``
    (:func:`crossembed.probit_scores`) of unit means with the variances scaled
    alike (``v / |mu|^2``, the Gaussian of ``x / |mu|``). ``use_variance=False``
    zeroes the variances on both sides: the dot product of the means.
:class:`BetaCosineScoring` (the official UEC code)
    ``cos(mu_q, mu_c) / (1 + beta sig2_s / pi)`` (:func:`crossembed.uec.rules.beta_scores`)
    of unit means with the variances normalised as the official code does,
    ``v / |v|_2^2``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Protocol, Tuple

import numpy as np

import crossembed.uec.rules as rules
from crossembed import kernels
from crossembed._config import Configured, from_config
from crossembed._validation import as_matrix, check_bool, check_positive
from crossembed.uec.gaussian import GaussianEmbedding, normalize_gaussian

__all__ = ["BetaCosineScoring", "PreparedDocs", "ProbitScoring", "Scoring", "scoring_from_config"]


class PreparedDocs(Protocol):
    """Documents prepared for repeated top-k searches (what :meth:`Scoring.prepare` returns)."""

    #: bytes the prepared documents hold (an index reports its cached blocks by it)
    nbytes: int

    def top_k(
        self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Best ``k`` documents per query: ``(scores float32 (Q, k), indices int64 (Q, k))``, best first."""
        ...


class Scoring(Protocol):
    """The interface every scoring object follows (:class:`ProbitScoring`, :class:`BetaCosineScoring`)."""

    kind: str
    decomposes: bool

    def normalize(self, g: GaussianEmbedding) -> GaussianEmbedding: ...

    def normalize_mixture(self, g: GaussianEmbedding) -> GaussianEmbedding: ...

    def prepare(self, mean: np.ndarray, var: np.ndarray) -> PreparedDocs: ...

    def similarity(self, mq, vq, mc, vc, *, num_threads: Optional[int] = None) -> np.ndarray: ...

    def get_config(self) -> Dict[str, Any]: ...


class _ZeroQueryVariance:
    """Prepared documents (scored without variances) that also zero each query's variance."""

    def __init__(self, docs: kernels.ProbitDocs):
        self.docs = docs

    def __len__(self) -> int:
        return len(self.docs)

    @property
    def nbytes(self) -> int:
        return self.docs.nbytes

    def top_k(self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None):
        v_q = np.zeros_like(as_matrix(v_q, "v_q", allow_empty=True))
        return self.docs.top_k(mu_q, v_q, k, candidates=candidates, num_threads=num_threads)


class ProbitScoring(Configured):
    """The probit similarity of two diagonal Gaussians (the paper's scoring).

    Parameters
    ----------
    use_variance : bool
        Score with the variances (default True). False zeroes them on both
        sides, so the score is the dot product of the means (the paper's
        "- Unc Sim" ablation).
    """

    kind = "probit"
    #: the score of side-by-side blocks is the probit of the blocks' summed moments, so extra
    #: coordinates (hubness) and per-block maps (query heads) act on the per-model scores
    decomposes = True

    def __init__(self, use_variance: bool = True):
        self.use_variance = check_bool(use_variance, "use_variance")

    def normalize(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """Unit means, the variance scaled alike (``v / |mu|^2``)."""
        return normalize_gaussian(g)

    def normalize_mixture(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """A convolution of unit Gaussians, brought back to a unit mean."""
        return normalize_gaussian(g)

    def _var(self, v) -> np.ndarray:
        return v if self.use_variance else np.zeros_like(np.asarray(v))

    def prepare(self, mean: np.ndarray, var: np.ndarray, *, storage: str = "float32"):
        """The documents as a :class:`crossembed.ProbitDocs` (``storage`` as there; float32 by default)."""
        docs = kernels.ProbitDocs(mean, self._var(var), storage=storage)
        return docs if self.use_variance else _ZeroQueryVariance(docs)

    def similarity(self, mq, vq, mc, vc, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Dense ``(Q, N)`` float32 probit scores."""
        return kernels.probit_scores(mq, self._var(vq), mc, self._var(vc), num_threads=num_threads)


class _BetaDocs:
    """Documents held for :func:`crossembed.uec.rules.beta_topk` (nothing to precompute)."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, beta: float):
        self.mean = as_matrix(mean, "mean")
        self.var = as_matrix(var, "var", nonnegative=True)
        if self.var.shape != self.mean.shape:
            raise ValueError(f"var has shape {self.var.shape} but mean has shape {self.mean.shape}")
        self.beta = beta

    def __len__(self) -> int:
        return self.mean.shape[0]

    @property
    def nbytes(self) -> int:
        return int(self.mean.nbytes + self.var.nbytes)

    def top_k(self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None):
        return rules.beta_topk(
            mu_q, v_q, self.mean, self.var, k, beta=self.beta, candidates=candidates, num_threads=num_threads
        )


class BetaCosineScoring(Configured):
    """The official UEC code's similarity ``cos / (1 + beta sig2_s / pi)``.

    Parameters
    ----------
    beta : float
        ``beta >= 0``, how strongly the score moment ``sig2_s`` shrinks the
        cosine (default 1; 0 is the plain cosine of the means).
    """

    kind = "beta_cosine"
    #: the cosine renormalises the whole vector: extra coordinates would not add to per-model scores
    decomposes = False

    def __init__(self, beta: float = 1.0):
        self.beta = check_positive(beta, "beta", allow_zero=True)

    def normalize(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """Unit means; the variance ``v / |v|_2^2`` per row (:func:`~crossembed.uec.rules.normalize_variance_official`)."""
        unit = normalize_gaussian(g)
        return GaussianEmbedding(unit.mean, rules.normalize_variance_official(g.var).astype(np.float32), unit.weights)

    def normalize_mixture(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """Unchanged: the official code scores the unnormalised convolution (its cosine normalises the means)."""
        return g

    def prepare(self, mean: np.ndarray, var: np.ndarray):
        """The documents, held as given (the beta cosine has no prepared form)."""
        return _BetaDocs(mean, var, self.beta)

    def similarity(self, mq, vq, mc, vc, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Dense ``(Q, N)`` float32 beta-cosine scores."""
        return rules.beta_scores(mq, vq, mc, vc, beta=self.beta, num_threads=num_threads)


_SCORINGS = {cls.kind: cls for cls in (ProbitScoring, BetaCosineScoring)}


def scoring_from_config(config: Dict[str, Any]):
    """The scoring object a :meth:`get_config` dict describes."""
    return from_config(config, _SCORINGS, "scoring")
