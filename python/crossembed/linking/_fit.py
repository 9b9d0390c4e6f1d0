"""The state of one :meth:`GEHLinker.fit` call.

Everything a fit changes lives here, not on the linker, so one linker can
fit several problems at once (threads) or one after another and each fit
starts from the same place.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking.views import ViewSampler, kernel_signatures

# pools up to this size get their cosine Gram matrices computed once per round (64 MB a side at
# the cap): every view's farthest-point sampling and kernel width then read it instead of
# recomputing the pool's cosines per view (a quarter of a 10k fit's time went there)
_GRAM_MAX_POOL = 4096
# rows x columns of the cosines a round keeps per side for its views (512 MB a side at the cap)
_COSINES_MAX = 1 << 27


@dataclass
class PoolGeometry:
    """One round's pool geometry, shared by its views.

    ``unit_a`` is ``A[pool[:, 0]]``; ``gram_a``/``gram_b`` are the pool's
    cosine matrices on each side, or None above :data:`_GRAM_MAX_POOL` anchors.
    """

    pool: np.ndarray
    unit_a: np.ndarray
    gram_a: Optional[np.ndarray] = None
    gram_b: Optional[np.ndarray] = None

    def kernel_widths(self, view: np.ndarray) -> Optional[Tuple[float, float]]:
        """The kernel widths of a view's anchors on each side (as :func:`kernels.median_anchor_distance`)."""
        if self.gram_a is None:
            return None
        return _median_distance(self.gram_a, view), _median_distance(self.gram_b, view)


@dataclass
class ViewCosines:
    """Each side's cosines to the pool anchors that a round's views use, computed once for all views.

    ``cols`` are sorted pool positions; ``a``/``b`` are ``(N, len(cols))``.
    The views of a 10k fit (20 of 256 anchors) draw on ~2,000 distinct
    anchors: one GEMM over those replaces 20 (a quarter of the fit's time
    was the views' signatures).
    """

    cols: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def columns(self, view: np.ndarray) -> np.ndarray:
        """Columns of ``a``/``b`` holding the pool positions ``view``."""
        return np.searchsorted(self.cols, view)


def _trusted(C: np.ndarray) -> np.ndarray:
    """Cosines as the unchecked signature kernel needs them: float32, C-contiguous, finite."""
    C = np.ascontiguousarray(C, dtype=np.float32)
    return C if np.isfinite(C).all() else np.nan_to_num(C, nan=0.0, posinf=1.0, neginf=-1.0)


def _median_distance(gram: np.ndarray, view: np.ndarray) -> float:
    """Median of ``1 - cos`` over the view's anchor pairs ``i < j``; 1.0 when undefined or zero."""
    if len(view) < 2:
        return 1.0
    sub = gram[np.ix_(view, view)]
    med = float(np.median(1.0 - sub[np.triu_indices(len(view), 1)].astype(np.float64)))
    return med if med > 1e-6 else 1.0


def _accepts(fn: Callable, name: str) -> bool:
    """Whether ``fn`` takes keyword ``name`` (user callables written before it was added do not)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


@dataclass
class FitState:
    """Inputs, settings and the growing link set of one fit.

    ``A`` and ``B`` are unit rows; ``links`` excludes the seeds; the *pool*
    (anchors) is the seeds followed by the links.
    """

    A: np.ndarray
    B: np.ndarray
    seeds: np.ndarray
    rng: np.random.Generator
    signature_fn: Callable[..., np.ndarray]
    view_sampler: ViewSampler
    k: int
    csls_k: int
    m0: float
    rho0: float
    c: float
    num_threads: Optional[int] = None
    #: candidate lists from anchor cells (``candidates="cells"``): the map pass uses them too
    cells: bool = False
    links: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    link_post: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_votes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    table: kernels.VoteTable = field(default_factory=kernels.VoteTable)
    # whether the user's callables take the per-round shortcuts (asked once, not per view)
    _sigma_kw: bool = field(init=False, repr=False, default=False)
    _gram_kw: bool = field(init=False, repr=False, default=False)
    #: discounted held-out seed hits and trials of the rounds so far (ValidatedPromotion)
    holdout_hits: float = 0.0
    holdout_trials: float = 0.0

    def __post_init__(self) -> None:
        self._sigma_kw = _accepts(self.signature_fn, "sigma")
        self._gram_kw = _accepts(self.view_sampler, "gram")

    @property
    def n_a(self) -> int:
        return len(self.A)

    @property
    def n_b(self) -> int:
        return len(self.B)

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def pool(self) -> np.ndarray:
        return np.concatenate([self.seeds, self.links]) if len(self.links) else self.seeds

    def set_links(self, links, post, votes) -> None:
        self.links = np.asarray(links, np.int64).reshape(-1, 2)
        self.link_post = np.asarray(post, np.float64)
        self.link_votes = np.asarray(votes, np.int64)

    def schedule(self, pool_size: int):
        """The paper's schedule: ``(views, anchors per view)`` for a pool of ``pool_size``.

        With ``g = P / |seeds|`` and ``sf = 1 + c ln g``: ``ceil(m0 sf)`` views
        of ``max(5, ceil(rho0 P / sf))`` anchors.
        """
        sf = 1.0 + self.c * math.log(max(pool_size / self.n_seeds, 1.0))
        return math.ceil(self.m0 * sf), max(5, math.ceil(self.rho0 * pool_size / sf))

    def geometry(self, pool: np.ndarray) -> PoolGeometry:
        """The round's :class:`PoolGeometry` of ``pool`` (built once per round by the rule)."""
        unit_a = self.A[pool[:, 0]]
        if len(pool) > _GRAM_MAX_POOL:
            return PoolGeometry(pool, unit_a)
        unit_b = self.B[pool[:, 1]]
        return PoolGeometry(pool, unit_a, unit_a @ unit_a.T, unit_b @ unit_b.T)

    def view_cosines(self, geometry: PoolGeometry, views) -> Optional[ViewCosines]:
        """Both sides' cosines to every anchor of ``views`` (pool positions), or None where the
        signatures are not the default kernel ones, the round has no Gram matrices, or they
        would pass :data:`_COSINES_MAX` entries a side."""
        if self.signature_fn is not kernel_signatures or geometry.gram_a is None or not len(views):
            return None
        cols = np.unique(np.concatenate(views))
        if max(self.n_a, self.n_b) * len(cols) > _COSINES_MAX:
            return None
        pool = geometry.pool[cols]
        cos_a, cos_b = self.A @ self.A[pool[:, 0]].T, self.B @ self.B[pool[:, 1]].T
        # unit rows, but float32 rounding can leave |cos| a hair above 1; the kernel trusts these arrays
        return ViewCosines(cols, _trusted(cos_a), _trusted(cos_b))

    def signatures(
        self,
        anchors: np.ndarray,
        *,
        geometry: Optional[PoolGeometry] = None,
        view=None,
        cosines: Optional[ViewCosines] = None,
        num_threads: Optional[int] = None,
    ):
        """Both sides' signatures against the anchor pairs ``anchors`` (rows of A, rows of B).

        With the round's ``geometry`` and the ``view`` positions of ``anchors``
        in its pool, a signature function that takes ``sigma`` gets the kernel
        widths read from the pool's Gram matrices; with the round's
        ``cosines`` the default kernel signatures are read off them.
        ``num_threads`` overrides the fit's (views running side by side).
        """
        nt = self.num_threads if num_threads is None else num_threads
        widths = None
        if geometry is not None and view is not None and self._sigma_kw:
            widths = geometry.kernel_widths(view)
        if cosines is not None and widths is not None:
            at = cosines.columns(view)
            return (
                kernels._signatures_from_trusted_cosines(cosines.a, at, widths[0], nt),
                kernels._signatures_from_trusted_cosines(cosines.b, at, widths[1], nt),
            )
        kw_a, kw_b = ({}, {}) if widths is None else ({"sigma": widths[0]}, {"sigma": widths[1]})
        SA = self.signature_fn(self.A, self.A[anchors[:, 0]], num_threads=nt, **kw_a)
        SB = self.signature_fn(self.B, self.B[anchors[:, 1]], num_threads=nt, **kw_b)
        return SA, SB

    def view(self, geometry: PoolGeometry, size: int, subset: Optional[np.ndarray] = None) -> np.ndarray:
        """Pool positions of one view's anchors (see :class:`~crossembed.linking.views.ViewSampler`)."""
        if geometry.gram_a is not None and self._gram_kw:
            return self.view_sampler(geometry.unit_a, self.n_seeds, size, self.rng, subset, gram=geometry.gram_a)
        return self.view_sampler(geometry.unit_a, self.n_seeds, size, self.rng, subset)
