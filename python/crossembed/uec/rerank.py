"""How a UEC index answers a search: graph candidates, then an exact rerank on one of three paths.

The HNSW graph (inner product on the means) gives ``rerank`` candidates per
query, reranked exactly by the scoring: on the cached prepared blocks
(:class:`PanelCache`) or on just the candidate rows prepared per query batch;
``exact`` (or a filter allowing at most ``_EXACT_FILTER_ROWS`` documents)
scores every document block by block of ``_BLOCK`` slots. Prepared documents
(for the probit, packed panels of 12 D bytes each) are cached only for
documents with variances, and only while all of them fit the budget.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from crossembed.ann import MeanGraph
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.store import DocStore, mean_rows

__all__ = ["PanelCache", "RerankPlanner", "merge_topk"]

_BLOCK = 16384  # slots per block of prepared documents (exact search and the panel cache go block by block)
_RERANK_ROWS = 32768  # candidate rows prepared per rerank batch when the panels are not cached
_EXACT_FILTER_ROWS = 20000  # a filter allowing at most this many documents is searched exactly
# the panel budget is checked against the probit's packed panels (three float32 values per coordinate),
# the largest prepared form, before any block exists
_PANEL_BYTES_PER_VALUE = 12
# the ANN rerank visits cached blocks only when it has this many candidate rows per block or more: below,
# preparing just the candidate rows costs less than a step per block
_ROWS_PER_CACHED_BLOCK = 256


def merge_topk(scores: np.ndarray, ids: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of each row of ``(Q, M)`` scores/ids: score descending, ties to the lower id.

    ``-1`` ids are padding and go last. Used to merge blocks and shards, so
    merging any partition of the documents gives the same answer.
    """
    pad = ids < 0
    key_ids = np.where(pad, np.iinfo(np.int64).max, ids)
    key_scores = np.where(pad, np.inf, -scores.astype(np.float64))
    order = np.lexsort((key_ids, key_scores), axis=-1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def padded(scores: np.ndarray, ids: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(Q, j)`` results widened to ``k`` columns with score -inf and id -1 (faiss's padding)."""
    if scores.shape[1] >= k:
        return scores, ids
    q, j = scores.shape
    out_s = np.full((q, k), -np.inf, np.float32)
    out_i = np.full((q, k), -1, np.int64)
    out_s[:, :j], out_i[:, :j] = scores, ids
    return out_s, out_i


class PanelCache:
    """The scoring's prepared documents per fixed block of ``_BLOCK`` slots, kept while all fit ``budget``.

    Parameters
    ----------
    store, graph : DocStore, MeanGraph
        The documents (variances and means, by slot).
    scoring : scoring object
        Prepares documents (``scoring.prepare(mean, var)``).
    budget : int
        Bytes of prepared blocks kept between searches (the index's ``panel_cache_bytes``).
    """

    def __init__(self, store: DocStore, graph: MeanGraph, scoring, budget: int):
        self.store, self.graph, self.scoring, self.budget = store, graph, scoring, budget
        self._blocks: Dict[int, Tuple[Any, np.ndarray]] = {}  # block -> (prepared documents, their slots)
        self._rows_packed = 0  # candidate rows prepared per search since blocks were last rebuilt

    def __len__(self) -> int:
        """Blocks held."""
        return len(self._blocks)

    @property
    def nbytes(self) -> int:
        return sum(int(prepared.nbytes) for prepared, _ in list(self._blocks.values()))

    def rows(self, slots: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """float32 means (from the graph, or the store of an int8 or bf16 index) and variances of store ``slots``."""
        return mean_rows(self.store, self.graph, slots), self.store.variances(slots)

    def fits(self) -> bool:
        """Whether prepared blocks are kept: the documents have variances (without, the prepared form
        is a re-layout of the graph's means) and the blocks of every live document fit the budget."""
        if not self.store.has_variance:
            return False
        return _PANEL_BYTES_PER_VALUE * self.store.dim * len(self.store) <= self.budget

    def live_blocks(self) -> List[Tuple[int, np.ndarray]]:
        """``(block, live slots)`` of each fixed range of ``_BLOCK`` slots (fixed, so its panels can be cached)."""
        live = self.store.live_slots()
        cuts = np.searchsorted(live, np.arange(0, self.store.n_slots + _BLOCK, _BLOCK))
        return [(b, live[lo:hi]) for b, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])) if hi > lo]

    def prepared(self, rows: np.ndarray, block: Optional[int]):
        """The scoring's prepared documents of store ``rows`` (kept when ``block`` is named and all fit)."""
        if block is not None and block in self._blocks:
            return self._blocks[block][0]
        mean, var = self.rows(rows)
        prepared = self.scoring.prepare(mean, var)
        del mean, var
        if block is not None and self.fits():  # all or none: a partial cache would still pack per call
            self._blocks[block] = (prepared, rows)
        return prepared

    def worth_using(self, n_candidates: int) -> bool:
        """Whether to rerank ``n_candidates`` rows on the cached blocks (else prepare only those rows).

        Missing blocks (never built, or dropped by an update) are rebuilt once the rows prepared
        one search at a time since the last rebuild reach the rows the rebuild prepares (ski
        rental: at most twice the cheaper choice in hindsight), so a stream of searches beside a
        writer does not repack whole blocks per query, and a stable index ends up cached.
        """
        if not self.fits():
            return False
        # a block holds at most _BLOCK documents: this many blocks are live at least (no slot scan needed)
        if n_candidates < _ROWS_PER_CACHED_BLOCK * -(-len(self.store) // _BLOCK):
            return False
        blocks = self.live_blocks()
        if n_candidates < _ROWS_PER_CACHED_BLOCK * len(blocks):
            return False  # too few rows to gain from the blocks even when they are all cached
        missing = sum(len(rows) for b, rows in blocks if b not in self._blocks)
        if missing == 0:
            return True
        if self._rows_packed + n_candidates >= missing:
            self._rows_packed = 0
            return True
        self._rows_packed += n_candidates  # racy between searches: only a heuristic's counter
        return False

    def forget(self, slots: np.ndarray) -> None:
        """Drop the blocks holding ``slots`` (they changed)."""
        for b in np.unique(slots // _BLOCK):
            self._blocks.pop(int(b), None)


class RerankPlanner:
    """Answers searches over ``store`` and ``graph``: graph candidates, reranked exactly through ``cache``.

    The caller holds the index's lock shared around each call (the planner itself takes none).
    """

    def __init__(self, store: DocStore, graph: MeanGraph, cache: PanelCache):
        self.store, self.graph, self.cache = store, graph, cache

    def search(
        self, q: GaussianEmbedding, k: int, m: int, ef: int, filter_ids: Optional[np.ndarray], *, exact: bool, nt
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(scores, ids)`` per query: ``m`` candidates found with breadth ``ef`` (``exact``:
        every document), among the ids of ``filter_ids`` when given (sorted, distinct)."""
        allowed = self._allowed(filter_ids)
        n = len(self.store) if allowed is None else len(allowed)
        if n == 0:
            return padded(np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64), k)
        if exact or (allowed is not None and n <= _EXACT_FILTER_ROWS):
            return padded(*self._exact(q, min(k, n), allowed, nt), k)
        m = min(m, n)
        cand = self.candidates(q.mean, m, max(ef, m), nt, allowed)
        rerank = self._rerank_cached if self.cache.worth_using(cand.size) else self._rerank_packed
        return padded(*rerank(q, cand, min(k, n), nt), k)

    def _allowed(self, filter_ids: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Sorted slots of the live documents among ``filter_ids`` (others are ignored; may be empty)."""
        if filter_ids is None:
            return None
        ids = filter_ids[self.store.contains(filter_ids)]
        return np.sort(self.store.slots_of(ids))

    def candidates(self, mean: np.ndarray, m: int, ef: int, nt, allowed=None) -> np.ndarray:
        """The graph's ``m`` nearest slots per query (``allowed``: sorted slots, or None for all live ones).

        A query the graph finds fewer than ``m`` of (a sparse graph, many identical documents)
        gets its candidates by exact inner product instead.
        """
        mask = None
        if allowed is not None:
            mask = np.zeros(self.store.n_slots, dtype=bool)
            mask[allowed] = True
        slots, _ = self.graph.knn(mean, m, ef=ef, allowed=mask, num_threads=nt)
        short = np.flatnonzero((slots < 0).any(axis=1))
        if len(short):
            pool = self.store.live_slots() if allowed is None else allowed
            slots[short] = np.stack([self._exact_candidates(mean[i], m, pool) for i in short])
        return slots

    def _exact_candidates(self, query: np.ndarray, m: int, pool: np.ndarray) -> np.ndarray:
        """The ``m`` slots of ``pool`` of largest inner product with ``query`` (ties: lower slot)."""
        ip = np.concatenate(
            [mean_rows(self.store, self.graph, pool[s : s + _BLOCK]) @ query for s in range(0, len(pool), _BLOCK)]
        ).astype(np.float64)
        return pool[np.lexsort((pool, -ip))[:m]]

    def _score_rows(self, q: GaussianEmbedding, rows: np.ndarray, k: int, candidates, nt, block=None):
        """Top-``k`` of ``q`` over store ``rows`` (or among ``candidates``, positions in ``rows``) as slots,
        widened past ``k`` while the ``k``-th score ties the last one returned.

        The kernel breaks ties by position (slot order), the index by id; after updates the two differ,
        so a tie across the cut must come back whole for :func:`merge_topk` to keep the lower ids.
        """
        prepared = self.cache.prepared(rows, block)
        width = len(rows) if candidates is None else candidates.shape[1]
        take = min(k + 1, width)
        while True:
            s, p = prepared.top_k(q.mean, q.var, take, candidates=candidates, num_threads=nt)
            cut = s[:, min(k, take) - 1]
            if take >= width or not np.any(np.isfinite(cut) & (cut == s[:, -1])):
                return s, np.where(p >= 0, rows[np.maximum(p, 0)], -1)
            take = min(2 * take, width)

    def _rerank_cached(self, q: GaussianEmbedding, cand: np.ndarray, k: int, nt) -> Tuple[np.ndarray, np.ndarray]:
        """Rerank ``cand`` (slots) block by block on the cached panels: each block sees, per query,
        only its own candidates (a ``(Q, c_b)`` matrix, ``c_b`` the most any query has there)."""
        srt = np.sort(cand, axis=1)  # -1 pads first; each block's candidates contiguous per row
        scores, ids = [], []
        for b, rows in self.cache.live_blocks():
            lo = (srt < b * _BLOCK).sum(axis=1)
            hi = (srt < (b + 1) * _BLOCK).sum(axis=1)
            width = int((hi - lo).max())
            if width == 0:
                continue
            take = lo[:, None] + np.arange(width)
            valid = take < hi[:, None]
            slots = np.take_along_axis(srt, np.minimum(take, srt.shape[1] - 1), axis=1)
            local = np.where(valid, np.searchsorted(rows, slots), -1)
            sc, sl = self._score_rows(q, rows, min(k, width), local, nt, b)
            scores.append(sc)
            ids.append(self.store.ids_of(sl))
        return merge_topk(np.concatenate(scores, axis=1), np.concatenate(ids, axis=1), k)

    def _rerank_packed(self, q: GaussianEmbedding, cand: np.ndarray, k: int, nt) -> Tuple[np.ndarray, np.ndarray]:
        """Rerank ``cand`` (slots) per batch of queries, preparing only the rows that batch's candidates need."""
        m = cand.shape[1]
        out_s = np.empty((len(q), k), np.float32)
        out_i = np.empty((len(q), k), np.int64)
        step = max(1, _RERANK_ROWS // m)
        for s in range(0, len(q), step):
            c = cand[s : s + step]
            rows = np.unique(c[c >= 0])
            pos = np.where(c >= 0, np.searchsorted(rows, c), -1)
            sc, sl = self._score_rows(q[s : s + step], rows, k, pos, nt)
            out_s[s : s + step], out_i[s : s + step] = merge_topk(sc, self.store.ids_of(sl), k)
        return out_s, out_i

    def _exact(self, q: GaussianEmbedding, k: int, allowed, nt) -> Tuple[np.ndarray, np.ndarray]:
        """Score every live document (or every ``allowed`` slot), block by block."""
        if allowed is None:
            parts = self.cache.live_blocks()
        else:
            parts = [(None, allowed[s : s + _BLOCK]) for s in range(0, len(allowed), _BLOCK)]
        scores, slots = [], []
        for b, rows in parts:
            s, sl = self._score_rows(q, rows, min(k, len(rows)), None, nt, None if b is None else int(b))
            scores.append(s)
            slots.append(sl)
        return merge_topk(np.concatenate(scores, axis=1), self.store.ids_of(np.concatenate(slots, axis=1)), k)
