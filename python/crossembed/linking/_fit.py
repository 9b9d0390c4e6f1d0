"""The state of one :meth:`GEHLinker.fit` call.

Everything a fit changes lives here, not on the linker, so one linker can
fit several problems at once (threads) or one after another and each fit
starts from the same place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from crossembed import kernels
from crossembed.linking.views import ViewSampler


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
    links: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    link_post: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_votes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    table: kernels.VoteTable = field(default_factory=kernels.VoteTable)
    #: discounted held-out seed hits and trials of the rounds so far (ValidatedPromotion)
    holdout_hits: float = 0.0
    holdout_trials: float = 0.0

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

    def signatures(self, anchors: np.ndarray):
        """Both sides' signatures against the anchor pairs ``anchors`` (rows of A, rows of B)."""
        SA = self.signature_fn(self.A, self.A[anchors[:, 0]], num_threads=self.num_threads)
        SB = self.signature_fn(self.B, self.B[anchors[:, 1]], num_threads=self.num_threads)
        return SA, SB

    def view(self, pool_a: np.ndarray, size: int, subset: Optional[np.ndarray] = None) -> np.ndarray:
        """Pool positions of one view's anchors (see :class:`~crossembed.linking.views.ViewSampler`).

        ``pool_a`` is ``A[pool[:, 0]]``, gathered once per round by the caller.
        """
        return self.view_sampler(pool_a, self.n_seeds, size, self.rng, subset)
