"""The plain numpy/torch/faiss ways to compute what :mod:`crossembed.kernels` computes: the peers `crossembed bench` times.

These are the fast float32 formulations a user would write without
crossembed (BLAS GEMMs, ``argpartition``, ``torch.topk``), not the exact
float64 references of :mod:`crossembed.reference`: ``crossembed bench`` and
``benchmarks/`` time the C++ kernels against them and check that both agree.

- :func:`numpy_probit_docs`, :func:`numpy_probit_topk`: probit top-k (UEC).
- :func:`numpy_signatures`: anchor signatures (GEH).
- :func:`numpy_csls_mutual_topk`: one-to-one CSLS mutual top-k (GEH).
- :func:`numpy_topk_rows_and_columns`, :func:`faiss_topk_rows_and_columns`:
  GEH's per-round candidate lists (both directions' dot-product top-k).
- :func:`numpy_lorentz`, :func:`numpy_lorentz_topk`, :func:`torch_lorentz`,
  :func:`torch_lorentz_topk`: Lorentz distances (UNCHA).
- Peers: :func:`faiss_flat_topk` (exact inner-product top-k, ``IndexFlatIP``:
  cosine top-k on the means is what probit top-k refines),
  :func:`faiss_csls_mutual_topk` (two flat searches plus the merge),
  :func:`torch_probit_topk`, :func:`torch_signatures`. torch and faiss are
  imported only when one of their functions is called.

No input validation: these take what the kernels' own tests already
validated (C-contiguous float32 arrays, ``1 <= k <= N``).
"""

from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np

__all__ = [
    "numpy_cell_candidate_lists",
    "faiss_csls_mutual_topk",
    "faiss_flat_topk",
    "faiss_topk_rows_and_columns",
    "numpy_csls_mutual_topk",
    "numpy_greedy_one_to_one",
    "numpy_lorentz",
    "numpy_lorentz_topk",
    "numpy_probit_docs",
    "numpy_probit_topk",
    "numpy_signatures",
    "numpy_signatures_from_cosines",
    "numpy_topk_rows_and_columns",
    "torch_lorentz",
    "torch_lorentz_topk",
    "torch_probit_topk",
    "torch_signatures",
]


# --------------------------------------------------------------------------- probit top-k
def numpy_probit_docs(mu_c: np.ndarray, v_c: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The doc-side precomputation of :func:`numpy_probit_topk` (index time, like ``ProbitDocs``).

    Returns ``(mu_c^T, [v_c | mu_c^2 + v_c]^T)``, both C-contiguous, so that
    ``sig2_s = [mu_q^2 | v_q] @ [v_c | mu_c^2 + v_c]^T`` is one GEMM
    (3D multiply-adds per pair with the mean GEMM).
    """
    return np.ascontiguousarray(mu_c.T), np.ascontiguousarray(np.hstack([v_c, mu_c**2 + v_c]).T)


def numpy_probit_topk(
    mu_q: np.ndarray, v_q: np.ndarray, docs: Tuple[np.ndarray, np.ndarray], k: int, *, block: int = 128
) -> Tuple[np.ndarray, np.ndarray]:
    """Probit top-``k`` as two float32 GEMMs per query block, then argpartition + sort.

    Parameters
    ----------
    mu_q, v_q : ndarray, shape (Q, D), float32
        Query means and diagonal variances.
    docs : tuple of ndarray
        :func:`numpy_probit_docs` of the candidates.
    k : int
        Results per query.
    block : int
        Query rows per block; bounds the (block, N) score matrices
        (~50 MB each at N = 100k with the default).

    Returns
    -------
    scores : ndarray, shape (Q, k), float32, best first
    indices : ndarray, shape (Q, k), int64
    """
    mean_t, var_t = docs
    scores = np.empty((mu_q.shape[0], k), np.float32)
    index = np.empty((mu_q.shape[0], k), np.int64)
    for s in range(0, mu_q.shape[0], block):
        q, vq = mu_q[s : s + block], v_q[s : s + block]
        mu_s = q @ mean_t
        sig2 = np.hstack([q**2, vq]) @ var_t
        score = mu_s / np.sqrt(np.float32(1) + np.float32(math.pi / 8) * sig2)
        part = np.argpartition(-score, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(score, part, axis=1)
        order = np.argsort(-top, axis=1, kind="stable")
        index[s : s + block] = np.take_along_axis(part, order, axis=1)
        scores[s : s + block] = np.take_along_axis(top, order, axis=1)
    return scores, index


def torch_probit_topk(mu_q, v_q, docs, k: int, *, block: int = 128):
    """:func:`numpy_probit_topk` in torch (CPU tensors): two matmuls per query block, then ``torch.topk``.

    ``docs`` is :func:`numpy_probit_docs` of the candidates as torch tensors.
    """
    import torch

    mean_t, var_t = docs
    scores, index = [], []
    with torch.no_grad():
        for s in range(0, mu_q.shape[0], block):
            q, vq = mu_q[s : s + block], v_q[s : s + block]
            mu_s = q @ mean_t
            sig2 = torch.cat([q * q, vq], dim=1) @ var_t
            top = torch.topk(mu_s / torch.sqrt(1 + (math.pi / 8) * sig2), k, dim=1)
            scores.append(top.values)
            index.append(top.indices)
    return torch.cat(scores), torch.cat(index)


def faiss_flat_topk(index, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-``k`` with a built ``faiss.IndexFlatIP`` (unit rows: cosine)."""
    return index.search(queries, k)


# --------------------------------------------------------------------------- anchor signatures
def numpy_signatures_from_cosines(C: np.ndarray, cols: np.ndarray, sigma: float) -> np.ndarray:
    """Signatures read off given cosines: gather ``C[:, cols]``, ``exp(-(d - min d) / sigma)``, rows L2-normalised.

    Returns
    -------
    ndarray, shape (N, len(cols)), float32
    """
    return _numpy_kernel_rows(np.float32(1) - C[:, cols], sigma)


def numpy_signatures(X: np.ndarray, anchors: np.ndarray, sigma: float) -> np.ndarray:
    """Anchor signatures: cosine GEMM, ``exp(-(d - min d) / sigma)``, rows L2-normalised.

    Returns
    -------
    ndarray, shape (N, A), float32
    """
    xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), np.float32(1e-30))
    an = anchors / np.maximum(np.linalg.norm(anchors, axis=1, keepdims=True), np.float32(1e-30))
    return _numpy_kernel_rows(np.float32(1) - xn @ an.T, sigma)


def _numpy_kernel_rows(dist: np.ndarray, sigma: float) -> np.ndarray:
    """float32 ``exp(-(d - min_row d) / sigma)``, rows L2-normalised in place."""
    kern = np.exp(-(dist - dist.min(axis=1, keepdims=True)) / np.float32(sigma))
    kern /= np.linalg.norm(kern, axis=1, keepdims=True)
    return kern


def torch_signatures(X, anchors, sigma: float):
    """:func:`numpy_signatures` in torch (CPU tensors)."""
    import torch

    with torch.no_grad():
        xn = torch.nn.functional.normalize(X, dim=1)
        an = torch.nn.functional.normalize(anchors, dim=1)
        dist = 1 - xn @ an.T
        kern = torch.exp(-(dist - dist.min(dim=1, keepdim=True).values) / sigma)
        return torch.nn.functional.normalize(kern, dim=1)


# --------------------------------------------------------------------------- CSLS mutual top-k
def _top_mean(rows_of: Callable[[int, int], np.ndarray], n_rows: int, m: int, block: int) -> np.ndarray:
    return np.concatenate(
        [-np.partition(-rows_of(s, s + block), m - 1, axis=1)[:, :m].mean(axis=1) for s in range(0, n_rows, block)]
    )


def _top_k(rows_of: Callable[[int, int], np.ndarray], n_rows: int, k: int, block: int) -> np.ndarray:
    return np.vstack([np.argpartition(-rows_of(s, s + block), k - 1, axis=1)[:, :k] for s in range(0, n_rows, block)])


def _greedy_one_to_one(i: np.ndarray, j: np.ndarray, score: np.ndarray, na: int, nb: int):
    """Keep pairs by descending score (ties: lower i, then lower j) while both rows are free."""
    order = np.lexsort((j, i, -score))
    used_a, used_b, keep = np.zeros(na, bool), np.zeros(nb, bool), []
    for p in order:
        if not (used_a[i[p]] or used_b[j[p]]):
            used_a[i[p]] = used_b[j[p]] = True
            keep.append(p)
    return np.stack([i[keep], j[keep]], axis=1), score[keep]


def numpy_greedy_one_to_one(pairs: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Greedy one-to-one selection as a numpy user writes it: lexsort, then one pass over the order."""
    pairs = np.asarray(pairs, dtype=np.int64)
    i, j = pairs[:, 0], pairs[:, 1]
    chosen, _ = _greedy_one_to_one(i, j, np.asarray(scores, dtype=np.float64), int(i.max()) + 1, int(j.max()) + 1)
    return chosen


def numpy_csls_mutual_topk(
    SA: np.ndarray, SB: np.ndarray, k: int, csls_k: int, *, block: int = 2048
) -> Tuple[np.ndarray, np.ndarray]:
    """One-to-one CSLS mutual top-``k`` pairs from the full similarity matrix.

    ``S = SA @ SB^T`` once (N_A x N_B float32: 1.6 GB at 20k per side), then,
    in row blocks of ``block`` to bound the index arrays, the ``csls_k``-mean
    hubness terms, row and column CSLS top-``k`` by argpartition, the mutual
    test and the greedy one-to-one pass by descending CSLS (ties: lower i,
    then lower j).

    Returns
    -------
    pairs : ndarray, shape (P, 2), int64, by descending score
    scores : ndarray, shape (P,), float32 (CSLS)
    """
    sim = SA @ SB.T
    na, nb = sim.shape
    r_a = _top_mean(lambda s, e: sim[s:e], na, min(csls_k, nb), block)
    r_b = _top_mean(lambda s, e: sim[:, s:e].T, nb, min(csls_k, na), block)
    csls_rows = lambda s, e: 2 * sim[s:e] - r_a[s:e, None] - r_b[None, :]  # noqa: E731
    csls_cols = lambda s, e: (2 * sim[:, s:e] - r_a[:, None] - r_b[None, s:e]).T  # noqa: E731
    row_top, col_top = _top_k(csls_rows, na, min(k, nb), block), _top_k(csls_cols, nb, min(k, na), block)
    i = np.repeat(np.arange(na), row_top.shape[1])
    j = row_top.ravel()
    mutual = (col_top[j] == i[:, None]).any(axis=1)
    i, j = i[mutual], j[mutual]
    score = 2 * sim[i, j] - r_a[i] - r_b[j]
    return _greedy_one_to_one(i, j, score, na, nb)


def numpy_csls_mutual_topk_candidates(
    SA: np.ndarray, SB: np.ndarray, cand_a: np.ndarray, cand_b: np.ndarray, k: int, csls_k: int, *, block: int = 4096
) -> Tuple[np.ndarray, np.ndarray]:
    """Candidate-restricted CSLS mutual top-``k`` (all candidates valid, no padding).

    Gathered similarities ``einsum('ia,ima->im')`` in row blocks, hubness
    terms by partition, per-side top-``k`` by argpartition, the mutual test
    through pair codes, then the same greedy one-to-one pass.
    """

    def gathered(X, Y, cand):
        out = np.empty(cand.shape, np.float32)
        for s in range(0, X.shape[0], block):
            out[s : s + block] = np.einsum("ia,ima->im", X[s : s + block], Y[cand[s : s + block]])
        return out

    na, nb = SA.shape[0], SB.shape[0]
    sa, sb = gathered(SA, SB, cand_a), gathered(SB, SA, cand_b)
    r_a = -np.partition(-sa, min(csls_k, sa.shape[1]) - 1, axis=1)[:, :csls_k].mean(axis=1)
    r_b = -np.partition(-sb, min(csls_k, sb.shape[1]) - 1, axis=1)[:, :csls_k].mean(axis=1)
    ca = 2 * sa - r_a[:, None] - r_b[cand_a]
    cb = 2 * sb - r_b[:, None] - r_a[cand_b]
    ta = np.take_along_axis(cand_a, np.argpartition(-ca, k - 1, axis=1)[:, :k], axis=1)
    tb = np.take_along_axis(cand_b, np.argpartition(-cb, k - 1, axis=1)[:, :k], axis=1)
    i = np.repeat(np.arange(na), k)
    j = ta.ravel()
    back = np.repeat(np.arange(nb), k) + nb * tb.ravel()  # codes j + nb * i proposed by the B side
    mutual = np.isin(j + nb * i, back)
    i, j = i[mutual], j[mutual]
    score = 2 * np.einsum("ia,ia->i", SA[i], SB[j]) - r_a[i] - r_b[j]
    return _greedy_one_to_one(i, j, score, na, nb)


def faiss_csls_mutual_topk(SA: np.ndarray, SB: np.ndarray, k: int, csls_k: int) -> Tuple[np.ndarray, np.ndarray]:
    """CSLS mutual top-``k`` the faiss way: two exact flat searches (``csls_k`` neighbours each way), then the merge.

    The hubness terms and each side's CSLS top-``k`` come from the
    ``csls_k`` nearest neighbours by similarity (the usual practice:
    a CSLS winner outside them is rare), merged by
    :func:`numpy_csls_mutual_topk_candidates`.
    """
    return numpy_csls_mutual_topk_candidates(SA, SB, _faiss_knn(SB, SA, csls_k), _faiss_knn(SA, SB, csls_k), k, csls_k)


def _faiss_knn(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Each query's ``k`` best rows of ``base`` by inner product: one exact flat search (``IndexFlatIP``)."""
    import faiss

    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return index.search(queries, k)[1]


def numpy_topk_rows_and_columns(SA: np.ndarray, SB: np.ndarray, k: int, *, block: int = 2048):
    """Each side's ``k`` best rows of the other by dot product: row blocks of ``SA @ SB.T`` and of ``SB @ SA.T``.

    Returns the unordered index lists ``(row_idx, col_idx)`` (argpartition;
    the kernel also sorts them, which this skips in its favour).
    """
    row_idx = _top_k(lambda s, e: SA[s:e] @ SB.T, len(SA), k, block)
    col_idx = _top_k(lambda s, e: SB[s:e] @ SA.T, len(SB), k, block)
    return row_idx, col_idx


def faiss_topk_rows_and_columns(SA: np.ndarray, SB: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The same lists the faiss way: two exact flat searches (``IndexFlatIP``), one each way."""
    return _faiss_knn(SB, SA, k), _faiss_knn(SA, SB, k)


def numpy_cell_candidate_lists(FA: np.ndarray, FB: np.ndarray, cells_a: np.ndarray, cells_b: np.ndarray, m: int):
    """GEH's anchor-cell lists the numpy way: per cell one GEMM block and an argpartition each way.

    Each row's ``m`` best rows among those sharing one of its cells, as
    unordered sets per row (``-1`` padded; duplicates across cells dropped
    by a sort per row): the numpy form of what
    :func:`crossembed.linking.cells.cell_candidate_lists` computes with the fused C++ top-k.
    """
    n_cells = int(max(cells_a.max(), cells_b.max())) + 1
    lists = []
    for F, G, own, other in ((FA, FB, cells_a, cells_b), (FB, FA, cells_b, cells_a)):
        r = own.shape[1]
        best = np.full((len(F), r, m), -1, np.int64)
        score = np.full((len(F), r, m), -np.inf, np.float32)
        for c in range(n_cells):
            rows, slots = np.nonzero(own == c)
            cols = np.flatnonzero((other == c).any(axis=1))
            if len(rows) == 0 or len(cols) == 0:
                continue
            S = F[rows] @ G[cols].T
            kk = min(m, len(cols))
            top = (
                np.argpartition(-S, kk - 1, axis=1)[:, :kk]
                if kk < len(cols)
                else np.broadcast_to(np.arange(kk), (len(rows), kk))
            )
            best[rows, slots, :kk] = cols[top]
            score[rows, slots, :kk] = np.take_along_axis(S, top, axis=1)
        flat, flat_score = best.reshape(len(F), -1), score.reshape(len(F), -1)
        order = np.argsort(-flat_score, axis=1, kind="stable")
        flat = np.take_along_axis(flat, order, axis=1)
        out = np.full((len(F), m), -1, np.int64)
        for i, row in enumerate(flat):  # first occurrences, best first
            uniq, first = np.unique(row[row >= 0], return_index=True)
            keep = uniq[np.argsort(first)][:m]
            out[i, : len(keep)] = keep
        lists.append(out)
    return lists[0], lists[1]


# --------------------------------------------------------------------------- Lorentz distances
def numpy_lorentz(X: np.ndarray, Y: np.ndarray, c: float = 1.0) -> np.ndarray:
    """Lorentz distances by the textbook acosh form, one GEMM.

    ``d = acosh(-c <x, y>_L) / sqrt(c)`` with ``<x, y>_L = X Y^T - x_t y_t^T``
    and ``x_t = sqrt(1/c + |x|^2)``. Loses all precision for nearby points
    (the kernel's asinh form keeps it); computes in the dtype of ``X``.

    Returns
    -------
    ndarray, shape (NX, NY)
    """
    dtype = X.dtype.type
    xt = np.sqrt(dtype(1 / c) + (X * X).sum(1))
    yt = np.sqrt(dtype(1 / c) + (Y * Y).sum(1))
    z = dtype(-c) * (X @ Y.T - np.outer(xt, yt))
    return np.arccosh(np.maximum(z, dtype(1))) / dtype(np.sqrt(c))


def numpy_lorentz_topk(X: np.ndarray, Y: np.ndarray, k: int, c: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest rows of ``Y`` per row of ``X``: :func:`numpy_lorentz`, argpartition, sort.

    Returns
    -------
    distances : ndarray, shape (NX, k), smallest first
    indices : ndarray, shape (NX, k), int64
    """
    dist = numpy_lorentz(X, Y, c)
    part = np.argpartition(dist, k - 1, axis=1)[:, :k]
    top = np.take_along_axis(dist, part, axis=1)
    order = np.argsort(top, axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(part, order, axis=1)


def torch_lorentz(X, Y, c: float = 1.0):
    """:func:`numpy_lorentz` in torch (``X``, ``Y`` are tensors; call under ``torch.no_grad()`` to time it)."""
    import torch

    xt = torch.sqrt(1 / c + (X * X).sum(1))
    yt = torch.sqrt(1 / c + (Y * Y).sum(1))
    z = -c * (X @ Y.T - torch.outer(xt, yt))
    return torch.acosh(torch.clamp_min(z, 1.0)) / c**0.5


def torch_lorentz_topk(X, Y, k: int, c: float = 1.0):
    """:func:`torch_lorentz` then ``torch.topk`` of the smallest (no autograd).

    Returns
    -------
    torch.return_types.topk
        ``(values, indices)`` tensors of shape (NX, k), smallest first.
    """
    import torch

    with torch.no_grad():
        return torch.topk(torch_lorentz(X, Y, c), k, dim=1, largest=False, sorted=True)
