"""GEH: geometric embedding hashing for vector linking (formulas: docs/methods.md#geh-signatures onwards).

Two embedding clouds A and B from different black-box encoders share an
unknown subset of objects. A handful of seed pairs acts as the first anchor
pool. Every row gets a *signature*: its kernel similarities to the pool's
anchors on its own side, L2-normalised. Because contrastive encoders are
locally isometric up to scale, the same object has similar signatures on
both sides. Many small views (anchor subsets) each propose mutual CSLS
top-k pairs; the votes give a Beta posterior per pair; confident pairs are
promoted into the pool and the next round sees more anchors.

Each choice is an object passed to :class:`GEHLinker`, so each can be
swapped or ablated on its own: the growth rule
(:mod:`~crossembed.linking.promotion`), the stop rule
(:mod:`~crossembed.linking.stopping`), the candidate source
(:mod:`~crossembed.linking.candidates`), the row sample
(:mod:`~crossembed.linking.sampling`), the schedule
(:mod:`~crossembed.linking.schedule`), signatures and view anchors
(:mod:`~crossembed.linking.views`) and the per-side preprocessing
(:mod:`~crossembed.linking.preprocess`).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed._config import check_plugin
from crossembed._validation import check_int, check_num_threads, check_random_state
from crossembed.linking._fit import FitSetup, FitState
from crossembed.linking._inputs import check_link_inputs
from crossembed.linking.candidates import AutoCandidates, RoundProposers, check_source
from crossembed.linking.preprocess import Center, unit_rows
from crossembed.linking.promotion import PromotionRule, ValidatedPromotion
from crossembed.linking.proposers import Proposer
from crossembed.linking.result import LinkResult
from crossembed.linking.sampling import RowSample
from crossembed.linking.schedule import Schedule
from crossembed.linking.seedless import SeedSearch
from crossembed.linking.stopping import StopCounter, StopRule, turnover
from crossembed.linking.views import FarthestPointViews, KernelSignatures

__all__ = ["DEFAULT_MAX_ITER", "GEHLinker"]

#: the most rounds a fit runs by default (``GEHLinker(max_iter=...)``)
DEFAULT_MAX_ITER = 15

# below this many row pairs (N_A * N_B) a fit with num_threads=None runs on one thread: its kernels
# take milliseconds, and waking a team of threads on a busy machine costs more than it saves
_SMALL_FIT_PAIRS = 1_000_000

# the default objects: frozen settings (a fit keeps its state on its FitState), so one serves every linker
_PROMOTION, _STOP, _CANDIDATES, _SAMPLE = ValidatedPromotion(), StopRule(), AutoCandidates(), RowSample()
_SCHEDULE, _VIEWS, _SIGNATURES, _CENTER = Schedule(), FarthestPointViews(), KernelSignatures(), Center()
_SEED_SEARCH = SeedSearch()


class GEHLinker:
    """Link rows of two embedding matrices from a few seed pairs (GEH).

    Parameters
    ----------
    promotion : PromotionRule
        Growth rule (:mod:`~crossembed.linking.promotion`); default
        :class:`~crossembed.linking.promotion.ValidatedPromotion`.
    stop : StopRule
        When growth has stopped; default
        :class:`~crossembed.linking.stopping.StopRule` (3 stale rounds, 2 %).
    candidates : CandidateSource
        Which pairs the views score (:mod:`~crossembed.linking.candidates`);
        default :class:`~crossembed.linking.candidates.AutoCandidates`
        (exact, pool lists or anchor cells by size).
    sample : RowSample or None
        Rows the rounds run on for large sides; the final pass then links every
        row. Default :class:`~crossembed.linking.sampling.RowSample` (20,000
        rows a side, nearest the seeds); None: every round on every row.
    schedule : Schedule
        Views per round, anchors per view and the CSLS ``k``/``csls_k``;
        default :class:`~crossembed.linking.schedule.Schedule`.
    views : ViewSampler
        Picks each view's anchors; default
        :class:`~crossembed.linking.views.FarthestPointViews`.
    signatures : KernelSignatures
        How a row is described by its anchors (:mod:`~crossembed.linking.views`); default
        :class:`~crossembed.linking.views.KernelSignatures`.
    center : Center or None
        Per-side preprocessing fitted on each side's own rows; default
        :class:`~crossembed.linking.preprocess.Center`; None: unit rows only.
    max_iter : int
        Most rounds (default :data:`DEFAULT_MAX_ITER`, 15): the default final pass
        relinks every row out of sample from the pool, so later rounds, which mostly
        swap pool links, buy little.
    random_state : None, int or numpy Generator
    num_threads : int, optional
        Kernel threads. None: one thread below 1e6 row pairs (N_A x N_B),
        else all cores (``$CROSSEMBED_NUM_THREADS``). Results do not depend on it.
    show_progress_bar : bool
        Show a tqdm bar over rounds (default True).

    Attributes
    ----------
    result_ : LinkResult
        After :meth:`fit`: links without the seeds, their posterior means
        and votes, and the per-round history.

    Examples
    --------
    >>> result = GEHLinker(random_state=0).link(A, B, seeds)  # doctest: +SKIP
    >>> result.links[:3]  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        promotion: PromotionRule = _PROMOTION,
        stop: StopRule = _STOP,
        candidates=_CANDIDATES,
        sample: Optional[RowSample] = _SAMPLE,
        schedule: Schedule = _SCHEDULE,
        views=_VIEWS,
        signatures=_SIGNATURES,
        center=_CENTER,
        max_iter: int = DEFAULT_MAX_ITER,
        random_state=None,
        num_threads: Optional[int] = None,
        show_progress_bar: bool = True,
    ):
        self.promotion = check_plugin(promotion, "promotion", ("grow", "finish"), "ValidatedPromotion()")
        self.stop = check_plugin(stop, "stop", ("counter",), "StopRule(patience=3)")
        self.candidates = check_source(candidates)
        self.sample = check_plugin(sample, "sample", ("draw",), "RowSample(rows=20_000)", optional=True)
        self.schedule = check_plugin(schedule, "schedule", ("views",), "Schedule(k=5)")
        self.views = check_plugin(views, "views", ("__call__",), "FarthestPointViews()")
        self.signatures = check_plugin(signatures, "signatures", ("__call__", "from_cosines"), "KernelSignatures()")
        self.center = check_plugin(center, "center", ("apply",), "Center()", optional=True)
        self.max_iter = check_int(max_iter, "max_iter", low=1)
        self.random_state = random_state
        self.num_threads = num_threads if num_threads is None else check_num_threads(num_threads)
        self.show_progress_bar = bool(show_progress_bar)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.endswith("_"))  # result_: a fit's
        return f"GEHLinker({args})"

    def fit_threads(self, n_a: int, n_b: int) -> Optional[int]:
        """The kernel threads of a fit of N_A x N_B rows (see ``num_threads``)."""
        if self.num_threads is None and n_a * n_b < _SMALL_FIT_PAIRS:
            return 1
        return self.num_threads

    # ------------------------------------------------------------------ fit
    def fit(self, A, B, seeds=None) -> GEHLinker:
        """Link the rows of ``A`` and ``B``; the links are in :attr:`result_`.

        Parameters
        ----------
        A : array_like, shape (N_A, D_A)
        B : array_like, shape (N_B, D_B)
            Dimensions may differ; only cosine geometry within a side is used.
        seeds : array_like of int, shape (s, 2), SeedSearch or None
            Known pairs (row of A, row of B), one-to-one, ``s >= 2``; or how to
            find them from the two collections' shapes
            (:class:`~crossembed.linking.seedless.SeedSearch`, run after the
            preprocessing; None: ``SeedSearch()``). The result's ``seeds_found``
            and ``seed_confidence`` then say which it found and how sure it is.

        Returns
        -------
        GEHLinker
            ``self``.
        """
        self.result_ = self._run(A, B, seeds)
        return self

    def link(self, A, B, seeds=None) -> LinkResult:
        """Like :meth:`fit`, but return the :class:`LinkResult` (safe to call from several threads)."""
        return self._run(A, B, seeds)

    def _state(self, A, B, seeds, rng) -> FitState:
        setup = FitSetup(
            schedule=self.schedule,
            signatures=self.signatures,
            views=self.views,
            num_threads=self.fit_threads(len(A), len(B)),
            cells=self.candidates.map_cells(len(A), len(B)),
        )
        return FitState(A=A, B=B, seeds=seeds, rng=rng, setup=setup)

    def _preprocess(self, X: np.ndarray) -> np.ndarray:
        return unit_rows(X) if self.center is None else self.center.apply(X)

    def _sampled_state(self, whole: FitState) -> Tuple[FitState, Optional[Tuple[np.ndarray, np.ndarray]]]:
        """The state the rounds run on and its rows of A and B (None: ``whole``, every row)."""
        if self.sample is None or not self.promotion.links_every_row:
            return whole, None
        rows_a = self.sample.draw(whole.A, whole.seeds[:, 0], whole.rng)
        rows_b = self.sample.draw(whole.B, whole.seeds[:, 1], whole.rng)
        if rows_a is None and rows_b is None:
            return whole, None
        rows_a = np.arange(whole.n_a) if rows_a is None else rows_a
        rows_b = np.arange(whole.n_b) if rows_b is None else rows_b
        seeds = np.stack([np.searchsorted(rows_a, whole.seeds[:, 0]), np.searchsorted(rows_b, whole.seeds[:, 1])], 1)
        sub_a, sub_b = (np.asarray(X[rows], np.float32) for X, rows in ((whole.A, rows_a), (whole.B, rows_b)))
        return self._state(sub_a, sub_b, seeds, whole.rng), (rows_a, rows_b)

    def _run(self, A, B, seeds) -> LinkResult:
        search = _SEED_SEARCH if seeds is None else seeds if isinstance(seeds, SeedSearch) else None
        A, B, seeds = check_link_inputs(A, B, _NO_SEEDS if search else seeds, min_seeds=0 if search else 2)
        A, B = self._preprocess(A), self._preprocess(B)
        rng = check_random_state(self.random_state)
        found: Dict[str, Any] = {}
        if search:
            tic = time.perf_counter()
            seeds, confidence, found = search.find(A, B, rng, num_threads=self.fit_threads(len(A), len(B)))
            found.update(seconds=round(time.perf_counter() - tic, 4))
            # nothing to start from, or seeds two searches disagree on (rounds from wrong seeds would
            # run as long as right ones and link nothing true): no links, and the search's figures say why
            if len(seeds) < 2 or confidence < search.min_confidence:
                warnings.warn(
                    f"no seed pairs found with confidence >= {search.min_confidence} "
                    f"(found {len(seeds)}, confidence {confidence:.2f}); no links: pass seeds=",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return LinkResult(_NO_SEEDS, [], [], [found], seeds_found=seeds, seed_confidence=confidence)
        whole = self._state(A, B, seeds, rng)
        fit, rows = self._sampled_state(whole)
        every_row = rows is None
        rounds = self.candidates.for_fit(fit, every_row=every_row)
        history = self._grow(fit, rounds, self.stop.counter(every_row=every_row))
        if not every_row and len(fit.links):
            # the rounds ran on a sample; the final pass links every row from its pool
            links = np.stack([rows[0][fit.links[:, 0]], rows[1][fit.links[:, 1]]], 1)
            whole.set_links(links, fit.link_post, fit.link_votes)
        if len(whole.links) and self.promotion.has_final_pass:
            tic = time.perf_counter()
            # built only if the final pass proposes (the decoy and map passes do not)
            info = self.promotion.finish(whole, _LazyProposer(lambda: rounds(whole)))
            if info is not None:
                info.update(round=len(history), links=len(whole.links), seconds=round(time.perf_counter() - tic, 4))
                history.append(info)
        if not search:
            return LinkResult(whole.links, whole.link_post, whole.link_votes, history)
        return LinkResult(
            whole.links,
            whole.link_post,
            whole.link_votes,
            [found, *history],
            seeds_found=seeds,
            seed_confidence=confidence,
        )

    def _grow(self, fit: FitState, rounds: RoundProposers, stopper: StopCounter) -> List[Dict[str, Any]]:
        """Run the rounds on ``fit`` until the rule promotes nothing, the stop rule fires or ``max_iter``."""
        rule = self.promotion
        history: List[Dict[str, Any]] = []
        bar = tqdm(total=self.max_iter, desc=f"GEH ({rule.name})", disable=not self.show_progress_bar, leave=False)
        try:
            for t in range(self.max_iter):
                tic = time.perf_counter()
                before = np.asarray(fit.links)
                info = rule.grow(fit, rounds(fit))
                info.update(round=t, links=len(fit.links), seconds=round(time.perf_counter() - tic, 4))
                history.append(info)
                bar.update(1)
                bar.set_postfix(links=len(fit.links), pool=info["pool"])
                if info["promoted"] == 0:
                    break
                saturated = info.get("limit") is None or len(fit.links) < info["limit"]
                moved = turnover(np.asarray(fit.links), before, fit.n_b)
                info["turnover"] = round(moved, 4)
                if stopper.update(len(fit.links), saturated=saturated, turnover=moved):
                    break
        finally:
            bar.close()
        return history


# what a call without seeds validates its inputs with
_NO_SEEDS = np.zeros((0, 2), np.int64)


class _LazyProposer(Proposer):
    """A proposer built on its first call."""

    def __init__(self, build: Callable[[], Proposer]):
        self._build, self._proposer = build, None

    def __call__(self, SA, SB, **options):
        if self._proposer is None:
            self._proposer = self._build()
        return self._proposer(SA, SB, **options)
