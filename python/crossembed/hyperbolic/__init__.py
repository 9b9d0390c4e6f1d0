"""UNCHA: uncertainty-guided compositional alignment in the Lorentz model.

* :mod:`~crossembed.hyperbolic.lorentz` - differentiable Lorentz-model ops
  (stable distance, exp/log maps at the origin, entailment cones, uncertainty).
* :mod:`~crossembed.hyperbolic.losses` - the UNCHA objective; CLIP, MERU,
  HyCoCLIP and two UNCHA ablations are presets of it.
* :mod:`~crossembed.hyperbolic.data` - compositional Fashion-MNIST scenes.
* :mod:`~crossembed.hyperbolic.model`, :mod:`~crossembed.hyperbolic.train` -
  the towers and the one trainer.
* :mod:`~crossembed.hyperbolic.heads` - projection heads trained on frozen
  features of any pretrained towers, and their batches.
* :mod:`~crossembed.hyperbolic.evaluate` - metrics (retrieval via the C++
  ``lorentz_topk``).
* :mod:`~crossembed.hyperbolic.wordnet_embedding` - the WordNet noun
  hierarchy embedded with the same ops.

The submodules are loaded on first use, so ``import crossembed`` works
without torch.
"""

from __future__ import annotations

import importlib

__all__ = ["lorentz", "losses", "data", "model", "train", "heads", "evaluate", "wordnet_embedding"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"crossembed.hyperbolic.{name}")
    raise AttributeError(f"module 'crossembed.hyperbolic' has no attribute {name!r}")
