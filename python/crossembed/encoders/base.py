"""The encoder interface and the base class every backend shares: validation, length-sorted
batches, progress bar, L2 normalisation, thread limits."""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, List, Optional, Protocol, Union, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from crossembed._rows import unit_rows
from crossembed._validation import check_choice, check_int, default_num_threads

__all__ = ["BaseEncoder", "Encoder", "ROLES", "default_num_threads"]

PathLike = Union[str, "os.PathLike[str]"]
ROLES = ("query", "passage")


@runtime_checkable
class Encoder(Protocol):
    """What crossembed needs from a text encoder."""

    name: str
    dim: int

    def encode(
        self, texts, *, batch_size: int = 32, show_progress_bar: Optional[bool] = None, role: str = "query"
    ) -> np.ndarray: ...


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
    return check_choice(role, "role", ROLES)


def _check_batch_size(batch_size) -> int:
    return check_int(batch_size, "batch_size", low=1)


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
        return unit_rows(self._raw(texts, batch_size, show_progress_bar, role)).astype(np.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"
