"""GEH: geometric embedding hashing for vector linking (SPEC section 4).

Two embedding clouds A and B from different black-box encoders share an
unknown subset of objects. A handful of seed pairs acts as the first anchor
pool. Every row gets a *signature*: its kernel similarities to the pool's
anchors on its own side, L2-normalised. Because contrastive encoders are
locally isometric up to scale, the same object has similar signatures on
both sides. Many small views (anchor subsets) each propose mutual CSLS
top-k pairs; the votes give a Beta posterior per pair; confident pairs are
promoted into the pool and the next round sees more anchors.

Three promotion rules are implemented (``promotion=``):

``"paper"``
    The paper as written: all anchors in every view while the pool has < 50,
    cumulative votes, Otsu threshold on posterior means (values on the
    threshold count as above, so identical votes promote everything - the
    round-0 collapse SPEC measured), greedy one-to-one promotion.
``"capped"``
    SPEC's robust variant: views of 70 % of the anchors (>= 20 views) while
    the pool is small, and at most as many new links per round as the pool
    holds, ranked by posterior then CSLS.
``"validated"``
    Ours (see docs/linking.md). Each round re-votes from scratch on views of
    a random 70 % of the pool; a pair only collects votes in views where
    neither of its rows is an anchor (no link can vote for itself); held-out
    seeds measure the proposal precision, which sets how fast the pool may
    grow; a final pass links the remaining rows with the whole pool.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed._validation import check_num_threads, check_positive, check_random_state
from crossembed.linking._inputs import check_link_inputs, unit_rows
from crossembed.linking.result import LinkResult

__all__ = ["GEHLinker", "PROMOTIONS"]

PROMOTIONS = ("paper", "capped", "validated")
_SAMPLINGS = ("fps", "random")
_CANDIDATES = ("auto", "exact", "pool", "ann")
# "auto" switches from exact to pool proposals above this many row pairs (N_A * N_B):
# exact was better on the anisotropic minilm <-> e5 pair at 1k rows, pool is ~2x faster at 10k.
_AUTO_POOL_PAIRS = 4_000_000

# A proposer turns two signature matrices into one-to-one proposals: the exact
# C++ kernel, per-round candidate lists (``candidates="pool"``), hnswlib
# (``candidates="ann"``) or crossembed.distributed's Dask-sharded one.
Proposer = Callable[..., Any]


def _int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _fraction(value, name: str) -> float:
    value = check_positive(value, name)
    if value > 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


def farthest_point_sampling(X: np.ndarray, size: int, start: int) -> np.ndarray:
    """Greedy farthest-point sample of ``size`` rows of unit-norm ``X`` (cosine distance).

    Starts at row ``start``; each step adds the row farthest from everything
    chosen so far (ties: lower index). Returns row indices in pick order.
    """
    n = len(X)
    size = min(size, n)
    chosen = np.empty(size, np.int64)
    chosen[0] = start
    dist = 1.0 - X @ X[start]
    dist[start] = -np.inf
    for t in range(1, size):
        nxt = int(np.argmax(dist))
        chosen[t] = nxt
        np.minimum(dist, 1.0 - X @ X[nxt], out=dist)
        dist[chosen[: t + 1]] = -np.inf
    return chosen


class GEHLinker:
    """Link rows of two embedding matrices from a few seed pairs (GEH).

    Parameters
    ----------
    m0, rho0, c : float
        Schedule: with pool size ``P``, ``g = P / |seeds|`` and
        ``sf = 1 + c ln g``, a round uses ``ceil(m0 sf)`` views of
        ``max(5, ceil(rho0 P / sf))`` anchors.
    max_iter : int
        Most rounds.
    k, csls_k : int
        Mutual top-``k`` under CSLS; ``csls_k`` neighbours for the hubness terms.
    promotion : {"paper", "capped", "validated"}
        Growth rule (see the module docstring). Default ``"validated"``.
    small_pool : int
        Below this pool size the paper uses every anchor in every view.
    subsample : float
        Fraction of the pool per view for ``"capped"`` (small pools) and
        ``"validated"`` (always).
    min_views : int
        Views per round at least, for ``"capped"`` (small pools) and ``"validated"``.
    max_view_anchors : int
        ``"validated"`` only: anchors per view at most (FPS thins larger views).
    patience, tol : int, float
        Stop when the link count changed by less than ``tol`` (relative) for
        ``patience`` rounds in a row.
    kernel : bool
        ``False`` (ablation): signatures are normalised raw cosine distances.
    sampling : {"fps", "random"}
        Anchor choice inside a view (``"random"`` is the ablation).
    posterior : bool
        ``False`` (ablation): promote pairs proposed by at least
        ``vote_fraction`` of the round's views instead of the Otsu-thresholded
        posterior.
    vote_fraction : float
        The fixed threshold of the ablation.
    final_pass : bool
        ``"validated"`` only: link the rows left over with the whole pool.
    score_filter : bool
        ``"validated"`` only: in the final pass drop links whose CSLS score
        falls in the lower Otsu class (rows whose object is missing on the
        other side still find a mutual neighbour, with lower scores).
    candidates : {"auto", "exact", "pool", "ann"}
        ``"auto"`` (default): ``"exact"`` while N_A x N_B <= 4e6 (2,000 rows a
        side), ``"pool"`` above.
        ``"exact"``: every view scores all N_A x N_B pairs (C++ tiled top-k).
        ``"pool"``: once per round each row gets its ``pool_k``
        nearest rows on the other side by signatures against (up to
        ``pool_anchors`` of) the whole pool, each anchor's own column left
        out, and every view scores only those pairs - O(N pool_k) per view
        instead of O(N_A N_B); same F1 on minilm <-> USE, but far lower on
        minilm <-> e5 at 1k rows (docs/linking.md).
        ``"ann"``: hnswlib candidates rebuilt per view.
    pool_k : int
        Candidates per row on the ``"pool"`` path.
    pool_anchors : int
        Most pool anchors (a random subset) for the ``"pool"`` candidate lists.
    ann_k : int
        Candidates per row on the ANN path.
    proposer : callable, optional
        Replaces the top-k step, e.g. :class:`crossembed.distributed.DaskProposer`.
    random_state : None, int or numpy Generator
    num_threads : int, optional
        Kernel threads (results do not depend on it).
    progress : bool
        Show a tqdm bar over rounds.

    Examples
    --------
    >>> result = GEHLinker(random_state=0).fit(A, B, seeds)  # doctest: +SKIP
    >>> result.links[:3]  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        m0: float = 5,
        rho0: float = 0.4,
        c: float = 0.3,
        max_iter: int = 100,
        k: int = 5,
        csls_k: int = 50,
        promotion: str = "validated",
        small_pool: int = 50,
        subsample: float = 0.7,
        min_views: int = 20,
        max_view_anchors: int = 256,
        patience: int = 10,
        tol: float = 0.01,
        kernel: bool = True,
        sampling: str = "fps",
        posterior: bool = True,
        vote_fraction: float = 0.5,
        final_pass: bool = True,
        score_filter: bool = True,
        candidates: str = "auto",
        pool_k: int = 128,
        pool_anchors: int = 512,
        ann_k: int = 64,
        proposer: Optional[Proposer] = None,
        random_state=None,
        num_threads: Optional[int] = None,
        progress: bool = True,
    ):
        self.m0 = check_positive(m0, "m0")
        self.rho0 = _fraction(rho0, "rho0")
        self.c = check_positive(c, "c", allow_zero=True)
        self.max_iter = _int(max_iter, "max_iter", 1)
        self.k = _int(k, "k", 1)
        self.csls_k = _int(csls_k, "csls_k", 1)
        if promotion not in PROMOTIONS:
            raise ValueError(f"promotion must be one of {PROMOTIONS}, got {promotion!r}")
        self.promotion = promotion
        self.small_pool = _int(small_pool, "small_pool", 1)
        self.subsample = _fraction(subsample, "subsample")
        self.min_views = _int(min_views, "min_views", 1)
        self.max_view_anchors = _int(max_view_anchors, "max_view_anchors", 2)
        self.patience = _int(patience, "patience", 1)
        self.tol = check_positive(tol, "tol", allow_zero=True)
        self.kernel = bool(kernel)
        if sampling not in _SAMPLINGS:
            raise ValueError(f"sampling must be one of {_SAMPLINGS}, got {sampling!r}")
        self.sampling = sampling
        self.posterior = bool(posterior)
        self.vote_fraction = _fraction(vote_fraction, "vote_fraction")
        self.final_pass = bool(final_pass)
        self.score_filter = bool(score_filter)
        if candidates not in _CANDIDATES:
            raise ValueError(f"candidates must be one of {_CANDIDATES}, got {candidates!r}")
        self.candidates = candidates
        self.pool_k = _int(pool_k, "pool_k", 1)
        self.pool_anchors = _int(pool_anchors, "pool_anchors", 2)
        self.ann_k = _int(ann_k, "ann_k", 1)
        if proposer is not None and not callable(proposer):
            raise TypeError("proposer must be callable")
        self.proposer = proposer
        self.random_state = random_state
        self.num_threads = num_threads if num_threads is None else check_num_threads(num_threads)
        self.progress = bool(progress)

    def __repr__(self) -> str:
        return f"GEHLinker(promotion={self.promotion!r}, k={self.k}, max_iter={self.max_iter})"

    # ------------------------------------------------------------------ pieces
    def _schedule(self, pool: int, n_seeds: int):
        sf = 1.0 + self.c * math.log(max(pool / n_seeds, 1.0))
        return math.ceil(self.m0 * sf), max(5, math.ceil(self.rho0 * pool / sf))

    def _signatures(self, X: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        if self.kernel:
            return kernels.anchor_signatures(X, anchors, num_threads=self.num_threads)
        dist = 1.0 - X @ anchors.T  # ablation: raw distances, same scale-free normalisation
        return unit_rows(dist)

    def _propose(self, SA, SB, exclude_a, exclude_b):
        proposer = self._proposer if self._proposer is not None else self._round_proposer
        if proposer is not None:
            return proposer(SA, SB, k=self.k, csls_k=self.csls_k, exclude_a=exclude_a, exclude_b=exclude_b)
        return kernels.csls_mutual_topk(
            SA, SB, k=self.k, csls_k=self.csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=self.num_threads
        )

    def _candidate_mode(self, n_a: int, n_b: int) -> str:
        if self.candidates == "auto":
            return "pool" if n_a * n_b > _AUTO_POOL_PAIRS else "exact"
        return self.candidates

    def _begin_round(self, An, Bn, anchors: np.ndarray, rng) -> None:
        """``candidates="pool"``: this round's candidate lists, from (a subset of) all its anchors."""
        self._round_proposer = None
        if self._candidate_mode(len(An), len(Bn)) != "pool" or self.proposer is not None:
            return
        from crossembed.linking.candidates import PoolProposer, pool_candidate_lists

        if len(anchors) > self.pool_anchors:
            anchors = anchors[np.sort(rng.choice(len(anchors), size=self.pool_anchors, replace=False))]
        # an anchor's own column spikes in its signature, and in its partner's: drop it, or every
        # link (right or wrong, seeds included) would be listed as its own partner's candidate
        SA = _without_own_anchor(self._signatures(An, An[anchors[:, 0]]), anchors[:, 0])
        SB = _without_own_anchor(self._signatures(Bn, Bn[anchors[:, 1]]), anchors[:, 1])
        cand_a, cand_b = pool_candidate_lists(SA, SB, self.pool_k, num_threads=self.num_threads)
        self._round_proposer = PoolProposer(cand_a, cand_b, num_threads=self.num_threads)

    def _view_anchors(self, pool_a_unit: np.ndarray, n_seeds: int, size: int, rng, subset: Optional[np.ndarray]):
        """Pool positions of one view's anchors: FPS (or random) from a random seed pair."""
        cand = np.arange(len(pool_a_unit)) if subset is None else np.sort(subset)
        size = min(size, len(cand))
        if self.sampling == "random":
            return np.sort(rng.choice(cand, size=size, replace=False))
        seeds_in = cand[cand < n_seeds]  # pool positions < n_seeds are the seeds
        start_pos = int(rng.choice(seeds_in)) if len(seeds_in) else int(rng.choice(cand))
        start = int(np.searchsorted(cand, start_pos))
        picked = farthest_point_sampling(pool_a_unit[cand], size, start)
        return np.sort(cand[picked])

    # ------------------------------------------------------------------ fit
    def fit(self, A, B, seeds) -> LinkResult:
        """Link the rows of ``A`` and ``B``.

        Parameters
        ----------
        A : array_like, shape (N_A, D_A)
        B : array_like, shape (N_B, D_B)
            Dimensions may differ; only cosine geometry within a side is used.
        seeds : array_like of int, shape (s, 2)
            Known pairs (row of A, row of B), one-to-one, ``s >= 2``.

        Returns
        -------
        LinkResult
            Links without the seeds, their posterior means and votes, and
            the per-round history.
        """
        A, B, seeds = check_link_inputs(A, B, seeds)
        rng = check_random_state(self.random_state)
        An, Bn = unit_rows(A), unit_rows(B)
        self._proposer = self._make_proposer()
        self._round_proposer = None
        state = _State(seeds=seeds, n_a=len(A), n_b=len(B))
        history: List[Dict[str, Any]] = []
        stable = 0
        bar = tqdm(total=self.max_iter, desc=f"GEH ({self.promotion})", disable=not self.progress, leave=False)
        try:
            for t in range(self.max_iter):
                tic = time.perf_counter()
                prev = len(state.links)
                if self.promotion == "validated":
                    info = self._round_validated(An, Bn, state, rng)
                else:
                    info = self._round_paper(An, Bn, state, rng)
                info.update(round=t, links=len(state.links), seconds=round(time.perf_counter() - tic, 4))
                history.append(info)
                bar.update(1)
                bar.set_postfix(links=len(state.links), pool=info["pool"])
                if info["promoted"] == 0:
                    break
                change = abs(len(state.links) - prev) / max(prev, 1)
                stable = stable + 1 if change < self.tol else 0
                if stable >= self.patience:
                    break
        finally:
            bar.close()
        if self.promotion == "validated" and self.final_pass and len(state.links):
            tic = time.perf_counter()
            info = self._final_pass(An, Bn, state, rng)
            info.update(round=len(history), links=len(state.links), seconds=round(time.perf_counter() - tic, 4))
            history.append(info)
        return LinkResult(state.links, state.link_post, state.link_votes, history)

    def _make_proposer(self):
        if self.proposer is not None:
            return self.proposer
        if self.candidates == "ann":
            from crossembed.linking.candidates import AnnProposer

            return AnnProposer(ann_k=self.ann_k, num_threads=self.num_threads)
        return None

    # ------------------------------------------------------------------ paper / capped
    def _round_paper(self, An, Bn, state: _State, rng) -> Dict[str, Any]:
        pool = state.pool()
        P, S = len(pool), len(state.seeds)
        m, size = self._schedule(P, S)
        self._begin_round(An, Bn, pool, rng)
        pool_a_unit = An[pool[:, 0]]
        small = P < self.small_pool
        subset_size = None
        if small and self.promotion == "capped":
            m = max(m, self.min_views)
            subset_size = max(2, math.ceil(self.subsample * P))
        if small:
            size = P
        round_pairs, round_scores = [], []
        sizes = []
        for _ in range(m):
            if small and subset_size is None:  # paper: every anchor in every view
                view = np.arange(P)
            elif subset_size is not None:
                sub = rng.choice(P, size=subset_size, replace=False)
                view = self._view_anchors(pool_a_unit, S, subset_size, rng, sub)
            else:  # FPS view, seeds always kept
                view = np.union1d(self._view_anchors(pool_a_unit, S, size, rng, None), np.arange(S))
            sizes.append(len(view))
            SA = self._signatures(An, An[pool[view, 0]])
            SB = self._signatures(Bn, Bn[pool[view, 1]])
            pairs, scores = self._propose(SA, SB, state.seeds[:, 0], state.seeds[:, 1])
            state.table.add(pairs)
            round_pairs.append(pairs)
            round_scores.append(scores)
        uniq, mean_csls, round_votes = _merge_views(round_pairs, round_scores, state.n_b)
        info: Dict[str, Any] = {"pool": P, "views": m, "anchors": int(np.median(sizes)), "proposals": len(uniq)}
        if len(uniq) == 0:
            info.update(promoted=0, threshold=None)
            return info
        post = state.table.posterior_mean(uniq)
        if self.posterior:
            thr = kernels.otsu_threshold(post)
            keep = post >= thr if self.promotion == "paper" else post > thr
            if self.promotion == "capped" and not keep.any():  # all equal: nothing separates
                keep = post >= thr
        else:
            thr = self.vote_fraction * m
            keep = round_votes >= thr
        cand, cpost, ccsls = uniq[keep], post[keep], mean_csls[keep]
        if self.promotion == "paper":
            new = state.table.promote(
                cand, cpost, threshold=-np.inf, exclude_a=state.seeds[:, 0], exclude_b=state.seeds[:, 1]
            )
        else:
            rank = _rank_scores(cpost, ccsls)
            new = state.table.promote(
                cand,
                rank,
                threshold=-np.inf,
                exclude_a=state.seeds[:, 0],
                exclude_b=state.seeds[:, 1],
                limit=len(state.links) + P,
            )
        info.update(threshold=float(thr), promoted=_count_new(new, state.links))
        if len(new):
            state.set_links(new, state.table.posterior_mean(new), state.table.votes(new))
        return info

    # ------------------------------------------------------------------ validated (ours)
    def _round_validated(self, An, Bn, state: _State, rng) -> Dict[str, Any]:
        pool = state.pool()
        P, S = len(pool), len(state.seeds)
        m, size = self._schedule(P, S)
        m = max(m, self.min_views)
        self._begin_round(An, Bn, pool, rng)
        # views keep a fixed fraction of the pool: shrinking them (the paper's s_t) starves weak
        # encoder pairs of anchors; beyond max_view_anchors FPS thins the view for speed
        sub_size = max(2, math.ceil(self.subsample * P))
        size = min(sub_size, max(self.max_view_anchors, S))
        pool_a_unit = An[pool[:, 0]]
        in_view = np.zeros((m, P), bool)
        kept_pairs, kept_scores = [], []
        correct = wrong = 0
        seed_pos_a = np.full(state.n_a, -1, np.int64)
        seed_pos_a[state.seeds[:, 0]] = np.arange(S)
        seed_pos_b = np.full(state.n_b, -1, np.int64)
        seed_pos_b[state.seeds[:, 1]] = np.arange(S)
        pos_a = np.full(state.n_a, -1, np.int64)
        pos_a[pool[:, 0]] = np.arange(P)
        pos_b = np.full(state.n_b, -1, np.int64)
        pos_b[pool[:, 1]] = np.arange(P)
        sizes = []
        for v in range(m):
            sub = rng.choice(P, size=sub_size, replace=False)
            view = self._view_anchors(pool_a_unit, S, size, rng, sub)
            in_view[v, view] = True
            sizes.append(len(view))
            SA = self._signatures(An, An[pool[view, 0]])
            SB = self._signatures(Bn, Bn[pool[view, 1]])
            pairs, scores = self._propose(SA, SB, pool[view, 0], pool[view, 1])
            # held-out seeds: a proposal touching a seed row is right only if it is the seed pair
            sa, sb = seed_pos_a[pairs[:, 0]], seed_pos_b[pairs[:, 1]]
            touch = (sa >= 0) | (sb >= 0)
            ok = touch & (sa == sb)
            correct += int(ok.sum())
            wrong += int((touch & ~ok).sum())
            kept_pairs.append(pairs[~touch])
            kept_scores.append(scores[~touch])
        uniq, mean_csls, votes = _merge_views(kept_pairs, kept_scores, state.n_b)
        est_precision = correct / (correct + wrong) if correct + wrong else 0.0
        info: Dict[str, Any] = {
            "pool": P,
            "views": m,
            "anchors": int(np.median(sizes)),
            "proposals": len(uniq),
            "holdout_precision": round(est_precision, 4),
            "holdout_recall": round(float(correct / max(1, (~in_view[:, :S]).sum())), 4),
        }
        if len(uniq) == 0:
            info.update(promoted=0, threshold=None)
            return info
        # views in which a pair could vote: neither of its rows was an anchor there
        pa, pb = pos_a[uniq[:, 0]], pos_b[uniq[:, 1]]
        blocked = (in_view[:, np.maximum(pa, 0)] & (pa >= 0)) | (in_view[:, np.maximum(pb, 0)] & (pb >= 0))
        n_elig = m - blocked.sum(axis=0)
        post = (1.0 + votes) / (2.0 + n_elig)
        if self.posterior:
            thr = kernels.otsu_threshold(post)
            keep = (post > thr) & (votes >= 2)
        else:
            thr = self.vote_fraction
            keep = votes >= self.vote_fraction * np.maximum(n_elig, 1)
        # growth follows the measured precision: grow by (precision x pool) while the held-out
        # precision does not fall; when it falls, keep the size and only re-rank (swap links)
        improving = est_precision >= state.best_precision
        state.best_precision = max(state.best_precision, est_precision)
        limit = len(state.links) + (max(S, math.ceil(est_precision * P)) if improving else 0)
        rank = _rank_scores(post[keep], mean_csls[keep])
        new = kernels.VoteTable().promote(
            uniq[keep], rank, threshold=-np.inf, exclude_a=state.seeds[:, 0], exclude_b=state.seeds[:, 1], limit=limit
        )
        info.update(threshold=float(thr), promoted=_count_new(new, state.links), limit=int(limit))
        if len(new):
            idx = _lookup(uniq, new, state.n_b)
            state.set_links(new, post[idx], votes[idx])
        return info

    def _final_pass(self, An, Bn, state: _State, rng, folds: int = 3) -> Dict[str, Any]:
        """Cross-validated relinking with the whole pool.

        The pool links are split into ``folds`` parts; view ``f`` uses every
        anchor except part ``f`` (seeds always), so each link is judged once
        by anchors that do not contain it and must be re-proposed there to
        survive. Rows outside the pool are judged by all views and linked
        when a majority proposes the same partner.
        """
        S = len(state.seeds)
        links = state.links
        fold = rng.permutation(len(links)) % folds
        self._begin_round(An, Bn, state.pool(), rng)
        proposals, fold_scores = [], []
        for f in range(folds):
            anchors = np.concatenate([state.seeds, links[fold != f]])
            SA = self._signatures(An, An[anchors[:, 0]])
            SB = self._signatures(Bn, Bn[anchors[:, 1]])
            pairs, scores = self._propose(SA, SB, anchors[:, 0], anchors[:, 1])
            proposals.append(pairs)
            fold_scores.append(scores)
        uniq, mean_score, votes = _merge_views(proposals, fold_scores, state.n_b)
        in_pool_a = np.zeros(state.n_a, bool)
        in_pool_a[links[:, 0]] = True
        in_pool_b = np.zeros(state.n_b, bool)
        in_pool_b[links[:, 1]] = True
        touches_pool = in_pool_a[uniq[:, 0]] | in_pool_b[uniq[:, 1]]
        link_set = _lookup_set(links, state.n_b)
        is_link = np.isin(uniq[:, 0] * state.n_b + uniq[:, 1], link_set)
        keep = np.where(touches_pool, is_link, votes * 2 > folds)
        # rows without a partner on the other side still find a mutual neighbour; their CSLS
        # scores sit in a lower mode, which Otsu separates when the overlap is partial
        thr = kernels.otsu_threshold(mean_score[keep]) if keep.sum() > 1 and self.score_filter else -np.inf
        keep &= mean_score > thr
        cand = uniq[keep]
        confirmed = is_link[keep]
        # confirmed pool links first, then new majority pairs; greedy keeps it one-to-one
        rank = _rank_scores(confirmed.astype(np.float64), votes[keep].astype(np.float64))
        final = kernels.VoteTable().promote(
            cand, rank, threshold=-np.inf, exclude_a=state.seeds[:, 0], exclude_b=state.seeds[:, 1]
        )
        post_of = dict(zip(map(tuple, links.tolist()), state.link_post.tolist()))
        votes_of = dict(zip(map(tuple, links.tolist()), state.link_votes.tolist()))
        post = np.array(
            [
                post_of.get(p, votes[_lookup(uniq, np.array([p]), state.n_b)[0]] / folds)
                for p in map(tuple, final.tolist())
            ]
        )
        vts = np.array([votes_of.get(p, 0) for p in map(tuple, final.tolist())], np.int64)
        n_confirmed = int(sum(1 for p in map(tuple, final.tolist()) if p in post_of))
        info: Dict[str, Any] = {
            "pool": len(links) + S,
            "views": folds,
            "anchors": int(len(links) * (folds - 1) / folds) + S,
            "proposals": len(uniq),
            "final_pass": True,
            "threshold": float(thr),
            "promoted": len(final) - n_confirmed,
            "dropped": len(links) - n_confirmed,
        }
        state.set_links(final, post, vts)
        return info


class _State:
    """Seeds, the current links and the cumulative vote table of one fit."""

    def __init__(self, seeds: np.ndarray, n_a: int, n_b: int):
        self.seeds = seeds
        self.n_a, self.n_b = n_a, n_b
        self.links = np.zeros((0, 2), np.int64)
        self.link_post = np.zeros(0)
        self.link_votes = np.zeros(0, np.int64)
        self.table = kernels.VoteTable()
        self.best_precision = 0.0

    def pool(self) -> np.ndarray:
        return np.concatenate([self.seeds, self.links]) if len(self.links) else self.seeds

    def set_links(self, links, post, votes):
        self.links = np.asarray(links, np.int64).reshape(-1, 2)
        self.link_post = np.asarray(post, np.float64)
        self.link_votes = np.asarray(votes, np.int64)


def _without_own_anchor(S: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Signatures with each anchor row's own column zeroed, those rows re-normalised."""
    S = np.array(S, dtype=np.float32)
    S[rows, np.arange(len(rows))] = 0.0
    S[rows] = unit_rows(S[rows])
    return S


def _merge_views(pairs_list, scores_list, n_b: int):
    """Unique pairs over views, their mean CSLS score and their vote count."""
    pairs = np.concatenate(pairs_list) if pairs_list else np.zeros((0, 2), np.int64)
    scores = np.concatenate(scores_list).astype(np.float64) if scores_list else np.zeros(0)
    if len(pairs) == 0:
        return pairs.reshape(0, 2), scores, np.zeros(0, np.int64)
    key = pairs[:, 0] * n_b + pairs[:, 1]
    ukey, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    mean = np.bincount(inv, weights=scores, minlength=len(ukey)) / counts
    uniq = np.stack([ukey // n_b, ukey % n_b], axis=1)
    return uniq, mean, counts.astype(np.int64)


def _lookup(uniq: np.ndarray, pairs: np.ndarray, n_b: int) -> np.ndarray:
    """Positions of ``pairs`` inside the sorted unique pair list ``uniq``."""
    return np.searchsorted(uniq[:, 0] * n_b + uniq[:, 1], pairs[:, 0] * n_b + pairs[:, 1])


def _lookup_set(pairs: np.ndarray, n_b: int) -> np.ndarray:
    return pairs[:, 0] * n_b + pairs[:, 1]


def _rank_scores(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """A score whose descending order is (primary desc, secondary desc): ranks, best = largest."""
    order = np.lexsort((-secondary, -primary))
    score = np.empty(len(order), np.float64)
    score[order] = np.arange(len(order), 0, -1, dtype=np.float64)
    return score


def _count_new(new: np.ndarray, old: np.ndarray) -> int:
    if len(old) == 0:
        return len(new)
    old_set = set(map(tuple, old.tolist()))
    return sum(1 for p in map(tuple, new.tolist()) if p not in old_set)
