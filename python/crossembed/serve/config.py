"""The settings of one served index (:class:`ServeConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from crossembed._validation import check_int, default_num_threads
from crossembed.serve.access import ApiKeys

__all__ = ["ServeConfig"]


@dataclass(frozen=True)
class ServeConfig:
    """Limits, batching and persistence of :func:`crossembed.serve.create_app`.

    Attributes
    ----------
    max_body_bytes : int
        Largest request body accepted; larger ones get 413 (default 64 MiB).
    max_batch : int
        Most queries one coalesced index call takes, and most texts one
        coalesced encoder call takes (default 256).
    max_batch_tokens : int
        Most tokens (estimated: :func:`crossembed.serve.text_batcher.estimate_tokens`)
        one coalesced encoder call takes (default 2,048); a request with more is
        encoded on its own. Bounds how long requests queued behind an encoder call
        wait (searches wait for it too: encoder and index calls take turns).
    batch_wait_ms : float
        How long the batcher waits for more requests before an index call when
        fewer than ``max_batch`` queries are queued (default 0: it never waits;
        requests that arrive while a call runs form the next batch).
    max_k : int
        Largest ``k`` a search may ask for (default 1,000).
    max_candidates : int
        Largest ``rerank`` and ``ef`` a search may ask for (default 10,000).
    search_threads : int, optional
        Threads of one index search call (default: every core but one, at least
        one; the event loop keeps a core). More threads than free cores make
        the kernels' threads wait for each other and slow every call down.
    save_path : str or Path, optional
        Where ``POST /save`` (without a path) and the save at shutdown write (default none).
    save_on_exit : bool
        Save to ``save_path`` when the app shuts down (default False).
    allow_save_path : bool
        Whether ``POST /save`` may name its own path (default False: a client
        must not choose where the server writes files).
    api_keys : ApiKeys, optional
        Keys the routes need (default none: every route open). Search, embed,
        models and metrics (unless ``ApiKeys.open_metrics``) take a key of
        either kind, add/upsert/remove/save a full key; ``/healthz`` and
        ``/readyz`` stay open.
    model_name : str
        The model id of ``/v1/models`` and ``/v1/embeddings`` (default ``"crossembed"``).
    """

    max_body_bytes: int = 64 << 20
    max_batch: int = 256
    max_batch_tokens: int = 2048
    batch_wait_ms: float = 0.0
    max_k: int = 1000
    max_candidates: int = 10_000
    search_threads: Optional[int] = None
    save_path: Optional[Union[str, Path]] = None
    save_on_exit: bool = False
    allow_save_path: bool = False
    api_keys: Optional[ApiKeys] = None
    model_name: str = "crossembed"

    def __post_init__(self):
        check_int(self.max_body_bytes, "max_body_bytes", low=1)
        check_int(self.max_batch, "max_batch", low=1)
        check_int(self.max_batch_tokens, "max_batch_tokens", low=1)
        check_int(self.max_k, "max_k", low=1)
        check_int(self.max_candidates, "max_candidates", low=1)
        if self.search_threads is not None:
            check_int(self.search_threads, "search_threads", low=1)
        wait = float(self.batch_wait_ms)
        if not 0.0 <= wait <= 1000.0:
            raise ValueError(f"batch_wait_ms must be in [0, 1000], got {self.batch_wait_ms}")
        if self.api_keys is not None and not isinstance(self.api_keys, ApiKeys):
            raise TypeError(f"api_keys must be an ApiKeys, got {type(self.api_keys).__name__}")
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ValueError(f"model_name must be a non-empty str, got {self.model_name!r}")
        if self.save_on_exit and self.save_path is None:
            raise ValueError("save_on_exit needs a save_path")

    def resolved_search_threads(self) -> int:
        """``search_threads``, or every core but one (at least one)."""
        return self.search_threads if self.search_threads is not None else max(1, default_num_threads() - 1)
