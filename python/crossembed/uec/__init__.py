"""UEC: uncertainty-driven embedding convolution of off-the-shelf text encoders.

* :class:`LaplaceEmbedder` - post-hoc Gaussian embeddings (last-layer Laplace),
  with the posterior form a :class:`Posterior` (:class:`DiagPosterior`,
  :class:`KronPosterior`).
* :class:`UECEnsemble` - per-input uncertainty weights, Gaussian convolution
  (embedding or score space), probit similarity.
* :class:`UECIndex` - hnswlib candidates + exact probit rerank, with ids,
  add/remove and filters, float16 storage, saved atomically (memory-mappable).
* :class:`ShardedUECIndex` - the same index partitioned over Dask workers.
* :mod:`crossembed.uec.rank_head`, :mod:`crossembed.uec.query_head` - what
  each embedder also fits on its pairs: the rank head that routes queries,
  and the query head that maps them (both used by the default ensemble).
* :mod:`crossembed.uec.metrics` - retrieval and calibration metrics.

The evaluation harness behind ``crossembed uec-eval`` and ``docs/uec.md`` is
:mod:`crossembed.experiments.uec_eval` (this package is library only).
"""

from crossembed.uec.ensemble import UECEnsemble, convolve, uncertainty_coefficients
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.posteriors import DiagPosterior, KronPosterior, Posterior
from crossembed.uec.sharded import ShardedUECIndex

__all__ = [
    "DiagPosterior",
    "GaussianEmbedding",
    "KronPosterior",
    "LaplaceEmbedder",
    "Posterior",
    "ShardedUECIndex",
    "UECEnsemble",
    "UECIndex",
    "convolve",
    "uncertainty_coefficients",
]
