"""The file of a UEC index: one checksummed :mod:`crossembed._io` raw container (atomic, streamed).

It holds the graph's saved bytes (with the means, or with an int8 or bf16
index their codes), the float32 means of an int8 or bf16 index (``means``,
memory-mapped by :meth:`IndexFile.read` with ``mmap=True``), the store's ids and live
flags, the variances when any document has one (``var``), the texts when kept (``texts``), the
:class:`~crossembed.uec.index_config.IndexConfig`, the scoring's config and
the fitted ensemble's state (:meth:`UECEnsemble.get_state`, arrays prefixed
``ens.``; the encoders by name). Index format :data:`INDEX_VERSION` is the only
one read: rebuild an index written by another release.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from crossembed._io import CorruptFileError, load_arrays, save_raw_arrays
from crossembed.ann import MeanGraph
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.scoring import scoring_from_config
from crossembed.uec.store import DocStore

__all__ = ["INDEX_VERSION", "IndexFile"]

_KIND = "crossembed.uec.UECIndex"
#: Version of the index file layout (the only one :meth:`IndexFile.read` reads).
INDEX_VERSION = 6
_COPY_BYTES = 1 << 24  # graph bytes copied per read when the saved graph is handed back to MeanGraph.load


def _pack_texts(texts: List[Optional[str]]) -> Tuple[np.ndarray, np.ndarray]:
    blobs = [(t or "").encode("utf-8") for t in texts]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).copy(), offsets


def _unpack_texts(data: np.ndarray, offsets: np.ndarray) -> List[str]:
    raw = np.asarray(data).tobytes()
    return [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]


def _write_graph_file(graph: np.ndarray) -> str:
    """The saved graph bytes (a memory map of the index file) as a temporary file for :meth:`MeanGraph.load`.

    They are copied in 16 MiB reads, so the map's pages never become resident: loading holds the graph
    once, not twice.
    """
    if not isinstance(graph, np.memmap) or graph.filename is None:
        raise CorruptFileError("the index file holds no graph bytes")
    fd, tmp = tempfile.mkstemp(suffix=".hnsw")
    try:
        with os.fdopen(fd, "wb") as fh, open(graph.filename, "rb") as src:
            src.seek(graph.offset)
            left = graph.nbytes
            while left:
                chunk = src.read(min(left, _COPY_BYTES))
                if not chunk:
                    raise CorruptFileError(f"{graph.filename}: graph bytes end early (truncated?)")
                fh.write(chunk)
                left -= len(chunk)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


@dataclass
class IndexFile:
    """What an index file holds: the parts a :class:`~crossembed.uec.UECIndex` is made of.

    ``ensemble`` may be None (queries must then be Gaussians).
    """

    store: DocStore
    graph: MeanGraph
    config: IndexConfig
    scoring: Any
    ensemble: Optional[UECEnsemble]

    def write(self, path) -> Path:
        """Write the parts to ``path`` atomically, with a checksum over everything (graph bytes included),
        streamed. The caller keeps updates out while it runs."""
        fd, tmp = tempfile.mkstemp(suffix=".hnsw")
        os.close(fd)
        try:
            self.graph.save(tmp)
            arrays, meta = self._state(np.memmap(tmp, dtype=np.uint8, mode="r"))
            out = save_raw_arrays(path, _KIND, arrays, meta)
            del arrays
            return out
        finally:
            os.unlink(tmp)

    def _state(self, graph: np.ndarray) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays and JSON metadata of the file (``graph``: the graph's saved bytes, the means included)."""
        store = self.store
        arrays = {"ids": store.ids[: store.n_slots], "alive": store.alive[: store.n_slots], "graph": graph}
        if store.has_variance:
            arrays["var"] = store.var
        if store.means is not None:
            arrays["means"] = store.means.head(store.n_slots)
        meta = {
            "index_version": INDEX_VERSION,
            "config": self.config.get_config(),
            "dim": store.dim,
            "scoring": self.scoring.get_config(),
            "ensemble": None,
        }
        if store.texts is not None:
            arrays["texts"], arrays["text_offsets"] = _pack_texts(store.texts)
        if self.ensemble is not None:
            ens_arrays, meta["ensemble"] = self.ensemble.get_state()
            arrays.update({f"ens.{k}": v for k, v in ens_arrays.items()})
        return arrays, meta

    @classmethod
    def read(cls, path, *, mmap: bool = False, ensemble: Optional[UECEnsemble] = None, encoders=None) -> IndexFile:
        """The parts saved at ``path``: the store (with the means of an int8 or bf16 index) memory-mapped with
        ``mmap=True``, the graph always read into memory. The saved ensemble is restored unless ``ensemble`` is given (its encoders load lazily, by stored
        name or from ``encoders``).

        Raises ValueError for a file of another index format version, and :class:`CorruptFileError` (a
        ValueError) when the file is truncated, edited or of another kind.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no index file at {str(path)!r}")
        # the graph is always mapped: it is copied from the file into MeanGraph, never read into memory whole
        arrays, meta = load_arrays(path, _KIND, mmap=True if mmap else {"graph"})
        version = meta.get("index_version")
        if version != INDEX_VERSION:
            raise ValueError(
                f"{path}: UECIndex file version {version} is not supported (expected {INDEX_VERSION}); "
                "rebuild the index with this release"
            )
        try:
            store = _read_store(path, arrays, meta)
            config = IndexConfig(**meta["config"])
            if ensemble is None and meta["ensemble"] is not None:
                ens_arrays = {k[4:]: v for k, v in arrays.items() if k.startswith("ens.")}
                ensemble = UECEnsemble.from_state(ens_arrays, meta["ensemble"], encoders=encoders)
            graph = _read_graph(arrays["graph"], store)
            return cls(store, graph, config, scoring_from_config(meta["scoring"]), ensemble)
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, CorruptFileError):
                raise
            raise CorruptFileError(f"{path}: incomplete UECIndex ({type(exc).__name__}: {exc})") from None


def _read_store(path: Path, arrays: Dict[str, np.ndarray], meta: Dict[str, Any]) -> DocStore:
    """The document store of a loaded file (CorruptFileError when its arrays disagree)."""
    ids, alive, dim = arrays["ids"], arrays["alive"], int(meta["dim"])
    n = len(ids)
    var = arrays.get("var")  # saved only when some document has a variance
    means = arrays.get("means")  # saved only by int8 and bf16 indexes (DocStore checks that)
    if alive.shape != (n,) or (var is not None and var.shape != (n, dim)) or dim < 1:
        raise CorruptFileError(f"{path}: inconsistent UECIndex arrays")
    if means is not None and (means.shape != (n, dim) or means.dtype != np.float32):
        raise CorruptFileError(f"{path}: inconsistent UECIndex means")
    texts = _unpack_texts(arrays["texts"], arrays["text_offsets"]) if "texts" in arrays else None
    if texts is not None:
        texts = [t if a else None for t, a in zip(texts, alive)]
    return DocStore(ids, alive, dim=dim, dtype=meta["config"]["dtype"], var=var, means=means, texts=texts)


def _read_graph(graph: np.ndarray, store: DocStore) -> MeanGraph:
    """The saved graph bytes as a :class:`MeanGraph` with room for the store's capacity."""
    tmp = _write_graph_file(graph)
    try:
        loaded = MeanGraph.load(tmp, dim=store.dim, storage=store.dtype, max_elements=max(1, store.capacity))
    except (RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"unreadable graph ({exc})") from None
    finally:
        os.unlink(tmp)
    if loaded.count != store.n_slots:
        raise CorruptFileError(f"the graph holds {loaded.count} items, expected {store.n_slots}")
    return loaded
