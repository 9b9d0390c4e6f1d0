"""The map pass at scale: an inverted file in B's space, streamed over row chunks.

Once a ridge map ``W`` takes A to B's space, both sides are points of one
space and linking them is a nearest-neighbour search. ``C`` centres,
trained by a few spherical k-means steps on a sample of B's rows from
evenly spaced rows, define the cells; every B row sits in its nearest
centre's cell, and in up to ``copies - 1`` next nearest ones whose cosine
to the row is within ``margin`` of the nearest's (a row near a cell's
border is scored on both sides of it, as in SPANN's boundary
duplication), and every mapped A row probes its ``probes`` nearest cells
(an IVF index: about ``probes N_A N_B / C`` pairs scored instead of
``N_A N_B``). The centres are trained and the nearest ones found on the
sample's top principal directions (a quantiser only decides which pairs
are scored; the pairs themselves are scored in full). Each cell's block
goes through the fused C++ top-k; an A row keeps its ``m`` best over its
cells (a strict order on (score, row), so the lists do not depend on the
order the cells finish), and so does a B row over its cells. A pair that
two cells score (a B row in several cells an A row probes) counts once: in
the first of the B row's cells that the A row probes, so each list is the
exact ``m`` best of the pairs its cells share. Links are mutual CSLS best
pairs over the lists, with the kernel's hubness terms.

Nothing of size ``N x D`` is held beyond the inputs and the mapped A rows,
which are stored in B's dtype (float16 halves them); the centres' training
holds its sample on the quantiser's axes only; every pass over the
rows goes in chunks of rows, so the result does not depend on
how the inputs are held (memory-mapped or not).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed._validation import resolve_num_threads
from crossembed.linking._inputs import ROW_CHUNK as CHUNK
from crossembed.linking.cells import cell_members
from crossembed.linking.csls import csls_hubness, csls_scores
from crossembed.linking.preprocess import unit_rows

__all__ = ["CellIndex", "cell_lists", "mapped_rows", "mutual_best"]

# dimensions the centres are trained and the nearest centres found in (the quantiser only; pairs are
# scored in full): 128 axes find more partners than 64 at a small cost, all dimensions cost 4x that at
# 1M rows and more beyond
_PROJECTED_DIMS = 128
# the centres' training: Lloyd steps and sampled B rows per centre
_LLOYD_ITERATIONS = 6
_SAMPLE_PER_CENTRE = 64
_EMPTY = np.iinfo(np.int64).min


def _float32(X: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=np.float32)


class CellIndex:
    """Cells of B's rows: the centres (``projected``: unit rows on the quantiser's axes), each B
    row's cells (``cells_of_b``, ``(N_B, copies)``, nearest first, ``-1`` padded), the quantiser's
    ``projection`` (None: all dimensions).

    The centres start at evenly spaced rows of B and take ``_LLOYD_ITERATIONS``
    spherical k-means (Lloyd) steps on a fixed random sample of
    ``_SAMPLE_PER_CENTRE`` B rows a centre, in the quantiser's space (the
    sample's top principal axes): a centre moves to the unit mean of the
    sample rows nearest it, so the cells follow the density of B and their
    sizes even out.

    Parameters
    ----------
    B : ndarray, shape (N_B, D)
        Unit rows (float32 or float16).
    exclude_b : ndarray of int
        Rows in no cell (the seeds).
    rows_per_centre : int
        Rows of the larger side per cell centre, ``>= 1``.
    n_rows : int
        Rows of the larger side.
    copies : int
        Most cells a B row sits in, ``>= 1`` (default 1).
    margin : float
        A B row also sits in its next nearest cells (up to ``copies``) whose
        cosine to it, on the quantiser's axes, is at least the nearest's
        minus ``margin`` (default 0.0; ``inf``: always ``copies`` cells).
    random_state : int
        Seed of the training sample (default 0); the index does not depend on the threads.
    num_threads : int, optional
    """

    def __init__(
        self,
        B: np.ndarray,
        exclude_b: np.ndarray,
        *,
        rows_per_centre: int,
        n_rows: int,
        copies: int = 1,
        margin: float = 0.0,
        random_state=0,
        num_threads=None,
    ):
        keep = np.ones(len(B), bool)
        keep[np.asarray(exclude_b, np.int64)] = False
        rows = np.flatnonzero(keep)
        want = max(1, min(len(rows), -(-n_rows // rows_per_centre)))
        start = rows[np.unique(np.linspace(0, len(rows) - 1, want).astype(np.int64))]
        rng = np.random.default_rng(random_state)
        sample = np.sort(rng.choice(rows, size=min(len(rows), _SAMPLE_PER_CENTRE * len(start)), replace=False))
        self.projection = _principal_axes(B, sample, _PROJECTED_DIMS)
        self.projected = self._project(B[start])
        if _LLOYD_ITERATIONS > 0:
            self.projected = _lloyd(self._project_rows(B, sample), self.projected, _LLOYD_ITERATIONS, num_threads)
        sims, cells = self._nearest(B, copies, num_threads)
        cells[sims < sims[:, :1] - margin] = -1  # the nearest cell always: its cosine is the first
        cells[~keep] = -1
        self.cells_of_b = cells

    @property
    def n_cells(self) -> int:
        return len(self.projected)

    def _project(self, X: np.ndarray) -> np.ndarray:
        """Unit rows of ``X`` on the quantiser's axes (float32): a centre must not win by a larger share
        of the top axes (hub cells cost N^2)."""
        Y = _float32(X)
        return unit_rows(Y if self.projection is None else Y @ self.projection)

    def _project_rows(self, X: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """:meth:`_project` of ``X[rows]``, gathered in chunks."""
        return np.concatenate([self._project(X[rows[s : s + CHUNK]]) for s in range(0, len(rows), CHUNK)])

    def nearest(self, X: np.ndarray, r: int, *, num_threads=None) -> np.ndarray:
        """``(N, r)`` int64: each row's ``r`` nearest centres by cosine on the top axes, best first."""
        return self._nearest(X, r, num_threads)[1]

    def _nearest(self, X: np.ndarray, r: int, num_threads) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`nearest` and the cosines (float32), ``(N, r)`` each."""
        r = min(int(r), self.n_cells)
        sims = np.empty((len(X), r), np.float32)
        out = np.empty((len(X), r), np.int64)
        for s in range(0, len(X), CHUNK):
            sims[s : s + CHUNK], out[s : s + CHUNK], _, _ = kernels.topk_rows_and_columns(
                self._project(X[s : s + CHUNK]), self.projected, r, 1, num_threads=num_threads
            )
        return sims, out


def _principal_axes(B: np.ndarray, rows: np.ndarray, dims: int) -> Optional[np.ndarray]:
    """``(D, dims)`` float32: the top principal axes of ``B[rows]`` (uncentred: scores are dot
    products; the Gram matrix summed over chunks in float64); None when ``dims`` is 0 or ``>= D``
    (the quantiser then works in all dimensions)."""
    if dims <= 0 or dims >= B.shape[1]:
        return None
    gram = np.zeros((B.shape[1], B.shape[1]))
    for s in range(0, len(rows), CHUNK):
        X = np.asarray(B[rows[s : s + CHUNK]], np.float64)
        gram += X.T @ X
    _, vecs = np.linalg.eigh(gram)
    return _float32(vecs[:, ::-1][:, :dims])


def _lloyd(X: np.ndarray, centres: np.ndarray, iterations: int, num_threads) -> np.ndarray:
    """Spherical k-means from ``centres`` on the unit rows ``X``: each centre becomes the unit
    mean (float64 sums in row order) of the rows nearest it; a centre nearest to no row stays."""
    for _ in range(iterations):
        cell = np.concatenate(
            [
                kernels.topk_rows_and_columns(X[s : s + CHUNK], centres, 1, 1, num_threads=num_threads)[1][:, 0]
                for s in range(0, len(X), CHUNK)
            ]
        )
        order = np.argsort(cell, kind="stable")
        bounds = np.searchsorted(cell[order], np.arange(len(centres) + 1))
        filled = np.flatnonzero(np.diff(bounds))
        sums = np.zeros(centres.shape)
        sums[filled] = np.add.reduceat(X[order], bounds[filled], axis=0, dtype=np.float64)
        moved = np.linalg.norm(sums, axis=1) > 0
        centres = centres.copy()
        centres[moved] = unit_rows(sums[moved])
    return centres


def mapped_rows(A: np.ndarray, W: np.ndarray, dtype) -> np.ndarray:
    """``unit(A W)`` in ``dtype``, computed in float32 chunks of rows."""
    out = np.empty((len(A), W.shape[1]), dtype)
    for s in range(0, len(A), CHUNK):
        out[s : s + CHUNK] = unit_rows(_float32(A[s : s + CHUNK]) @ W)
    return out


def _keys(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int64 keys ordered like (score descending, row ascending): the score's bits made monotone, high
    word; the row's complement, low word."""
    bits = np.ascontiguousarray(scores, np.float32).view(np.int32).astype(np.int64)
    bits ^= (bits >> 31) & 0x7FFFFFFF
    return np.where(rows >= 0, (bits << 32) | (0xFFFFFFFF - rows.astype(np.int64)), _EMPTY)


def _unkey(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Scores (float32) and rows (-1 for an empty slot) of :func:`_keys`."""
    bits = keys >> 32
    bits ^= (bits >> 31) & 0x7FFFFFFF
    scores = bits.astype(np.int32).view(np.float32)
    rows = 0xFFFFFFFF - (keys & 0xFFFFFFFF)
    empty = keys == _EMPTY
    return np.where(empty, -np.inf, scores).astype(np.float32), np.where(empty, -1, rows)


def _index_dtype(n: int) -> type:
    """int32 for row numbers below 2**31 (halves the lists of a large pass), else int64."""
    return np.int32 if n < 2**31 else np.int64


def _cell_rows(cells: np.ndarray, n_cells: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of each cell in row order, ``rows[bounds[c]:bounds[c + 1]]`` (:func:`cell_members`), and
    the column of ``cells`` each came from (``slots``, int8)."""
    order, bounds = cell_members(cells, n_cells)
    rows, slots = np.divmod(order, cells.shape[1])
    return rows.astype(_index_dtype(len(cells))), bounds, slots.astype(np.int8)


def _scored_before(a: np.ndarray, b: np.ndarray, slot: np.ndarray, probes: np.ndarray, cells_of_b: np.ndarray):
    """Whether the pairs ``(a, b)``, listed in B row ``b``'s cell ``slot``, are scored in an earlier
    cell of ``b`` too (one that ``a`` probes): such a pair counts in that cell only."""
    out = np.zeros(a.shape, bool)
    at = np.nonzero(slot > 0)
    if len(at[0]) == 0:
        return out
    earlier = cells_of_b[b[at]]
    earlier = np.where(np.arange(earlier.shape[1]) < slot[at][:, None], earlier, -2)  # -2: no cell
    out[at] = (probes[a[at]][:, :, None] == earlier[:, None, :]).any(axis=(1, 2))
    return out


def _merge(best: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> None:
    """``best[rows]`` becomes the ``m`` largest of itself and ``keys`` (any order)."""
    both = np.concatenate([best[rows], keys], axis=1)
    best[rows] = np.partition(both, both.shape[1] - best.shape[1], axis=1)[:, -best.shape[1] :]


def _sorted_lists(best: np.ndarray, n_other: int) -> Tuple[np.ndarray, np.ndarray]:
    """Rows (``-1`` padded) and scores (``-inf`` padded) of :func:`_keys` lists, best first."""
    cand = np.empty(best.shape, _index_dtype(n_other))
    dots = np.empty(best.shape, np.float32)
    for s in range(0, len(best), CHUNK):
        dots[s : s + CHUNK], cand[s : s + CHUNK] = _unkey(np.sort(best[s : s + CHUNK], axis=1)[:, ::-1])
    return cand, dots


def _take(block, best_a, best_b, own_b, probes, cells_of_b) -> None:
    """Merge a cell's scored block into the lists (:func:`cell_lists`)."""
    ra, rb, slot, (s_a, i_a, s_b, i_b) = block
    keys_a, keys_b = _keys(s_a, rb[i_a]), _keys(s_b, ra[i_b])
    if slot.any():  # B rows in an earlier cell too: their pairs may be listed there already
        pair_a = np.broadcast_to(ra[:, None], i_a.shape)
        keys_a[_scored_before(pair_a, rb[i_a], slot[i_a], probes, cells_of_b)] = _EMPTY
        pair_b, slot_b = np.broadcast_to(rb[:, None], i_b.shape), np.broadcast_to(slot[:, None], i_b.shape)
        keys_b[_scored_before(ra[i_b], pair_b, slot_b, probes, cells_of_b)] = _EMPTY
    _merge(best_a, ra, keys_a)
    _merge(best_b, rb, keys_b)
    nearest = slot == 0
    own_b[rb[nearest], : s_b.shape[1]] = s_b[nearest]


def cell_lists(
    FA: np.ndarray,
    B: np.ndarray,
    probes: np.ndarray,
    index: CellIndex,
    m: int,
    *,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's ``m`` best rows on the other side among the pairs its cells score, each pair once.

    Parameters
    ----------
    FA : ndarray, shape (N_A, D)
        Mapped A rows (B's space).
    B : ndarray, shape (N_B, D)
    probes : ndarray of int, shape (N_A, r)
        Cells each A row probes (``-1``: none, e.g. the seeds).
    index : CellIndex
    m : int
        Candidates kept per row.
    num_threads : int, optional
        Cells scored at once (one kernel thread each); None: all cores.

    Returns
    -------
    cand_a, dots_a : ndarray, shape (N_A, m)
        B rows (int32 below 2**31 rows, else int64; ``-1`` padded) and their dot products (float32, ``-inf``
        padded), best first, ties to the lower row.
    cand_b, dots_b : ndarray, shape (N_B, m)
        The same for B's rows over the A rows probing their cells.
    own_b : ndarray, shape (N_B, m)
        B rows' dot products with the A rows probing their nearest cell (float32, best first, ``-inf``
        padded): every B row's hubness term from a neighbourhood of one kind (:func:`mutual_best`).
    """
    rows_a, bounds_a, _ = _cell_rows(probes, index.n_cells)
    rows_b, bounds_b, slots_b = _cell_rows(index.cells_of_b, index.n_cells)
    best_a = np.full((len(FA), m), _EMPTY, np.int64)
    best_b = np.full((len(B), m), _EMPTY, np.int64)
    own_b = np.full((len(B), m), -np.inf, np.float32)

    def score(c: int):
        ra, rb = rows_a[bounds_a[c] : bounds_a[c + 1]], rows_b[bounds_b[c] : bounds_b[c + 1]]
        if len(ra) == 0 or len(rb) == 0:
            return None
        return (
            ra,
            rb,
            slots_b[bounds_b[c] : bounds_b[c + 1]],
            kernels.topk_rows_and_columns(_float32(FA[ra]), _float32(B[rb]), m, m, num_threads=1),
        )

    workers = resolve_num_threads(num_threads)
    # the largest cells first, so no thread is left with one at the end (the lists do not depend on the order)
    cost = np.diff(bounds_a).astype(np.float64) * np.diff(bounds_b)
    order = np.argsort(-cost, kind="stable")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start in range(0, index.n_cells, 64 * workers):  # bounded look-ahead: results are consumed in order
            for done in pool.map(score, order[start : start + 64 * workers]):
                if done is None:
                    continue
                _take(done, best_a, best_b, own_b, probes, index.cells_of_b)
    return (*_sorted_lists(best_a, len(B)), *_sorted_lists(best_b, len(FA)), own_b)


def _best(cand, dots, r_own, r_other) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's CSLS-best candidate (-1: none) and its score (float32), ties to the lower row."""
    best = np.full(len(cand), -1, np.int64)
    top = np.full(len(cand), -np.inf, np.float32)
    for s in range(0, len(cand), CHUNK):
        c, d = cand[s : s + CHUNK], dots[s : s + CHUNK]
        csls = csls_scores(d, c, r_own[s : s + CHUNK], r_other)
        csls[c < 0] = -np.inf
        order = np.lexsort((np.where(c < 0, np.iinfo(np.int64).max, c), -csls), axis=1)[:, 0]
        at = np.arange(len(c))
        best[s : s + CHUNK] = np.where(np.isfinite(csls[at, order]), c[at, order], -1)
        top[s : s + CHUNK] = csls[at, order]
    return best, top


def mutual_best(
    cand_a: np.ndarray,
    dots_a: np.ndarray,
    cand_b: np.ndarray,
    dots_b: np.ndarray,
    own_b: Optional[np.ndarray] = None,
    *,
    csls_k: int,
) -> Tuple[np.ndarray, np.ndarray]:
    """Mutual CSLS best pairs ``(P, 2)`` over the lists of :func:`cell_lists` and their scores, best
    first (ties to the lower A row).

    ``CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)``, ``r`` the kernel's hubness term
    over a row's listed values (:func:`~crossembed.linking.csls.csls_hubness`); a B row's over
    ``own_b`` (default ``dots_b``), its values with the A rows probing its nearest cell: a B row in
    two cells lists about twice the A rows, and a hubness term over those would run higher than
    its neighbours' and hide it from its partner. Mutual best pairs are one-to-one by
    construction. :func:`crossembed.kernels.csls_mutual_topk_candidates`
    with ``k=1`` on the same lists and dot products gives the same pairs.
    """
    # the lists are best first: a row's csls_k best listed values are its first csls_k
    own_b = dots_b if own_b is None else own_b
    r_a, r_b = csls_hubness(dots_a[:, :csls_k], csls_k), csls_hubness(own_b[:, :csls_k], csls_k)
    best_a, score_a = _best(cand_a, dots_a, r_a, r_b)
    best_b, _ = _best(cand_b, dots_b, r_b, r_a)
    i = np.flatnonzero(best_a >= 0)
    i = i[best_b[best_a[i]] == i]
    order = np.lexsort((i, -score_a[i]))
    i = i[order]
    return np.stack([i, best_a[i]], axis=1), score_a[i]
