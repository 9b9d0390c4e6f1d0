"""Projection heads on frozen features: the models and the trainer's batches.

:func:`head_towers` makes the two :class:`~crossembed.hyperbolic.model.FeatureHead`
towers of :func:`crossembed.hyperbolic.train.build_model` from a
:class:`~crossembed.hyperbolic.features.FeatureSet`, with the standardisation
statistics of its training drawings; :class:`FeatureBatches` is the
:class:`~crossembed.hyperbolic.train.BatchSource` over those drawings.

How a drawing maps onto the loss's scenes and parts (the same conventions as
the Fashion-MNIST scenes):

* whole image <-> caption (title, keywords, description); drawings with
  identical captions are each other's positives;
* parts: the drawing's alpha-mask components; a drawing without proper parts
  has one part, itself (like a one-item scene, whose part is the scene: the
  loss keeps it out of the part -> whole entailment);
* part text: the drawing's title. No part has a caption of its own (keywords
  describe the drawing, not a component), and the title is the most general
  text of the drawing, entailed by its caption. A part's positives in the
  part -> whole terms are the batch's drawings with the same title.
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from crossembed.hyperbolic.features import FeatureSet
from crossembed.hyperbolic.losses import Batch
from crossembed.hyperbolic.model import CompositionalModel, FeatureHead

__all__ = ["FeatureBatches", "head_towers", "text_ids"]


def text_ids(texts: Sequence[str]) -> np.ndarray:
    """``int64`` ids with equal ids exactly for equal texts (first occurrence order)."""
    ids = {t: i for i, t in enumerate(dict.fromkeys(texts))}
    return np.array([ids[t] for t in texts], np.int64)


def _stats(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, np.float64)
    return x.mean(0).astype(np.float32), x.std(0).astype(np.float32)


def head_towers(features: FeatureSet, rows: Sequence[int]) -> Callable:
    """``towers(encoder_config) -> (image head, text head)`` for :func:`~crossembed.hyperbolic.train.build_model`.

    The heads standardise with the mean and std of the training drawings
    ``rows`` (images; captions and titles together for the text head).
    """
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        raise ValueError("rows is empty")
    img = _stats(features.image[rows])
    txt = _stats(np.concatenate([features.caption_text[rows], features.title_text[rows]]))

    def towers(encoder) -> Tuple[nn.Module, nn.Module]:
        return FeatureHead(*img, encoder.dim), FeatureHead(*txt, encoder.dim)

    return towers


class FeatureBatches:
    """The training drawings ``rows`` of ``features`` as batches of embedded wholes, parts and texts.

    Parameters
    ----------
    features : FeatureSet
    rows : sequence of int
        The training drawings (rows of ``features``).
    """

    def __init__(self, features: FeatureSet, rows: Sequence[int]):
        self.rows = np.asarray(rows, np.int64)
        if self.rows.size == 0 or self.rows.min() < 0 or self.rows.max() >= len(features):
            raise ValueError(f"rows must be non-empty indices below {len(features)}")
        self.features = features
        self.caption_ids = text_ids(features.captions)
        self.title_ids = text_ids(features.titles)
        n = len(features)
        self._parts_of = [[] for _ in range(n)]
        for p, d in enumerate(features.part_of):
            self._parts_of[int(d)].append(p)

    def __len__(self) -> int:
        return len(self.rows)

    def _parts(self, drawings: np.ndarray):
        """Part features and the batch position of their drawing; a drawing without parts stands for itself."""
        f = self.features
        feats, where = [], []
        for b, d in enumerate(drawings):
            own = self._parts_of[int(d)]
            feats.append(f.part[own] if own else f.image[d : d + 1])
            where += [b] * max(1, len(own))
        return np.concatenate(feats), np.asarray(where, np.int64)

    def batch(self, model: CompositionalModel, indices: np.ndarray) -> Batch:
        f = self.features
        d = self.rows[np.asarray(indices)]
        batch = Batch(
            model.encode_image(torch.from_numpy(f.image[d])),
            model.encode_text(torch.from_numpy(f.caption_text[d])),
            scene_caption=torch.from_numpy(self.caption_ids[d]),
        )
        cfg = model.config
        if not (cfg.local or cfg.part_whole or cfg.entailment == "all"):
            return batch  # CLIP and MERU train on wholes only
        part_feats, part_scene = self._parts(d)
        titles = self.title_ids[d]
        uniq, first, part_text = np.unique(titles[part_scene], return_index=True, return_inverse=True)
        batch.image_part = model.encode_image(torch.from_numpy(part_feats))
        batch.text_part = model.encode_text(torch.from_numpy(f.title_text[d[part_scene[first]]]))
        batch.part_text = torch.from_numpy(part_text.reshape(-1).astype(np.int64))
        batch.part_scene = torch.from_numpy(part_scene)
        batch.scene_has = torch.from_numpy(titles[:, None] == uniq[None, :])
        return batch
