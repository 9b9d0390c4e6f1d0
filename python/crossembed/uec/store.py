"""What an index keeps per document slot besides the graph: int64 ids, live flags, texts, variances,
and the float32 means of an int8 or bf16 index.

With dtype float32 or float16 the document means live once, in the ANN graph
(:class:`crossembed.ann.MeanGraph`), which stores them in that dtype. With
dtype int8 or bf16 the graph holds codes for its distances and the store keeps
the float32 means for the exact rerank (:class:`MeanRows`): a saved index
loaded with ``mmap=True`` reads them from its file, so what is resident is the
codes, the links and the rows the reranks touch. :class:`DocStore` holds the rest, row
by slot. A slot is a row; a removed document's slot stays taken (the graph
keeps its node, marked deleted) until :meth:`DocStore.compacted` renumbers the
live slots ``0 .. n-1`` for a graph rebuilt on them.
Variances are kept only once some document has one: a store of documents
without variance (a deterministic embedder's, the default ensemble's) holds
none, and reads them as zeros. The arrays may be read-only memory maps of a
saved index: the first change copies them into memory.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import as_array, as_int_matrix

__all__ = ["DocStore", "MeanRows", "as_ids", "check_ids", "check_texts", "index_dtype", "mean_rows"]

_FLOAT16_MAX = 65504.0
_DTYPES = ("float32", "float16", "int8", "bf16")
_CODED = ("int8", "bf16")  # the graph holds codes: the store keeps the float32 means


def index_dtype(dtype) -> str:
    """``dtype`` (a name, or the numpy float32 / float16 / int8 dtype) as an index dtype name: "float32",
    "float16", "int8" or "bf16" (ValueError naming the argument otherwise)."""
    try:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _DTYPES:
        raise ValueError(f"dtype must be 'float32', 'float16', 'int8' or 'bf16', got {dtype!r}")
    return name


class MeanRows:
    """float32 document means by slot: a read-only ``base`` for slots ``0 .. len(base) - 1`` (a memory map of
    a saved index, or an array) and an in-memory tail for the slots taken after it, up to ``capacity``.

    Slots are written once (a replaced document takes a new slot), so new rows always go to the tail and
    the base is never copied.
    """

    def __init__(self, base: np.ndarray, capacity: int):
        self.base = base
        self.dim = int(base.shape[1])
        self.tail = np.zeros((max(0, capacity - len(base)), self.dim), np.float32)

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """float32 ``(len(slots), dim)`` means of ``slots``."""
        n = len(self.base)
        in_base = slots < n
        if in_base.all():
            return np.ascontiguousarray(self.base[slots], dtype=np.float32)
        out = np.empty((len(slots), self.dim), np.float32)
        out[in_base] = self.base[slots[in_base]]
        out[~in_base] = self.tail[slots[~in_base] - n]
        return out

    def put(self, slots: np.ndarray, rows: np.ndarray) -> None:
        """Write ``rows`` to new ``slots`` (all past the base)."""
        self.tail[slots - len(self.base)] = rows

    def grow(self, capacity: int) -> None:
        """Room for slots up to ``capacity`` (the tail grows; the base never changes)."""
        tail = np.zeros((max(0, capacity - len(self.base)), self.dim), np.float32)
        tail[: len(self.tail)] = self.tail[: len(tail)]
        self.tail = tail

    def head(self, n_slots: int) -> np.ndarray:
        """The means of slots ``0 .. n_slots - 1`` as one array (the base itself when no slot was added)."""
        n = len(self.base)
        if n_slots <= n:
            return self.base[:n_slots]
        return np.concatenate([self.base, self.tail[: n_slots - n]])

    def nbytes(self) -> int:
        """Bytes of the means, the base counted whole whether it is held or mapped."""
        return int(self.base.nbytes + self.tail.nbytes)


class DocStore:
    """Document slots: ids, live flags, texts and variances (see module docstring).

    Parameters
    ----------
    ids : ndarray (n_slots,) int64
        External id per slot (any value for free slots).
    alive : ndarray (n_slots,) bool
        Whether each slot holds a document (False: a free slot).
    dim : int
        Dimension of the documents.
    dtype : {"float32", "float16", "int8", "bf16"}
        The index's dtype: the graph's storage of the means; variances are stored in float16 with
        float16, else in float32.
    var : ndarray (n_slots, dim) or None, optional
        Variances (converted to their storage); default None: no document has one.
    means : ndarray (n_slots, dim) float32, optional
        The means, kept only (and then required) with dtype int8 or bf16; may be a read-only memory map.
    texts : list of str or None, optional
        One per slot (None for free slots); default: the store keeps no texts.
    capacity : int, optional
        Rows to reserve (default ``n_slots``; at least ``n_slots``).
    """

    def __init__(
        self, ids, alive, *, dim: int, dtype, var=None, means=None, texts=None, capacity: Optional[int] = None
    ):
        self.dtype = index_dtype(dtype)
        self.var_dtype = np.dtype(np.float16 if self.dtype == "float16" else np.float32)
        self.dim = int(dim)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.alive = np.asarray(alive, dtype=bool)
        self.n_slots = int(self.ids.shape[0])
        self._var = None if var is None else (var if var.dtype == self.var_dtype else var.astype(self.var_dtype))
        if (means is not None) != (self.dtype in _CODED):
            raise ValueError(f"means must be given exactly when dtype is int8 or bf16 (dtype {self.dtype!r})")
        self.means = None if means is None else MeanRows(means, self.n_slots)
        self._live = int(self.alive[: self.n_slots].sum())  # kept by put/drop: len() is on every search's path
        self.texts: Optional[List[Optional[str]]] = None if texts is None else list(texts)
        self._lookup: Optional[Tuple[np.ndarray, np.ndarray]] = None
        if capacity is not None and capacity > self.n_slots:
            self._grow(capacity)

    @classmethod
    def empty(cls, dim: int, dtype, *, capacity: int, keep_texts: bool) -> DocStore:
        """A store without documents, with room for ``capacity`` rows of ``dim`` values (texts kept or not)."""
        texts = [] if keep_texts else None
        means = np.zeros((0, dim), np.float32) if index_dtype(dtype) in _CODED else None
        return cls(
            np.zeros(0, np.int64), np.zeros(0, bool), dim=dim, dtype=dtype, means=means, texts=texts, capacity=capacity
        )

    # ------------------------------------------------------------------ rows
    @property
    def has_variance(self) -> bool:
        """Whether some document has (or had) a variance; False: every variance is 0 and none is stored."""
        return self._var is not None

    @property
    def var(self) -> Optional[np.ndarray]:
        """Stored variances by slot (None when no document has one)."""
        return None if self._var is None else self._var[: self.n_slots]

    @property
    def capacity(self) -> int:
        return int(self.ids.shape[0])

    def __len__(self) -> int:
        return self._live

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self.alive[: self.n_slots])

    def variances(self, slots: np.ndarray) -> np.ndarray:
        """float32 variances of ``slots`` (zeros without stored variances)."""
        if self._var is None:
            return np.zeros((len(slots), self.dim), np.float32)
        return np.ascontiguousarray(self._var[slots], dtype=np.float32)

    def nbytes(self) -> int:
        """Bytes held (or mapped) for variances, means (int8 and bf16 indexes), ids and flags."""
        var = 0 if self._var is None else self._var.nbytes
        means = 0 if self.means is None else self.means.nbytes()
        return int(var + means + self.ids.nbytes + self.alive.nbytes)

    # ------------------------------------------------------------------ ids
    def _sorted(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._lookup is None:
            live = self.live_slots()
            order = np.argsort(self.ids[live], kind="stable")
            self._lookup = (self.ids[live][order], live[order])
        return self._lookup

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask: which of ``ids`` are live documents."""
        keys, _ = self._sorted()
        if not len(keys):
            return np.zeros(len(ids), dtype=bool)
        return keys[np.minimum(np.searchsorted(keys, ids), len(keys) - 1)] == ids

    def slots_of(self, ids: np.ndarray, name: str = "ids") -> np.ndarray:
        """Slots of live ``ids`` (ValueError naming ``name`` for an unknown one)."""
        known = self.contains(ids)
        if not known.all():
            raise ValueError(f"{name} has {int((~known).sum())} ids not in the index (first: {int(ids[~known][0])})")
        keys, slots = self._sorted()
        return slots[np.searchsorted(keys, ids)]

    def ids_of(self, slots: np.ndarray) -> np.ndarray:
        """External ids of ``slots`` (any shape; ``-1`` slots, the padding, give ``-1``)."""
        return np.where(slots >= 0, self.ids[np.maximum(slots, 0)], -1)

    def next_ids(self, n: int) -> np.ndarray:
        """``n`` fresh ids after the largest one ever stored (0, 1, ... for an empty store)."""
        start = int(self.ids[: self.n_slots].max()) + 1 if self.n_slots else 0
        return np.arange(start, start + n, dtype=np.int64)

    # ------------------------------------------------------------------ changes
    def _materialize(self) -> None:
        if isinstance(self.ids, np.memmap) or not self.ids.flags.writeable:
            self.ids, self.alive = np.array(self.ids), np.array(self.alive)
            self._var = None if self._var is None else np.array(self._var)

    def _grow(self, capacity: int) -> None:
        def grow(a, fill):
            out = np.full((capacity,) + a.shape[1:], fill, dtype=a.dtype)
            out[: self.n_slots] = a[: self.n_slots]
            return out

        self.ids, self.alive = grow(self.ids, -1), grow(self.alive, False)
        self._var = None if self._var is None else grow(self._var, 0)
        if self.means is not None:
            self.means.grow(capacity)

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` rows in all (a store never shrinks)."""
        if capacity > self.capacity:
            self._grow(capacity)

    def check_rows(self, mean: np.ndarray, var: np.ndarray) -> None:
        """ValueError when rows cannot be stored in the store's dtype (beyond float16's range)."""
        if self.dtype == "float16" and mean.size and max(np.abs(mean).max(), var.max()) > _FLOAT16_MAX:
            raise ValueError("docs have values beyond float16's range: use dtype='float32'")

    def _set_var(self, slots: np.ndarray, var: np.ndarray) -> None:
        if self._var is None:
            if not var.any():
                return  # still no variance anywhere: nothing to store
            self._var = np.zeros((self.capacity, self.dim), dtype=self.var_dtype)
        self._var[slots] = var

    @property
    def deleted(self) -> int:
        """Slots of removed documents still taken (until :meth:`compacted`)."""
        return self.n_slots - self._live

    def put(self, mean: np.ndarray, var: np.ndarray, ids: np.ndarray, texts: Optional[Sequence[str]]) -> np.ndarray:
        """Take new slots, after the last one, for new ``ids`` with their variances, means (kept only with
        dtype int8 or bf16) and texts; returns the slots. The caller writes the means to the graph under these
        slots. Removed documents' slots are not reused: a graph node re-linked in place costs tens of fresh
        insertions (hnswlib's updatePoint)."""
        self._materialize()
        n = len(ids)
        if self.n_slots + n > self.capacity:
            self._grow(max(self.n_slots + n, 2 * self.capacity))
        slots = np.arange(self.n_slots, self.n_slots + n, dtype=np.int64)
        self.n_slots += n
        self._set_var(slots, var)
        if self.means is not None:
            self.means.put(slots, mean)
        self.ids[slots], self.alive[slots] = ids, True
        self._live += n
        if self.texts is not None:
            self.texts.extend(texts)
        self._lookup = None
        return slots

    def compacted(self, headroom: int = 0) -> DocStore:
        """A store of the live documents only, in slots ``0 .. len - 1`` (in slot order), with room for
        ``headroom`` more; this store is left as it was."""
        live = self.live_slots()
        return DocStore(
            self.ids[live],
            np.ones(len(live), bool),
            dim=self.dim,
            dtype=self.dtype,
            var=None if self._var is None else np.array(self._var[live]),
            means=None if self.means is None else self.means.rows(live),
            texts=None if self.texts is None else [self.texts[s] for s in live],
            capacity=max(1, len(live) + headroom),
        )

    def take(self, other: DocStore) -> None:
        """Hold ``other``'s documents from now on (whoever holds this object sees them)."""
        if (other.dim, other.dtype) != (self.dim, self.dtype):
            raise ValueError("other must hold documents of the same dim and dtype")
        self.__dict__.update(other.__dict__)

    def drop(self, slots: np.ndarray) -> None:
        """Free ``slots`` (distinct live slots)."""
        self._materialize()
        self.alive[slots] = False
        self._live -= len(slots)
        if self.texts is not None:
            for s in slots:
                self.texts[s] = None
        self._lookup = None


def as_ids(ids, name: str = "ids", *, low: int = 0) -> np.ndarray:
    """``ids`` (an int, or array_like of ints of any shape) as a flat int64 vector of entries >= ``low``."""
    return as_int_matrix(as_array(ids, name).reshape(-1), name, ndim=1, low=low)


def check_ids(ids, n: Optional[int] = None, name: str = "ids") -> np.ndarray:
    """``n`` (default: any number of) distinct non-negative int64 ids (``-1`` is the padding of search results)."""
    arr = as_ids(ids, name)
    n = len(arr) if n is None else n
    if len(arr) != n:
        raise ValueError(f"{name} must hold {n} ids (one per document), got {len(arr)}")
    if len(np.unique(arr)) != n:
        raise ValueError(f"{name} has repeated ids")
    return arr


def check_texts(texts, n: int) -> Optional[List[str]]:
    """``texts`` as a list of ``n`` strings, one per document (None stays None; ValueError otherwise)."""
    if texts is None:
        return None
    texts = list(texts)
    if len(texts) != n or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"texts must hold {n} strings (one per document)")
    return texts


def mean_rows(store: DocStore, graph, slots: np.ndarray, num_threads=None) -> np.ndarray:
    """float32 means of store ``slots``: the store's own (int8 and bf16 indexes, whose graph holds codes),
    else the graph's stored rows (``graph``: the :class:`crossembed.ann.MeanGraph` labelled by slot)."""
    if store.means is not None:
        return store.means.rows(slots)
    return graph.rows(slots, num_threads=num_threads)
