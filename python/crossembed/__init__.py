"""crossembed: embeddings across models.

* :mod:`crossembed.kernels` - the C++ kernels (probit similarity, anchor
  signatures, CSLS mutual top-k, Lorentz distances), re-exported here.
* :mod:`crossembed.encoders` - offline text encoders behind one ``encode``.
* :mod:`crossembed.uec` - uncertainty-driven embedding convolution (ensembles).
* :mod:`crossembed.linking` - GEH vector linking across black-box encoders.
* :mod:`crossembed.hyperbolic` - UNCHA Lorentz-model image-text training.
"""

from crossembed.kernels import (
    ProbitDocs,
    VoteTable,
    anchor_signatures,
    csls_mutual_topk,
    csls_mutual_topk_candidates,
    greedy_one_to_one,
    lorentz_pairwise,
    lorentz_topk,
    median_anchor_distance,
    otsu_threshold,
    probit_scores,
    probit_topk,
    signatures_from_cosines,
    simd_level,
    topk_rows_and_columns,
)

__version__ = "0.1.0"

__all__ = [
    "ProbitDocs",
    "VoteTable",
    "anchor_signatures",
    "csls_mutual_topk",
    "csls_mutual_topk_candidates",
    "greedy_one_to_one",
    "lorentz_pairwise",
    "lorentz_topk",
    "median_anchor_distance",
    "otsu_threshold",
    "probit_scores",
    "probit_topk",
    "signatures_from_cosines",
    "simd_level",
    "topk_rows_and_columns",
]
