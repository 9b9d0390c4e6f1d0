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
from crossembed._validation import check_choice
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
FORMAT_VERSION = 2


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

    Attributes
    ----------
    routing, mixing, scoring
        The behaviour objects in use (``mixing`` with its defaults resolved).
    reference_ : RetrievalReference or None
    """

    def __init__(
        self,
        embedders: Sequence[LaplaceEmbedder],
        *,
        routing=None,
        mixing=None,
        scoring=None,
        reference: Optional[RetrievalReference] = None,
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
        return type(self)(
            self.embedders, routing=self.routing, mixing=self.mixing, scoring=self.scoring, reference=reference
        )

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
        meta = {
            "format": FORMAT_VERSION,
            "embedders": metas,
            "routing": self.routing.get_config(),
            "mixing": self.mixing.get_config(),
            "scoring": self.scoring.get_config(),
            "has_reference": self.reference_ is not None,
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
