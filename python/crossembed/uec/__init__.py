"""UEC: uncertainty-driven embedding convolution of off-the-shelf text encoders.

* :class:`LaplaceEmbedder` - post-hoc Gaussian embeddings (last-layer Laplace).
* :class:`UECEnsemble` - per-input uncertainty weights, Gaussian convolution
  (embedding or score space), probit similarity.
* :class:`UECIndex` - hnswlib candidates + exact probit rerank, saved atomically.
* :mod:`crossembed.uec.evaluate` / :mod:`crossembed.experiments.tasks` - the retrieval
  harness behind ``crossembed uec-eval`` and ``docs/uec.md``.
"""

from crossembed.uec.ensemble import UECEnsemble, convolve, uncertainty_coefficients
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.laplace import LaplaceEmbedder

__all__ = [
    "GaussianEmbedding",
    "LaplaceEmbedder",
    "UECEnsemble",
    "UECIndex",
    "convolve",
    "uncertainty_coefficients",
]
