"""GEH: geometric embedding hashing for vector linking (SPEC section 4).

Two embedding clouds A and B from different black-box encoders share an
unknown subset of objects. A handful of seed pairs acts as the first anchor
pool. Every row gets a *signature*: its kernel similarities to the pool's
anchors on its own side, L2-normalised. Because contrastive encoders are
locally isometric up to scale, the same object has similar signatures on
both sides. Many small views (anchor subsets) each propose mutual CSLS
top-k pairs; the votes give a Beta posterior per pair; confident pairs are
promoted into the pool and the next round sees more anchors.

The pieces are objects, so each can be swapped or ablated on its own:

* the growth rule (:mod:`crossembed.linking.promotion`: paper, capped,
  validated), which gets each round's proposer passed in;
* the proposer (:mod:`crossembed.linking.proposers`: exact kernel,
  per-round candidate lists, hnswlib, or :class:`crossembed.distributed.DaskProposer`);
* signatures and view anchors (:mod:`crossembed.linking.views`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed._validation import (
    check_choice,
    check_fraction,
    check_int,
    check_num_threads,
    check_positive,
    check_random_state,
)
from crossembed.linking._fit import FitState
from crossembed.linking._inputs import check_link_inputs, unit_rows
from crossembed.linking.cells import pad_lists
from crossembed.linking.preprocess import PREPROCESS, preprocess_side
from crossembed.linking.promotion import PromotionRule, make_rule
from crossembed.linking.proposers import (
    AnnProposer,
    CandidateBackend,
    CellCandidates,
    ExactProposer,
    LocalCandidates,
    Proposer,
)
from crossembed.linking.result import LinkResult
from crossembed.linking.stopping import STOP_RULES, StopRule, turnover
from crossembed.linking.views import FarthestPointViews, ViewSampler, kernel_signatures

__all__ = ["CANDIDATES", "GEHLinker"]

CANDIDATES = ("auto", "exact", "pool", "cells", "ann")
#: which rows a sampled fit's rounds run on (GEHLinker(row_sample=))
ROW_SAMPLES = ("seeds", "random")
# below this many row pairs (N_A * N_B) a fit with num_threads=None runs on one thread: its
# kernels take milliseconds, and waking a team of threads on a busy machine cost 8x at 300 rows
_SMALL_FIT_PAIRS = 1_000_000
# "auto" switches from exact to pool proposals above this many row pairs (N_A * N_B):
# exact was better on the anisotropic minilm <-> e5 pair at 1k rows, pool is ~2x faster at 10k.
_AUTO_POOL_PAIRS = 4_000_000
# ... and from pool to anchor-cell lists above this many (30k rows a side): the exact lists grow as
# N_A N_B x 512 per round (2 min at 100k a side), the cells' as N_A N_B x 16
_AUTO_CELL_PAIRS = 900_000_000
# rows a side the rounds run on before the map pass links every row (GEHLinker(sample_rows=))
_SAMPLE_ROWS = 20_000


class GEHLinker:
    """Link rows of two embedding matrices from a few seed pairs (GEH).

    Parameters
    ----------
    center : {"center", "whiten", "none"}
        Per-side preprocessing, fitted on each side's own rows
        (:func:`~crossembed.linking.preprocess.preprocess_side`): ``"center"``
        (default) subtracts each side's column mean, which removes the
        common component of anisotropic encoders; ``"none"`` is the paper.
    m0, rho0, c : float
        Schedule: with pool size ``P``, ``g = P / |seeds|`` and
        ``sf = 1 + c ln g``, a round uses ``ceil(m0 sf)`` views of
        ``max(5, ceil(rho0 P / sf))`` anchors.
    max_iter : int
        Most rounds.
    k, csls_k : int
        Mutual top-``k`` under CSLS; ``csls_k`` neighbours for the hubness terms.
    promotion : {"validated", "paper", "capped"} or PromotionRule
        Growth rule (:mod:`crossembed.linking.promotion`); a name uses the
        rule's defaults, an object (e.g. ``ValidatedPromotion(min_views=6)``)
        its own settings. Default ``"validated"``.
    stop : {"best", "change"}
        When growth has stopped (:class:`~crossembed.linking.stopping.StopRule`):
        ``"best"`` (default) ends the fit after ``patience`` rounds in a row
        that do not beat the best link count so far by more than ``tol``;
        ``"change"`` after ``patience`` rounds whose count moved by less than
        ``tol`` (earlier releases; at 10k objects the count oscillates by
        +-4 % once growth stops, so that rule ran minilm <-> e5 to
        ``max_iter``). Rounds held at the rule's growth limit never count.
    patience, tol : int, float
        Stale rounds in a row that stop the fit, and the relative tolerance
        (default 3 rounds, 2 %).
    stop_turnover : float or None
        A round counts as stale only if at most this share of its links is
        new (default 0.2; None: ignore turnover; ignored while the rounds run
        on a sample, see ``sample_rows``). See
        :class:`~crossembed.linking.stopping.StopRule`.
    unsettled_patience : int or None
        Stale rounds in a row that end the fit even while its link set is
        not settled (default 20; None: only ``stop_turnover`` decides). Small
        fits can hover at the turnover bound: minilm <-> e5 at 1,500 objects
        ran 86 rounds (F1 51.1, 47 s) against 36 (52.5, 19 s) with it.
    signatures : callable
        ``signatures(X, anchors, num_threads=) -> S``; default the paper's
        :func:`~crossembed.linking.views.kernel_signatures`
        (:func:`~crossembed.linking.views.cosine_signatures` is the ablation).
    views : ViewSampler
        Picks each view's anchors; default
        :class:`~crossembed.linking.views.FarthestPointViews`
        (:class:`~crossembed.linking.views.RandomViews` is the ablation).
    candidates : {"auto", "exact", "pool", "cells", "ann"}
        ``"auto"`` (default): ``"exact"`` while N_A x N_B <= 4e6 (2,000 rows a
        side), ``"pool"`` up to 9e8 (30,000 a side), ``"cells"`` above.
        ``"exact"``: every view scores all N_A x N_B pairs (C++ tiled top-k).
        ``"pool"``: once per round each row gets its ``pool_k``
        nearest rows on the other side by signatures against (up to
        ``pool_anchors`` of) the whole pool, each anchor's own column left
        out, and every view scores only those pairs - O(N pool_k) per view
        instead of O(N_A N_B); same F1 on minilm <-> USE, but far lower on
        minilm <-> e5 at 1k rows (docs/linking.md).
        ``"cells"``: the same lists restricted to pairs whose rows share one
        of their 4 nearest list anchors (:mod:`crossembed.linking.cells`), and
        the map pass linked over such lists too: ~30x less work per round.
        ``"ann"``: hnswlib candidates rebuilt per view.
    pool_k : int
        Candidates per row on the ``"pool"`` path.
    pool_anchors : int
        Most pool anchors (a random subset) for the ``"pool"`` candidate
        lists. 256 halves their cost (10k objects, draw 0: F1 82.0 / 74.2 on
        minilm <-> USE / e5 in 27 / 35 s against 82.9 / 74.6 in 33 / 52 s),
        but minilm <-> e5 draw 4 then never recovers from its false early
        pool (F1 9 vs 70), so the default stays 512.
    list_refresh : float
        The ``"pool"``/``"cells"`` candidate lists are rebuilt once more than
        this fraction of the pool they came from has changed (or the pool has
        grown by more than it); until then each round reuses them.
    list_reuse : int or None
        Rounds in a row that may reuse the lists while the pool has grown by
        at most ``list_refresh``, however many of its pairs were swapped
        (``0``: only the rule above). A round swaps 18-50 % of a 10k pool,
        so that rule alone rebuilt them every round, a third of the fit's
        time. ``None`` (default): ``1`` when the rounds run on every row,
        ``0`` on a sample (``sample_rows``). Every other round at 10k objects,
        5 draws: minilm <-> e5 F1 73.32 vs 73.54 in 26.1 vs 30.8 s a fit;
        minilm <-> USE 82.06 vs 82.36 in 17.9 vs 21.4 s. On the sampled
        rounds of a 100k fit (minilm <-> USE, one draw) it cost 2.0 F1
        (60.0 vs 62.1) for 99 vs 127 s: that pool never settles.
    sample_rows : int or None
        Above this many rows a side, the rounds grow the pool on a sample of
        ``sample_rows`` rows of that side (the seeds kept; see ``row_sample``), and the
        final map pass links every row through a map fitted on that pool;
        only with a rule whose final pass links every row (``validated``,
        ``final_pass="map"``); the paper and capped rules always run on every
        row. None: every round on every row. Measured on minilm <-> USE
        (docs/linking.md), the default seed sample against every row: F1 62.1
        in 146 s against 63.6 in 2,377 s at 100k rows a side, 72.3 in 140 s
        against 74.1 in 877 s at 32,500.
    row_sample : {"seeds", "random"}
        Which rows that sample holds: ``"seeds"`` (default): the rows most
        similar to any seed row of their side, i.e. the objects near the
        seeds, so a row's partner is far more often in the other side's
        sample (8,842 of a 20k sample's rows at 100k rows a side, against
        3,272 at random); or ``"random"`` rows. Measured on minilm <-> USE
        (docs/linking.md): F1 62.1 vs 62.0 at 100k rows a side; at 1M rows a
        side (synthetic objects mixing two real glosses) 68.3 vs 1.7, where a
        random 20k sample holds ~1.7 % partnered rows.
    ann_k : int
        Candidates per row on the ANN path.
    proposer : Proposer, optional
        Replaces the top-k step of every view, e.g.
        :class:`crossembed.distributed.DaskProposer` (``candidates`` is then ignored).
    candidate_backend : CandidateBackend, optional
        Where the ``"pool"`` path runs: default
        :class:`~crossembed.linking.proposers.LocalCandidates`;
        :class:`crossembed.distributed.DaskCandidates` shards B over Dask
        workers with the same links. Given, ``"auto"`` resolves to ``"pool"``.
    random_state : None, int or numpy Generator
    num_threads : int, optional
        Kernel threads. None: one thread for small problems (N_A x N_B <
        1e6, where threads cost more than they save), else all cores
        (``$CROSSEMBED_NUM_THREADS``). Results do not depend on it.
    show_progress_bar : bool
        Show a tqdm bar over rounds.

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
        center: str = "center",
        m0: float = 5,
        rho0: float = 0.4,
        c: float = 0.3,
        max_iter: int = 100,
        k: int = 5,
        csls_k: int = 50,
        promotion: Union[str, PromotionRule] = "validated",
        stop: str = "best",
        patience: int = 3,
        tol: float = 0.02,
        stop_turnover: Optional[float] = 0.2,
        unsettled_patience: Optional[int] = 20,
        signatures: Callable[..., np.ndarray] = kernel_signatures,
        views: Optional[ViewSampler] = None,
        candidates: str = "auto",
        pool_k: int = 64,
        pool_anchors: int = 512,
        list_refresh: float = 0.1,
        list_reuse: Optional[int] = None,
        sample_rows: Optional[int] = _SAMPLE_ROWS,
        row_sample: str = "seeds",
        ann_k: int = 64,
        proposer: Optional[Proposer] = None,
        candidate_backend: Optional[CandidateBackend] = None,
        random_state=None,
        num_threads: Optional[int] = None,
        show_progress_bar: bool = True,
    ):
        self.center = check_choice("none" if center is None else center, "center", PREPROCESS)
        self.m0 = check_positive(m0, "m0")
        self.rho0 = check_fraction(rho0, "rho0")
        self.c = check_positive(c, "c", allow_zero=True)
        self.max_iter = check_int(max_iter, "max_iter", low=1)
        self.k = check_int(k, "k", low=1)
        self.csls_k = check_int(csls_k, "csls_k", low=1)
        self.promotion = make_rule(promotion)
        self.stop = check_choice(stop, "stop", STOP_RULES)
        self.patience = check_int(patience, "patience", low=1)
        self.tol = check_positive(tol, "tol", allow_zero=True)
        self.stop_turnover = None if stop_turnover is None else check_fraction(stop_turnover, "stop_turnover")
        self.unsettled_patience = (
            None if unsettled_patience is None else check_int(unsettled_patience, "unsettled_patience", low=1)
        )
        if not callable(signatures):
            raise TypeError("signatures must be callable: signatures(X, anchors, num_threads=) -> S")
        self.signatures = signatures
        views = FarthestPointViews() if views is None else views
        if not callable(views):
            raise TypeError("views must be a ViewSampler (a callable)")
        self.views = views
        self.candidates = check_choice(candidates, "candidates", CANDIDATES)
        self.pool_k = check_int(pool_k, "pool_k", low=1)
        self.pool_anchors = check_int(pool_anchors, "pool_anchors", low=2)
        self.list_refresh = check_fraction(list_refresh, "list_refresh", allow_zero=True)
        self.list_reuse = None if list_reuse is None else check_int(list_reuse, "list_reuse", low=0)
        self.sample_rows = None if sample_rows is None else check_int(sample_rows, "sample_rows", low=2)
        self.row_sample = check_choice(row_sample, "row_sample", ROW_SAMPLES)
        self.ann_k = check_int(ann_k, "ann_k", low=1)
        if proposer is not None and not callable(proposer):
            raise TypeError("proposer must be callable")
        self.proposer = proposer
        if candidate_backend is not None and not (
            hasattr(candidate_backend, "candidate_lists") and hasattr(candidate_backend, "proposer")
        ):
            raise TypeError("candidate_backend must have candidate_lists() and proposer() (a CandidateBackend)")
        self.candidate_backend = candidate_backend
        self.random_state = random_state
        self.num_threads = num_threads if num_threads is None else check_num_threads(num_threads)
        self.show_progress_bar = bool(show_progress_bar)

    def __repr__(self) -> str:
        return f"GEHLinker(promotion={self.promotion!r}, k={self.k}, max_iter={self.max_iter})"

    # ------------------------------------------------------------------ proposers
    def candidate_mode(self, n_a: int, n_b: int) -> str:
        """The candidate path ``"auto"`` resolves to for N_A x N_B rows."""
        if self.candidates != "auto":
            return self.candidates
        if self.candidate_backend is not None:
            return "pool"
        if n_a * n_b > _AUTO_CELL_PAIRS:
            return "cells"
        return "pool" if n_a * n_b > _AUTO_POOL_PAIRS else "exact"

    def fit_threads(self, n_a: int, n_b: int) -> Optional[int]:
        """The kernel threads of a fit of N_A x N_B rows (see ``num_threads``)."""
        if self.num_threads is None and n_a * n_b < _SMALL_FIT_PAIRS:
            return 1
        return self.num_threads

    def _fit_proposer(self, n_a: int, n_b: int, threads: Optional[int]) -> Optional[Proposer]:
        """The proposer of every view of one fit, or None for per-round candidate lists."""
        if self.proposer is not None:
            return self.proposer
        mode = self.candidate_mode(n_a, n_b)
        if mode == "ann":
            return AnnProposer(ann_k=self.ann_k, num_threads=threads)
        if mode == "exact":
            return ExactProposer(num_threads=threads)
        return None

    def _round_proposer(self, fit: FitState, fixed: Optional[Proposer], cache: Dict[str, Any]) -> Proposer:
        """This round's proposer: the fit's fixed one, or candidate lists from (a subset of) the pool.

        The lists of an earlier round are reused while the pool is still mostly
        (>= 90%) the one they were built from, or for ``cache["reuse"]`` rounds
        (``list_reuse``) while it has not grown by more than ``list_refresh``: they are a
        superset of what the views pick, and rebuilding them was a third of a
        10k fit's time.
        """
        if fixed is not None:
            return fixed
        anchors = fit.pool()
        if "pool" in cache and _lists_still_serve(
            anchors, cache["pool"], cache["age"], fit.n_b, self.list_refresh, cache["reuse"]
        ):
            cache["age"] += 1
            return cache["proposer"]
        cache["pool"], cache["age"] = anchors, 0
        if len(anchors) > self.pool_anchors:
            anchors = anchors[np.sort(fit.rng.choice(len(anchors), size=self.pool_anchors, replace=False))]
        # an anchor's own column spikes in its signature, and in its partner's: drop it for the
        # other rows' lists; the anchor rows themselves are relisted without their own pairing
        SA0, SB0 = fit.signatures(anchors)
        SA, SB = _without_own_anchor(SA0, anchors[:, 0]), _without_own_anchor(SB0, anchors[:, 1])
        backend = self.candidate_backend or (CellCandidates() if fit.cells else LocalCandidates())
        cand_a, cand_b = backend.candidate_lists(SA, SB, self.pool_k, num_threads=fit.num_threads)
        _cross_fit_anchor_lists(cand_a, cand_b, SA0, SB0, anchors, fit.rng, num_threads=fit.num_threads)
        cache["proposer"] = backend.proposer(cand_a, cand_b, num_threads=fit.num_threads)
        return cache["proposer"]

    # ------------------------------------------------------------------ fit
    def fit(self, A, B, seeds) -> GEHLinker:
        """Link the rows of ``A`` and ``B``; the links are in :attr:`result_`.

        Parameters
        ----------
        A : array_like, shape (N_A, D_A)
        B : array_like, shape (N_B, D_B)
            Dimensions may differ; only cosine geometry within a side is used.
        seeds : array_like of int, shape (s, 2)
            Known pairs (row of A, row of B), one-to-one, ``s >= 2``.

        Returns
        -------
        GEHLinker
            ``self``.
        """
        self.result_ = self._run(A, B, seeds)
        return self

    def link(self, A, B, seeds) -> LinkResult:
        """Like :meth:`fit`, but return the :class:`LinkResult` (safe to call from several threads)."""
        return self._run(A, B, seeds)

    def _state(self, A, B, seeds, rng) -> FitState:
        return FitState(
            A=A,
            B=B,
            seeds=seeds,
            rng=rng,
            signature_fn=self.signatures,
            view_sampler=self.views,
            k=self.k,
            csls_k=self.csls_k,
            m0=self.m0,
            rho0=self.rho0,
            c=self.c,
            num_threads=self.fit_threads(len(A), len(B)),
            cells=self.candidate_backend is None and self.candidate_mode(len(A), len(B)) == "cells",
        )

    def _run(self, A, B, seeds) -> LinkResult:
        A, B, seeds = check_link_inputs(A, B, seeds)
        A, B = preprocess_side(A, self.center), preprocess_side(B, self.center)
        rng = check_random_state(self.random_state)
        rule = self.promotion
        rows_a = rows_b = None
        if self.sample_rows is not None and rule.links_every_row:
            rows_a = _sample_rows(A, seeds[:, 0], self.sample_rows, rng, self.row_sample)
            rows_b = _sample_rows(B, seeds[:, 1], self.sample_rows, rng, self.row_sample)
        whole = self._state(A, B, seeds, rng)
        if rows_a is None and rows_b is None:
            fit = whole
        else:
            rows_a = np.arange(len(A)) if rows_a is None else rows_a
            rows_b = np.arange(len(B)) if rows_b is None else rows_b
            sample_seeds = np.stack([np.searchsorted(rows_a, seeds[:, 0]), np.searchsorted(rows_b, seeds[:, 1])], 1)
            fit = self._state(A[rows_a], B[rows_b], sample_seeds, rng)
        threads = fit.num_threads
        fixed = self._fit_proposer(fit.n_a, fit.n_b, threads)
        history: List[Dict[str, Any]] = []
        # the pool path's candidate lists, the pool they came from, and how many rounds they may serve
        reuse = self.list_reuse if self.list_reuse is not None else (1 if fit is whole else 0)
        lists: Dict[str, Any] = {"reuse": reuse}
        # a sampled fit's pool only seeds the map pass, which cleans it: at 100k rows a side a pool
        # that settled at 29 % precision (36 % turnover a round, 15 rounds) mapped to F1 62.0, within
        # 2 points of an 89 %-precision pool of all rows (63.6), so there the turnover does not hold the fit
        max_turnover = self.stop_turnover if fit is whole else None
        stopper = StopRule(
            self.stop,
            patience=self.patience,
            tol=self.tol,
            max_turnover=max_turnover,
            unsettled_patience=self.unsettled_patience,
        )
        bar = tqdm(total=self.max_iter, desc=f"GEH ({rule.name})", disable=not self.show_progress_bar, leave=False)
        try:
            for t in range(self.max_iter):
                tic = time.perf_counter()
                before = np.asarray(fit.links)
                info = rule.grow(fit, self._round_proposer(fit, fixed, lists))
                info.update(round=t, links=len(fit.links), seconds=round(time.perf_counter() - tic, 4))
                history.append(info)
                bar.update(1)
                bar.set_postfix(links=len(fit.links), pool=info["pool"])
                if info["promoted"] == 0:
                    break
                saturated = info.get("limit") is None or len(fit.links) < info["limit"]
                moved = turnover(np.asarray(fit.links), before, len(B))
                info["turnover"] = round(moved, 4)
                if stopper.update(len(fit.links), saturated=saturated, turnover=moved):
                    break
        finally:
            bar.close()
        if fit is not whole and len(fit.links):
            # the rounds ran on a sample; the final pass links every row from its pool
            whole.set_links(
                np.stack([rows_a[fit.links[:, 0]], rows_b[fit.links[:, 1]]], 1), fit.link_post, fit.link_votes
            )
        fit = whole
        if len(fit.links) and rule.has_final_pass:
            tic = time.perf_counter()
            # built only if the final pass proposes (the default "map" pass does not)
            info = rule.finish(fit, _LazyProposer(lambda: self._round_proposer(fit, fixed, lists)))
            if info is not None:
                info.update(round=len(history), links=len(fit.links), seconds=round(time.perf_counter() - tic, 4))
                history.append(info)
        return LinkResult(fit.links, fit.link_post, fit.link_votes, history)


def _sample_rows(X: np.ndarray, keep: np.ndarray, size: int, rng: np.random.Generator, how: str = "random"):
    """Sorted rows of ``X``: ``keep`` plus ``size - len(keep)`` others, random or nearest to ``keep``
    (largest cosine to any kept row, ties to the lower row); None when ``len(X) <= size`` (every row)."""
    n = len(X)
    size = max(size, len(keep))
    if n <= size:
        return None
    if how == "seeds":
        near = np.max(X @ X[keep].T, axis=1)
        near[keep] = np.inf
        return np.sort(np.argsort(-near, kind="stable")[:size])
    rest = np.setdiff1d(np.arange(n), keep)
    return np.sort(np.concatenate([keep, rng.choice(rest, size - len(keep), replace=False)]))


def _lists_still_serve(
    pool: np.ndarray, old: np.ndarray, age: int, n_b: int, change: float = 0.1, reuse: int = 0
) -> bool:
    """Whether lists built from the pool ``old`` and reused ``age`` rounds since still serve ``pool``:
    it grew by at most ``change``, and either ``age < reuse`` or at most ``change`` of its pairs are new."""
    if len(pool) > (1.0 + change) * len(old):
        return False
    return age < reuse or turnover(pool, old, n_b) <= change


class _LazyProposer:
    """A proposer built on its first call."""

    def __init__(self, build: Callable[[], Proposer]):
        self._build, self._proposer = build, None

    def __call__(self, SA, SB, **options):
        if self._proposer is None:
            self._proposer = self._build()
        return self._proposer(SA, SB, **options)


def _cross_fit_anchor_lists(cand_a, cand_b, SA0, SB0, anchors, rng, *, num_threads=None) -> None:
    """Relist the anchor rows (in place) from the signatures of the other half of the anchors.

    Zeroing an anchor's own column is not enough: both rows of an anchor pair
    then share a hole at the same column, a pattern no other row has, so each
    was still listed as the other's best candidate. Held-out seeds were found
    through that leak, not through their geometry (held-out precision 1.0
    while the promoted links were 2-13 % right, minilm <-> USE at 10k), and every
    pool link re-confirmed itself. Here the anchors are split in two halves;
    the rows of one half get their lists from signatures against the other
    half only, so nothing in them knows their own pairing. Lists wider than
    the other side (the cell lists are ``-1`` padded to ``pool_k``) keep their padding.
    """
    if len(anchors) < 4:
        return
    half = rng.permutation(len(anchors)) % 2
    m_a, m_b = cand_a.shape[1], cand_b.shape[1]  # clipped to the other side's rows by the kernel
    for h in (0, 1):
        other = np.flatnonzero(half != h)
        SA = _without_own_anchor(unit_rows(SA0[:, other]), anchors[other, 0])
        SB = _without_own_anchor(unit_rows(SB0[:, other]), anchors[other, 1])
        rows_a, rows_b = anchors[half == h, 0], anchors[half == h, 1]
        _, best_a, _, _ = kernels.topk_rows_and_columns(SA[rows_a], SB, m_a, 1, num_threads=num_threads)
        _, best_b, _, _ = kernels.topk_rows_and_columns(SB[rows_b], SA, m_b, 1, num_threads=num_threads)
        cand_a[rows_a] = pad_lists(best_a, m_a)
        cand_b[rows_b] = pad_lists(best_b, m_b)


def _without_own_anchor(S: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Signatures with each anchor row's own column zeroed, those rows re-normalised."""
    S = np.array(S, dtype=np.float32)
    S[rows, np.arange(len(rows))] = 0.0
    S[rows] = unit_rows(S[rows])
    return S
