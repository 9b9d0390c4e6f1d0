"""A searchable UEC index: hnswlib candidates on the means, exact probit rerank.

``search(queries, k)`` asks hnswlib (inner product on the document means) for
``rerank`` candidates per query and reranks them exactly with
:meth:`crossembed.ProbitDocs.top_k` (``candidates=``); ``exact=True`` scores
every document with the fused probit top-k kernel instead.

The file written by :meth:`UECIndex.save` is one checksummed
:mod:`crossembed._io` container (atomic write): the document Gaussians, the
hnswlib graph bytes (so the checksum covers them too), optional document
texts and the fitted ensemble (so ``index search`` can encode text queries).
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from crossembed import kernels
from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed._validation import check_int, check_k, check_num_threads
from crossembed.uec._random import int_seed
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = ["UECIndex"]

_KIND = "crossembed.uec.UECIndex"
INDEX_VERSION = 1


def _hnswlib():
    try:
        import hnswlib
    except ImportError as exc:  # pragma: no cover - hnswlib is an optional dependency
        raise ImportError("UECIndex needs hnswlib: pip install 'crossembed[index]'") from exc
    return hnswlib


def _pack_texts(texts: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    blobs = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).copy(), offsets


def _unpack_texts(data: np.ndarray, offsets: np.ndarray) -> List[str]:
    raw = data.tobytes()
    return [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]


class UECIndex:
    """Documents as Gaussians, searchable by probit similarity.

    Parameters
    ----------
    docs : GaussianEmbedding
        Document Gaussians (``role="passage"`` output of the ensemble).
    ensemble : UECEnsemble, optional
        Needed to search with text queries (and saved with the index).
        :meth:`build` encodes texts with it.
    texts : sequence of str, optional
        The document texts, kept for display and saved with the index.
    M, ef_construction : int
        hnswlib graph parameters.
    rerank : int
        Default number of ANN candidates reranked exactly per query.
    use_variance : bool, optional
        Score with the variances (default: the ensemble's ``use_variance``, else True).
    random_state : int, Generator or None
        hnswlib's construction seed (None or a Generator: one is drawn and saved).
    num_threads : int, optional
        Threads for building and searching (default: all cores).
    """

    def __init__(
        self,
        docs: GaussianEmbedding,
        *,
        ensemble: Optional[UECEnsemble] = None,
        texts: Optional[Sequence[str]] = None,
        M: int = 32,
        ef_construction: int = 200,
        rerank: int = 100,
        use_variance: Optional[bool] = None,
        random_state=0,
        num_threads: Optional[int] = None,
        _graph: Optional[bytes] = None,
    ):
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if len(docs) == 0:
            raise ValueError("docs must not be empty")
        if ensemble is not None and not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if ensemble is not None and ensemble.dim != docs.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the ensemble produces {ensemble.dim}")
        if texts is not None:
            texts = list(texts)
            if len(texts) != len(docs) or not all(isinstance(t, str) for t in texts):
                raise ValueError(f"texts must hold {len(docs)} strings (one per document)")
        self.docs = docs
        self.ensemble = ensemble
        self.texts = texts
        self.M = check_int(M, "M", low=2)
        self.ef_construction = check_int(ef_construction, "ef_construction", low=1)
        self.rerank = check_int(rerank, "rerank", low=1)
        if use_variance is None:
            use_variance = True if ensemble is None else ensemble.use_variance
        self.use_variance = bool(use_variance)
        self.random_state = int_seed(random_state)
        check_num_threads(num_threads)
        self.num_threads = num_threads
        v = docs.var if self.use_variance else np.zeros_like(docs.var)
        self._probit = kernels.ProbitDocs(docs.mean, v)
        self._graph_lock = threading.Lock()  # set_ef + knn_query as one step (see candidates)
        self._graph = self._build_graph(_graph)

    @classmethod
    def build(
        cls,
        ensemble: UECEnsemble,
        docs,
        *,
        batch_size: int = 64,
        show_progress_bar: bool = True,
        **kwargs,
    ) -> UECIndex:
        """Index ``docs`` for ``ensemble``: texts are encoded as passages (and kept), or pass
        a passage :class:`GaussianEmbedding` from :meth:`UECEnsemble.encode`/``combine``.
        When the ensemble routes by retrieval confidence and has no reference
        collection yet, the encoded documents become it (texts only; with a
        GaussianEmbedding call :meth:`UECEnsemble.set_reference` first).

        ``kwargs`` are the constructor's options (``M``, ``ef_construction``,
        ``rerank``, ``use_variance``, ``random_state``, ``num_threads``).
        """
        if not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if isinstance(docs, GaussianEmbedding):
            return cls(docs, ensemble=ensemble, **kwargs)
        if isinstance(docs, str):
            raise TypeError("docs must be a list of strings or a GaussianEmbedding, not one string")
        texts = list(docs)
        comps = ensemble.encode_components(
            texts, role="passage", batch_size=batch_size, show_progress_bar=show_progress_bar
        )
        if ensemble.needs_reference and ensemble.reference_ is None:
            ensemble.set_reference(comps)  # retrieval confidence is measured over the indexed documents
        return cls(ensemble.combine(comps, role="passage"), ensemble=ensemble, texts=texts, **kwargs)

    def __len__(self) -> int:
        return len(self.docs)

    @property
    def dim(self) -> int:
        return self.docs.dim

    def _build_graph(self, graph_bytes: Optional[bytes]):
        hnswlib = _hnswlib()
        n, d = self.docs.mean.shape
        index = hnswlib.Index(space="ip", dim=d)
        if graph_bytes is None:
            index.init_index(
                max_elements=n, ef_construction=self.ef_construction, M=self.M, random_seed=self.random_state
            )
            threads = check_num_threads(self.num_threads) or -1
            index.add_items(self.docs.mean, np.arange(n), num_threads=threads)
            return index
        fd, tmp = tempfile.mkstemp(suffix=".hnsw")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(graph_bytes)
            index.load_index(tmp, max_elements=n)
        except RuntimeError as exc:
            raise CorruptFileError(f"unreadable hnswlib graph ({exc})") from None
        finally:
            os.unlink(tmp)
        if index.get_current_count() != n:
            raise CorruptFileError(f"hnswlib graph holds {index.get_current_count()} items, expected {n}")
        return index

    def _graph_bytes(self) -> bytes:
        fd, tmp = tempfile.mkstemp(suffix=".hnsw")
        os.close(fd)
        try:
            with self._graph_lock:
                self._graph.save_index(tmp)
            return Path(tmp).read_bytes()
        finally:
            os.unlink(tmp)

    # ------------------------------------------------------------------ search
    def _queries(self, queries) -> GaussianEmbedding:
        if isinstance(queries, GaussianEmbedding):
            q = queries
        elif isinstance(queries, str):
            raise TypeError("queries must be a list of strings or a GaussianEmbedding, not one string")
        else:
            queries = list(queries)
            if not queries:
                raise ValueError("queries must not be empty")
            if not all(isinstance(t, str) for t in queries):
                raise TypeError("queries must be a list of strings or a GaussianEmbedding")
            if self.ensemble is None:
                raise ValueError("this index has no ensemble: pass query GaussianEmbeddings, or build/load it with one")
            q = self.ensemble.encode(queries, role="query", show_progress_bar=False)
        if q.dim != self.dim:
            raise ValueError(f"queries have dimension {q.dim} but the index has {self.dim}")
        return q

    def candidates(self, queries, m: int, *, ef: Optional[int] = None, num_threads: Optional[int] = None) -> np.ndarray:
        """The hnswlib inner-product candidates ``(Q, m)`` int64 (``-1`` pads).

        Safe to call from several threads at once: the graph's search breadth
        (``set_ef``) is shared state, so setting it and querying happen under
        one lock per index, and every call sees its own ``ef``. Queries for
        which hnswlib cannot return ``m`` neighbours (a sparse graph, many
        identical documents) get their candidates by exact inner product.
        """
        q = self._queries(queries)
        m = min(check_int(m, "m", low=1), len(self))
        ef = max(m, check_int(ef, "ef", low=1) if ef is not None else 2 * m)
        threads = check_num_threads(num_threads if num_threads is not None else self.num_threads) or -1
        with self._graph_lock:
            self._graph.set_ef(ef)
            try:
                labels, _ = self._graph.knn_query(q.mean, k=m, num_threads=threads)
                return labels.astype(np.int64)
            except RuntimeError:  # "Cannot return the results in a contiguous 2D array..."
                pass
            rows = []
            for row in q.mean:  # find the queries hnswlib fails on; the others keep its answer
                try:
                    rows.append(self._graph.knn_query(row[None, :], k=m, num_threads=1)[0][0].astype(np.int64))
                except RuntimeError:
                    rows.append(None)
        return np.stack([r if r is not None else self._exact_candidates(row, m) for r, row in zip(rows, q.mean)])

    def _exact_candidates(self, query: np.ndarray, m: int) -> np.ndarray:
        """The ``m`` documents of largest inner product with ``query`` (ties: lower index)."""
        ip = self.docs.mean.astype(np.float64) @ query.astype(np.float64)
        return np.lexsort((np.arange(len(ip)), -ip))[:m].astype(np.int64)

    def search(
        self,
        queries,
        k: int = 10,
        *,
        exact: bool = False,
        rerank: Optional[int] = None,
        ef: Optional[int] = None,
        num_threads: Optional[int] = None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` documents per query by probit similarity.

        Thread-safe: any number of threads may search one index at once, with
        different ``k``/``rerank``/``ef``, and each gets exactly what the same
        call alone would return.

        Parameters
        ----------
        queries : list of str or GaussianEmbedding
        k : int
        exact : bool
            Score every document (brute force) instead of reranking ANN candidates.
        rerank : int, optional
            ANN candidates per query (default ``self.rerank``, at least ``k``).
        ef : int, optional
            hnswlib search breadth (default ``2 * rerank``).

        Returns
        -------
        scores : ndarray (Q, k) float32, best first
        indices : ndarray (Q, k) int64
        """
        q = self._queries(queries)
        k = check_k(k, len(self))
        vq = q.var if self.use_variance else np.zeros_like(q.var)
        nt = num_threads if num_threads is not None else self.num_threads
        official = self.ensemble is not None and self.ensemble.rules == "official"
        if exact:
            if official:
                return self.ensemble.topk(q, self._scored_docs(), k, num_threads=nt)
            return self._probit.top_k(q.mean, vq, k, num_threads=nt)
        m = max(k, check_int(rerank, "rerank", low=1) if rerank is not None else self.rerank)
        cand = self.candidates(q, m, ef=ef, num_threads=nt)
        if official:  # the official code's beta-scaled cosine instead of the probit
            return self.ensemble.topk(q, self._scored_docs(), k, candidates=cand, num_threads=nt)
        return self._probit.top_k(q.mean, vq, k, candidates=cand, num_threads=nt)

    def _scored_docs(self) -> GaussianEmbedding:
        return self.docs if self.use_variance else GaussianEmbedding(self.docs.mean, np.zeros_like(self.docs.var))

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> Path:
        """Write the index atomically with a checksum over everything (graph bytes included)."""
        arrays = {
            "mean": self.docs.mean,
            "var": self.docs.var,
            "graph": np.frombuffer(self._graph_bytes(), dtype=np.uint8),
        }
        meta = {
            "index_version": INDEX_VERSION,
            "M": self.M,
            "ef_construction": self.ef_construction,
            "rerank": self.rerank,
            "use_variance": self.use_variance,
            "random_state": self.random_state,
            "has_texts": self.texts is not None,
            "ensemble": None,
        }
        if self.docs.weights is not None:
            arrays["weights"] = self.docs.weights
        if self.texts is not None:
            arrays["texts"], arrays["text_offsets"] = _pack_texts(self.texts)
        if self.ensemble is not None:
            ens_arrays, meta["ensemble"] = self.ensemble.get_state()
            arrays.update({f"ens.{k}": v for k, v in ens_arrays.items()})
        return save_arrays(path, _KIND, arrays, meta)

    @classmethod
    def load(
        cls, path, *, ensemble: Optional[UECEnsemble] = None, encoders=None, num_threads: Optional[int] = None
    ) -> UECIndex:
        """Read an index written by :meth:`save`.

        Raises :class:`crossembed._io.CorruptFileError` (a ValueError) when the
        file is truncated, edited, of another kind or of an unknown version.
        The saved ensemble is restored unless ``ensemble`` is given; its
        encoders load lazily (by stored name, or from ``encoders``).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no index file at {str(path)!r}")
        arrays, meta = load_arrays(path, _KIND)
        if meta.get("index_version") != INDEX_VERSION:
            raise CorruptFileError(
                f"{path}: UECIndex version {meta.get('index_version')} is not supported (expected {INDEX_VERSION})"
            )
        try:
            docs = GaussianEmbedding(arrays["mean"], arrays["var"], arrays.get("weights"))
            texts = _unpack_texts(arrays["texts"], arrays["text_offsets"]) if meta["has_texts"] else None
            if ensemble is None and meta.get("ensemble") is not None:
                ens_arrays = {k[4:]: v for k, v in arrays.items() if k.startswith("ens.")}
                ensemble = UECEnsemble.from_state(ens_arrays, meta["ensemble"], encoders=encoders)
            return cls(
                docs,
                ensemble=ensemble,
                texts=texts,
                M=meta["M"],
                ef_construction=meta["ef_construction"],
                rerank=meta["rerank"],
                use_variance=meta["use_variance"],
                random_state=meta["random_state"],
                num_threads=num_threads,
                _graph=arrays["graph"].tobytes(),
            )
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise CorruptFileError(f"{path}: incomplete UECIndex ({type(exc).__name__}: {exc})") from None

    def __repr__(self) -> str:
        return f"UECIndex(n={len(self)}, dim={self.dim}, M={self.M}, rerank={self.rerank})"
