"""Uncertainty-driven convolution of K Gaussian embedders (UEC steps 2-4).

An ensemble holds K fitted :class:`LaplaceEmbedder` s and three behaviour
objects, each with its own defaults, validation and saved config:

routing (:mod:`crossembed.uec.routing`)
    the per-input coefficients ``pi`` (n, K): the rank head with each model's
    languages (default when a model reads only some languages: the query's
    language and the model's probe), the rank head alone, the
    Laplace posterior (:class:`LaplaceRouting`, the paper), uniform or fixed weights.
mixing (:mod:`crossembed.uec.mixing`)
    how the K routed Gaussians become one: per-model scores side by side
    (:class:`ScoreMixing`, default, with score calibration, document hubness
    and query heads) or one convolved embedding (:class:`EmbeddingMixing`, the paper).
scoring (:mod:`crossembed.uec.scoring`)
    the similarity and the variance normalisation it goes with: the probit
    (:class:`ProbitScoring`, default).

The three are frozen objects (shared safely); :mod:`crossembed.uec.ablations` holds the rules the
default is compared with. Encode documents with ``role="passage"`` and queries with
``role="query"``. :meth:`UECEnsemble.similarity` of two lists of texts is
symmetric by default, the mean of the two retrieval directions
(``similarity(a, b) == similarity(b, a).T``); ``roles=("query", "passage")``
gives the one-way retrieval form an index scores.

A routing that ``needs_reference`` (retrieval confidence) measures queries against a reference
collection (:meth:`UECEnsemble.with_reference`, done by :meth:`UECIndex.build` with the
indexed documents). The reference is never set implicitly by ``encode`` or ``similarity``, so a
query's encoding does not depend on call order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed._config import check_plugin
from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed._rows import unit_rows
from crossembed._validation import check_choice, check_random_state
from crossembed.uec.confidence import TopHitConfidence, fit_top_hit_confidence, search_features
from crossembed.uec.crossfit import FOLDS, RoutingCheck, held_out_searches
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.mixing import ScoreMixing, mixing_from_config
from crossembed.uec.routing import RetrievalReference, default_routing, routing_from_config
from crossembed.uec.scoring import ProbitScoring, scoring_from_config

__all__ = ["FORMAT_VERSION", "UECEnsemble"]

_ROLES = ("query", "passage")
_KIND = "crossembed.uec.UECEnsemble"
#: version of the saved ensemble state (``meta["format"]``); other versions are refused
FORMAT_VERSION = 5
#: fit anchors a confidence is calibrated on at most (a random subset)
CONFIDENCE_PAIRS = 4096
#: a collection row whose model-0 cosine to an anchor's positive reaches this is that positive
_SAME_TEXT_COSINE = 1.0 - 1e-5


# the methods the ensemble calls on each behaviour object
_ROUTING_METHODS = ("route", "check_models", "get_config")
_SCORING_METHODS = ("normalize", "normalize_mixture", "prepare", "similarity", "get_config")
_MIXING_METHODS = ("bind", "mix", "get_config")


def _check_roles(roles) -> Optional[Tuple[str, str]]:
    """``(role of a, role of b)`` of :meth:`UECEnsemble.similarity`, or None (the symmetric form)."""
    if roles is None:
        return None
    if isinstance(roles, str) or not isinstance(roles, (tuple, list)) or len(roles) != 2:
        raise TypeError(f"roles must be None or a pair of roles such as ('query', 'passage'), got {roles!r}")
    return check_choice(roles[0], "roles[0]", _ROLES), check_choice(roles[1], "roles[1]", _ROLES)


def _pair_subset(n: int, random_state) -> np.ndarray:
    """Sorted rows of at most :data:`CONFIDENCE_PAIRS` of ``n`` pairs (all when there are fewer)."""
    if n <= CONFIDENCE_PAIRS:
        return np.arange(n)
    return np.sort(check_random_state(random_state).permutation(n)[:CONFIDENCE_PAIRS])


def _is_among(rows: np.ndarray, among: np.ndarray) -> np.ndarray:
    """(n,) bool: which ``rows`` have cosine >= 1 - 1e-5 to a row of ``among`` (the same text, encoded again)."""
    a, b = unit_rows(rows).astype(np.float32), unit_rows(among).astype(np.float32)
    return (
        np.concatenate([(a[s : s + 1024] @ b.T).max(axis=1) >= _SAME_TEXT_COSINE for s in range(0, len(a), 1024)])
        if len(a)
        else np.zeros(0, bool)
    )


def _texts(x) -> bool:
    return isinstance(x, (list, tuple)) and (not x or isinstance(x[0], str))


def _check_embedders(embedders) -> List[LaplaceEmbedder]:
    embedders = list(embedders) if not isinstance(embedders, LaplaceEmbedder) else [embedders]
    if not embedders:
        raise ValueError("embedders must hold at least one LaplaceEmbedder")
    for e in embedders:
        if not isinstance(e, LaplaceEmbedder):
            raise TypeError(f"embedders must hold LaplaceEmbedder objects, got {type(e).__name__}")
        if not e.is_fitted:
            raise ValueError("every embedder must be fitted (call fit() or load())")
    return embedders


class UECEnsemble:
    """Uncertainty-weighted ensemble of :class:`LaplaceEmbedder` s.

    Parameters
    ----------
    embedders : sequence of LaplaceEmbedder
        Fitted embedders (K >= 1).
    routing : routing object
        The per-input coefficients (:mod:`crossembed.uec.routing`; default
        :func:`~crossembed.uec.routing.default_routing`: :class:`~crossembed.uec.routing.LanguageRouting`
        when an encoder's name says it reads only some languages, else
        :class:`~crossembed.uec.routing.RankRouting`, T = 1).
    mixing : mixing object
        How the routed Gaussians are combined (:mod:`crossembed.uec.mixing`;
        default :class:`~crossembed.uec.mixing.ScoreMixing` with calibrated
        scores, hubness 1/2 and query heads where every model has one).
    scoring : scoring object
        The similarity (:mod:`crossembed.uec.scoring`; default
        :class:`~crossembed.uec.scoring.ProbitScoring`).
    reference : RetrievalReference or None
        The collection a routing that ``needs_reference`` measures queries against; use
        :meth:`with_reference` rather than passing one.
    confidence : TopHitConfidence or None
        The calibrated top-hit confidence; use :meth:`fit_confidence` rather than passing one.
    routing_check : RoutingCheck or None
        The held-out check of the routing :meth:`fit_confidence` made; use it rather than passing one.

    Attributes
    ----------
    routing, mixing, scoring
        The behaviour objects in use (``mixing`` with its defaults resolved).
    reference_ : RetrievalReference or None
    confidence_ : TopHitConfidence or None
        What :meth:`top_hit_confidence` applies (None until :meth:`fit_confidence`).
    routing_check_ : RoutingCheck or None
        Held-out nDCG@10 of the fit pairs with the rank heads and with a fixed log-rank, and whether the
        rank heads were kept (:mod:`crossembed.uec.crossfit`; None until :meth:`fit_confidence`).
    """

    def __init__(
        self,
        embedders: Sequence[LaplaceEmbedder],
        *,
        routing=None,
        mixing=None,
        scoring=None,
        reference: Optional[RetrievalReference] = None,
        confidence: Optional[TopHitConfidence] = None,
        routing_check: Optional[RoutingCheck] = None,
    ):
        self.embedders = _check_embedders(embedders)
        if routing is None:
            routing = default_routing([e.encoder_name for e in self.embedders], self.heads)
        self.routing = check_plugin(routing, "routing", _ROUTING_METHODS, "RankRouting()")
        self.scoring = check_plugin(
            ProbitScoring() if scoring is None else scoring, "scoring", _SCORING_METHODS, "ProbitScoring()"
        )
        mixing = check_plugin(ScoreMixing() if mixing is None else mixing, "mixing", _MIXING_METHODS, "ScoreMixing()")
        heads = self.heads
        self.routing.check_models(heads)
        self.mixing = mixing.bind(heads, self.scoring)
        if reference is not None and not isinstance(reference, RetrievalReference):
            raise TypeError(f"reference must be a RetrievalReference or None, got {type(reference).__name__}")
        self.reference_ = reference
        if confidence is not None and not isinstance(confidence, TopHitConfidence):
            raise TypeError(f"confidence must be a TopHitConfidence or None, got {type(confidence).__name__}")
        self.confidence_ = confidence
        if routing_check is not None and not isinstance(routing_check, RoutingCheck):
            raise TypeError(f"routing_check must be a RoutingCheck or None, got {type(routing_check).__name__}")
        self.routing_check_ = routing_check

    @property
    def heads(self) -> List[ModelHeads]:
        """Each embedder's :class:`~crossembed.uec.heads.ModelHeads`."""
        return [e.heads_ for e in self.embedders]

    @property
    def n_models(self) -> int:
        return len(self.embedders)

    @property
    def dim(self) -> int:
        """Dimension of the encoded means (the mixing's: ``sum D_k`` (+ K hubness coordinates) or ``min D_k``)."""
        return self.mixing.dim([e.dim for e in self.embedders])

    @property
    def needs_reference(self) -> bool:
        """True when the routing measures queries against a reference collection (:meth:`with_reference`)."""
        return bool(self.routing.needs_reference)

    @property
    def has_reference(self) -> bool:
        """True once a reference collection is set (:meth:`with_reference`)."""
        return self.reference_ is not None

    def with_reference(self, documents) -> UECEnsemble:
        """A new ensemble whose routing measures queries against ``documents``; ``self`` is left as it was.

        ``documents``: K items, model ``k``'s documents as a
        :class:`GaussianEmbedding` or an ``(N, D_k)`` array (``N >= 2``); only
        the L2-normalised means are kept (and saved).
        """
        reference = RetrievalReference.from_components(documents, [e.dim for e in self.embedders])
        return self._copy(reference=reference)

    def _copy(self, **changes) -> UECEnsemble:
        """A new ensemble of the same embedders and behaviour objects, ``changes`` (reference, confidence,
        routing and its check) applied."""
        kw = {
            "routing": self.routing,
            "reference": self.reference_,
            "confidence": self.confidence_,
            "routing_check": self.routing_check_,
            **changes,
        }
        return type(self)(self.embedders, mixing=self.mixing, scoring=self.scoring, **kw)

    # ------------------------------------------------------------------ maths
    def _check_components(self, components: Sequence[GaussianEmbedding]) -> List[GaussianEmbedding]:
        comps = list(components)
        if len(comps) != self.n_models:
            raise ValueError(f"components must hold {self.n_models} GaussianEmbeddings, got {len(comps)}")
        n = len(comps[0]) if isinstance(comps[0], GaussianEmbedding) else None
        for k, c in enumerate(comps):
            if not isinstance(c, GaussianEmbedding):
                raise TypeError(f"components[{k}] must be a GaussianEmbedding, got {type(c).__name__}")
            if len(c) != n:
                raise ValueError(f"components[{k}] has {len(c)} rows but components[0] has {n}")
            if c.dim != self.embedders[k].dim:
                raise ValueError(f"components[{k}] has dimension {c.dim} but embedder {k} has {self.embedders[k].dim}")
        return comps

    @property
    def needs_texts(self) -> bool:
        """True when the routing reads the query texts (give :meth:`combine` its ``texts``)."""
        return bool(getattr(self.routing, "needs_texts", False))

    def _route(self, comps, role: str, texts):
        """``routing.route`` with the reference and the texts (queries only)."""
        if texts is not None and (isinstance(texts, str) or len(texts) != len(comps[0])):
            raise ValueError(f"texts must hold {len(comps[0])} strings, one per input")
        texts = None if texts is None or role == "passage" else list(texts)
        return self.routing.route(comps, self.heads, role=role, reference=self.reference_, texts=texts)

    def coefficients(self, components: Sequence[GaussianEmbedding], *, role: str = "query", texts=None) -> np.ndarray:
        """``pi`` of shape (n, K) for per-model Gaussians of the same inputs.

        ``components`` as :meth:`combine` hands them to the routing (normalised by :attr:`scoring`);
        ``texts`` as for :meth:`combine`.
        """
        check_choice(role, "role", _ROLES)
        return self._route(self._check_components(components), role, texts)[0]

    def combine(self, components: Sequence[GaussianEmbedding], *, role: str = "query", texts=None) -> GaussianEmbedding:
        """Ensemble Gaussians from the K models' Gaussians of the same inputs.

        Parameters
        ----------
        components : sequence of K GaussianEmbedding
            Model ``k``'s output for the same ``n`` inputs (e.g. from
            :meth:`LaplaceEmbedder.transform` of cached embeddings).
        role : {"query", "passage"}
            Documents stay unweighted under score mixing and carry no routing signal.
        texts : list of str or None
            The inputs' texts, read by a routing that reads them (:attr:`needs_texts`)
            for queries (without them it routes as it can and warns).
        """
        check_choice(role, "role", _ROLES)
        comps = [self.scoring.normalize(c) for c in self._check_components(components)]
        pi, comps = self._route(comps, role, texts)
        return self.mixing.mix(comps, pi, self.heads, role=role, scoring=self.scoring)

    # ------------------------------------------------------------------ text API
    def encode(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = True
    ) -> GaussianEmbedding:
        """Encode texts with every model and combine: ``GaussianEmbedding(mean, var, weights)``."""
        comps = self.encode_components(texts, role=role, batch_size=batch_size, show_progress_bar=show_progress_bar)
        return self.combine(comps, role=role, texts=texts)

    def encode_components(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = True
    ) -> List[GaussianEmbedding]:
        """Each model's Gaussians of ``texts`` (before combining), one per embedder."""
        check_choice(role, "role", _ROLES)
        bar = tqdm(self.embedders, desc=f"UEC encode ({role})", disable=not show_progress_bar, unit="model")
        return [e.encode(texts, role=role, batch_size=batch_size, show_progress_bar=False) for e in bar]

    def _checked(self, g: GaussianEmbedding, name: str) -> GaussianEmbedding:
        if not isinstance(g, GaussianEmbedding):
            raise TypeError(f"{name} must be a GaussianEmbedding (from encode()), got {type(g).__name__}")
        if g.dim != self.dim:
            raise ValueError(f"{name} has dimension {g.dim} but this ensemble produces {self.dim}")
        return g

    def similarity(self, a, b, *, roles=None, num_threads: Optional[int] = None) -> np.ndarray:
        """Similarity matrix ``(len(a), len(b))`` under :attr:`scoring`.

        Parameters
        ----------
        a, b : list of str or GaussianEmbedding
            Texts, or Gaussians from :meth:`encode` (scored as they are: the scoring itself is symmetric).
        roles : None or (str, str)
            None (default): two lists of texts are compared both ways, ``(S(a, b) + S(b, a).T) / 2``
            with ``S(x, y)`` the retrieval form below, so ``similarity(a, b) == similarity(b, a).T``.
            ``("query", "passage")``: the retrieval form, ``a`` encoded as queries (routed, mapped by
            the query heads) and ``b`` as documents (with their hubness), as an index scores them.
        num_threads : int or None
        """
        pair = _check_roles(roles)
        if pair is None and _texts(a) and _texts(b):
            forward = self.similarity(a, b, roles=("query", "passage"), num_threads=num_threads)
            backward = self.similarity(b, a, roles=("query", "passage"), num_threads=num_threads)
            return 0.5 * (forward + backward.T)
        role_a, role_b = pair or ("query", "passage")
        if _texts(b):
            b = self.encode(list(b), role=role_b, show_progress_bar=False)
        if _texts(a):
            a = self.encode(list(a), role=role_a, show_progress_bar=False)
        a, b = self._checked(a, "a"), self._checked(b, "b")
        return self.scoring.similarity(a.mean, a.var, b.mean, b.var, num_threads=num_threads)

    def topk(self, queries: GaussianEmbedding, docs, k: int, *, candidates=None, num_threads: Optional[int] = None):
        """Best ``k`` documents per query under this ensemble's scoring.

        ``docs`` is a passage :class:`GaussianEmbedding` or documents already
        prepared by ``self.scoring.prepare``; ``candidates`` (Q, M) int64
        reranks only those rows. Returns ``(scores, indices)``, best first.
        """
        q = self._checked(queries, "queries")
        if isinstance(docs, GaussianEmbedding):
            d = self._checked(docs, "docs")
            docs = self.scoring.prepare(d.mean, d.var)
        return docs.top_k(q.mean, q.var, k, candidates=candidates, num_threads=num_threads)

    # ------------------------------------------------------------------ confidence
    def _blocks(self) -> Tuple[List[int], int]:
        """Each model's block width and the hubness coordinates of a side-by-side (score-mixed) Gaussian."""
        dims = [e.dim for e in self.embedders]
        hub = self.mixing.hub_dims(len(dims)) if hasattr(self.mixing, "hub_dims") else 0
        if self.dim != sum(dims) + hub or not hasattr(self.mixing, "score_scales"):
            raise ValueError(f"a top-hit confidence needs per-model score blocks (ScoreMixing), not {self.mixing!r}")
        return dims, hub

    def _encoder_query(self, heads: ModelHeads, block: np.ndarray) -> np.ndarray:
        """The encoder's own unit query (what the rank head reads) from its block of a combined query:
        the block is ``w unit(mu W)`` with the query head ``W`` (invertible: the MAP near the identity)."""
        q = block.astype(np.float64) / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-30)
        head = heads.query_head
        if self.mixing.query_head and head is not None and not head.is_identity:
            q = np.linalg.solve(np.asarray(head.weight, np.float64).T, q.T).T
        return q

    def search_features(self, queries: GaussianEmbedding, scores, docs) -> np.ndarray:
        """(Q, F) features of a search (:func:`crossembed.uec.confidence.search_features`; pads give a zero row).

        ``queries`` from :meth:`encode`, ``scores`` (Q, m) their best scores (best first, ``-inf`` pads)
        and ``docs`` (Q, m, D) those documents' means; :data:`~crossembed.uec.confidence.DEPTH` results
        are what the confidence was calibrated on.
        """
        dims, hub = self._blocks()
        q = self._checked(queries, "queries")
        # each query block is w_k = pi_k c_k times a unit vector: the routing weights are read off the
        # blocks, so queries sent as bare means (the service) get the same features as encoded ones
        cuts = np.cumsum(dims)[:-1]
        norms = np.stack([np.linalg.norm(b, axis=1) for b in np.split(q.mean[:, : sum(dims)], cuts, axis=1)], axis=1)
        pi = norms / self.mixing.score_scales(self.heads)[None, :]
        pi = pi / np.maximum(pi.sum(axis=1, keepdims=True), 1e-30)
        log_rank = np.zeros(len(q))
        for k, (h, block) in enumerate(zip(self.heads, np.split(q.mean[:, : sum(dims)], cuts, axis=1))):
            log_rank += pi[:, k] * h.predicted_log_rank(self._encoder_query(h, block))
        feats, has_hit = search_features(GaussianEmbedding(q.mean, q.var, pi), scores, docs, dims, hub, log_rank)
        return np.where(has_hit[:, None], feats, 0.0)

    def top_hit_confidence(self, queries: GaussianEmbedding, scores, docs) -> np.ndarray:
        """(Q,) float64: the calibrated probability that each query's top hit is relevant (0 with no hit).

        Arguments as :meth:`search_features`; :meth:`UECIndex.search <crossembed.uec.UECIndex.search>`
        with ``return_confidence=True`` calls it. ValueError until :meth:`fit_confidence`.
        """
        if self.confidence_ is None:
            raise ValueError("this ensemble has no top-hit confidence: fit_confidence(pairs) first")
        p = self.confidence_.probability(self.search_features(queries, scores, docs))
        return np.where(np.isfinite(np.asarray(scores, dtype=np.float64)[:, 0]), p, 0.0)

    def fit_confidence(
        self,
        pairs,
        *,
        documents: Optional[Sequence[str]] = None,
        folds: int = FOLDS,
        batch_size: int = 64,
        random_state=0,
        show_progress_bar: bool = True,
    ) -> UECEnsemble:
        """A new ensemble calibrated on held-out fit pairs; ``self`` is left as it was.

        Cross-fitted over ``folds`` folds of the pairs (:mod:`crossembed.uec.crossfit`: each fold's
        queries searched by heads refitted on the other folds), it gets

        * its routing checked: the rank heads are kept only where they beat one fixed log-rank
          (uniform weights where every model reads the query) on the held-out pairs, else the
          routing's ``fixed_log_rank`` is set (:attr:`routing_check_` says which and by how much);
        * a top-hit confidence (:attr:`confidence_`) fitted on those held-out searches.

        Parameters
        ----------
        pairs : sequence of (query, positive) str pairs
            The fit pairs (those the embedders were fitted on serve: no other labels are needed).
            Each query is searched among the distinct positives and ``documents``; whether its
            top hit is its own positive is what the confidence learns to predict.
        documents : sequence of str or None
            More documents to search among (e.g. the collection to be indexed), so the calibration
            sees the distractors of real searches (default none).
        folds : int
            Folds of the pairs (default 5, at least 2).
        batch_size, show_progress_bar
            The encoding's.
        random_state : int, Generator or None
            Picks the at most 4,096 pairs searched and the folds (default 0).
        """
        pairs = list(pairs)
        if not pairs or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise ValueError("pairs must be a non-empty list of (query, positive) pairs")
        queries = [str(q) for q, _ in pairs]
        positives = [str(p) for _, p in pairs]
        opts = {"batch_size": batch_size, "show_progress_bar": show_progress_bar}
        docs = None if documents is None else self.encode_components(list(documents), role="passage", **opts)
        distinct, owner = np.unique(np.array(positives, dtype=object).astype(str), return_inverse=True)
        encoded = self.encode_components(list(distinct), role="passage", **opts)
        return self.fit_confidence_components(
            self.encode_components(queries, role="query", **opts),
            [c[np.asarray(owner).reshape(-1)] for c in encoded],  # one row per pair, equal rows per text
            documents=docs,
            texts=queries,
            folds=folds,
            random_state=random_state,
        )

    def fit_confidence_components(
        self, queries, positives, *, documents=None, texts=None, folds: int = FOLDS, random_state=0
    ) -> UECEnsemble:
        """:meth:`fit_confidence` from per-model Gaussians: ``queries``, ``positives`` and ``documents``
        as K GaussianEmbeddings each (model ``k``'s, as :meth:`combine` takes them; ``positives`` row
        ``i`` pairs with ``queries`` row ``i``), ``texts`` every query's text. Every pair refits the
        heads; at most 4,096 (picked by ``random_state``) are searched."""
        q_comps, p_comps = self._check_components(queries), self._check_components(positives)
        n = len(q_comps[0])
        if len(p_comps[0]) != n:
            raise ValueError(f"positives must hold {n} rows (one per query), got {len(p_comps[0])}")
        if texts is not None and (isinstance(texts, str) or len(texts) != n):
            raise ValueError(f"texts must hold {n} strings, one per query")
        _, first, owner = np.unique(p_comps[0].mean, axis=0, return_index=True, return_inverse=True)
        collection = [GaussianEmbedding(c.mean[first], c.var[first]) for c in p_comps]
        if documents is not None:  # a document that is one of the positives is searched once
            d_comps = self._check_components(documents)
            new = ~_is_among(d_comps[0].mean, collection[0].mean)
            collection = [
                GaussianEmbedding(np.concatenate([c.mean, d.mean[new]]), np.concatenate([c.var, d.var[new]]))
                for c, d in zip(collection, d_comps)
            ]
        # pairs with one query (a word with several glosses) share their positives as right answers
        same = np.array(list(texts), dtype=object).astype(str) if texts is not None else q_comps[0].mean
        groups = np.unique(same, axis=0, return_inverse=True)[1].reshape(-1)
        rng = check_random_state(random_state)
        held = held_out_searches(
            self,
            q_comps,
            p_comps,
            collection,
            np.asarray(owner).reshape(-1),
            _pair_subset(n, rng),
            texts=None if texts is None else list(texts),
            groups=groups,
            folds=folds,
            random_state=rng,
        )
        confidence = fit_top_hit_confidence(held.features, held.correct)
        return self._copy(routing=held.routing, confidence=confidence, routing_check=held.check)

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays (each embedder's prefixed ``m{k}.``, the reference's) and JSON metadata of the whole ensemble."""
        arrays: Dict[str, np.ndarray] = {}
        metas = []
        for k, e in enumerate(self.embedders):
            arr, meta = e.get_state()
            arrays.update({f"m{k}.{name}": v for name, v in arr.items()})
            metas.append(meta)
        if self.reference_ is not None:
            arrays.update(self.reference_.get_state())
        if self.confidence_ is not None:
            arrays.update(self.confidence_.get_state())
        meta = {
            "format": FORMAT_VERSION,
            "embedders": metas,
            "routing": self.routing.get_config(),
            "mixing": self.mixing.get_config(),
            "scoring": self.scoring.get_config(),
            "has_reference": self.reference_ is not None,
            "has_confidence": self.confidence_ is not None,
            "routing_check": None if self.routing_check_ is None else self.routing_check_.get_config(),
        }
        return arrays, meta

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], meta: Dict[str, Any], *, encoders=None) -> UECEnsemble:
        """Rebuild from :meth:`get_state`; ``encoders`` (K items) override the stored names."""
        found = meta.get("format")
        if found != FORMAT_VERSION:
            raise ValueError(
                f"UECEnsemble state has format version {found!r}, this release reads version {FORMAT_VERSION}: "
                "refit the ensemble"
            )
        metas = meta["embedders"]
        if encoders is not None and len(encoders) != len(metas):
            raise ValueError(f"encoders must hold {len(metas)} items, got {len(encoders)}")
        embedders = []
        for k, m in enumerate(metas):
            prefix = f"m{k}."
            arr = {name[len(prefix) :]: v for name, v in arrays.items() if name.startswith(prefix)}
            embedders.append(LaplaceEmbedder.from_state(arr, m, encoder=None if encoders is None else encoders[k]))
        reference = RetrievalReference.from_state(arrays, len(metas)) if meta["has_reference"] else None
        return cls(
            embedders,
            routing=routing_from_config(meta["routing"]),
            mixing=mixing_from_config(meta["mixing"]),
            scoring=scoring_from_config(meta["scoring"]),
            reference=reference,
            confidence=TopHitConfidence.from_state(arrays) if meta["has_confidence"] else None,
            routing_check=None if meta["routing_check"] is None else RoutingCheck.from_config(meta["routing_check"]),
        )

    def save(self, path) -> Path:
        """Write the fitted ensemble to ``path`` (atomic, checksummed, versioned): the :meth:`get_state` an
        index file holds, the encoders by name."""
        arrays, meta = self.get_state()
        return save_arrays(path, _KIND, arrays, meta)

    @classmethod
    def load(cls, path, *, encoders=None) -> UECEnsemble:
        """Read an ensemble written by :meth:`save`; ``encoders`` (K items) override the stored names.

        Raises ValueError for another state version and :class:`~crossembed._io.CorruptFileError`
        (a ValueError) for a truncated, edited or incomplete file.
        """
        arrays, meta = load_arrays(path, _KIND)
        try:
            return cls.from_state(arrays, meta, encoders=encoders)
        except (KeyError, TypeError) as exc:
            raise CorruptFileError(f"{path}: incomplete UECEnsemble ({type(exc).__name__}: {exc})") from None

    def __repr__(self) -> str:
        names = [e.encoder_name or type(e.encoder).__name__ for e in self.embedders]
        return f"UECEnsemble({names}, routing={self.routing!r}, mixing={self.mixing!r}, scoring={self.scoring!r})"
