"""crossembed: embeddings across models.

The classes a user starts from, one per method, and the kernels they share:

* :class:`UECEnsemble`, :class:`LaplaceEmbedder`, :class:`UECIndex` - UEC:
  K text encoders as Gaussian embedders (last-layer Laplace), weighted per
  query, fused, scored with the probit similarity and served from an index
  (:mod:`crossembed.uec`; encoders by name with :func:`load_encoder`).
* :class:`GEHLinker` - GEH: which rows of two black-box vector collections are
  the same object (:mod:`crossembed.linking`).
* :mod:`crossembed.hyperbolic` - UNCHA: Lorentz-model image-text training.
* Kernels (C++, :mod:`crossembed.kernels` has them all): :class:`ProbitDocs`,
  :func:`probit_scores`, :func:`probit_topk`, :func:`anchor_signatures`,
  :func:`csls_mutual_topk`, :func:`lorentz_pairwise`, :func:`lorentz_topk`.

The method classes are imported on first use, so ``import crossembed`` loads
the kernels only.
"""

from __future__ import annotations

import importlib

from crossembed.kernels import (
    ProbitDocs,
    anchor_signatures,
    csls_mutual_topk,
    lorentz_pairwise,
    lorentz_topk,
    probit_scores,
    probit_topk,
    simd_level,
)

__version__ = "0.1.0"

# name -> module that defines it, imported on first access (PEP 562)
_LAZY = {
    "UECEnsemble": "crossembed.uec",
    "UECIndex": "crossembed.uec",
    "LaplaceEmbedder": "crossembed.uec",
    "GEHLinker": "crossembed.linking",
    "load_encoder": "crossembed.encoders",
}

__all__ = [
    "GEHLinker",
    "LaplaceEmbedder",
    "ProbitDocs",
    "UECEnsemble",
    "UECIndex",
    "anchor_signatures",
    "csls_mutual_topk",
    "load_encoder",
    "lorentz_pairwise",
    "lorentz_topk",
    "probit_scores",
    "probit_topk",
    "simd_level",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'crossembed' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
