"""Image and text towers with a Lorentz (or Euclidean) projection.

Two kinds of towers, one model class:

* trained from scratch, sized for CPU training in about a minute: a 4-layer
  CNN (any input size, global average pooling) for scenes and part crops,
  and a one-layer GRU over the closed caption vocabulary for texts;
* :class:`FeatureHead`: a trainable linear projection of a frozen
  pretrained tower's features (the towers themselves never train).

Hyperbolic models map ``expmap0(scale * encoder(x))`` with learnable scalers
(init ``1/sqrt(dim)``) and a learnable curvature; Euclidean CLIP returns the
raw projections and the loss L2-normalises them.
"""

from __future__ import annotations

import math
from typing import Dict

import torch
import torch.nn as nn

from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.losses import MIN_TEMPERATURE, LossConfig

__all__ = ["ImageEncoder", "TextEncoder", "FeatureHead", "CompositionalModel"]

CURVATURE_RANGE = (0.1, 10.0)


class ImageEncoder(nn.Module):
    """Conv(3x3, stride 2) x3 + Conv(3x3) + global average pool + linear.

    GroupNorm rather than BatchNorm: scenes and part crops go through
    separate calls with different statistics, and train/eval must agree.
    """

    def __init__(self, dim: int = 64, width: int = 32):
        super().__init__()
        w = width
        layers = []
        chans = [1, w // 2, w, 2 * w, 2 * w]
        for i in range(4):
            stride = 2 if i < 3 else 1
            layers += [
                nn.Conv2d(chans[i], chans[i + 1], 3, stride, 1, bias=False),
                nn.GroupNorm(4, chans[i + 1]),
                nn.ReLU(inplace=True),
            ]
        self.features = nn.Sequential(*layers)
        self.proj = nn.Linear(chans[-1], dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images``: (N, H, W) uint8 or float in [0, 1]; returns (N, dim)."""
        x = images.float().unsqueeze(1)
        if images.dtype == torch.uint8:
            x = x / 255.0
        return self.proj(self.features(x).mean((2, 3)))


class TextEncoder(nn.Module):
    """Token embedding + one-layer GRU, mean-pooled over real tokens, + linear."""

    def __init__(self, vocab_size: int, dim: int = 64, width: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width, padding_idx=0)
        self.gru = nn.GRU(width, width, batch_first=True)
        self.proj = nn.Linear(width, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != 0).unsqueeze(-1).float()
        h, _ = self.gru(self.embed(tokens))
        pooled = (h * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return self.proj(pooled)


class FeatureHead(nn.Module):
    """Fixed standardisation of a frozen feature, then a trainable linear map to ``dim``.

    Parameters
    ----------
    mean, std : array-like (D,)
        Per-feature statistics of the training set (stored as buffers; a zero
        std is treated as 1).
    dim : int
        Output dimension.

    The weights start with standard deviation ``1/sqrt(D * dim)``, so a
    standardised feature (norm ~ ``sqrt(D)``) maps to norm ~1: the output
    scale of the CNN towers, where ``u = softplus(-|x|)`` is not yet
    saturated at 0.
    """

    def __init__(self, mean, std, dim: int):
        super().__init__()
        mean = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        std = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        if mean.shape != std.shape:
            raise ValueError(f"mean has {mean.numel()} features but std has {std.numel()}")
        self.register_buffer("mean", mean)
        self.register_buffer("std", torch.where(std > 0, std, torch.ones_like(std)))
        self.proj = nn.Linear(mean.numel(), dim)
        nn.init.normal_(self.proj.weight, std=1.0 / math.sqrt(mean.numel() * dim))
        nn.init.zeros_(self.proj.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``features``: (N, D) frozen tower outputs; returns (N, dim)."""
        return self.proj((features.float() - self.mean) / self.std)


class CompositionalModel(nn.Module):
    """Image and text towers plus the learnable scalers, curvature and temperatures.

    Parameters
    ----------
    config : LossConfig
        Its ``geometry`` decides Lorentz vs Euclidean outputs.
    image_encoder, text_encoder : nn.Module
        Map a batch of images (or their features) and of texts (token ids or
        features) to ``(N, dim)``: :class:`ImageEncoder` and
        :class:`TextEncoder`, or two :class:`FeatureHead`.
    dim : int
        Embedding dimension (space components).
    """

    def __init__(self, config: LossConfig, image_encoder: nn.Module, text_encoder: nn.Module, *, dim: int = 64):
        super().__init__()
        self.config = config
        self.dim = dim
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.log_scale_image = nn.Parameter(torch.tensor(math.log(1 / math.sqrt(dim))))
        self.log_scale_text = nn.Parameter(torch.tensor(math.log(1 / math.sqrt(dim))))
        self.log_curvature = nn.Parameter(torch.tensor(0.0))  # c = 1 at init
        self.log_tau_g = nn.Parameter(torch.tensor(math.log(0.07)))
        self.log_tau_l = nn.Parameter(torch.tensor(math.log(0.05)))
        self.log_tau_gl = nn.Parameter(torch.tensor(math.log(0.06)))

    @property
    def hyperbolic(self) -> bool:
        return self.config.geometry == "lorentz"

    def curvature(self) -> torch.Tensor:
        """``c = exp(log_c)`` clamped to [0.1, 10]."""
        return self.log_curvature.exp().clamp(*CURVATURE_RANGE)

    def manifold(self) -> L.Lorentz:
        """The hyperboloid of the current :meth:`curvature` (gradients flow to ``log_curvature``)."""
        return L.Lorentz(self.curvature())

    def temperatures(self) -> Dict[str, torch.Tensor]:
        """``tau_g, tau_l, tau_gl``, each clamped so the logit scale stays <= 100."""
        return {
            name: getattr(self, f"log_{name}").exp().clamp_min(MIN_TEMPERATURE) for name in ("tau_g", "tau_l", "tau_gl")
        }

    def _project(self, v: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
        if not self.hyperbolic:
            return v
        # the towers' projections output O(1) norms; transformer towers (for which the
        # 1/sqrt(dim) scaler init was chosen) output O(sqrt(dim)) norms, so match them
        return self.manifold().expmap0(v * (math.sqrt(self.dim) * log_scale.exp()))

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """Scenes or part crops (N, H, W), or their frozen features (N, D) -> embeddings (N, dim)."""
        return self._project(self.image_encoder(images), self.log_scale_image)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids (N, L), or frozen text features (N, D) -> embeddings (N, dim)."""
        return self._project(self.text_encoder(tokens), self.log_scale_text)

    def no_decay_parameters(self):
        """Temperatures, curvature and scalers: excluded from weight decay."""
        return [
            self.log_scale_image,
            self.log_scale_text,
            self.log_curvature,
            self.log_tau_g,
            self.log_tau_l,
            self.log_tau_gl,
        ]
