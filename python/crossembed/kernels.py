"""The C++ kernels behind one validated, documented Python layer.

Every function checks its inputs at this boundary (shape, dtype, finiteness,
non-negative variances, ``k``) and raises ``ValueError``/``TypeError`` naming
the argument, then hands C-contiguous arrays to :mod:`crossembed._core`, which
releases the GIL and runs multi-threaded (OpenMP, or std::thread where OpenMP
is missing). Results are deterministic for a fixed input and independent of
``num_threads``; ties go to the lower index.

In a process forked after ``import crossembed`` (the ``"fork"`` start
method of :mod:`multiprocessing`, gunicorn ``--preload``, torch DataLoader
workers) every kernel runs on one thread, whatever ``num_threads`` asks, with
the same results: GNU OpenMP's thread pool does not survive ``fork()``, and
the pool may be the parent's or another library's (torch shares the OpenMP
runtime). :func:`single_threaded_after_fork` tells. For multi-threaded
kernels in worker processes, use the ``"spawn"`` or ``"forkserver"`` start
method (without crossembed in ``set_forkserver_preload``).

Plain float64 numpy versions of every kernel live in :mod:`crossembed.reference`.
"""

from __future__ import annotations

import numbers
from typing import Optional, Tuple

import numpy as np

from crossembed._native import core
from crossembed._validation import (
    INT64_MAX,
    as_array,
    as_int_matrix,
    as_matrix,
    check_int,
    check_k,
    check_num_threads,
    check_positive,
)

__all__ = [
    "AnchorCosines",
    "CandidateLists",
    "ProbitDocs",
    "QuantizedDocs",
    "VoteTable",
    "anchor_signatures",
    "candidate_dots",
    "csls_mutual_topk",
    "csls_mutual_topk_candidates",
    "csls_mutual_topk_lists",
    "greedy_one_to_one",
    "lorentz_pairwise",
    "lorentz_topk",
    "median_anchor_distance",
    "otsu_threshold",
    "probit_scores",
    "probit_topk",
    "signatures_from_cosines",
    "simd_level",
    "single_threaded_after_fork",
    "topk_rows_and_columns",
]

# float32 products of values above ~1e18 overflow inside a D-long dot product;
# rather than return inf/NaN scores we refuse such inputs with a clear message.
_FLOAT32_SAFE = 1e17
# Largest first/second moment the probit kernel accumulates in float32 (3.4e38 is inf).
_FLOAT32_MOMENT_LIMIT = 1e36
# Largest finite float16: the bound on every value ProbitDocs(storage="float16") stores.
_FLOAT16_MAX = 65504.0
# ProbitDocs storage -> the C++ class holding the documents.
_PROBIT_STORAGE = {"float32": "ProbitDocs", "float16": "ProbitDocsF16"}
# otsu_threshold: the most bins (8 bytes each in C++), and the inputs so small that bin widths
# would be subnormal (they are scaled by a power of two into the normal range first).
_OTSU_MAX_BINS = 2**24
_OTSU_TINY, _OTSU_SCALE = 2.0**-900, 2.0**1000


def simd_level() -> str:
    """The instruction set the kernels picked at run time: ``avx512``, ``avx2`` or ``generic`` on x86-64, ``neon`` or
    ``generic`` on AArch64 (``CROSSEMBED_SIMD=generic`` selects ``generic``)."""
    return core().simd_level()


def single_threaded_after_fork() -> bool:
    """Whether kernels run on one thread here: this process was forked from one that had imported crossembed.

    A child of such a child is single-threaded too (see the module docstring).
    """
    return bool(core().single_threaded_after_fork())


def _check_magnitude(
    arr: np.ndarray,
    name: str,
    limit: float = _FLOAT32_SAFE,
    why: str = "float32 scoring would overflow (rescale the embeddings)",
) -> None:
    if arr.size and float(np.abs(arr).max()) > limit:
        raise ValueError(f"{name} has entries above {limit:g} in magnitude; {why}")


# --------------------------------------------------------------------------- probit similarity
def _probit_docs(mu_c, v_c) -> Tuple[np.ndarray, np.ndarray]:
    """Validated candidate means and variances: the document checks of every probit entry point.

    Shape, dtype, finiteness, non-empty, non-negative variances and the float32
    magnitude limit; the moment limit depends on the queries too and is checked
    per query batch (``ProbitDocs._queries``).
    """
    mu_c = as_matrix(mu_c, "mu_c")
    v_c = as_matrix(v_c, "v_c", nonnegative=True)
    if v_c.shape != mu_c.shape:
        raise ValueError(f"v_c has shape {v_c.shape} but mu_c has shape {mu_c.shape}")
    _check_magnitude(mu_c, "mu_c")
    _check_magnitude(v_c, "v_c")
    return mu_c, v_c


class ProbitDocs:
    """Candidate Gaussians prepared once for repeated probit scoring.

    Stores the doc-side block ``[mu_c | v_c | mu_c**2 + v_c]`` and per-doc
    bounds so :meth:`top_k` can score any number of query batches without
    redoing that work (index time vs query time).

    Parameters
    ----------
    mu_c : array_like, shape (N, D)
        Candidate means.
    v_c : array_like, shape (N, D)
        Candidate diagonal variances (>= 0).
    storage : {"float32", "float16"}
        How the documents are held: ``"float32"`` (``12 D`` bytes a document)
        or IEEE ``"float16"`` (``6 D`` bytes; see :attr:`nbytes`). float16
        rounds each stored value once, here, to nearest (ties to even), after
        the usual conversion of the inputs to float32: ``mu_h = fp16(mu_c)``,
        ``v_h = fp16(v_c)`` and the second moment ``s_h = fp16(mu_h**2 + v_h)``
        (of the rounded values, rounded once). Scoring widens them to float32
        exactly and accumulates in float32: a float16 document scores exactly
        as the float32 kernel scores float32 copies of ``(mu_h, v_h, s_h)``, so
        ``sig2_s = <mu_q**2, v_h> + <v_q, s_h>``. ``top_k``, ``top_k`` with
        ``candidates`` and ``scores`` agree bit for bit, independently of
        ``num_threads``, and the pruning bounds come from the stored values (it
        stays exact). Every stored value must be finite in float16:
        ``|mu_c| <= 65504``, ``v_c <= 65504`` and ``mu_h**2 + v_h <= 65504``
        (so ``|mu_c| < 256``), else ``ValueError``. Precision is relative
        (11 significant bits, a relative error up to ``2**-11``) down to
        ``2**-14 ~ 6.1e-5``; smaller values (tiny variances) become subnormal
        halves with fewer significant bits, and below ``2**-25 ~ 3e-8`` they
        are stored as 0. Top-10 recall against float32 on unit means with
        Kronecker-like variances: see ``benchmarks/recall_probit_float16.py``.

    Documents without variance (every ``v_c`` 0, as a deterministic embedder
    gives) keep only the mean panels (``4 D`` bytes a document in float32,
    ``2 D`` in float16), and a query without variance scores ``mu_s`` exactly:
    its top-k is an inner-product top-k. A query with variance against them
    gets the same bits as against stored zero variances.

    Attributes
    ----------
    n, dim : int
    storage : str
    nbytes : int
        Bytes the prepared documents hold (mean panels, stacked variance rows
        and three float64 bounds per document).
    """

    def __init__(self, mu_c, v_c, *, storage: str = "float32"):
        if not isinstance(storage, str) or storage not in _PROBIT_STORAGE:
            raise ValueError(f"storage must be 'float32' or 'float16', got {storage!r}")
        # Conversion only: the packing pass reads each value once and reports what the checks need
        # (a separate numpy pass per check cost about as much as the packing itself).
        mu_c = as_matrix(mu_c, "mu_c", finite=False)
        v_c = as_matrix(v_c, "v_c", finite=False)
        if v_c.shape != mu_c.shape:
            raise ValueError(f"v_c has shape {v_c.shape} but mu_c has shape {mu_c.shape}")
        handle = getattr(core(), _PROBIT_STORAGE[storage])(mu_c, v_c)
        finite, min_v, max_abs_mu, max_v = handle.input_stats
        if not finite:
            _probit_docs(mu_c, v_c)  # raises, naming the argument
        if min_v < 0:
            raise ValueError("v_c must be non-negative (variances)")
        for name, top in (("mu_c", max_abs_mu), ("v_c", max_v)):
            if top > _FLOAT32_SAFE:
                raise ValueError(
                    f"{name} has entries above {_FLOAT32_SAFE:g} in magnitude; "
                    "float32 scoring would overflow (rescale the embeddings)"
                )
            if storage == "float16" and top > _FLOAT16_MAX:
                raise ValueError(
                    f"{name} has entries above {_FLOAT16_MAX:g} in magnitude; "
                    "beyond float16's range: use storage='float32'"
                )
        if storage == "float16" and handle.max_second_moment > _FLOAT16_MAX:
            raise ValueError(
                f"mu_c**2 + v_c reaches {handle.max_second_moment:.6g}, beyond float16's range "
                f"({_FLOAT16_MAX:g}): use storage='float32' (or rescale the embeddings)"
            )
        self._handle = handle
        self.storage = storage
        self.n, self.dim = mu_c.shape
        # The query checks bound the moments by the stored values (rounding can raise a value by 2**-11).
        self._max_mu = float(max_abs_mu)
        self._max_v = float(max_v)
        if storage == "float16":
            self._max_mu *= 1.0 + 2.0**-11
            self._max_v *= 1.0 + 2.0**-11

    @property
    def nbytes(self) -> int:
        """Bytes held by the prepared documents (about ``12 D`` a document in float32, ``6 D`` in float16;
        a third of that without variances)."""
        return int(self._handle.nbytes)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        extra = "" if self.storage == "float32" else f", storage={self.storage!r}"
        return f"ProbitDocs(n={self.n}, dim={self.dim}{extra})"

    def _queries(self, mu_q, v_q) -> Tuple[np.ndarray, np.ndarray]:
        mu_q = as_matrix(mu_q, "mu_q", allow_empty=True)
        v_q = as_matrix(v_q, "v_q", nonnegative=True, allow_empty=True)
        if mu_q.shape != v_q.shape:
            raise ValueError(f"v_q has shape {v_q.shape} but mu_q has shape {mu_q.shape}")
        if mu_q.shape[1] != self.dim:
            raise ValueError(f"mu_q has dimension {mu_q.shape[1]} but the candidates have {self.dim}")
        _check_magnitude(mu_q, "mu_q")
        _check_magnitude(v_q, "v_q")
        if mu_q.size:
            # Largest possible |mu_s| and sig2_s, in float64: float32 accumulation
            # must not overflow (inf/NaN scores would be silently wrong).
            mq, vq = float(np.abs(mu_q).max()), float(v_q.max())
            worst = self.dim * max(mq * self._max_mu, mq * mq * self._max_v + self._max_mu**2 * vq + vq * self._max_v)
            if worst > _FLOAT32_MOMENT_LIMIT:
                raise ValueError(
                    "mu_q/v_q and the candidates are too large for float32 probit scoring "
                    f"(moments up to {worst:.1e}); rescale the embeddings"
                )
        return mu_q, v_q

    def top_k(self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None):
        """Best ``k`` candidates per query by probit score (see :func:`probit_topk`)."""
        mu_q, v_q = self._queries(mu_q, v_q)
        nt = check_num_threads(num_threads)
        if candidates is None:
            k = check_k(k, self.n)
            return self._handle.topk(mu_q, v_q, k, nt)
        cand = as_int_matrix(candidates, "candidates", low=-1, high=self.n, copy=True)
        if cand.shape[0] != mu_q.shape[0]:
            raise ValueError(f"candidates has {cand.shape[0]} rows but there are {mu_q.shape[0]} queries")
        k = check_k(k, cand.shape[1])
        if cand.size:
            srt = np.sort(cand, axis=1)
            if ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any():
                raise ValueError("candidates has a repeated index within a row")
        return self._handle.rerank(mu_q, v_q, cand, k, nt)

    def scores(self, mu_q, v_q, *, return_moments: bool = False, num_threads: Optional[int] = None):
        """Dense (Q, N) probit scores (see :func:`probit_scores`)."""
        mu_q, v_q = self._queries(mu_q, v_q)
        scores, mu_s, sig2 = self._handle.scores(mu_q, v_q, check_num_threads(num_threads))
        return (scores, mu_s, sig2) if return_moments else scores


def probit_scores(mu_q, v_q, mu_c, v_c, *, return_moments: bool = False, num_threads: Optional[int] = None):
    """Probit similarity of every query Gaussian with every candidate Gaussian.

    ``score = mu_s / sqrt(1 + pi/8 * sig2_s)`` with ``mu_s = <mu_q, mu_c>`` and
    ``sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>``.

    Parameters
    ----------
    mu_q, v_q : array_like, shape (Q, D)
        Query means and diagonal variances.
    mu_c, v_c : array_like, shape (N, D)
        Candidate means and diagonal variances.
    return_moments : bool
        Also return ``mu_s`` and ``sig2_s``.
    num_threads : int, optional
        Threads to use (default: all cores).

    Returns
    -------
    scores : ndarray, shape (Q, N), float32
    mu_s, sig2_s : ndarray, shape (Q, N), float32
        Only with ``return_moments=True``.

    Examples
    --------
    >>> import numpy as np, crossembed
    >>> mu = np.eye(2, dtype=np.float32); v = np.zeros_like(mu)
    >>> crossembed.probit_scores(mu, v, mu, v)
    array([[1., 0.],
           [0., 1.]], dtype=float32)
    """
    return ProbitDocs(mu_c, v_c).scores(mu_q, v_q, return_moments=return_moments, num_threads=num_threads)


def probit_topk(mu_q, v_q, mu_c, v_c, k: int, *, candidates=None, num_threads: Optional[int] = None):
    """Top-``k`` candidates per query by probit similarity, fused and tiled.

    Never materialises the (Q, N) score matrix: candidate tiles are scored
    and folded into per-query heaps; candidates whose score bound cannot beat
    the current k-th best skip the variance term. With plain arrays the
    documents are prepared on every call; to search the same documents
    repeatedly, build a :class:`ProbitDocs` once and pass it as ``mu_c`` (with
    ``v_c=None``), or call :meth:`ProbitDocs.top_k`.

    Parameters
    ----------
    mu_q, v_q : array_like, shape (Q, D)
    mu_c, v_c : array_like, shape (N, D), or ``ProbitDocs`` and ``None``
    k : int
        Results per query, ``1 <= k <= N`` (``<= M`` with ``candidates``).
    candidates : array_like of int, shape (Q, M), optional
        Rerank only these candidate rows per query (the ANN path); ``-1``
        marks padding. Rows with fewer than ``k`` valid candidates are padded
        with index ``-1`` and score ``-inf``.
    num_threads : int, optional

    Returns
    -------
    scores : ndarray, shape (Q, k), float32, best first
    indices : ndarray, shape (Q, k), int64
    """
    if isinstance(mu_c, ProbitDocs):
        if v_c is not None:
            raise ValueError("v_c must be None when mu_c is a ProbitDocs")
        docs = mu_c
    else:
        docs = ProbitDocs(mu_c, v_c)
    return docs.top_k(mu_q, v_q, k, candidates=candidates, num_threads=num_threads)


# --------------------------------------------------------------------------- quantized inner-product top-k
_QUANTIZED_CODES = ("int8", "bf16")


class QuantizedDocs:
    """Documents as int8 or bfloat16 codes for a fast first pass, rescored exactly on their float32 means.

    :meth:`top_k` scores every document on codes, keeps the ``candidates``
    best per query, and rescores those with the float32 means: the returned
    scores are the float32 inner products (the bits of
    ``ProbitDocs(means, zeros).top_k`` with zero query variances), and the
    ids are the float32 top-k's unless a true top-k document fell outside the
    candidate list (recall@10 on clustered means: benchmarks/bench_quantized.py).

    Parameters
    ----------
    means : array_like, shape (N, D), float32
        The documents. Held by reference, not copied, and read only when
        rescoring: an ``np.memmap`` keeps them on disk, with the codes
        (``D + 4`` bytes a document for int8, ``2 D`` for bf16) in memory.
        Do not modify them while the object is in use.
    codes : {"int8", "bf16"}
        ``"int8"``: each row (document or query) scaled by its own
        ``max|x| / 127`` and rounded, so a query-document product is one
        integer dot times two scales (AVX-512 VNNI where the CPU has it).
        ``"bf16"``: each value rounded to bfloat16 (AVX-512 BF16 where present).
    num_threads : int, optional
        Threads for the quantization (default: all cores).

    Attributes
    ----------
    n, dim : int
    codes : str
    nbytes : int
        Bytes of the codes and scales (the means are not counted: they are the caller's).
    """

    def __init__(self, means, *, codes: str = "int8", num_threads: Optional[int] = None):
        if not isinstance(codes, str) or codes not in _QUANTIZED_CODES:
            raise ValueError(f"codes must be 'int8' or 'bf16', got {codes!r}")
        means = as_matrix(means, "means")
        _check_magnitude(means, "means")
        self._max = float(np.abs(means).max())
        self._handle = core().QuantizedDocs(means, codes, check_num_threads(num_threads))
        self.codes = codes
        self.n, self.dim = means.shape

    @property
    def nbytes(self) -> int:
        """Bytes held by the codes and their scales."""
        return int(self._handle.nbytes)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"QuantizedDocs(n={self.n}, dim={self.dim}, codes={self.codes!r})"

    def _queries(self, queries, m: int) -> Tuple[np.ndarray, int]:
        queries = as_matrix(queries, "queries", allow_empty=True)
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries has dimension {queries.shape[1]} but the documents have {self.dim}")
        _check_magnitude(queries, "queries")
        if queries.size and self.dim * float(np.abs(queries).max()) * self._max > _FLOAT32_MOMENT_LIMIT:
            raise ValueError("queries and documents are too large for float32 inner products; rescale them")
        return queries, check_k(m, self.n, "candidates")

    def top_k(self, queries, k: int, *, candidates: Optional[int] = None, num_threads: Optional[int] = None):
        """Best ``k`` documents per query by exact float32 inner product, among the first pass's candidates.

        Parameters
        ----------
        queries : array_like, shape (Q, D)
        k : int
            Results per query, ``1 <= k <= N``.
        candidates : int, optional
            First-pass candidates per query, ``k <= candidates <= N``; default
            ``min(N, max(4 k, k + 32))``. ``candidates = N`` gives the float32
            top-k exactly.
        num_threads : int, optional

        Returns
        -------
        scores : ndarray, shape (Q, k), float32, best first (ties to the lower index)
        indices : ndarray, shape (Q, k), int64
        """
        k = check_k(k, self.n)
        if candidates is None:
            candidates = min(self.n, max(4 * k, k + 32))
        elif check_int(candidates, "candidates") < k:
            raise ValueError(f"candidates must be >= k ({k}), got {candidates}")
        queries, m = self._queries(queries, candidates)
        return self._handle.topk(queries, k, m, check_num_threads(num_threads))

    def candidates(self, queries, m: int, *, num_threads: Optional[int] = None):
        """The first pass alone: the ``m`` best documents per query by code score (for a rescoring of
        one's own, e.g. :meth:`ProbitDocs.top_k` with ``candidates=``).

        Returns
        -------
        approx : ndarray, shape (Q, m), float32, the code scores, best first
        indices : ndarray, shape (Q, m), int64
        """
        queries, m = self._queries(queries, m)
        return self._handle.candidates(queries, m, check_num_threads(num_threads))


# --------------------------------------------------------------------------- anchor signatures
def median_anchor_distance(anchors, *, num_threads: Optional[int] = None) -> float:
    """Median cosine distance ``1 - cos`` over all pairs of distinct anchors.

    This is the default kernel width of :func:`anchor_signatures`. With one
    anchor, or when every pair coincides, it falls back to 1.0 (the width is
    then irrelevant: a one-column signature normalises to 1). The result does
    not depend on ``num_threads``.
    """
    anchors = as_matrix(anchors, "anchors")
    return float(core().median_anchor_distance(anchors, check_num_threads(num_threads)))


def anchor_signatures(
    X, anchors, *, sigma: Optional[float] = None, metric: str = "cosine", num_threads: Optional[int] = None
) -> np.ndarray:
    """Scale-free kernel signatures of rows of ``X`` against ``anchors``.

    ``d(x, a) = 1 - cos(x, a)``, ``k = exp(-d / sigma)``, each row
    L2-normalised. A zero row has cosine 0 to every anchor. The row-wise
    shift by the smallest distance (cancelled by the normalisation) keeps
    the kernel from underflowing for tiny ``sigma``.

    Parameters
    ----------
    X : array_like, shape (N, D)
    anchors : array_like, shape (A, D)
    sigma : float, optional
        Kernel width; default :func:`median_anchor_distance` of ``anchors``.
    metric : {"cosine"}
    num_threads : int, optional

    Returns
    -------
    ndarray, shape (N, A), float32
    """
    if metric != "cosine":
        raise ValueError(f"metric must be 'cosine', got {metric!r}")
    X = as_matrix(X, "X", allow_empty=True, finite=False)  # the kernel checks X in its norm pass
    anchors = as_matrix(anchors, "anchors")
    if X.shape[1] != anchors.shape[1]:
        raise ValueError(f"X has dimension {X.shape[1]} but anchors have {anchors.shape[1]}")
    if sigma is None:
        sigma = median_anchor_distance(anchors, num_threads=num_threads)
    else:
        sigma = check_positive(sigma, "sigma")
    return core().anchor_signatures(X, anchors, float(sigma), check_num_threads(num_threads))


def signatures_from_cosines(C, cols, *, sigma: float, num_threads: Optional[int] = None) -> np.ndarray:
    """:func:`anchor_signatures` from cosines already computed: anchor ``t`` is column ``cols[t]`` of ``C``.

    A GEH round computes each side's cosines to its whole pool once
    (``C = X @ pool.T`` over unit rows); each view then reads its anchors'
    columns instead of redoing a GEMM. Callers reading many column sets of
    one ``C`` check it once with :class:`AnchorCosines`.

    Parameters
    ----------
    C : array_like, shape (N, P)
        Cosines of N rows to P anchors, each in ``[-1, 1]`` up to rounding.
    cols : array_like of int, shape (V,)
        Columns of ``C`` (repeats allowed), each in ``[0, P)``.
    sigma : float
        Kernel width, ``> 0``.
    num_threads : int, optional

    Returns
    -------
    ndarray, shape (N, V), float32
    """
    return AnchorCosines(C).signatures(cols, sigma=sigma, num_threads=num_threads)


class AnchorCosines:
    """Cosines of N rows to P anchors, checked once, read by many :meth:`signatures` calls.

    Parameters
    ----------
    C : array_like, shape (N, P)
        Cosines, each finite and in ``[-1, 1]`` up to rounding (``|C| <= 1.001``).
    """

    def __init__(self, C):
        C = as_matrix(C, "C", allow_empty=True, finite=False)
        # min and max, not abs: no temporary the size of C; NaN and inf fail them too
        if not (-1.0 - 1e-3 <= C.min(initial=0.0) and C.max(initial=0.0) <= 1.0 + 1e-3):
            raise ValueError("C must hold finite cosines (|C| <= 1)")
        self.C = C

    @property
    def shape(self) -> Tuple[int, int]:
        return self.C.shape

    def signatures(self, cols, *, sigma: float, num_threads: Optional[int] = None) -> np.ndarray:
        """Kernel signatures ``(N, V)`` float32 against the anchors in columns ``cols`` (see
        :func:`signatures_from_cosines`); ``sigma`` is the kernel width, ``> 0``."""
        cols = as_int_matrix(cols, "cols", ndim=1, high=self.C.shape[1])
        sigma = check_positive(sigma, "sigma")
        return core().signatures_from_cosines(self.C, cols, float(sigma), check_num_threads(num_threads))


# --------------------------------------------------------------------------- CSLS mutual top-k
def _exclusion_mask(exclude, n: int, name: str) -> np.ndarray:
    mask = np.zeros(n, dtype=np.uint8)
    if exclude is not None:
        idx = as_int_matrix(as_array(exclude, name).reshape(-1), name, ndim=1, high=n)
        mask[idx] = 1
    return mask


def _signature_pair(SA, SB, k, csls_k, k_name="k", csls_k_name="csls_k"):
    """Validated float32 signature matrices of the CSLS kernels and their two neighbourhood sizes.

    The sizes are integers >= 1, clipped to ``2**63 - 1`` (the kernels clip
    them to the available rows anyway): any larger Python int means "all".
    """
    SA = as_matrix(SA, "SA", allow_empty=True)
    SB = as_matrix(SB, "SB", allow_empty=True)
    if SA.shape[1] != SB.shape[1]:
        raise ValueError(f"SA has {SA.shape[1]} columns but SB has {SB.shape[1]}")
    k = min(check_int(k, k_name, low=1), INT64_MAX)
    csls_k = min(check_int(csls_k, csls_k_name, low=1), INT64_MAX)
    _check_magnitude(SA, "SA", 1e15)
    _check_magnitude(SB, "SB", 1e15)
    return SA, SB, k, csls_k


def csls_mutual_topk(
    SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None, num_threads: Optional[int] = None
):
    """One-to-one mutual top-``k`` pairs under CSLS between two signature sets.

    ``s_ij = <SA_i, SB_j>``; ``CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)`` with
    ``r_A(i)`` the mean of row ``i``'s ``csls_k`` largest similarities (and
    ``r_B`` likewise per column). A pair is proposed when each is in the
    other's CSLS top-``k``; proposals are made one-to-one greedily by CSLS
    (ties: lower ``i``, then lower ``j``). Tiled: never allocates N_A x N_B.

    Parameters
    ----------
    SA : array_like, shape (N_A, A)
    SB : array_like, shape (N_B, A)
    k : int
        Mutual neighbourhood size (clipped to the available rows).
    csls_k : int
        Neighbours averaged for the hubness terms (clipped likewise).
    exclude_a, exclude_b : array_like of int, optional
        Rows that take no part (e.g. already linked).
    num_threads : int, optional

    Returns
    -------
    pairs : ndarray, shape (P, 2), int64, sorted by descending score
    scores : ndarray, shape (P,), float32 (CSLS)
    """
    SA, SB, k, csls_k = _signature_pair(SA, SB, k, csls_k)
    mask_a = _exclusion_mask(exclude_a, SA.shape[0], "exclude_a")
    mask_b = _exclusion_mask(exclude_b, SB.shape[0], "exclude_b")
    return core().csls_mutual_topk(SA, SB, k, csls_k, mask_a, mask_b, check_num_threads(num_threads))


def topk_rows_and_columns(SA, SB, k_row: int, k_col: Optional[int] = None, *, num_threads: Optional[int] = None):
    """Each row's ``k_row`` best rows of ``SB`` and each row of ``SB``'s ``k_col`` best rows of ``SA``.

    The score is the dot product ``s_ij = <SA_i, SB_j>``; both lists come
    from one tiled sweep, so every ``s_ij`` is computed once (two
    :meth:`ProbitDocs.top_k` calls would compute it twice). GEH's per-round
    candidate lists (:func:`crossembed.linking.proposers.pool_candidate_lists`).

    Parameters
    ----------
    SA : array_like, shape (N_A, A)
    SB : array_like, shape (N_B, A)
    k_row : int
        Best columns per row of ``SA`` (clipped to ``N_B``).
    k_col : int, optional
        Best rows per row of ``SB`` (clipped to ``N_A``; default ``k_row``).
    num_threads : int, optional

    Returns
    -------
    row_scores : ndarray, shape (N_A, min(k_row, N_B)), float32, best first
    row_idx : ndarray, same shape, int64 (ties to the lower index)
    col_scores : ndarray, shape (N_B, min(k_col, N_A)), float32
    col_idx : ndarray, same shape, int64
    """
    k_col = k_row if k_col is None else k_col
    SA, SB, k_row, k_col = _signature_pair(SA, SB, k_row, k_col, "k_row", "k_col")
    k_row, k_col = min(k_row, SB.shape[0]), min(k_col, SA.shape[0])
    if SA.shape[0] == 0 or SB.shape[0] == 0:
        return (
            np.zeros((SA.shape[0], k_row), np.float32),
            np.zeros((SA.shape[0], k_row), np.int64),
            np.zeros((SB.shape[0], k_col), np.float32),
            np.zeros((SB.shape[0], k_col), np.int64),
        )
    return core().topk_rows_and_columns(SA, SB, k_row, k_col, check_num_threads(num_threads))


class CandidateLists:
    """Candidate rows per row of each side, checked once: many CSLS calls may then share them.

    Parameters
    ----------
    cand_a : array_like of int, shape (N_A, M_A)
        Rows of B that may pair with each row of A, each in ``[0, N_B)``; ``-1`` pads.
    cand_b : array_like of int, shape (N_B, M_B)
        Rows of A that may pair with each row of B, each in ``[0, N_A)``; ``-1`` pads.

    No index may repeat within a row. The checked int64 copies are
    :attr:`cand_a` and :attr:`cand_b`; ``N_A``/``N_B`` are their row counts.
    """

    def __init__(self, cand_a, cand_b):
        n_a, n_b = _row_count(cand_a, "cand_a"), _row_count(cand_b, "cand_b")
        self.cand_a = _checked_lists(cand_a, n_b, "cand_a")
        self.cand_b = _checked_lists(cand_b, n_a, "cand_b")

    @property
    def n_a(self) -> int:
        return self.cand_a.shape[0]

    @property
    def n_b(self) -> int:
        return self.cand_b.shape[0]

    def check_rows(self, n_a: int, n_b: int) -> None:
        """Raise ``ValueError`` unless the lists are for ``n_a`` rows of A and ``n_b`` rows of B."""
        for have, want, name in ((self.n_a, n_a, "cand_a"), (self.n_b, n_b, "cand_b")):
            if have != want:
                raise ValueError(f"{name} has {have} rows but there are {want}")

    def __repr__(self) -> str:
        return f"CandidateLists(n_a={self.n_a}, n_b={self.n_b})"


def _row_count(cand, name: str) -> int:
    shape = () if cand is None else as_array(cand, name).shape
    if len(shape) != 2:
        as_int_matrix(cand, name, low=-1)  # raises the usual TypeError/ValueError naming it
        raise ValueError(f"{name} must be 2-D, got shape {shape}")
    return int(shape[0])


def _checked_lists(cand, n_other: int, name: str) -> np.ndarray:
    cand = as_int_matrix(cand, name, low=-1, high=n_other, copy=True)
    if cand.size:
        srt = np.sort(cand, axis=1)
        if ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any():
            raise ValueError(f"{name} has a repeated index within a row")
    return cand


def csls_mutual_topk_candidates(
    SA,
    SB,
    cand_a,
    cand_b,
    *,
    k: int = 5,
    csls_k: int = 50,
    exclude_a=None,
    exclude_b=None,
    num_threads: Optional[int] = None,
):
    """:func:`csls_mutual_topk` restricted to candidate pairs (the fast path for large N).

    ``s_ij`` is computed only for listed pairs. ``r_A(i)`` averages the
    ``csls_k`` best similarities among row ``i``'s candidates (0 when it has
    none), ``r_B`` likewise; each side takes its CSLS top-``k`` among its own
    candidates, so a proposed pair must be listed on both sides. Mutual pairs
    are made one-to-one greedily as in :func:`csls_mutual_topk`. Cost
    ``O((N_A M_A + N_B M_B) A)`` instead of ``O(N_A N_B A)``.

    Parameters
    ----------
    SA : array_like, shape (N_A, A)
    SB : array_like, shape (N_B, A)
    cand_a : array_like of int, shape (N_A, M_A)
        Rows of ``SB`` that may pair with each row of ``SA``; ``-1`` pads.
    cand_b : array_like of int, shape (N_B, M_B)
        Rows of ``SA`` that may pair with each row of ``SB``; ``-1`` pads.
    k, csls_k, exclude_a, exclude_b, num_threads
        As in :func:`csls_mutual_topk`.

    Returns
    -------
    pairs : ndarray, shape (P, 2), int64, sorted by descending score
    scores : ndarray, shape (P,), float32 (CSLS)
    """
    SA, SB, k, csls_k = _signature_pair(SA, SB, k, csls_k)
    lists = CandidateLists(cand_a, cand_b)
    lists.check_rows(SA.shape[0], SB.shape[0])
    return _csls_candidates_core(SA, SB, lists, k, csls_k, exclude_a, exclude_b, num_threads)


def csls_mutual_topk_lists(
    SA,
    SB,
    lists: CandidateLists,
    *,
    k: int = 5,
    csls_k: int = 50,
    exclude_a=None,
    exclude_b=None,
    num_threads: Optional[int] = None,
):
    """:func:`csls_mutual_topk_candidates` over :class:`CandidateLists` checked once.

    A GEH round's views share one pair of lists; checking them once (not
    per call) is the point of passing a :class:`CandidateLists`. Other
    arguments and the result are those of :func:`csls_mutual_topk_candidates`.
    """
    if not isinstance(lists, CandidateLists):
        raise TypeError(f"lists must be a CandidateLists, got {type(lists).__name__}")
    SA, SB, k, csls_k = _signature_pair(SA, SB, k, csls_k)
    lists.check_rows(SA.shape[0], SB.shape[0])
    return _csls_candidates_core(SA, SB, lists, k, csls_k, exclude_a, exclude_b, num_threads)


def _csls_candidates_core(SA, SB, lists: CandidateLists, k, csls_k, exclude_a, exclude_b, num_threads):
    """The C++ call on checked signatures and lists (exclusions still checked here)."""
    mask_a = _exclusion_mask(exclude_a, SA.shape[0], "exclude_a")
    mask_b = _exclusion_mask(exclude_b, SB.shape[0], "exclude_b")
    return core().csls_mutual_topk_candidates(
        SA, SB, lists.cand_a, lists.cand_b, k, csls_k, mask_a, mask_b, check_num_threads(num_threads)
    )


def candidate_dots(X, Y, cand, *, num_threads: Optional[int] = None) -> np.ndarray:
    """Dot products of each row of ``X`` with its candidate rows of ``Y``.

    ``out[i, t] = <X[i], Y[cand[i, t]]>`` in float32, NaN where ``cand`` is
    ``-1``: exactly the values :func:`csls_mutual_topk_candidates` scores
    (the sharded GEH path in :mod:`crossembed.distributed` merges them).

    Parameters
    ----------
    X : array_like, shape (N, D)
    Y : array_like, shape (M, D)
    cand : array_like of int, shape (N, C)
        Rows of ``Y`` per row of ``X``; ``-1`` pads.
    num_threads : int, optional

    Returns
    -------
    ndarray, shape (N, C), float32
    """
    X = as_matrix(X, "X", allow_empty=True)
    Y = as_matrix(Y, "Y", allow_empty=True)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} columns but Y has {Y.shape[1]}")
    cand = as_int_matrix(cand, "cand", low=-1, high=Y.shape[0])
    if cand.shape[0] != X.shape[0]:
        raise ValueError(f"cand has {cand.shape[0]} rows but X has {X.shape[0]}")
    return core().candidate_dots(X, Y, cand, check_num_threads(num_threads))


def otsu_threshold(values, *, bins: int = 100) -> float:
    """Otsu's threshold of ``values`` on ``bins`` equal-width bins over [min, max].

    Returns the upper edge of the bin that maximises the between-class
    variance (first maximum), i.e. values ``> threshold`` form the upper class.
    A constant input returns that constant. ``2 <= bins <= 2**24``. Scaling
    ``values`` by a power of two scales the threshold by it, subnormal inputs
    included (they are binned at ``2**1000`` times their size, where bin
    widths are normal numbers, and the threshold is rounded once on the way
    back).
    """
    v = as_matrix(values, "values", ndim=1, dtype=np.float64)
    bins = check_int(bins, "bins", low=2, high=_OTSU_MAX_BINS)
    scale = _OTSU_SCALE if float(np.abs(v).max()) < _OTSU_TINY else 1.0
    return float(core().otsu_threshold(v * scale, bins)) / scale


# VoteTable keys a pair as (i << 32) | j: larger ids would alias other pairs.
_ID_LIMIT = 2**32


class VoteTable:
    """Votes per candidate pair across views, with a Beta-Bernoulli posterior.

    Each call to :meth:`add` is one view: every proposed pair gets one vote
    and the view counter ``n_views`` grows by one. The posterior of pair
    ``(i, j)`` is ``Beta(1 + v, 1 + n - v)``; its mean is ``(1 + v) / (2 + n)``.
    """

    def __init__(self):
        self._t = core().VoteTable()

    def add(self, pairs) -> None:
        """Record one view's proposals (``(P, 2)`` int64 ids in ``[0, 2**32)``, P may be 0)."""
        self._t.add(_vote_pairs(pairs))

    @property
    def n_views(self) -> int:
        return self._t.n_views

    def __len__(self) -> int:
        return self._t.size()

    def items(self) -> Tuple[np.ndarray, np.ndarray]:
        """All pairs seen (sorted by i, then j) and their vote counts."""
        return self._t.items()

    def votes(self, pairs) -> np.ndarray:
        """Vote counts of the given pairs (0 for unseen)."""
        return self._t.votes(_vote_pairs(pairs))

    def posterior_mean(self, pairs=None) -> np.ndarray:
        """``(1 + v) / (2 + n)`` for ``pairs`` (default: all pairs in :meth:`items` order)."""
        if pairs is None:
            pairs = self.items()[0]
        v = self.votes(pairs).astype(np.float64)
        return (1.0 + v) / (2.0 + self.n_views)

    def promote(
        self, pairs, scores, *, threshold: float, exclude_a=None, exclude_b=None, limit: Optional[int] = None
    ) -> np.ndarray:
        """:func:`greedy_one_to_one` of ``pairs``: GEH's promotion step."""
        return greedy_one_to_one(
            pairs, scores, threshold=threshold, exclude_a=exclude_a, exclude_b=exclude_b, limit=limit
        )


def _vote_pairs(pairs) -> np.ndarray:
    """``pairs`` as checked ``(P, 2)`` int64 ids in ``[0, 2**32)`` (an empty input is zero pairs)."""
    if pairs is None:
        raise TypeError("pairs must be an integer array, got None")
    arr = as_array(pairs, "pairs")
    pairs = as_int_matrix(arr.reshape(-1, 2) if arr.size == 0 else arr, "pairs", high=_ID_LIMIT)
    if pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (P, 2), got {pairs.shape}")
    return pairs


def _row_set(rows, name: str) -> np.ndarray:
    if rows is None:
        return np.zeros(0, np.int64)
    rows = as_array(rows, name)  # no dtype here: 1.7 must be rejected, not truncated to 1
    return np.unique(as_int_matrix(rows.reshape(-1), name, ndim=1))


def greedy_one_to_one(
    pairs, scores, *, threshold: float = -np.inf, exclude_a=None, exclude_b=None, limit: Optional[int] = None
) -> np.ndarray:
    """Greedy one-to-one selection of ``pairs`` whose ``scores`` exceed ``threshold``.

    Pairs are taken by descending score (ties: lower i, then lower j); a
    pair is skipped when its i or j is already used (or excluded). At most
    ``limit`` pairs are returned (``None``: no cap).

    Returns
    -------
    ndarray, shape (L, 2), int64
        The chosen pairs in selection order.
    """
    pairs = as_int_matrix(pairs, "pairs")
    scores = as_matrix(scores, "scores", ndim=1, dtype=np.float64, allow_empty=True)
    if pairs.shape[0] != scores.shape[0] or (pairs.size and pairs.shape[1] != 2):
        raise ValueError("pairs must be (P, 2) and scores (P,)")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or np.isnan(threshold):
        raise ValueError(f"threshold must be a real number (not NaN), got {threshold!r}")
    lim = -1 if limit is None else min(check_int(limit, "limit", low=0), INT64_MAX)  # larger: no cap either
    ex_a, ex_b = _row_set(exclude_a, "exclude_a"), _row_set(exclude_b, "exclude_b")
    return core().greedy_one_to_one(pairs.reshape(-1, 2), scores, float(threshold), ex_a, ex_b, lim)


# --------------------------------------------------------------------------- Lorentz distances
def _lorentz_inputs(X, Y, curvature):
    X = as_matrix(X, "X", allow_float64=True, allow_empty=True)
    Y = as_matrix(Y, "Y", allow_float64=True)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has dimension {X.shape[1]} but Y has {Y.shape[1]}")
    if X.dtype != Y.dtype:  # compute in the wider type
        X, Y = X.astype(np.float64), Y.astype(np.float64)
    c = check_positive(curvature, "curvature")
    limit = 1e150 if X.dtype == np.float64 else 1e17
    _check_magnitude(X, "X", limit)
    _check_magnitude(Y, "Y", limit)
    return X, Y, c


def lorentz_pairwise(X, Y, *, curvature: float = 1.0, num_threads: Optional[int] = None) -> np.ndarray:
    """Geodesic distances in the Lorentz model between all rows of X and Y.

    Rows are space components; the time component is ``sqrt(1/c + |x|^2)``.
    Uses the ``asinh`` form with ``q = -<x - y, x - y>_L`` written as a sum of
    non-negative terms (see :func:`crossembed.reference.lorentz_pairwise`), so
    nearby points, and points at different radii along nearly one direction,
    keep their relative precision. float32 and float64 (output dtype
    follows the input; mixed inputs compute in float64).

    Returns
    -------
    ndarray, shape (NX, NY)
    """
    X, Y, c = _lorentz_inputs(X, Y, curvature)
    return core().lorentz_pairwise(X, Y, c, check_num_threads(num_threads))


def lorentz_topk(X, Y, k: int, *, curvature: float = 1.0, num_threads: Optional[int] = None):
    """The ``k`` nearest rows of ``Y`` for every row of ``X`` (smallest distance first).

    Returns
    -------
    distances : ndarray, shape (NX, k)
    indices : ndarray, shape (NX, k), int64
    """
    X, Y, c = _lorentz_inputs(X, Y, curvature)
    k = check_k(k, Y.shape[0])
    return core().lorentz_topk(X, Y, k, c, check_num_threads(num_threads))
