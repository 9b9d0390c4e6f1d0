"""UEC: uncertainty-driven embedding convolution of off-the-shelf text encoders.

The supported classes (what ``__all__`` lists):

* :class:`LaplaceEmbedder` - post-hoc Gaussian embeddings (last-layer Laplace) of any encoder,
  fitted from text pairs; the posterior form is ``"kron"`` (default), ``"diag"`` or a
  :class:`Posterior` subclass.
* :class:`UECEnsemble` - K embedders combined by three frozen behaviour objects: a routing
  (per-input weights; by default the rank head, discounted by the query's language and each
  model's probe where a model reads only some languages, :class:`LanguageRouting`; else
  :class:`RankRouting`; the paper's :class:`LaplaceRouting`, :class:`UniformRouting`,
  :class:`FixedRouting`, or a new :class:`Routing`), a mixing (:class:`ScoreMixing`, default, or
  the paper's :class:`EmbeddingMixing`) and a scoring (:class:`ProbitScoring`).
* :class:`UECIndex` - HNSW candidates + exact probit rerank, with ids, add/remove and filters,
  float16 storage, saved atomically (memory-mappable); build settings in an :class:`IndexConfig`.
* :class:`ShardedUECIndex` - the same index partitioned over Dask workers (errors derive from
  :class:`ShardError`).
* :class:`GaussianEmbedding` - what every encode returns: means, diagonal variances, weights.

:mod:`crossembed.uec.ablations` holds the rules the default is compared with (the official
code's, retrieval confidence); the evaluation harness lives outside the package
(``python -m experiments uec-eval``).
"""

from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.mixing import EmbeddingMixing, ScoreMixing
from crossembed.uec.posteriors import Posterior
from crossembed.uec.routing import FixedRouting, LanguageRouting, LaplaceRouting, RankRouting, Routing, UniformRouting
from crossembed.uec.scoring import ProbitScoring
from crossembed.uec.sharded import ShardedUECIndex, ShardError

__all__ = [
    "EmbeddingMixing",
    "FixedRouting",
    "GaussianEmbedding",
    "IndexConfig",
    "LanguageRouting",
    "LaplaceEmbedder",
    "LaplaceRouting",
    "Posterior",
    "ProbitScoring",
    "RankRouting",
    "Routing",
    "ScoreMixing",
    "ShardError",
    "ShardedUECIndex",
    "UECEnsemble",
    "UECIndex",
    "UniformRouting",
]
