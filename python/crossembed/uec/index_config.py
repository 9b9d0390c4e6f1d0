"""The build settings of a :class:`~crossembed.uec.UECIndex`, validated once and saved with it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from crossembed._validation import INT64_MAX, INT_MAX, check_int
from crossembed.uec._random import int_seed
from crossembed.uec.store import index_dtype

__all__ = ["IndexConfig"]


@dataclass(frozen=True)
class IndexConfig:
    """How an index is built and what it keeps (the query settings are :meth:`UECIndex.search`'s, per call).

    Immutable, so one config may be shared by many indexes; :meth:`UECIndex.save` writes it and
    :meth:`UECIndex.load` restores it as saved.

    Parameters
    ----------
    M : int
        HNSW links per node (default 32; 2 to 2**31 - 1).
    ef_construction : int
        HNSW candidate list size while inserting (default 200).
    rerank : int
        ANN candidates reranked exactly per query when :meth:`UECIndex.search` is not told (default 100).
    dtype : {"float32", "float16", "int8", "bf16"}
        How the graph stores the document means (default float32). float16 halves the means and
        the variances, which the graph's distances and the rerank then read. int8 (a quarter,
        plus 8 bytes a document) and bf16 (a half) are codes for the graph's distances only: the
        index keeps the float32 means beside them for the exact rerank (read from the file, not
        memory, after ``UECIndex.load(path, mmap=True)``), and float32 variances. Scores are
        computed in float32 in every case.
    panel_cache_bytes : int
        Bytes of prepared documents with variances kept between searches (default 1 GiB): the
        prepared blocks are cached while those of every document fit, else prepared per call.
    random_state : int, Generator or None
        The graph's construction seed (default 0; None or a Generator: one int is drawn here, so
        the config holds the seed that every index built with it uses and saves).
    compact_at : float or None
        Removed (and replaced) documents keep their graph node until the index compacts: once
        they exceed ``compact_at`` times the live documents, the update that got them there
        starts a rebuild of the live set's graph in the background (:meth:`UECIndex.compact`;
        updates and searches go on meanwhile). Default 0.25 (the graph holds about 1.25 times
        the live set); None: only when ``compact()`` is called.
    """

    M: int = 32
    ef_construction: int = 200
    rerank: int = 100
    dtype: str = "float32"
    panel_cache_bytes: int = 1 << 30
    random_state: Any = 0
    compact_at: Optional[float] = 0.25

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the checked values replace the given ones once, here
        set_(self, "M", check_int(self.M, "M", low=2, high=INT_MAX))
        set_(self, "ef_construction", check_int(self.ef_construction, "ef_construction", low=1, high=INT_MAX))
        set_(self, "rerank", check_int(self.rerank, "rerank", low=1, high=INT_MAX))
        set_(self, "dtype", index_dtype(self.dtype))
        set_(self, "panel_cache_bytes", check_int(self.panel_cache_bytes, "panel_cache_bytes", low=0))
        set_(self, "random_state", check_int(int_seed(self.random_state), "random_state", low=0, high=INT64_MAX))
        if self.compact_at is not None:
            if isinstance(self.compact_at, bool) or not isinstance(self.compact_at, (int, float)):
                raise TypeError(f"compact_at must be a number or None, got {type(self.compact_at).__name__}")
            if not (math.isfinite(self.compact_at) and self.compact_at > 0):
                raise ValueError(f"compact_at must be a finite number > 0 or None, got {self.compact_at!r}")
            set_(self, "compact_at", float(self.compact_at))

    def get_config(self) -> Dict[str, Any]:
        """The settings as a JSON-able dict (``IndexConfig(**config)`` rebuilds the same config)."""
        return asdict(self)
