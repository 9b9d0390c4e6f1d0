"""The state of one :meth:`GEHLinker.fit` call.

Everything a fit changes lives here, not on the linker, so one linker can
fit several problems at once (threads) or one after another and each fit
starts from the same place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking.schedule import Schedule
from crossembed.linking.views import FarthestPointViews, KernelSignatures, ViewSampler

# pools up to this size get their cosine Gram matrices computed once per round (4096^2 float32 a
# side at the cap): every view's farthest-point sampling and kernel width then read it instead of
# recomputing the pool's cosines per view
_GRAM_MAX_POOL = 4096
# rows x columns of the cosines a round keeps per side for its views (float32)
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

    ``cols`` are sorted pool positions; ``a``/``b`` are each side's
    ``(N, len(cols))`` cosines, checked once. A round's views draw on far
    fewer distinct anchors than they use in all: one GEMM over those
    replaces one per view.
    """

    cols: np.ndarray
    a: kernels.AnchorCosines
    b: kernels.AnchorCosines

    def columns(self, view: np.ndarray) -> np.ndarray:
        """Columns of ``a``/``b`` holding the pool positions ``view``."""
        return np.searchsorted(self.cols, view)


def _median_distance(gram: np.ndarray, view: np.ndarray) -> float:
    """Median of ``1 - cos`` over the view's anchor pairs ``i < j``; 1.0 when undefined or zero."""
    if len(view) < 2:
        return 1.0
    sub = gram[np.ix_(view, view)]
    med = float(np.median(1.0 - sub[np.triu_indices(len(view), 1)].astype(np.float64)))
    return med if med > 1e-6 else 1.0


@dataclass
class FitSetup:
    """What a fit is run with: the linker's schedule and per-view objects, its threads, its map pass.

    ``cells``: the map pass links within cells of B's space (the candidate source
    says so for large fits).
    """

    schedule: Schedule = field(default_factory=Schedule)
    signatures: Any = field(default_factory=KernelSignatures)
    views: ViewSampler = field(default_factory=FarthestPointViews)
    num_threads: Optional[int] = None
    cells: bool = False


@dataclass
class FitState:
    """Inputs, setup and the growing link set of one fit.

    ``A`` and ``B`` are unit rows; ``links`` excludes the seeds; the *pool*
    (anchors) is the seeds followed by the links. ``holdout_hits`` and
    ``holdout_trials`` are the discounted held-out seed hits and trials of
    the rounds so far (:class:`~crossembed.linking.promotion.ValidatedPromotion`).
    """

    A: np.ndarray
    B: np.ndarray
    seeds: np.ndarray
    rng: np.random.Generator
    setup: FitSetup = field(default_factory=FitSetup)
    links: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    link_post: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_votes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    table: kernels.VoteTable = field(default_factory=kernels.VoteTable)
    holdout_hits: float = 0.0
    holdout_trials: float = 0.0

    @property
    def k(self) -> int:
        return self.setup.schedule.k

    @property
    def csls_k(self) -> int:
        return self.setup.schedule.csls_k

    @property
    def num_threads(self) -> Optional[int]:
        return self.setup.num_threads

    @property
    def cells(self) -> bool:
        return self.setup.cells

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

    def schedule(self, pool_size: int) -> Tuple[int, int]:
        """``(views, anchors per view)`` for a pool of ``pool_size`` (:meth:`Schedule.views`)."""
        return self.setup.schedule.views(pool_size, self.n_seeds)

    def geometry(self, pool: np.ndarray) -> PoolGeometry:
        """The round's :class:`PoolGeometry` of ``pool`` (built once per round by the rule)."""
        unit_a = self.A[pool[:, 0]]
        if len(pool) > _GRAM_MAX_POOL:
            return PoolGeometry(pool, unit_a)
        unit_b = self.B[pool[:, 1]]
        return PoolGeometry(pool, unit_a, unit_a @ unit_a.T, unit_b @ unit_b.T)

    def view_cosines(self, geometry: PoolGeometry, views) -> Optional[ViewCosines]:
        """Both sides' cosines to every anchor of ``views`` (pool positions), or None where the
        signatures do not read cosines, the round has no Gram matrices, or they would pass
        :data:`_COSINES_MAX` entries a side."""
        if not self.setup.signatures.reads_cosines or geometry.gram_a is None or not len(views):
            return None
        cols = np.unique(np.concatenate(views))
        if max(self.n_a, self.n_b) * len(cols) > _COSINES_MAX:
            return None
        pool = geometry.pool[cols]
        cos_a, cos_b = self.A @ self.A[pool[:, 0]].T, self.B @ self.B[pool[:, 1]].T
        return ViewCosines(cols, kernels.AnchorCosines(cos_a), kernels.AnchorCosines(cos_b))

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
        in its pool, the kernel widths are read from the pool's Gram matrices;
        with the round's ``cosines`` too, the signatures are read off them.
        ``num_threads`` overrides the fit's (views running side by side).
        """
        nt = self.num_threads if num_threads is None else num_threads
        make = self.setup.signatures
        widths = geometry.kernel_widths(view) if geometry is not None and view is not None else None
        if cosines is not None and widths is not None:
            at = cosines.columns(view)
            return (
                make.from_cosines(cosines.a, at, sigma=widths[0], num_threads=nt),
                make.from_cosines(cosines.b, at, sigma=widths[1], num_threads=nt),
            )
        sigma_a, sigma_b = (None, None) if widths is None else widths
        SA = make(self.A, self.A[anchors[:, 0]], sigma=sigma_a, num_threads=nt)
        SB = make(self.B, self.B[anchors[:, 1]], sigma=sigma_b, num_threads=nt)
        return SA, SB

    def view(self, geometry: PoolGeometry, size: int, subset: Optional[np.ndarray] = None) -> np.ndarray:
        """Pool positions of one view's anchors (see :class:`~crossembed.linking.views.ViewSampler`)."""
        return self.setup.views(geometry.unit_a, self.n_seeds, size, self.rng, subset, gram=geometry.gram_a)
