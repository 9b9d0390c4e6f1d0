"""UEC: uncertainty-driven embedding convolution of off-the-shelf text encoders.

* :class:`LaplaceEmbedder` - post-hoc Gaussian embeddings (last-layer Laplace),
  with the posterior form a :class:`Posterior` (:class:`DiagPosterior`,
  :class:`KronPosterior`).
* :class:`UECEnsemble` - K embedders with a routing (per-input weights; by
  default the rank head, discounted by the query's language and each model's
  probe where a model reads only some languages: :class:`LanguageRouting`), a
  mixing (score or embedding space) and a scoring (probit or the official
  beta cosine) object: :mod:`crossembed.uec.routing`,
  :mod:`crossembed.uec.mixing`, :mod:`crossembed.uec.scoring`;
  :mod:`crossembed.uec.presets` builds the published rule sets by name.
* :class:`UECIndex` - HNSW candidates + exact probit rerank, with ids,
  add/remove and filters, float16 storage, saved atomically (memory-mappable).
* :class:`ShardedUECIndex` - the same index partitioned over Dask workers.
* :class:`ModelHeads` - what each embedder also fits on its pairs for the
  ensemble: trace statistics, score scale, the rank head that routes queries
  (:mod:`crossembed.uec.rank_head`), hubness anchors, the query head that
  maps them (:mod:`crossembed.uec.query_head`) and the probe head
  (:mod:`crossembed.uec.probe`).
* :mod:`crossembed.uec.metrics` - retrieval and calibration metrics.

The evaluation harness behind ``crossembed uec-eval`` and ``docs/uec.md`` is
:mod:`experiments.uec_eval` (this package is library only).
"""

from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads
from crossembed.uec.index import UECIndex
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.languages import LangidIdentifier
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.mixing import EmbeddingMixing, ScoreMixing
from crossembed.uec.posteriors import DiagPosterior, KronPosterior, Posterior
from crossembed.uec.routing import (
    ConfidenceRouting,
    FixedRouting,
    LanguageRouting,
    LaplaceRouting,
    PrecisionSumRouting,
    RankRouting,
    RetrievalReference,
    Routing,
    UniformRouting,
)
from crossembed.uec.scoring import BetaCosineScoring, ProbitScoring
from crossembed.uec.sharded import ShardedUECIndex, ShardError, ShardLostError, ShardTimeoutError

__all__ = [
    "BetaCosineScoring",
    "ConfidenceRouting",
    "DiagPosterior",
    "EmbeddingMixing",
    "FixedRouting",
    "GaussianEmbedding",
    "IndexConfig",
    "KronPosterior",
    "LangidIdentifier",
    "LanguageRouting",
    "LaplaceEmbedder",
    "LaplaceRouting",
    "ModelHeads",
    "Posterior",
    "PrecisionSumRouting",
    "ProbitScoring",
    "RankRouting",
    "RetrievalReference",
    "Routing",
    "ScoreMixing",
    "ShardError",
    "ShardLostError",
    "ShardTimeoutError",
    "ShardedUECIndex",
    "UECEnsemble",
    "UECIndex",
    "UniformRouting",
]
