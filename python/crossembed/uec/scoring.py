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

A scoring is a frozen :class:`Scoring`; the official code's beta cosine is
:class:`crossembed.uec.ablations.BetaCosineScoring`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Protocol, Tuple

import numpy as np

from crossembed import kernels
from crossembed._config import Registered, from_config, set_checked
from crossembed._validation import as_matrix, check_bool
from crossembed.uec.gaussian import GaussianEmbedding, normalize_gaussian

__all__ = ["PreparedDocs", "ProbitScoring", "Scoring", "scoring_from_config"]


class PreparedDocs(Protocol):
    """Documents prepared for repeated top-k searches (what :meth:`Scoring.prepare` returns)."""

    #: bytes the prepared documents hold (an index reports its cached blocks by it)
    nbytes: int

    def top_k(
        self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Best ``k`` documents per query: ``(scores float32 (Q, k), indices int64 (Q, k))``, best first."""
        ...


@dataclass(frozen=True)
class Scoring(Registered):
    """Base of the scoring objects: a frozen dataclass whose fields are its config.

    A subclass is a ``@dataclass(frozen=True)`` that sets ``kind`` (it is then registered:
    :func:`scoring_from_config` rebuilds it) and ``decomposes`` (True when the score of
    side-by-side blocks is a function of the per-block scores, so score mixing may add
    coordinates and map blocks), and implements the methods below.
    """

    registry = {}
    kind = ""
    decomposes = False

    def normalize(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """One model's Gaussians in this scoring's space."""
        raise NotImplementedError

    def normalize_mixture(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """A convolution of normalised Gaussians (embedding mixing) in this scoring's space."""
        raise NotImplementedError

    def prepare(self, mean: np.ndarray, var: np.ndarray) -> PreparedDocs:
        """Documents prepared for repeated top-k searches."""
        raise NotImplementedError

    def similarity(self, mq, vq, mc, vc, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Dense ``(Q, N)`` float32 scores."""
        raise NotImplementedError


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


@dataclass(frozen=True)
class ProbitScoring(Scoring):
    """The probit similarity of two diagonal Gaussians (the paper's scoring).

    Parameters
    ----------
    use_variance : bool
        Score with the variances (default True). False zeroes them on both
        sides, so the score is the dot product of the means (the paper's
        "- Unc Sim" ablation).
    """

    use_variance: bool = True
    kind = "probit"
    #: the score of side-by-side blocks is the probit of the blocks' summed moments, so extra
    #: coordinates (hubness) and per-block maps (query heads) act on the per-model scores
    decomposes = True

    def __post_init__(self):
        set_checked(self, use_variance=check_bool(self.use_variance, "use_variance"))

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


def scoring_from_config(config: Dict[str, Any]) -> Scoring:
    """The scoring object a ``get_config()`` dict describes (any registered :class:`Scoring` kind)."""
    return from_config(config, Scoring.registry, "scoring")
