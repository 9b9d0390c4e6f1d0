"""UNCHA: uncertainty-guided compositional alignment in the Lorentz model.

* :mod:`~crossembed.hyperbolic.lorentz` - differentiable Lorentz-model ops
  (stable distance, exp/log maps at the origin, entailment cones, uncertainty).
* :mod:`~crossembed.hyperbolic.losses` - the UNCHA objective; CLIP, MERU,
  HyCoCLIP and the ablations are presets of it.
* :mod:`~crossembed.hyperbolic.data` - compositional Fashion-MNIST scenes.
* :mod:`~crossembed.hyperbolic.model`, :mod:`~crossembed.hyperbolic.train` -
  small encoders and the one trainer.
* :mod:`~crossembed.hyperbolic.evaluate` - metrics (retrieval via the C++
  ``lorentz_topk``).
* :mod:`~crossembed.hyperbolic.wordnet_embedding` - the WordNet noun
  hierarchy embedded with the same ops.

This package is the library only: the comparison table, its plots and the
speed measurement live in :mod:`experiments` (``uncha_table``,
``uncha_plots``, ``uncha_speed``). torch is imported lazily so that
``import crossembed`` works without it.
"""

from __future__ import annotations

import importlib

__all__ = ["lorentz", "losses", "data", "model", "train", "evaluate", "wordnet_embedding"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"crossembed.hyperbolic.{name}")
    raise AttributeError(f"module 'crossembed.hyperbolic' has no attribute {name!r}")
