"""UEC: uncertainty-driven embedding convolution of off-the-shelf text encoders.

* :class:`LaplaceEmbedder` - post-hoc Gaussian embeddings (last-layer Laplace).
* :class:`UECEnsemble` - per-input uncertainty weights, Gaussian convolution,
  probit similarity.
* :class:`UECIndex` - hnswlib candidates + exact probit rerank, saved atomically.
"""
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.laplace import LaplaceEmbedder

__all__ = ["GaussianEmbedding", "LaplaceEmbedder"]
