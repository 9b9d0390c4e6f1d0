"""Approximate nearest neighbours by inner product: an HNSW graph whose stored vectors are the only copy.

:class:`MeanGraph` is hnswlib's HNSW algorithm (v0.8.0, vendored in the C++
core) over float32, float16, int8 or bfloat16 vectors with the distance ``1 - <x, y>``,
computed with the instruction set picked at run time (:func:`crossembed.kernels.simd_level`).
Its stored vectors can be read back (:meth:`MeanGraph.rows`): a float32 or float16 graph is
an index's only copy of its means; an int8 or bf16 one holds codes, and the exact rerank
reads float32 means kept elsewhere. Labels are the caller's
integers (>= 0); adding a label already present rewrites its vector in place
and undeletes it.

Searches (:meth:`MeanGraph.knn`, :meth:`MeanGraph.rows`) may run from any
number of threads at once, each with its own ``ef``; ``add``,
``mark_deleted`` and ``resize`` wait for them and run alone.
"""

from __future__ import annotations

import os
import tempfile
from typing import Optional, Tuple

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order

from crossembed._native import core
from crossembed._validation import (
    INT64_MAX,
    INT_MAX,
    as_int_matrix,
    as_matrix,
    check_choice,
    check_int,
    check_num_threads,
)

__all__ = ["MeanGraph"]

_STORAGES = ("float32", "float16", "int8", "bf16")
_FLOAT16_MAX = 65504.0  # largest finite float16
_BF16_LIMIT = 3.3961e38  # float32 values at least this large round to a bfloat16 infinity
_MAX_ELEMENTS = INT_MAX  # hnswlib's ids are 32-bit and its visited lists are sized by an int
_MAX_DIM = 2**20
_MAX_M = 10000  # hnswlib caps M here
# hnswlib's file: a header of these fields (in this order), the bottom-layer block, then per label a uint32 size
# and that many bytes of upper-layer lists. A link list is a uint16 count (its third byte holds the deleted mark)
# and then its uint32 neighbours.
_HEADER = np.dtype(
    [("offset_level0", "<u8"), ("max_elements", "<u8"), ("count", "<u8"), ("size_data_per_element", "<u8")]
    + [("label_offset", "<u8"), ("offset_data", "<u8"), ("maxlevel", "<i4"), ("enterpoint", "<u4")]
    + [("maxM", "<u8"), ("maxM0", "<u8"), ("M", "<u8"), ("mult", "<f8"), ("ef_construction", "<u8")]
)
_DELETE_MARK = 0x01


def _max_dim(storage: str) -> int:
    """The largest ``dim`` of a storage: int8's integer dots must fit 32 bits (127**2 * dim < 2**31)."""
    return 2**17 if storage == "int8" else _MAX_DIM


class MeanGraph:
    """An HNSW graph on vectors by inner product (distance ``1 - <x, y>``), holding the vectors once.

    Parameters
    ----------
    dim : int
        Values per vector (1 to 2**20; to 2**17 with int8 storage).
    storage : {"float32", "float16", "int8", "bf16"}
        How vectors are held: float32 (``4 dim`` bytes each); IEEE float16 (``2 dim`` bytes, an odd ``dim``
        padded by one; each value rounded once to nearest, ties to even; ``|x| <= 65504``); int8 (``dim``
        codes padded to a multiple of 4, plus 8 bytes: per-vector symmetric codes ``c = round(x / s)``,
        ``s = max|x| / 127``, distances an exact integer dot times the two scales); bfloat16 (``2 dim``
        bytes, padded like float16; rounded to nearest, ties to even). Queries are stored the same way
        before searching (an int8 query gets its own scale): the results of any but float32 are
        candidates to rerank exactly. Default "float32". Each label also holds ``(2 M + 1) * 4 + 8``
        bytes of bottom-layer links and its label.
    max_elements : int
        Capacity in labels, deleted ones included (1 to 2**31 - 1); grow it with :meth:`resize`. Default 1024.
    M : int
        Links per node on the upper layers (2 M on the bottom one), 2 to 10000. Default 16.
    ef_construction : int
        Candidate list size while inserting (>= 1; at least M is used). Default 200.
    random_seed : int
        Seed of the level draws (>= 0). Default 100, as hnswlib's.
    """

    def __init__(
        self,
        dim: int,
        *,
        storage: str = "float32",
        max_elements: int = 1024,
        M: int = 16,
        ef_construction: int = 200,
        random_seed: int = 100,
    ):
        storage = check_choice(storage, "storage", _STORAGES)
        dim = check_int(dim, "dim", low=1, high=_max_dim(storage))
        max_elements = check_int(max_elements, "max_elements", low=1, high=_MAX_ELEMENTS)
        M = check_int(M, "M", low=2, high=_MAX_M)
        ef_construction = check_int(ef_construction, "ef_construction", low=1, high=INT_MAX)
        random_seed = check_int(random_seed, "random_seed", low=0, high=INT64_MAX)
        self._handle = core().MeanGraph(dim, storage, max_elements, M, ef_construction, random_seed)

    @classmethod
    def load(cls, path, *, dim: int, storage: str = "float32", max_elements: Optional[int] = None) -> MeanGraph:
        """The graph :meth:`save` wrote to ``path``.

        ``dim`` and ``storage`` must be the saved graph's: a file whose vectors have another size in bytes is a
        ValueError (the file records only that size: the caller keeps ``dim`` and ``storage``). ``max_elements``
        is the new capacity (default: the labels held). A truncated or corrupt file raises RuntimeError.
        """
        path = os.fspath(path)
        storage = check_choice(storage, "storage", _STORAGES)
        dim = check_int(dim, "dim", low=1, high=_max_dim(storage))
        max_elements = 1 if max_elements is None else check_int(max_elements, "max_elements", low=1, high=_MAX_ELEMENTS)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no graph file at {path}")
        graph = cls.__new__(cls)
        graph._handle = core().MeanGraph.load(path, dim, storage, max_elements)
        return graph

    @property
    def dim(self) -> int:
        """Values per vector."""
        return int(self._handle.dim)

    @property
    def storage(self) -> str:
        """``"float32"``, ``"float16"``, ``"int8"`` or ``"bf16"``."""
        return str(self._handle.storage)

    @property
    def count(self) -> int:
        """Labels held, deleted ones included."""
        return int(self._handle.count)

    @property
    def deleted_count(self) -> int:
        """Labels held and marked deleted."""
        return int(self._handle.deleted_count)

    @property
    def max_elements(self) -> int:
        """Capacity in labels (see :meth:`resize`)."""
        return int(self._handle.max_elements)

    @property
    def nbytes(self) -> int:
        """Bytes held: vectors, links, labels, locks; each concurrent search holds ``2 max_elements`` more while it runs."""
        return int(self._handle.nbytes)

    def __repr__(self) -> str:
        return f"MeanGraph(dim={self.dim}, storage={self.storage!r}, count={self.count}, deleted={self.deleted_count})"

    def _rows(self, x, name: str, *, allow_empty: bool) -> np.ndarray:
        x = as_matrix(x, name, allow_empty=allow_empty)
        if x.shape[1] != self.dim:
            raise ValueError(f"{name} has {x.shape[1]} columns but the graph holds {self.dim}-dimensional vectors")
        if self.storage == "float16" and x.size and float(np.abs(x).max()) > _FLOAT16_MAX:
            raise ValueError(f"{name} has entries beyond float16's range (|x| <= {_FLOAT16_MAX:g})")
        if self.storage == "bf16" and x.size and float(np.abs(x).max()) >= _BF16_LIMIT:
            raise ValueError(f"{name} has entries beyond bfloat16's range (|x| < {_BF16_LIMIT:g})")
        return x

    def add(self, data, labels, *, num_threads: Optional[int] = None) -> None:
        """Adds rows of ``data`` (float32, (n, dim), finite) under ``labels`` ((n,) distinct ints >= 0).

        A label already held (deleted or not) gets the new vector in place, is re-linked and undeleted. New labels
        need room: ``count`` plus their number must not exceed ``max_elements`` (ValueError; see :meth:`resize`).
        ``num_threads``: threads inserting (default: every core). With more than one thread the graph depends on
        their timing; with one it is determined by the seed and the order of the rows.
        """
        data = self._rows(data, "data", allow_empty=True)
        labels = as_int_matrix(labels, "labels", ndim=1, low=0, copy=True)
        if labels.shape[0] != data.shape[0]:
            raise ValueError(f"labels has {labels.shape[0]} entries but data has {data.shape[0]} rows")
        if np.unique(labels).size != labels.size:
            raise ValueError("labels has a repeated entry")
        self._handle.add(data, labels, check_num_threads(num_threads))

    def mark_deleted(self, labels) -> None:
        """Marks ``labels`` ((n,) ints, held, not yet deleted, distinct) deleted: :meth:`knn` skips them from now on.

        Any label missing or already deleted is a ValueError and nothing changes.
        """
        self._handle.mark_deleted(as_int_matrix(labels, "labels", ndim=1, low=0, copy=True))

    def resize(self, max_elements: int) -> None:
        """Sets the capacity to ``max_elements`` labels (>= :attr:`count`, <= 2**31 - 1)."""
        max_elements = check_int(max_elements, "max_elements", low=max(1, self.count), high=_MAX_ELEMENTS)
        self._handle.resize(max_elements)

    def knn(
        self, queries, k: int, *, ef: Optional[int] = None, allowed=None, num_threads: Optional[int] = None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest live labels of each query, best first: ``(labels (q, k) int64, distances (q, k) float32)``.

        Parameters
        ----------
        queries : array_like, shape (q, dim)
            Finite float32 vectors (rounded to float16 first in a float16 graph).
        k : int
            Neighbours per query (>= 1). Rows with fewer found end in label -1, distance +inf.
        ef : int, optional
            Search breadth: candidates kept while searching (>= 1; at least ``k`` is used). Default 10, as hnswlib's.
            Larger is slower and finds more of the true neighbours.
        allowed : array_like of bool, optional
            A mask indexed by label: only labels ``l < len(allowed)`` with ``allowed[l]`` are returned. Default: all.
        num_threads : int, optional
            Threads searching (default: every core).

        Distances are ``1 - <q, x>`` of the stored vectors, ties to the lower label; deleted labels never appear.
        """
        queries = self._rows(queries, "queries", allow_empty=True)
        k = check_int(k, "k", low=1, high=INT_MAX)
        ef = 10 if ef is None else check_int(ef, "ef", low=1, high=INT_MAX)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != np.bool_:
                raise TypeError(f"allowed must be a boolean mask, got dtype {allowed.dtype}")
            if allowed.ndim != 1:
                raise ValueError(f"allowed must be 1-dimensional, got shape {allowed.shape}")
            allowed = np.ascontiguousarray(allowed)
        return self._handle.knn(queries, k, ef, allowed, check_num_threads(num_threads))

    def rows(self, labels, *, out=None, num_threads: Optional[int] = None) -> np.ndarray:
        """The stored vectors of ``labels`` ((n,) ints of live labels) as float32 (n, dim): float16 and bf16
        widened exactly, int8 decoded (``s * c``, not the vectors added).

        ``out``: an optional writeable C-contiguous float32 (n, dim) array to fill and return. A label missing or
        deleted is a ValueError, raised before anything is written. ``num_threads``: threads copying (large reads).
        """
        labels = as_int_matrix(labels, "labels", ndim=1, low=0, copy=True)
        nt = check_num_threads(num_threads)
        if out is None:
            return self._handle.rows(labels, nt)
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
        self._handle.rows_into(labels, out, nt)
        return out

    def save(self, path) -> None:
        """Writes the graph (hnswlib's file format) to ``path``; read it back with :meth:`load`."""
        self._handle.save(os.fspath(path))

    def take(self, other: MeanGraph) -> None:
        """Makes this graph hold ``other``'s nodes (``other`` then holds this one's): swaps what the two objects
        point to, so whoever holds this object sees the new graph. The caller keeps searches off during the swap."""
        if not isinstance(other, MeanGraph):
            raise TypeError(f"other must be a MeanGraph, got {type(other).__name__}")
        if (other.dim, other.storage) != (self.dim, self.storage):
            raise ValueError("other must hold vectors of the same dim and storage")
        self._handle, other._handle = other._handle, self._handle

    def unreachable(self) -> np.ndarray:
        """Live labels that no search can reach (sorted int64): those no chain of links, on any layer and through
        deleted nodes too, leads to from the entry point. Searches never return them.

        Reads the links from a saved copy of the graph (a temporary file as large as :meth:`save` writes), so it
        costs about one save and a pass over the links: a check, not something to call per search.
        """
        with tempfile.TemporaryDirectory(prefix="crossembed-graph-") as tmp:
            path = os.path.join(tmp, "graph.bin")
            self.save(path)
            return _unreachable_in_file(path)


def _unreachable_in_file(path: str) -> np.ndarray:
    """The live labels of the graph file at ``path`` (written by :meth:`MeanGraph.save`) that no chain of links
    from its entry point reaches."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    head = raw[: _HEADER.itemsize].view(_HEADER)[0]
    n, size = int(head["count"]), int(head["size_data_per_element"])
    if n == 0:
        return np.zeros(0, np.int64)
    maxM, maxM0 = int(head["maxM"]), int(head["maxM0"])
    block = raw[_HEADER.itemsize : _HEADER.itemsize + n * size].reshape(n, size)
    counts0 = np.ascontiguousarray(block[:, :2]).view("<u2")[:, 0].astype(np.int64)
    deleted = (block[:, 2] & _DELETE_MARK) != 0
    label_off = int(head["label_offset"])
    labels = np.ascontiguousarray(block[:, label_off : label_off + 8]).view("<u8")[:, 0].astype(np.int64)
    links0 = np.ascontiguousarray(block[:, 4 : 4 + 4 * maxM0]).view("<u4")
    keep = np.arange(maxM0)[None, :] < counts0[:, None]
    src = [np.repeat(np.arange(n), counts0)]
    dst = [links0[keep].astype(np.int64)]
    at = _HEADER.itemsize + n * size
    per_level = 4 * (1 + maxM)
    for i in range(n):  # upper-layer lists: about one label in M has any
        nbytes = int(raw[at : at + 4].view("<u4")[0])
        at += 4
        if nbytes:
            lists = np.asarray(raw[at : at + nbytes]).view("<u4").reshape(nbytes // per_level, 1 + maxM)
            count = (lists[:, 0] & 0xFFFF).astype(np.int64)
            nbr = lists[:, 1:][np.arange(maxM)[None, :] < count[:, None]]
            src.append(np.full(nbr.size, i, np.int64))
            dst.append(nbr.astype(np.int64))
            at += nbytes
    src_all, dst_all = np.concatenate(src), np.concatenate(dst)
    links = csr_matrix((np.ones(src_all.size, np.int8), (src_all, dst_all)), shape=(n, n))
    reached = np.zeros(n, dtype=bool)
    reached[breadth_first_order(links, int(head["enterpoint"]), directed=True, return_predecessors=False)] = True
    return np.sort(labels[~reached & ~deleted])
