"""Routing: the per-input coefficients ``pi`` (n, K) an ensemble weights its K models by.

Every routing object has the same method, ``route(components, heads, *,
role, reference=None) -> (pi, components)``: from the K models' Gaussians of
the same inputs (as the scoring normalised them), each model's
:class:`~crossembed.uec.heads.ModelHeads`, the role (``"query"`` or
``"passage"``) and the retrieval reference when one is set, it returns the
coefficients and the Gaussians to score (a routing may change what variances
are scored). A routing whose ``needs_texts`` is true also reads the input
texts (``route(..., texts=...)``). Its ``temperature`` ``T`` is an attribute
with its own default; ``get_config()`` and :func:`routing_from_config` save
and rebuild it.

:class:`LanguageRouting` (default when a model reads only some languages)
    the rank head's ``t_k(q)`` as an expected log-rank over whether model k
    reads the query: ``c_k(q) t_k(q) + (1 - c_k(q)) t_0`` with ``t_0`` the
    log-rank of a random ranking and ``c_k(q)`` the probability that q is in
    a language the model reads (language identification of the text,
    tilted towards the fit's languages) times the model's own probe of q
    (:mod:`crossembed.uec.probe`); ``c_k = 1`` for a multilingual model.
:class:`RankRouting` (default otherwise)
    ``pi_k(q) = softmax_k(-t_k(q) / T)`` with ``t_k(q)`` the model's predicted
    log-rank of the right document (its rank head); documents are uniform.
:class:`LaplaceRouting` (the paper)
    ``softmax_k(-t_k(x) / T)`` with ``t_k(x) = tr(Sigma_k(x))``, standardised
    by the model's fit-set trace mean and std (raw traces of different models
    live on unrelated scales).
:class:`PrecisionSumRouting` (the official UEC code)
    ``softmax_k(sum_d (1 / v_kd(x)) / T)``, the total precision.
:class:`ConfidenceRouting`
    each model's retrieval confidence over a reference collection: the
    calibrated gap ``g_k(q)`` between its top-1 cosine and the mean of the
    next ``top - 1`` (:func:`crossembed.uec.rules.retrieval_gap`) as the
    score variance ``sigma_k^2(q) = (c_k / g_k(q))^2``, and
    ``pi = softmax_k(-log sigma_k^2(q) / T)`` (T = 1 is inverse-variance
    weighting). Documents carry no retrieval confidence (uniform).
:class:`UniformRouting`, :class:`FixedRouting`
    ``1/K``, or fixed global weights.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import crossembed.uec.rules as rules
from crossembed._config import Configured, from_config
from crossembed._rows import softmax_rows, unit_rows
from crossembed._validation import as_matrix, check_bool, check_int, check_positive
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads
from crossembed.uec.languages import LangidIdentifier, identifier_from_config, language_posterior, model_languages
from crossembed.uec.rank_head import RANK_SCALE

__all__ = [
    "ConfidenceRouting",
    "FixedRouting",
    "LanguageRouting",
    "LaplaceRouting",
    "PrecisionSumRouting",
    "ROUTINGS",
    "RankRouting",
    "RetrievalReference",
    "Routing",
    "UniformRouting",
    "default_routing",
    "routing_from_config",
]

_ROLES = ("query", "passage")
Routed = Tuple[np.ndarray, List[GaussianEmbedding]]


def _uniform(n: int, k: int) -> np.ndarray:
    return np.full((n, k), 1.0 / k)


def _deterministic(components: Sequence[GaussianEmbedding]) -> List[GaussianEmbedding]:
    """The same means with zero variances (scored as points)."""
    return [GaussianEmbedding(c.mean, np.zeros_like(c.var)) for c in components]


@dataclass(frozen=True)
class RetrievalReference:
    """The collection retrieval confidence is measured over, per model.

    Attributes
    ----------
    documents : list of ndarray, shape (N, D_k), float32
        Model ``k``'s unit document means.
    center, spread : ndarray, shape (K,), float64, or None
        Mean and standard deviation of ``log sigma_k^2`` over calibration
        queries (:meth:`ConfidenceRouting.calibrate`), None without them.
    """

    documents: List[np.ndarray]
    center: Optional[np.ndarray] = None
    spread: Optional[np.ndarray] = None

    @classmethod
    def from_components(cls, documents, dims: Sequence[int]) -> RetrievalReference:
        """Unit means of K items (GaussianEmbeddings or ``(N, D_k)`` arrays, one per model), ``N >= 2``."""
        if isinstance(documents, (GaussianEmbedding, np.ndarray)):
            raise TypeError("documents must be a sequence of K GaussianEmbeddings or arrays (one per model)")
        docs = list(documents)
        if len(docs) != len(dims):
            raise ValueError(f"documents must hold {len(dims)} items (one per model), got {len(docs)}")
        ref = []
        for k, d in enumerate(docs):
            m = model_matrix(d, dims[k], f"documents[{k}]")
            if m.shape[0] < 2:
                raise ValueError(f"documents[{k}] has {m.shape[0]} rows, need at least 2")
            ref.append(unit_rows(m).astype(np.float32))
        if len({r.shape[0] for r in ref}) != 1:
            raise ValueError("documents must hold the same number of rows for every model")
        return cls(ref)

    def get_state(self) -> Dict[str, np.ndarray]:
        arrays = {f"ref{k}": r for k, r in enumerate(self.documents)}
        if self.center is not None:
            arrays["confidence_center"] = self.center
            arrays["confidence_spread"] = self.spread
        return arrays

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], n_models: int) -> RetrievalReference:
        missing = [f"ref{k}" for k in range(n_models) if f"ref{k}" not in arrays]
        if missing:
            raise ValueError(f"ensemble state lacks its reference arrays {missing}")
        center = arrays.get("confidence_center")  # present only when calibrated
        spread = arrays.get("confidence_spread")
        return cls(
            [arrays[f"ref{k}"] for k in range(n_models)],
            None if center is None else np.asarray(center, dtype=np.float64),
            None if spread is None else np.asarray(spread, dtype=np.float64),
        )


def model_matrix(item, dim: int, name: str) -> np.ndarray:
    """The means of ``item`` (a GaussianEmbedding or an array), checked against a model's dimension."""
    m = as_matrix(item.mean if isinstance(item, GaussianEmbedding) else item, name)
    if m.shape[1] != dim:
        raise ValueError(f"{name} has dimension {m.shape[1]} but the model has {dim}")
    return m


class Routing(Configured):
    """Base of the routing objects: config, repr and the defaults of the optional hooks.

    A new routing subclasses it, sets ``kind``, keeps its constructor arguments
    as public attributes (they are its config), implements ``route`` and is
    added to :data:`ROUTINGS` to be loadable.
    """

    kind = ""
    #: True when queries are routed by retrieval confidence over a reference collection
    needs_reference = False
    #: True when the reference also needs calibration queries (:meth:`ConfidenceRouting.calibrate`)
    needs_calibration = False
    #: True when ``route`` also reads the input texts (``texts=``) for queries
    needs_texts = False

    def check_models(self, heads: Sequence[ModelHeads]) -> None:
        """Raise ``ValueError`` when this routing cannot route these models."""

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        """``(pi (n, K), components to score)`` (module docstring)."""
        raise NotImplementedError

    def coefficients(self, components, heads, *, role: str = "query", reference=None) -> np.ndarray:
        """Only the ``pi`` of :meth:`route`."""
        return self.route(components, heads, role=role, reference=reference)[0]


class UniformRouting(Routing):
    """``pi_k = 1/K`` for every input (the uniform ensemble, the paper's "- Unc Conv" ablation)."""

    kind = "uniform"

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        return _uniform(len(components[0]), len(components)), list(components)


class FixedRouting(Routing):
    """Fixed global weights for every input (a weighted ensemble).

    Parameters
    ----------
    weights : sequence of K floats
        Non-negative, positive sum; normalised to sum to 1.
    """

    kind = "fixed"

    def __init__(self, weights):
        w = as_matrix(weights, "weights", ndim=1, dtype=np.float64, nonnegative=True)
        if w.sum() <= 0:
            raise ValueError("weights must have a positive sum")
        self.weights = [float(x) for x in w]
        self._pi = w / w.sum()

    def check_models(self, heads: Sequence[ModelHeads]) -> None:
        if len(self.weights) != len(heads):
            raise ValueError(f"weights must hold {len(heads)} numbers (one per model), got {len(self.weights)}")

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        return np.tile(self._pi, (len(components[0]), 1)), list(components)


class _PosteriorRouting(Routing):
    """Coefficients ``softmax_k(z_k / T)`` from per-model posterior logits ``z`` (:meth:`logits`)."""

    temperature: float

    def logits(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        raise NotImplementedError

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        return softmax_rows(self.logits(components, heads) / self.temperature), list(components)


class LaplaceRouting(_PosteriorRouting):
    """The paper's coefficients ``softmax_k(-t_k(x) / T)`` from the Laplace posterior's traces.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of the standardised trace (default 10).
    standardize : bool
        Standardise each model's trace by its fit-set mean and std (default
        True); False uses raw traces (T then in raw trace units).
    """

    kind = "laplace"

    def __init__(self, temperature: float = 10.0, *, standardize: bool = True):
        self.temperature = check_positive(temperature, "temperature")
        self.standardize = check_bool(standardize, "standardize")

    def logits(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """``z`` (n, K) with ``pi = softmax(z / T)``: minus the (standardised) traces."""
        traces = np.stack([c.trace() for c in components], axis=1)
        if self.standardize:
            center = np.array([h.trace_mean for h in heads])
            scale = np.array([h.trace_std for h in heads])
            traces = (traces - center[None, :]) / scale[None, :]
        return -traces


class PrecisionSumRouting(_PosteriorRouting):
    """The official code's coefficients ``softmax_k(sum_d (1 / v_kd) / T)``.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of the precision sum (default 1).
    """

    kind = "precision_sum"

    def __init__(self, temperature: float = 1.0):
        self.temperature = check_positive(temperature, "temperature")

    def logits(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """``z`` (n, K) with ``pi = softmax(z / T)``: the precision sums."""
        return np.stack([rules.precision_sum(c.var) for c in components], axis=1)


class RankRouting(Routing):
    """Route each query by its models' predicted log-ranks, ``softmax_k(-t_k(q) / T)``.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of ``log(1 + rank per 1,000 candidates)`` (default 1).
    laplace_variances : bool
        Score the Laplace variances (True) or both sides as points (default
        False: the rank head carries no score variance).
    """

    kind = "rank"

    def __init__(self, temperature: float = 1.0, *, laplace_variances: bool = False):
        self.temperature = check_positive(temperature, "temperature")
        self.laplace_variances = check_bool(laplace_variances, "laplace_variances")

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        comps = list(components) if self.laplace_variances else _deterministic(components)
        if role == "passage":  # documents carry no rank
            return _uniform(len(components[0]), len(components)), comps
        t = np.stack([h.predicted_log_rank(c.mean) for h, c in zip(heads, components)], axis=1)
        return softmax_rows(-t / self.temperature), comps


#: the log-rank of a random ranking, ``E_u[log(1 + RANK_SCALE u)]`` for ``u ~ U(0, 1)``
CHANCE_LOG_RANK = float(((1.0 + RANK_SCALE) * np.log1p(RANK_SCALE) - RANK_SCALE) / RANK_SCALE)


def _check_languages(languages) -> List[Optional[Tuple[str, ...]]]:
    if isinstance(languages, (str, bytes)) or not isinstance(languages, Sequence) or not languages:
        raise TypeError("languages must be a list with one entry per model: language codes, or None (every language)")
    out = []
    for k, langs in enumerate(languages):
        if langs is None:
            out.append(None)
        elif isinstance(langs, (str, bytes)) or not all(isinstance(x, str) for x in langs) or not langs:
            raise TypeError(f"languages[{k}] must be None or a non-empty list of language codes, got {langs!r}")
        else:
            out.append(tuple(langs))
    return out


class LanguageRouting(Routing):
    """Rank-head routing that also asks whether each model reads the query (module docstring).

    ``pi_k(q) = softmax_k(-(c_k(q) t_k(q) + (1 - c_k(q)) t_0) / T)``: ``t_k`` the rank head's
    predicted log-rank, ``t_0`` (:data:`CHANCE_LOG_RANK`) that of a random ranking, and for a model
    that reads only the languages ``L_k``, ``c_k(q) = p(L_k | q) u_k(q)``: the identifier's
    probability that q is in one of them (:func:`~crossembed.uec.languages.language_posterior`)
    times the model's probe probability that it reads q (:meth:`ModelHeads.reads`); either factor
    is 1 when its signal is off. A multilingual model (``None``) has ``c_k = 1``. With every
    ``c_k = 1`` it routes exactly as :class:`RankRouting`. Documents are uniform.

    Parameters
    ----------
    languages : list
        One entry per model: the ISO 639-1 codes the model reads, or None for every language
        (:func:`~crossembed.uec.languages.model_languages` has the known encoders').
    temperature : float
        ``T > 0`` in units of ``log(1 + rank per 1,000 candidates)`` (default 1, as the rank head).
    identifier : identifier object or None
        Reads the query's language from its text (default
        :class:`~crossembed.uec.languages.LangidIdentifier`, the ``lang`` extra); None turns the
        text signal off (queries then need no texts). Queries combined without their texts are
        routed without it, with a ``RuntimeWarning``.
    probe : bool
        Multiply by each monolingual model's probe head (default True; the embedders need one).
    prior : float
        The prior probability, before the text is read, that a query is in the fit's languages
        (default 0.7, chosen on the dev languages of ``docs/uec.md``).
    fit_languages : sequence of str
        The languages of the fit pairs (default English).
    laplace_variances : bool
        Score the Laplace variances (True) or both sides as points (default False), as :class:`RankRouting`.
    """

    kind = "language"

    def __init__(
        self,
        languages,
        *,
        temperature: float = 1.0,
        identifier="langid",
        probe: bool = True,
        prior: float = 0.7,
        fit_languages: Sequence[str] = ("en",),
        laplace_variances: bool = False,
    ):
        self.languages = _check_languages(languages)
        self.temperature = check_positive(temperature, "temperature")
        self.identifier = LangidIdentifier() if identifier == "langid" else identifier_from_config(identifier)
        self.probe = check_bool(probe, "probe")
        prior = check_positive(prior, "prior")
        if prior >= 1.0:
            raise ValueError(f"prior must be in (0, 1), got {prior}")
        self.prior = prior
        if isinstance(fit_languages, str) or not all(isinstance(x, str) for x in fit_languages) or not fit_languages:
            raise TypeError(f"fit_languages must be a non-empty list of language codes, got {fit_languages!r}")
        self.fit_languages = list(fit_languages)
        self.laplace_variances = check_bool(laplace_variances, "laplace_variances")

    @property
    def needs_texts(self) -> bool:
        return self.identifier is not None

    def check_models(self, heads: Sequence[ModelHeads]) -> None:
        if len(self.languages) != len(heads):
            raise ValueError(f"languages must hold {len(heads)} entries (one per model), got {len(self.languages)}")
        if self.probe:
            missing = [k for k, h in enumerate(heads) if self.languages[k] is not None and h.probe_head is None]
            if missing:
                raise ValueError(
                    f"embedders[{missing[0]}] has no probe head: fit it from texts (fit()) or with scrambled= "
                    "(fit_embeddings()), or pass probe=False"
                )

    def coverage(self, components, heads: Sequence[ModelHeads], texts=None) -> np.ndarray:
        """``c`` (n, K) float64: the probability that each model reads each query (class docstring)."""
        n = len(components[0])
        c = np.ones((n, len(components)))
        restricted = [k for k, langs in enumerate(self.languages) if langs is not None]
        if not restricted:
            return c
        if self.identifier is not None and texts is None:
            warnings.warn(
                "LanguageRouting reads the query texts and got none (pass texts= to combine(), or encode() the "
                "texts): these queries are routed without their language",
                RuntimeWarning,
                stacklevel=4,
            )
        elif self.identifier is not None:
            if len(texts) != n:
                raise ValueError(f"texts must hold {n} strings, one per query")
            known = list(self.identifier.languages)
            p = language_posterior(self.identifier.log_likelihoods(list(texts)), known, self.fit_languages, self.prior)
            for k in restricted:
                c[:, k] *= p[:, np.isin(known, self.languages[k])].sum(axis=1)
        if self.probe:
            for k in restricted:
                c[:, k] *= heads[k].reads(components[k].mean)
        return c

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        comps = list(components) if self.laplace_variances else _deterministic(components)
        if role == "passage":  # documents carry no rank
            return _uniform(len(components[0]), len(components)), comps
        t = np.stack([h.predicted_log_rank(c.mean) for h, c in zip(heads, components)], axis=1)
        c = self.coverage(components, heads, texts)
        return softmax_rows(-(c * t + (1.0 - c) * CHANCE_LOG_RANK) / self.temperature), comps


def default_routing(encoder_names: Sequence[Optional[str]], heads: Sequence[ModelHeads]):
    """The routing an ensemble gets when none is given.

    :class:`LanguageRouting` when a model reads only some languages (:func:`model_languages` of its
    encoder name), with the probe where every such model has a probe head; else :class:`RankRouting`.
    The language routing reads the query text with langid (``pip install "crossembed[lang]"``).
    """
    languages = [model_languages(name) for name in encoder_names]
    if all(langs is None for langs in languages):
        return RankRouting()
    probe = all(h.probe_head is not None for h, langs in zip(heads, languages) if langs is not None)
    return LanguageRouting(languages, probe=probe)


def routing_from_config(config: Dict[str, Any]):
    """The routing object a ``get_config()`` dict describes (kinds in :data:`ROUTINGS`)."""
    return from_config(config, ROUTINGS, "routing")


class ConfidenceRouting(Routing):
    """Route queries by each model's retrieval confidence over a reference collection.

    Parameters
    ----------
    temperature : float or None
        ``T > 0`` in units of ``log sigma^2`` (of its z-score with
        ``standardize``). None: 2, or 1 with ``times_laplace``.
    top : int
        The gap compares the top-1 cosine with the mean of the next
        ``top - 1`` (default 20; capped at the reference size).
    center : bool
        Subtract each model's mean ``log sigma_k^2`` over calibration queries
        (its overall confidence level; default False).
    standardize : bool
        Also divide by its standard deviation over them (a per-model z-score;
        implies ``center``; default False).
    times_laplace : bool
        Multiply ``sigma_k^2(q)`` by ``tr(Sigma_k(q))`` over the model's mean
        fit trace (default False). Documents are then weighted by ``fallback``'s
        logits at this routing's ``T``.
    laplace_variances : bool
        Score the Laplace variances (True), or (default False) each query as
        isotropic ``sigma_k^2(q)`` and each document as a point, so the score
        is shrunk by the query's uncertainty.
    fallback : routing with ``logits``
        The Laplace coefficients used (with a ``RuntimeWarning``) for queries
        while no reference is set (default :class:`LaplaceRouting`).
    """

    kind = "confidence"
    needs_reference = True

    def __init__(
        self,
        temperature: Optional[float] = None,
        *,
        top: int = 20,
        center: bool = False,
        standardize: bool = False,
        times_laplace: bool = False,
        laplace_variances: bool = False,
        fallback=None,
    ):
        self.times_laplace = check_bool(times_laplace, "times_laplace")
        if temperature is None:
            temperature = 1.0 if self.times_laplace else 2.0
        self.temperature = check_positive(temperature, "temperature")
        self.top = check_int(top, "top", low=2)
        self.standardize = check_bool(standardize, "standardize")
        self.center = check_bool(center, "center") or self.standardize  # a z-score is centred
        self.laplace_variances = check_bool(laplace_variances, "laplace_variances")
        self.fallback = LaplaceRouting() if fallback is None else fallback
        if not callable(getattr(self.fallback, "logits", None)):
            raise TypeError(
                f"fallback must be a routing with logits() (LaplaceRouting, PrecisionSumRouting), got "
                f"{type(self.fallback).__name__}"
            )

    @property
    def needs_calibration(self) -> bool:
        return self.center

    def confidence_variance(
        self, components, heads: Sequence[ModelHeads], reference: RetrievalReference, *, num_threads=None
    ) -> np.ndarray:
        """``sigma_k^2(q) = (c_k / g_k(q))^2`` of shape (n, K), float64 (module docstring)."""
        cols = []
        for k, c in enumerate(components):
            docs, scale = reference.documents[k], heads[k].score_scale
            gap = rules.retrieval_gap(
                c.mean, docs, top=min(self.top, docs.shape[0]), scale=scale, num_threads=num_threads
            )
            cols.append(rules.confidence_variance(gap, scale))
        return np.stack(cols, axis=1)

    def calibrate(self, reference: RetrievalReference, queries, heads: Sequence[ModelHeads]) -> RetrievalReference:
        """``reference`` with the per-model mean and spread of ``log sigma^2`` over ``queries``.

        ``queries``: K items (GaussianEmbeddings or arrays, one per model), e.g. the fit anchors.
        A spread below 1e-12 (one query, or a model whose confidence never moves) counts as 1.
        """
        if isinstance(queries, (GaussianEmbedding, np.ndarray)) or len(queries) != len(heads):
            raise ValueError(f"queries must hold {len(heads)} items (one per model)")
        qs = []
        for k, q in enumerate(queries):
            m = model_matrix(q, heads[k].dim, f"queries[{k}]")
            qs.append(GaussianEmbedding(m, np.zeros_like(m)))
        t = np.log(np.asarray(self.confidence_variance(qs, heads, reference), dtype=np.float64))
        sd = t.std(axis=0)
        return RetrievalReference(reference.documents, t.mean(axis=0), np.where(sd > 1e-12, sd, 1.0))

    def _log_variance(self, u: np.ndarray, components, heads, reference: RetrievalReference) -> np.ndarray:
        t = np.log(u)
        if self.center:
            if reference.center is None:
                raise ValueError("center=True needs calibration queries: with_reference(documents, queries=...)")
            t = t - reference.center[None, :]
            if self.standardize:
                t = t / reference.spread[None, :]
        if self.times_laplace:
            tr = np.stack([c.trace() for c in components], axis=1)
            t = t + np.log(np.maximum(tr, 1e-300) / np.array([h.trace_mean for h in heads])[None, :])
        return t

    def route(self, components, heads, *, role: str = "query", reference=None) -> Routed:
        comps = list(components)
        if role == "passage":  # documents carry no retrieval confidence
            if self.times_laplace:
                pi = softmax_rows(self.fallback.logits(comps, heads) / self.temperature)
            else:
                pi = _uniform(len(comps[0]), len(comps))
            return pi, comps if self.laplace_variances else _deterministic(comps)
        if reference is None:
            warnings.warn(
                "retrieval-confidence routing has no reference collection yet (with_reference(), an index, or "
                "encode the documents first): these queries are weighted by the Laplace posterior",
                RuntimeWarning,
                stacklevel=4,
            )
            return self.fallback.route(comps, heads, role=role)
        u = self.confidence_variance(comps, heads, reference)
        pi = softmax_rows(-self._log_variance(u, comps, heads, reference) / self.temperature)
        if not self.laplace_variances:  # isotropic sigma_k^2: adds exactly sigma_k^2 to sig2_s of a unit document
            comps = [
                GaussianEmbedding(c.mean, (0.0 * c.var + u[:, k : k + 1]).astype(np.float32))
                for k, c in enumerate(comps)
            ]
        return pi, comps


#: routing kinds :func:`routing_from_config` rebuilds (add a class here to make a new routing loadable)
ROUTINGS = {
    cls.kind: cls
    for cls in (
        LanguageRouting,
        RankRouting,
        LaplaceRouting,
        PrecisionSumRouting,
        ConfidenceRouting,
        UniformRouting,
        FixedRouting,
    )
}
