"""What one model fits on its pairs for the ensemble, besides its Laplace posterior.

:class:`ModelHeads` holds, per model:

* the trace statistics of its posterior over the fit inputs (to standardise
  the Laplace routing's traces);
* its score scale, the spread of its cosine between unrelated fit texts
  (score mixing divides each model's similarity by it);
* its rank head (:mod:`crossembed.uec.rank_head`), which routes queries;
* its hubness anchors, the fit queries a document's hubness is measured against;
* optionally its query head (:mod:`crossembed.uec.query_head`), which maps queries;
* optionally its probe head (:mod:`crossembed.uec.probe`): the probability
  that the model reads an input like its fit text (real against scrambled
  anchors), which :class:`~crossembed.uec.routing.LanguageRouting` asks.

:meth:`LaplaceEmbedder.fit <crossembed.uec.LaplaceEmbedder.fit>` fits them
after the posterior (:meth:`ModelHeads.fit`), from the same random generator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Optional, Sequence

import numpy as np

from crossembed import kernels
from crossembed._rows import unit_rows
from crossembed._validation import as_matrix, check_int
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.probe import ProbeHead, fit_probe_head
from crossembed.uec.query_head import PENALTIES, QueryHead, fit_query_head
from crossembed.uec.rank_head import RankHead, fit_rank_head

__all__ = ["ModelHeads"]

#: pairs the rank and query heads are fitted on at most (the in-batch ranks are O(n^2 D))
RANK_HEAD_PAIRS = 20_000
#: fit anchors kept as the queries a document's hubness is measured against
HUB_REFERENCE_ROWS = 8192
#: pairs the score scale's unrelated cosines are drawn from
_SCALE_PAIRS = 1000
#: a document whose cosine to a fit positive reaches this is that positive (its own pair)
_SAME_TEXT_COSINE = 1.0 - 1e-5


@dataclass(eq=False)
class ModelHeads:
    """One model's fitted routing, scoring and query-mapping statistics (module docstring).

    Attributes
    ----------
    trace_mean, trace_std : float
        Mean and standard deviation (floored at 1e-12) of ``tr(Sigma(x))`` over the fit inputs.
    score_scale : float
        Standard deviation of the model's cosine between unrelated fit texts (floored at 1e-12).
    rank_head : RankHead
        Predicted log-rank of the right document per query.
    hub_reference : ndarray, shape (m, D), float32
        Unit fit anchors (at most 8,192) a document's hubness is measured against.
    hub_positives : ndarray, shape (p, D), float32
        The distinct unit positives of those anchors.
    hub_groups : ndarray, shape (m,), int64
        Row of ``hub_positives`` each anchor is paired with.
    query_head : QueryHead or None
        The query map, None when not fitted.
    probe_head : ProbeHead or None
        Real against scrambled fit anchors, None when not fitted (no scrambled anchors given).
    """

    trace_mean: float
    trace_std: float
    score_scale: float
    rank_head: RankHead
    hub_reference: np.ndarray
    hub_positives: np.ndarray
    hub_groups: np.ndarray
    query_head: Optional[QueryHead] = None
    probe_head: Optional[ProbeHead] = None

    @classmethod
    def fit(
        cls,
        anchors: np.ndarray,
        positives: np.ndarray,
        traces: np.ndarray,
        order: np.ndarray,
        rng: np.random.Generator,
        *,
        tau: float,
        query_head: bool = True,
        scrambled: Optional[np.ndarray] = None,
        query_penalties: Optional[Sequence[float]] = None,
        show_progress_bar: bool = False,
    ) -> ModelHeads:
        """Fit every head on one model's unit pair embeddings.

        Parameters
        ----------
        anchors, positives : ndarray, shape (n, D)
            Unit embeddings of the fit pairs (row ``i`` pairs up).
        traces : ndarray, shape (2n,)
            ``tr(Sigma(x))`` of the anchors then the positives under the fitted posterior.
        order : ndarray of int
            The posterior fit's shuffled pair order; its first rows are the subsample the heads use.
        rng : Generator
            The posterior fit's generator; the query head draws its seed from it.
        tau : float
            InfoNCE temperature of the query head (the posterior's ``loss_temperature``).
        query_head : bool
            Also fit the query head.
        scrambled : ndarray, shape (m, D), or None
            Embeddings of scrambled fit anchors (normalised here) (:func:`crossembed.uec.probe.scramble_sample`):
            fit the probe head on the anchors against them.
        query_penalties : sequence of float or None
            None (default): the query head's penalty is chosen from :data:`~crossembed.uec.query_head.PENALTIES`
            on held-out pairs; a sequence of at most one: fitted at that penalty, or the identity for none.
        show_progress_bar : bool
            Progress of the query head fit.
        """
        n = anchors.shape[0]
        m = min(n, _SCALE_PAIRS)
        cross = anchors[:m] @ positives[:m].T
        score_scale = max(float(cross[~np.eye(m, dtype=bool)].std()), 1e-12)
        sub = order[:RANK_HEAD_PAIRS] if n > RANK_HEAD_PAIRS else slice(None)
        keep = np.sort(order[:HUB_REFERENCE_ROWS])
        hub_positives = unit_rows(positives[keep]).astype(np.float32)
        unique, groups = np.unique(hub_positives, axis=0, return_inverse=True)
        head = None
        if query_head:
            head = fit_query_head(
                anchors[sub],
                positives[sub],
                tau=tau,
                penalties=PENALTIES if query_penalties is None else query_penalties,
                select=query_penalties is None,
                random_state=int(rng.integers(2**31)),
                show_progress_bar=show_progress_bar,
            )
        probe = None if scrambled is None else fit_probe_head(anchors[sub], unit_rows(scrambled))
        return cls(
            trace_mean=float(traces.mean()),
            trace_std=float(max(traces.std(), 1e-12)),
            score_scale=score_scale,
            rank_head=fit_rank_head(anchors[sub], positives[sub]),
            hub_reference=unit_rows(anchors[keep]).astype(np.float32),
            hub_positives=unique,
            hub_groups=groups.reshape(-1).astype(np.int64),
            query_head=head,
            probe_head=probe,
        )

    def refit(self, anchors: np.ndarray, positives: np.ndarray, rng: np.random.Generator, *, tau: float) -> ModelHeads:
        """These heads refitted on other unit pair embeddings (the cross-fitting of
        :meth:`UECEnsemble.fit_confidence <crossembed.uec.UECEnsemble.fit_confidence>`).

        The score scale, rank head, hubness anchors and query head come from the pairs, the query
        head fitted at this one's penalty (no penalty search; the identity stays the identity); the trace
        statistics (the posterior's) and the probe head (fitted on scrambled texts, not on pairs) are kept.
        """
        head = self.query_head
        penalties = () if head is None or head.is_identity else (head.penalty,)
        new = ModelHeads.fit(
            anchors,
            positives,
            np.zeros(1),  # the trace statistics are replaced below: they belong to the posterior, which is kept
            rng.permutation(len(anchors)),
            rng,
            tau=tau,
            query_head=head is not None,
            query_penalties=penalties,
        )
        return replace(new, trace_mean=self.trace_mean, trace_std=self.trace_std, probe_head=self.probe_head)

    @property
    def dim(self) -> int:
        """Dimension ``D`` of the model's embeddings."""
        return int(self.hub_reference.shape[1])

    def rows(self, embeddings, *, allow_empty: bool = False) -> np.ndarray:
        """This model's ``(n, D)`` rows from raw embeddings or a :class:`GaussianEmbedding` (its means)."""
        m = as_matrix(
            embeddings.mean if isinstance(embeddings, GaussianEmbedding) else embeddings,
            "embeddings",
            allow_empty=allow_empty,
        )
        if m.shape[1] != self.dim:
            raise ValueError(f"embeddings have dimension {m.shape[1]} but this model has {self.dim}")
        return m

    def predicted_log_rank(self, embeddings) -> np.ndarray:
        """(n,) predicted ``log(1 + rank per 1,000 candidates)`` of the right document, per input.

        ``embeddings``: raw ``(n, D)`` embeddings or a :class:`GaussianEmbedding`
        (the means are L2-normalised first).
        """
        return self.rank_head.predict(unit_rows(self.rows(embeddings)))

    def reads(self, embeddings) -> np.ndarray:
        """(n,) float64 probe probability that the model reads each input like its fit text.

        ``embeddings``: raw ``(n, D)`` embeddings or a :class:`GaussianEmbedding` (normalised first).
        """
        if self.probe_head is None:
            raise ValueError("this model has no probe head: fit its embedder from texts (fit()) or pass scrambled=")
        return self.probe_head.probability(unit_rows(self.rows(embeddings)))

    def map_queries(self, embeddings) -> np.ndarray:
        """(n, D) float32 unit queries mapped by the query head (raw embeddings or a GaussianEmbedding)."""
        if self.query_head is None:
            raise ValueError("this model has no query head: fit its embedder with query_head=True")
        return self.query_head.apply(self.rows(embeddings, allow_empty=True))

    def hubness(
        self, embeddings, *, k: int = 10, mapped_queries: bool = False, num_threads: Optional[int] = None
    ) -> np.ndarray:
        """(n,) float64 hubness ``r(d)``: the mean of each input's ``k`` best cosines to the fit anchors.

        A document close to many queries (a hub) gets a high cosine from
        every query; CSLS (Conneau et al., 2018) ranks by ``cos - r(d) / 2``.
        An input that is one of the fit positives (cosine >= 1 - 1e-5) leaves
        out the anchors paired with it: its own queries are no sign of
        hubness. ``k`` is capped at the anchors left (0 when none remain).
        ``mapped_queries``: measure against the anchors as the query head maps
        them (the queries an ensemble that maps its queries compares documents with).
        """
        ref = self.map_queries(self.hub_reference) if mapped_queries else self.hub_reference
        k = check_int(k, "k", low=1)
        m = self.rows(embeddings, allow_empty=True)
        if m.shape[0] == 0:
            return np.zeros(0)
        m = unit_rows(m).astype(np.float32)
        groups, positives = self.hub_groups, self.hub_positives
        n_ref = ref.shape[0]
        k = min(k, n_ref)
        # enough candidates to drop the largest group of anchors sharing one positive
        width = min(n_ref, k + int(np.bincount(groups).max()))
        # the tiled dot-product top-k (GEH's list kernel); the column lists it also returns are unused
        vals, idx, _, _ = kernels.topk_rows_and_columns(m, ref, width, 1, num_threads=num_threads)
        # an anchor is the input's own when its positive is the input: only listed anchors can matter
        own = kernels.candidate_dots(m, positives, groups[idx], num_threads=num_threads) >= _SAME_TEXT_COSINE
        keep = ~own
        keep &= np.cumsum(keep, axis=1) <= k  # the k best of the others
        count = keep.sum(axis=1)
        total = np.where(keep, vals.astype(np.float64), 0.0).sum(axis=1)
        return np.where(count > 0, total / np.maximum(count, 1), 0.0)

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Dict[str, np.ndarray]:
        """The heads as named arrays (what :meth:`from_state` reads)."""
        arrays = {
            "trace_stats": np.array([self.trace_mean, self.trace_std]),
            "score_scale": np.float64(self.score_scale),
            "rank_head": self.rank_head.to_array(),
            "hub_reference": self.hub_reference,
            "hub_positives": self.hub_positives,
            "hub_groups": self.hub_groups,
        }
        if self.query_head is not None:
            arrays["query_head"] = self.query_head.weight
            arrays["query_head_penalty"] = np.float64(self.query_head.penalty)
        if self.probe_head is not None:
            arrays["probe_head"] = self.probe_head.to_array()
        return arrays

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray]) -> ModelHeads:
        """Rebuild from :meth:`get_state` (``KeyError`` names a missing array)."""
        head = None
        if "query_head" in arrays:
            head = QueryHead(np.asarray(arrays["query_head"]), float(arrays["query_head_penalty"]), {})
        stats = np.asarray(arrays["trace_stats"], dtype=np.float64)
        return cls(
            trace_mean=float(stats[0]),
            trace_std=float(stats[1]),
            score_scale=float(arrays["score_scale"]),
            rank_head=RankHead.from_array(arrays["rank_head"]),
            hub_reference=np.asarray(arrays["hub_reference"]),
            hub_positives=np.asarray(arrays["hub_positives"]),
            hub_groups=np.asarray(arrays["hub_groups"]),
            query_head=head,
            probe_head=ProbeHead.from_array(arrays["probe_head"]) if "probe_head" in arrays else None,
        )
