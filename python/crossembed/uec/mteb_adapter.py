"""A :class:`~crossembed.uec.UECEnsemble` as an MTEB v2 encoder (``mteb.EncoderProtocol``).

MTEB hands the model a ``DataLoader`` of batches (dicts with a ``"text"``
list) and later gives the arrays it returned back to ``similarity``. A
Gaussian embedding is two arrays, so :meth:`UECMTEBEncoder.encode` returns
``[mean | var]`` side by side, shape ``(n, 2 D)``, and :meth:`similarity`
splits them again and scores with the ensemble's own scoring object. Retrieval,
reranking, STS and pair classification go through ``similarity`` and see
UEC's scores; tasks that feed the vectors to a classifier or k-means see the
``[mean | var]`` features (``vectors="mean"`` gives the means only).

Queries are encoded with role ``"query"``, documents (``PromptType.document``)
as ``"passage"``: retrieval keeps the asymmetric query -> document form (query
heads, document hubness). A symmetric task (no prompt type) compares texts
with texts as :meth:`UECEnsemble.similarity` does by default, the mean of the
two retrieval directions: each text is encoded both ways, ``[query output |
passage output]`` (twice the width), and :meth:`similarity` scores
``(S(a, b) + S(b, a).T) / 2``, the same either way round.
With retrieval-confidence routing the last document batch encoded becomes
the reference collection the queries' confidence is measured over, as
:meth:`UECIndex.build` does for an index (the encoder keeps that ensemble;
the one passed in is left as it was).
``mteb`` is imported only by :attr:`UECMTEBEncoder.mteb_model_meta`.

    import mteb
    from crossembed.uec.mteb_adapter import UECMTEBEncoder
    results = mteb.evaluate(UECMTEBEncoder(ensemble), tasks, cache=None)
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional

import numpy as np

from crossembed._validation import as_matrix, check_choice, check_int
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = ["UECMTEBEncoder"]

_PAIRWISE_BLOCK = 256  # rows scored at once by similarity_pairwise (the diagonal of each block is kept)


def _texts_of(inputs: Iterable) -> List[str]:
    """The texts of an MTEB dataloader (batches with a ``"text"`` list), a list of strings or of batches."""
    if isinstance(inputs, str):
        raise TypeError("inputs must be an MTEB DataLoader of batches, not a string")
    texts: List[str] = []
    for item in inputs:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and "text" in item:
            batch = item["text"]
            texts.extend([batch] if isinstance(batch, str) else list(batch))
        else:
            raise TypeError(f"inputs must yield batches with a 'text' field, got {type(item).__name__}")
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("inputs must hold text (this encoder embeds text only)")
    return texts


def _role(prompt_type) -> Optional[str]:
    """``"query"``, ``"passage"``, or None for a symmetric task (no prompt type)."""
    value = getattr(prompt_type, "value", prompt_type)
    if value is None:
        return None
    if value == "query":
        return "query"
    if value == "document":
        return "passage"
    raise ValueError(f"prompt_type must be 'query', 'document' or None, got {prompt_type!r}")


class UECMTEBEncoder:
    """MTEB v2 encoder over a fitted :class:`~crossembed.uec.UECEnsemble`.

    Parameters
    ----------
    ensemble : UECEnsemble
        Fitted embedders (their encoders must be loadable).
    name : str
        The model name MTEB files results under.
    vectors : {"mean+var", "mean"}
        What :meth:`encode` returns (module docstring). With ``"mean"``
        :meth:`similarity` scores the means with zero variance.
    batch_size : int
        Texts per model call inside each ensemble member.
    """

    def __init__(
        self, ensemble: UECEnsemble, *, name: str = "crossembed/uec", vectors: str = "mean+var", batch_size: int = 64
    ):
        if not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if not isinstance(name, str) or "/" not in name:
            raise ValueError(f"name must look like 'organisation/model' (MTEB's convention), got {name!r}")
        self.ensemble = ensemble
        self.name = name
        self.vectors = check_choice(vectors, "vectors", ("mean+var", "mean"))
        self.batch_size = check_int(batch_size, "batch_size", low=1)

    # ------------------------------------------------------------------ EncoderProtocol
    def encode(
        self,
        inputs,
        *,
        task_metadata: Any = None,
        hf_split: Optional[str] = None,
        hf_subset: Optional[str] = None,
        prompt_type=None,
        **kwargs: Any,
    ) -> np.ndarray:
        """``[mean | var]`` (float32, ``(n, 2 D)``) of the texts in ``inputs`` (``(n, D)`` for ``vectors="mean"``);
        twice as wide for a symmetric task (no ``prompt_type``): the query and the passage encoding."""
        texts = _texts_of(inputs)
        role = _role(prompt_type)
        if role is None:  # a symmetric task: both encodings of every text (module docstring)
            parts = [self._encode(texts, r, kwargs, corpus=False) for r in ("query", "passage")]
            return np.concatenate(parts, axis=1)
        return self._encode(texts, role, kwargs, corpus=role == "passage")

    def _encode(self, texts: List[str], role: str, kwargs, *, corpus: bool) -> np.ndarray:
        """One encoding of ``texts``: ``[mean | var]`` (or the means) of the combined Gaussians."""
        if not texts:
            return np.zeros((0, self._width), dtype=np.float32)
        comps = self.ensemble.encode_components(
            texts, role=role, batch_size=self.batch_size, show_progress_bar=bool(kwargs.get("show_progress_bar", False))
        )
        if corpus and self.ensemble.needs_reference and len(texts) >= 2:
            # MTEB encodes the corpus before the queries: it is the collection the retrieval
            # confidence of the queries is measured over (what UECIndex.build does)
            self.ensemble = self.ensemble.with_reference(comps)
        g = self.ensemble.combine(comps, role=role, texts=texts)
        if self.vectors == "mean":
            return g.mean
        return np.concatenate([g.mean, g.var], axis=1)

    @property
    def _width(self) -> int:
        """Columns of one encoding (a symmetric task's vectors hold two)."""
        return self.ensemble.dim * (1 if self.vectors == "mean" else 2)

    def _gaussians(self, x, name: str) -> List[GaussianEmbedding]:
        """The Gaussians of one output of :meth:`encode`: one (a side of a retrieval task) or two (query and
        passage encodings of a symmetric task's texts)."""
        if hasattr(x, "detach") and hasattr(x, "cpu"):
            x = x.detach().cpu().numpy()
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None, :]
        x = as_matrix(x, name, allow_empty=True)
        w, D = self._width, self.ensemble.dim
        if x.shape[1] not in (w, 2 * w):
            raise ValueError(
                f"{name} has {x.shape[1]} columns but this encoder's vectors have {w} or {2 * w} (encode())"
            )
        out = []
        for s in range(0, x.shape[1], w):
            part = x[:, s : s + w]
            if self.vectors == "mean":
                out.append(GaussianEmbedding(np.ascontiguousarray(part), np.zeros_like(part)))
            else:
                var = np.ascontiguousarray(np.maximum(part[:, D:], 0.0))
                out.append(GaussianEmbedding(np.ascontiguousarray(part[:, :D]), var))
        return out

    def _score(self, a: List[GaussianEmbedding], b: List[GaussianEmbedding]) -> np.ndarray:
        """Retrieval outputs scored one way; symmetric outputs both ways, averaged."""
        if len(a) != len(b):
            raise ValueError("embeddings1 and embeddings2 come from different kinds of task (symmetric or not)")
        if len(a) == 1:
            return np.asarray(self.ensemble.similarity(a[0], b[0]), dtype=np.float64)
        forward = np.asarray(self.ensemble.similarity(a[0], b[1]), dtype=np.float64)
        backward = np.asarray(self.ensemble.similarity(b[0], a[1]), dtype=np.float64)
        return 0.5 * (forward + backward.T)

    def similarity(self, embeddings1, embeddings2) -> np.ndarray:
        """The ensemble's similarity matrix ``(n1, n2)`` between two outputs of :meth:`encode`."""
        a = self._gaussians(embeddings1, "embeddings1")
        b = self._gaussians(embeddings2, "embeddings2")
        return self._score(a, b).astype(np.float32)

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        """Similarity of row ``i`` of ``embeddings1`` with row ``i`` of ``embeddings2``, shape ``(n,)``."""
        a = self._gaussians(embeddings1, "embeddings1")
        b = self._gaussians(embeddings2, "embeddings2")
        if len(a[0]) != len(b[0]):
            raise ValueError(f"embeddings2 has {len(b[0])} rows but embeddings1 has {len(a[0])}")
        out = np.empty(len(a[0]), dtype=np.float32)
        for s in range(0, len(a[0]), _PAIRWISE_BLOCK):
            block = self._score([g[s : s + _PAIRWISE_BLOCK] for g in a], [g[s : s + _PAIRWISE_BLOCK] for g in b])
            out[s : s + _PAIRWISE_BLOCK] = np.diagonal(block)
        return out

    @property
    def mteb_model_meta(self):
        """``mteb.models.ModelMeta`` describing the ensemble (MTEB files results under it)."""
        from mteb.models import ModelMeta

        members = [e.encoder_name or type(e.encoder).__name__ for e in self.ensemble.embedders]
        return ModelMeta(
            loader=None,
            name=self.name,
            revision="+".join(members) or None,
            release_date=None,
            languages=None,
            n_parameters=None,
            memory_usage_mb=None,
            max_tokens=None,
            embed_dim=self.ensemble.dim if self.vectors == "mean" else 2 * self.ensemble.dim,
            license=None,
            open_weights=None,
            public_training_code=None,
            public_training_data=None,
            framework=["NumPy"],
            similarity_fn_name=None,
            use_instructions=False,
            training_datasets=None,
        )

    def __repr__(self) -> str:
        return f"UECMTEBEncoder({self.ensemble!r}, name={self.name!r}, vectors={self.vectors!r})"
