"""The last FFN output dense of a sentence-transformers model, and its pooled linearisation.

:func:`last_dense_block` finds ``encoder.layer[-1].output`` (``dense``,
``LayerNorm``) in a BERT-style ``SentenceTransformer`` (transformer, mean or
CLS pooling, optional Normalize) and refuses anything else;
:func:`linearise_texts` runs the model once per batch with hooks on that block
and returns a :class:`~crossembed.uec.linearisation.PooledLinearisation`
(the math is in that module). torch is imported lazily.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed.uec.linearisation import PooledLinearisation

__all__ = ["LastDenseBlock", "last_dense_block", "linearise_features", "linearise_texts"]


class LastDenseBlock:
    """The parts of a model the last-dense Laplace needs.

    Attributes
    ----------
    model : SentenceTransformer
    dense : torch.nn.Linear
        ``encoder.layer[-1].output.dense`` (weight ``D x D_ff``, bias ``D``).
    layer_norm : torch.nn.LayerNorm
        The LayerNorm after it (``LayerNorm(dense(a) + residual)``).
    pooling : {"mean", "cls"}
    """

    def __init__(self, model, dense, layer_norm, pooling: str):
        self.model = model
        self.dense = dense
        self.layer_norm = layer_norm
        self.pooling = pooling

    @property
    def dim(self) -> int:
        return int(self.dense.out_features)

    @property
    def in_dim(self) -> int:
        """Layer inputs per output: ``D_ff`` activations and the bias."""
        return int(self.dense.in_features) + 1

    def weight_matrix(self) -> np.ndarray:
        """``[W b]`` as float64 (D, D_ff + 1): the MAP of the posterior."""
        import torch

        with torch.no_grad():
            return np.concatenate(
                [self.dense.weight.double().cpu().numpy(), self.dense.bias.double().cpu().numpy()[:, None]], axis=1
            )

    def __repr__(self) -> str:
        return f"LastDenseBlock(dim={self.dim}, in_dim={self.in_dim}, pooling={self.pooling!r})"


def _pooling_mode(module) -> str:
    cfg = module.get_config_dict() if hasattr(module, "get_config_dict") else {}
    mode = cfg.get("pooling_mode")
    if mode is None:  # sentence-transformers < 5 keeps one flag per mode
        flags = {k: v for k, v in cfg.items() if k.startswith("pooling_mode_") and v}
        mode = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}.get(next(iter(flags), ""), None)
        if len(flags) != 1:
            mode = None
    return mode


def last_dense_block(model) -> LastDenseBlock:
    """Locate the last FFN output dense of a BERT-style ``SentenceTransformer``.

    Raises
    ------
    TypeError
        ``model`` is not a torch sentence-transformers model.
    ValueError
        The model is not transformer -> mean/CLS pooling [-> Normalize], or its
        last block has no ``output.dense`` / ``output.LayerNorm``.
    """
    import torch

    modules = list(model) if isinstance(model, torch.nn.Sequential) else None
    if not modules:
        raise TypeError(f"model must be a SentenceTransformer (an nn.Sequential), got {type(model).__name__}")
    names = [type(m).__name__ for m in modules]
    if len(modules) not in (2, 3) or names[1] != "Pooling" or (len(modules) == 3 and names[2] != "Normalize"):
        raise ValueError(
            f"layer='last_dense' needs transformer -> Pooling [-> Normalize], got {' -> '.join(names)} "
            "(a Dense module after pooling is not supported)"
        )
    pooling = _pooling_mode(modules[1])
    if pooling not in ("mean", "cls"):
        raise ValueError(f"layer='last_dense' supports mean or CLS pooling, got {pooling!r}")
    hf = getattr(modules[0], "auto_model", modules[0])
    try:
        block = hf.encoder.layer[-1].output
        dense, ln = block.dense, block.LayerNorm
    except (AttributeError, IndexError, TypeError):
        raise ValueError(
            f"{type(hf).__name__} has no encoder.layer[-1].output.dense/LayerNorm (a BERT-style model is needed)"
        ) from None
    if not isinstance(dense, torch.nn.Linear) or dense.bias is None or not isinstance(ln, torch.nn.LayerNorm):
        raise ValueError("encoder.layer[-1].output must hold a Linear 'dense' with bias and a 'LayerNorm'")
    if ln.weight is None or tuple(ln.normalized_shape) != (dense.out_features,):
        raise ValueError("the LayerNorm after the last dense must be affine over the hidden dimension")
    return LastDenseBlock(model, dense, ln, pooling)


def linearise_features(block: LastDenseBlock, features: dict, *, rank: int) -> PooledLinearisation:
    """Run ``block.model`` on tokenised ``features`` (one batch) and linearise its output.

    ``features`` is what the model's ``preprocess``/``tokenize`` returns. The
    embedding in the result is the model's own (pooled, then normalised here).
    """
    import torch

    captured = {}

    def grab(key):
        def hook(_module, args):
            captured[key] = args[0].detach()

        return hook

    handles = [
        block.dense.register_forward_pre_hook(grab("a")),
        block.layer_norm.register_forward_pre_hook(grab("u")),
    ]
    try:
        with torch.inference_mode():
            out = features
            for module in block.model:
                if type(module).__name__ == "Normalize":
                    continue
                out = module(out)
    finally:
        for h in handles:
            h.remove()
    with torch.inference_mode():
        m = out["sentence_embedding"].double()
        mask = out["attention_mask"].double()
        a, u = captured["a"].double(), captured["u"].double()
        sigma = torch.sqrt(u.var(dim=-1, unbiased=False) + block.layer_norm.eps)  # (n, T)
        xh = (u - u.mean(dim=-1, keepdim=True)) / sigma[..., None]
        if block.pooling == "mean":
            w = mask / mask.sum(dim=1, keepdim=True)
        else:
            w = torch.zeros_like(mask)
            w[:, 0] = 1.0
        ws = w / sigma  # (n, T): pooling weight / sigma_t
        c = ws.sum(dim=1)
        x = torch.cat([torch.einsum("nt,ntf->nf", ws, a), c[:, None]], dim=1)
        D = u.shape[-1]
        dirs = torch.sqrt(ws / c[:, None] / D)[..., None] * xh  # (n, T, D): sum_t v v^T = averaged xh xh^T / D
        if dirs.shape[1] > rank:
            _, s, vh = torch.linalg.svd(dirs, full_matrices=False)
            dirs = s[:, :rank, None] * vh[:, :rank]
        norms = m.norm(dim=1)
        emb = m / norms.clamp_min(1e-300)[:, None]
        gamma = block.layer_norm.weight.double()
        return PooledLinearisation(
            emb.cpu().numpy(),
            norms.cpu().numpy(),
            x.cpu().numpy(),
            gamma.cpu().numpy(),
            np.ascontiguousarray(dirs.cpu().numpy()),
        )


def linearise_texts(
    block: LastDenseBlock,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    rank: int = 8,
    num_threads: Optional[int] = None,
    show_progress_bar: bool = False,
) -> PooledLinearisation:
    """:func:`linearise_features` of ``texts`` in length-sorted batches, returned in input order."""
    from crossembed.encoders.base import _torch_threads

    texts = list(texts)
    model = block.model
    prep = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers >= 6 renamed it
    order = np.argsort([-len(t) for t in texts], kind="stable")
    parts = []
    device = getattr(model, "device", None)
    with _torch_threads(num_threads or _current_threads()):
        for s in tqdm(range(0, len(texts), batch_size), disable=not show_progress_bar, desc="last dense", leave=False):
            feats = prep([texts[i] for i in order[s : s + batch_size]])
            if device is not None:
                feats = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in feats.items()}
            parts.append(linearise_features(block, feats, rank=rank))
    lin = PooledLinearisation.concatenate(parts)
    return lin[np.argsort(order, kind="stable")]


def _current_threads() -> int:
    import torch

    return torch.get_num_threads()


def pretrained_norm(block: LastDenseBlock) -> Tuple[float, int]:
    """``(|[W b]|_F^2, number of weights)`` of the dense (the zero-mean prior's MAP term)."""
    W = block.weight_matrix()
    return float((W * W).sum()), int(W.size)
