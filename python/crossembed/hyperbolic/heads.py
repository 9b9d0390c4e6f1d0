"""Projection heads on frozen features: the model's towers and the trainer's batches.

With pretrained image and text towers kept frozen, a collection is encoded
once and only two linear heads (:class:`~crossembed.hyperbolic.model.FeatureHead`)
train. :func:`head_towers` makes them for
:func:`crossembed.hyperbolic.train.build_model`, standardised with the
training features' statistics; :class:`FeatureBatches` is the
:class:`~crossembed.hyperbolic.train.BatchSource` over the training examples.

An example maps onto the loss's scenes and parts as a Fashion-MNIST scene does:

* whole image <-> its text; examples with equal ``text_ids`` are each
  other's positives;
* parts: image features of pieces of the example; an example without parts
  has one part, itself (like a one-item scene, whose part is the scene: the
  loss keeps it out of the part -> whole entailment);
* part text: one text per example, shared by its parts (the most general
  text of the example, e.g. a title entailed by its caption). A part's
  positives in the part -> whole terms are the batch's examples with equal
  ``part_text_ids``.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from crossembed.hyperbolic.losses import Batch
from crossembed.hyperbolic.model import CompositionalModel, FeatureHead

__all__ = ["FeatureBatches", "head_towers"]


def _stats(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, np.float64)
    return x.mean(0).astype(np.float32), x.std(0).astype(np.float32)


def head_towers(image: np.ndarray, text: np.ndarray) -> Callable:
    """``towers(encoder_config) -> (image head, text head)`` for :func:`~crossembed.hyperbolic.train.build_model`.

    Parameters
    ----------
    image : array (n, Di)
        Training image features; the image head standardises with their mean and std.
    text : array (m, Dt)
        Training text features (e.g. the captions and part texts of the training examples), the same for the text head.
    """
    if len(image) == 0 or len(text) == 0:
        raise ValueError("image and text need at least one training feature each")
    img, txt = _stats(image), _stats(text)

    def towers(encoder) -> Tuple[nn.Module, nn.Module]:
        return FeatureHead(*img, encoder.dim), FeatureHead(*txt, encoder.dim)

    return towers


class FeatureBatches:
    """Frozen features of ``N`` examples; batches of the training examples ``rows``, embedded by the model.

    Parameters
    ----------
    image : float32 (N, Di)
        Whole-image features.
    text : float32 (N, Dt)
        Text features of the wholes.
    part_text : float32 (N, Dt)
        Text features of each example's parts.
    part : float32 (P, Di)
        Part image features.
    part_of : int (P,)
        The example of each part.
    text_ids, part_text_ids : int (N,), optional
        Equal ids mark equal texts (:func:`crossembed.hyperbolic.data.text_ids`); default: every text distinct.
    rows : sequence of int, optional
        The training examples; default all ``N``.
    """

    def __init__(
        self,
        image: np.ndarray,
        text: np.ndarray,
        part_text: np.ndarray,
        part: np.ndarray,
        part_of: Sequence[int],
        *,
        text_ids: Optional[Sequence[int]] = None,
        part_text_ids: Optional[Sequence[int]] = None,
        rows: Optional[Sequence[int]] = None,
    ):
        n = len(image)
        own = np.arange(n, dtype=np.int64)
        self.image, self.text, self.part_text, self.part = (np.asarray(a) for a in (image, text, part_text, part))
        self.text_ids = own if text_ids is None else np.asarray(text_ids, np.int64)
        self.part_text_ids = own if part_text_ids is None else np.asarray(part_text_ids, np.int64)
        if not len(text) == len(part_text) == len(self.text_ids) == len(self.part_text_ids) == n:
            raise ValueError(f"text, part_text and the ids must have one row per image ({n})")
        part_of = np.asarray(part_of, np.int64)
        if len(part) != len(part_of) or (len(part_of) and (part_of.min() < 0 or part_of.max() >= n)):
            raise ValueError(f"part_of must name an example (below {n}) for each of the {len(part)} parts")
        self.rows = own if rows is None else np.asarray(rows, np.int64)
        if self.rows.size == 0 or self.rows.min() < 0 or self.rows.max() >= n:
            raise ValueError(f"rows must be non-empty indices below {n}")
        self._parts_of = [[] for _ in range(n)]
        for p, d in enumerate(part_of):
            self._parts_of[int(d)].append(p)

    def __len__(self) -> int:
        return len(self.rows)

    def _parts(self, examples: np.ndarray):
        """Part features and the batch position of their example; an example without parts stands for itself."""
        feats, where = [], []
        for b, d in enumerate(examples):
            own = self._parts_of[int(d)]
            feats.append(self.part[own] if own else self.image[d : d + 1])
            where += [b] * max(1, len(own))
        return np.concatenate(feats), np.asarray(where, np.int64)

    def batch(self, model: CompositionalModel, indices: np.ndarray) -> Batch:
        d = self.rows[np.asarray(indices)]
        batch = Batch(
            model.encode_image(torch.from_numpy(self.image[d])),
            model.encode_text(torch.from_numpy(self.text[d])),
            scene_caption=torch.from_numpy(self.text_ids[d]),
        )
        if not model.config.uses_parts:
            return batch
        part_feats, part_scene = self._parts(d)
        titles = self.part_text_ids[d]
        uniq, first, part_text = np.unique(titles[part_scene], return_index=True, return_inverse=True)
        batch.image_part = model.encode_image(torch.from_numpy(part_feats))
        batch.text_part = model.encode_text(torch.from_numpy(self.part_text[d[part_scene[first]]]))
        batch.part_text = torch.from_numpy(part_text.reshape(-1).astype(np.int64))
        batch.part_scene = torch.from_numpy(part_scene)
        batch.scene_has = torch.from_numpy(titles[:, None] == uniq[None, :])
        return batch
