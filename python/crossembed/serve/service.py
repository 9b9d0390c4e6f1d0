"""The operations of the service on one :class:`~crossembed.uec.UECIndex`, HTTP aside.

Each method takes a request body (JSON bytes) and returns the JSON-ready
answer, or raises :class:`~crossembed.serve.errors.RequestError` (4xx).
Index calls run in worker threads, never on the event loop (the index's
lock may make a call wait for an update). Every search goes through the
:class:`~crossembed.serve.batcher.SearchBatcher`: one search thread, whose
OpenMP parallel regions use ``search_threads`` threads (the default leaves a
core to the event loop: an OpenMP team larger than the free cores waits on
its busiest member), and requests whose rows cannot depend on each other
share a call. Texts are encoded on one encoder thread
(:class:`~crossembed.serve.text_batcher.TextBatcher`), whose encoders use their
own thread pools (``--num-threads``, default every core); the searches of an
encoded batch run next on that thread, with ``search_threads`` threads as on
the search thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from crossembed.serve.batcher import SearchBatcher, SearchKey
from crossembed.serve.bodies import BodyDecoder
from crossembed.serve.config import ServeConfig
from crossembed.serve.errors import RequestError
from crossembed.serve.metrics import ServeMetrics
from crossembed.serve.schema import (
    AddBody,
    RemoveBody,
    SaveBody,
    SearchBody,
    UpsertBody,
    ids_array,
    matrix,
)
from crossembed.serve.text_batcher import TextBatcher
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex

__all__ = ["IndexService", "limit_openmp_threads"]

logger = logging.getLogger("crossembed.serve")


def _index_call(fn, *args, **kwargs):
    """``fn(...)``, its ValueError/TypeError (the index refusing the request) as a 400."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise RequestError(400, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc


def limit_openmp_threads(n: int) -> bool:
    """Make OpenMP parallel regions started from the calling thread use at most ``n`` threads.

    ``omp_set_num_threads`` is per thread, so the rest of the process keeps its
    setting. Through threadpoolctl (False, and nothing changes, when it is not
    installed).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=n, user_api="openmp")
    return True


def _scores_json(scores: np.ndarray) -> List[List[Optional[float]]]:
    """Scores as lists of floats; the ``-inf`` of padding (id -1) as ``null`` (JSON has no infinity)."""
    rows = scores.tolist()
    if np.isfinite(scores).all():
        return rows
    return [[x if math.isfinite(x) else None for x in row] for row in rows]


class IndexService:
    """Search, add, upsert, remove and save on ``index`` within the limits of ``config``."""

    def __init__(self, index: UECIndex, config: ServeConfig):
        if not isinstance(index, UECIndex):
            raise TypeError(f"index must be a UECIndex, got {type(index).__name__}")
        self.index = index
        self.config = config
        self.keeps_texts = index.texts is not None
        self.search_threads = config.resolved_search_threads()
        self.metrics = ServeMetrics(index_stats=index.stats, queued=lambda: self.batcher.queued)
        self.batcher = SearchBatcher(
            self._run_batch,
            max_batch=config.max_batch,
            wait_s=config.batch_wait_ms / 1e3,
            on_batch=self.metrics.observe_batch,
            thread_init=lambda: limit_openmp_threads(self.search_threads),
        )
        # Encoder calls and index calls take turns on the cores: each runs alone with every thread it is
        # sized for (encoders: all cores, searches: search_threads), because one beside the other would put
        # more compute threads than cores on the machine, and an encoder's or kernel's thread team then waits
        # at each barrier for a member without a core. Searches are a small share of a text request's time
        # (encoding is ~90 % of it): taking turns costs them little, and max_batch_tokens bounds how long a
        # vector search waits behind one encoder call.
        self._turn = threading.Lock()
        # one encoder thread (encoders need not be thread-safe); texts queued meanwhile share its next call
        self.texts = TextBatcher(
            self._encode,
            self.batcher,
            max_batch=config.max_batch,
            max_batch_tokens=config.max_batch_tokens,
            on_batch=self.metrics.observe_encode_batch,
        )
        self.decoder = BodyDecoder()  # large bodies in a child process: parsing holds the GIL
        self.ready = False  # set once warm_up has run (GET /readyz)
        self.save_error: Optional[BaseException] = None  # set when the save at shutdown failed

    # ------------------------------------------------------------------ search
    def _encode(self, texts: List[str], role: str) -> GaussianEmbedding:
        with self._turn:
            return _index_call(self.index.ensemble.encode, texts, role=role, show_progress_bar=False)

    async def encode(self, texts: List[str], role: str) -> GaussianEmbedding:
        """The ensemble's Gaussians of ``texts`` encoded as ``role`` ("query" or "passage"), with each
        model's weight per text in ``weights`` (n, K).

        Every text the service encodes goes through here: the
        :class:`~crossembed.serve.text_batcher.TextBatcher` encodes the texts of concurrent requests
        in shared encoder calls. RequestError 400 when the index has no ensemble or ``texts`` is empty.
        """
        if self.index.ensemble is None:
            raise RequestError(400, "texts: this index has no ensemble to encode texts")
        if not texts:
            raise RequestError(400, "texts: must hold at least one text")
        return await self.texts.encode(list(texts), role)

    def search_key(
        self, k: int, exact: bool, rerank: Optional[int], ef: Optional[int], filter: Optional[List[int]] = None
    ) -> SearchKey:
        """The settings of a search that decide its rows: the candidate count and graph breadth
        :meth:`UECIndex.search` derives from these, and the set of allowed ids."""
        allowed = None if filter is None else np.unique(np.asarray(filter, dtype=np.int64)).tobytes()
        if exact:
            return SearchKey(True, 0, 0, allowed)
        m = max(k, rerank if rerank is not None else self.index.config.rerank)
        return SearchKey(False, m, max(m, ef) if ef is not None else 2 * m, allowed)

    def _run_batch(self, mean: np.ndarray, var: np.ndarray, k: int, key: SearchKey):
        q = GaussianEmbedding(mean, var)
        options = {"num_threads": self.search_threads}
        if key.filter is not None:
            options["filter"] = np.frombuffer(key.filter, dtype=np.int64)
        with self._turn:
            if key.exact:
                return _index_call(self.index.search, q, k, exact=True, **options)
            return _index_call(self.index.search, q, k, rerank=key.rerank, ef=key.ef, **options)

    def _search_with_confidence(self, req: SearchBody, q: GaussianEmbedding):
        """``index.search(..., return_confidence=True)`` of one request's query Gaussians, taking its turn
        on the cores (a 400 when the ensemble has no confidence)."""
        options: Dict[str, Any] = {"exact": req.exact, "rerank": req.rerank, "ef": req.ef}
        if req.filter is not None:
            options["filter"] = np.asarray(req.filter, dtype=np.int64)
        with self._turn:
            return _index_call(
                self.index.search, q, req.k, num_threads=self.search_threads, return_confidence=True, **options
            )

    def _check_search(self, req: SearchBody) -> None:
        limit = self.config.max_candidates
        if req.k > self.config.max_k:
            raise RequestError(400, f"k: {req.k} is above this server's limit of {self.config.max_k}")
        for name in ("rerank", "ef"):
            value = getattr(req, name)
            if value is not None and value > limit:
                raise RequestError(400, f"{name}: {value} is above this server's limit of {limit}")

    def _vectors(self, req: SearchBody) -> Tuple[SearchBody, Optional[np.ndarray], Optional[np.ndarray]]:
        """The decoded search body and its query means and variances (None for text queries)."""
        self._check_search(req)
        if req.queries is not None:
            if req.mean is not None or req.var is not None:
                raise RequestError(400, "queries: give queries (texts) or mean (and var), not both")
            if self.index.ensemble is None:
                raise RequestError(400, "queries: this index has no ensemble to encode texts; send mean (and var)")
            if not req.queries:
                raise RequestError(400, "queries: must hold at least one text")
            return req, None, None
        if req.mean is None:
            raise RequestError(400, "mean: give queries (texts) or mean (and var)")
        mean = matrix(req.mean, "mean", self.index.dim)
        if req.var is None:
            return req, mean, np.zeros_like(mean)
        if len(req.var) != len(mean):
            raise RequestError(400, f"var: has {len(req.var)} rows but mean has {len(mean)}")
        return req, mean, matrix(req.var, "var", self.index.dim, nonnegative=True)

    async def search(self, body: bytes) -> Dict[str, Any]:
        req, mean, var = self._vectors(await self.decoder.decode(SearchBody, body))
        key = self.search_key(req.k, req.exact, req.rerank, req.ef, req.filter)
        if req.confidence:  # searched on its own: the confidence reads each query's own encoding
            q = await self.encode(req.queries, "query") if mean is None else GaussianEmbedding(mean, var)
            scores, ids, confidence = await asyncio.to_thread(self._search_with_confidence, req, q)
            return {"ids": ids.tolist(), "scores": _scores_json(scores), "confidence": confidence.tolist()}
        if mean is None:  # encoded with the texts of other requests, searched with their queries
            scores, ids = await self.texts.search(req.queries, req.k, key)
        else:
            scores, ids = await self.batcher.search(mean, var, req.k, key)
        return {"ids": ids.tolist(), "scores": _scores_json(scores)}

    async def warm_up(self) -> None:
        """Start the body decoder's process, encode a text with each role (the encoders' first call
        loads what they load lazily) and run one exact search on the search thread (the index prepares
        and, within its budget, caches its scoring blocks); then :attr:`ready`."""
        start = time.perf_counter()
        try:
            await self.decoder.start()
            if self.index.ensemble is not None:
                for role in ("query", "passage"):
                    await self.encode(["warm-up"], role)
            ids = (await asyncio.to_thread(lambda: self.index.ids[:1])).tolist()
            if ids:
                doc = await asyncio.to_thread(self.index.get_docs, ids)
                await self.batcher.search(doc.mean, doc.var, 1, SearchKey(True, 0, 0))
            logger.info("warmed up in %.2f s", time.perf_counter() - start)
        except Exception as exc:  # only an optimisation: serve anyway (the requests will tell)
            logger.warning("warm-up failed (%s: %s)", type(exc).__name__, exc)
        self.ready = True

    async def close(self) -> None:
        """Finish the queued text requests (and the searches they hand on) and the queued searches;
        stop both threads."""
        await self.texts.close()
        await self.batcher.close()

    # ------------------------------------------------------------------ updates
    def _documents(self, req: AddBody) -> Tuple[AddBody, Optional[GaussianEmbedding]]:
        """The decoded add/upsert body and its documents (None when they are texts to encode)."""
        if req.mean is None and req.var is None:
            if req.texts is None:
                raise RequestError(400, "mean: give texts, or mean and var")
            if self.index.ensemble is None:
                raise RequestError(400, "texts: this index has no ensemble to encode texts; send mean and var")
            if not req.texts:
                raise RequestError(400, "texts: must hold at least one text")
            return req, None
        if req.mean is None:
            raise RequestError(400, "mean: var needs mean")
        if req.var is None:
            raise RequestError(400, "var: required with mean (variances >= 0, the shape of mean)")
        mean = matrix(req.mean, "mean", self.index.dim)
        if len(req.var) != len(mean):
            raise RequestError(400, f"var: has {len(req.var)} rows but mean has {len(mean)}")
        var = matrix(req.var, "var", self.index.dim, nonnegative=True)
        if req.texts is not None and len(req.texts) != len(mean):
            raise RequestError(400, f"texts: {len(req.texts)} texts for {len(mean)} documents")
        return req, GaussianEmbedding(mean, var)

    def _write(self, docs: GaussianEmbedding, ids: Optional[np.ndarray], texts, upsert: bool) -> np.ndarray:
        if ids is not None:
            if len(ids) != len(docs):
                raise RequestError(400, f"ids: {len(ids)} ids for {len(docs)} documents")
            if len(np.unique(ids)) != len(ids):
                raise RequestError(400, "ids: an id is repeated")
        if upsert:
            return _index_call(self.index.upsert, docs, ids=ids, texts=texts)
        if ids is not None:
            present = ids[self.index.contains(ids)]
            if len(present):
                raise RequestError(409, f"ids: {present[:5].tolist()} are already in the index (use /upsert)")
        return _index_call(self.index.add, docs, ids=ids, texts=texts)

    async def add(self, body: bytes, *, upsert: bool = False) -> Dict[str, Any]:
        req, docs = self._documents(await self.decoder.decode(UpsertBody if upsert else AddBody, body))
        texts = req.texts
        if docs is None:  # texts, encoded as passages (kept when the index keeps texts)
            docs = await self.encode(req.texts, "passage")
            texts = req.texts if self.keeps_texts else None
        ids = None if req.ids is None else ids_array(req.ids)
        new_ids = await asyncio.to_thread(self._write, docs, ids, texts, upsert)
        return {"ids": np.asarray(new_ids).tolist()}

    def _remove(self, ids: np.ndarray) -> None:
        if len(np.unique(ids)) != len(ids):
            raise RequestError(400, "ids: an id is repeated")
        unknown = ids[~self.index.contains(ids)]
        if len(unknown):
            raise RequestError(404, f"ids: {unknown[:5].tolist()} are not in the index (nothing was removed)")
        _index_call(self.index.remove, ids)

    async def remove(self, body: bytes) -> Dict[str, Any]:
        ids = ids_array((await self.decoder.decode(RemoveBody, body)).ids)
        if len(ids):
            await asyncio.to_thread(self._remove, ids)
        return {"removed": len(ids)}

    # ------------------------------------------------------------------ persistence and health
    def _save_path(self, requested: Optional[str]) -> Path:
        if requested is not None:
            if not self.config.allow_save_path:
                raise RequestError(403, "path: this server does not let clients choose where it writes")
            return Path(requested)
        if self.config.save_path is None:
            raise RequestError(409, "path: the server has no save path; start it with one (or allow paths)")
        return Path(self.config.save_path)

    def save_to(self, path: Path) -> Dict[str, Any]:
        """Save the index to ``path`` atomically (blocking)."""
        start = time.perf_counter()
        out = self.index.save(path)
        seconds = time.perf_counter() - start
        logger.info("saved %d documents to %s in %.2f s", len(self.index), out, seconds)
        return {"path": str(out), "documents": len(self.index), "seconds": seconds}

    async def save(self, body: bytes) -> Dict[str, Any]:
        req = await self.decoder.decode(SaveBody, body)
        path = self._save_path(req.path)
        if req.path is None:
            return await asyncio.to_thread(self.save_to, path)
        try:
            return await asyncio.to_thread(self.save_to, path)
        except OSError as exc:  # the client's path: its fault
            raise RequestError(400, f"path: cannot write {str(path)!r} ({exc.strerror or exc})") from None

    async def health(self) -> Dict[str, Any]:
        documents = await asyncio.to_thread(len, self.index)
        return {
            "status": "ok",
            "documents": documents,
            "dim": self.index.dim,
            "ensemble": self.index.ensemble is not None,
            "queued": self.batcher.queued,
        }
