"""Routing: the per-input coefficients ``pi`` (n, K) an ensemble weights its K models by.

A routing is a frozen :class:`Routing` (validated once, safe to share). Its one method,
``route(components, heads, *, role, reference=None, texts=None) -> (pi, components)``, takes the
K models' Gaussians of the same inputs (as the scoring normalised them), each model's
:class:`~crossembed.uec.heads.ModelHeads`, the role (``"query"`` or ``"passage"``), the
ensemble's reference collection (:class:`RetrievalReference`, None unless the routing
``needs_reference``) and the input texts (None when the caller has none), and returns the
coefficients and the Gaussians to score (a routing may change what variances are scored).
``get_config()`` and :func:`routing_from_config` save and rebuild it; :class:`Routing` says
how to write a new one.

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
:class:`UniformRouting`, :class:`FixedRouting`
    ``1/K``, or fixed global weights.

The rules the default is compared with (the official code's, retrieval confidence) are in
:mod:`crossembed.uec.ablations`.
"""

from __future__ import annotations

import warnings
from dataclasses import KW_ONLY, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._config import Registered, from_config, set_checked
from crossembed._rows import softmax_rows, unit_rows
from crossembed._validation import as_matrix, check_bool, check_positive
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads
from crossembed.uec.languages import LangidIdentifier, identifier_from_config, language_posterior, model_languages
from crossembed.uec.rank_head import RANK_SCALE

__all__ = [
    "CHANCE_LOG_RANK",
    "FixedRouting",
    "LanguageRouting",
    "LaplaceRouting",
    "RankRouting",
    "RetrievalReference",
    "Routing",
    "UniformRouting",
    "as_points",
    "default_routing",
    "routing_from_config",
    "uniform_coefficients",
]

Routed = Tuple[np.ndarray, List[GaussianEmbedding]]


def uniform_coefficients(n: int, k: int) -> np.ndarray:
    """``pi = 1/K`` for ``n`` inputs, shape (n, K) float64."""
    return np.full((n, k), 1.0 / k)


def as_points(components: Sequence[GaussianEmbedding]) -> List[GaussianEmbedding]:
    """The same means with zero variances (scored as points)."""
    return [GaussianEmbedding(c.mean, np.zeros_like(c.var)) for c in components]


@dataclass(frozen=True)
class RetrievalReference:
    """The collection a routing that ``needs_reference`` measures queries against: model ``k``'s
    unit document means, ``documents[k]`` of shape (N, D_k), float32 (:meth:`UECEnsemble.with_reference`)."""

    documents: Tuple[np.ndarray, ...]

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
            m = as_matrix(d.mean if isinstance(d, GaussianEmbedding) else d, f"documents[{k}]")
            if m.shape[1] != dims[k]:
                raise ValueError(f"documents[{k}] has dimension {m.shape[1]} but the model has {dims[k]}")
            if m.shape[0] < 2:
                raise ValueError(f"documents[{k}] has {m.shape[0]} rows, need at least 2")
            unit = unit_rows(m).astype(np.float32)
            unit.flags.writeable = False
            ref.append(unit)
        if len({r.shape[0] for r in ref}) != 1:
            raise ValueError("documents must hold the same number of rows for every model")
        return cls(tuple(ref))

    def get_state(self) -> Dict[str, np.ndarray]:
        return {f"ref{k}": r for k, r in enumerate(self.documents)}

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], n_models: int) -> RetrievalReference:
        missing = [f"ref{k}" for k in range(n_models) if f"ref{k}" not in arrays]
        if missing:
            raise ValueError(f"ensemble state lacks its reference arrays {missing}")
        return cls(tuple(arrays[f"ref{k}"] for k in range(n_models)))


@dataclass(frozen=True)
class Routing(Registered):
    """Base of the routing objects (module docstring): a frozen dataclass whose fields are its config.

    A subclass is a ``@dataclass(frozen=True)`` that sets ``kind`` (it is then registered:
    :func:`routing_from_config` rebuilds it) and implements :meth:`route`; it validates its
    fields once in ``__post_init__``. It sets ``needs_texts`` when ``route`` reads the query
    texts and ``needs_reference`` when it reads the ensemble's reference collection.
    """

    registry = {}
    kind = ""
    #: True when ``route`` reads the query texts (``texts=``); given none, the routing decides (LanguageRouting warns)
    needs_texts = False
    #: True when ``route`` reads the ensemble's reference collection (``reference=``, :meth:`UECEnsemble.with_reference`)
    needs_reference = False

    def check_models(self, heads: Sequence[ModelHeads]) -> None:
        """Raise ``ValueError`` when this routing cannot route these models (called once per ensemble)."""

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        """``(pi (n, K), components to score)`` (module docstring)."""
        raise NotImplementedError

    def coefficients(self, components, heads, *, role: str = "query", reference=None, texts=None) -> np.ndarray:
        """Only the ``pi`` of :meth:`route`."""
        return self.route(components, heads, role=role, reference=reference, texts=texts)[0]


@dataclass(frozen=True)
class UniformRouting(Routing):
    """``pi_k = 1/K`` for every input (the uniform ensemble, the paper's "- Unc Conv" ablation)."""

    kind = "uniform"

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        return uniform_coefficients(len(components[0]), len(components)), list(components)


@dataclass(frozen=True)
class FixedRouting(Routing):
    """Fixed global weights for every input (a weighted ensemble).

    Parameters
    ----------
    weights : sequence of K floats
        Non-negative, positive sum; normalised to sum to 1 when routing.
    """

    weights: Tuple[float, ...]
    kind = "fixed"

    def __post_init__(self):
        w = as_matrix(self.weights, "weights", ndim=1, dtype=np.float64, nonnegative=True)
        if w.sum() <= 0:
            raise ValueError("weights must have a positive sum")
        set_checked(self, weights=tuple(float(x) for x in w))

    def check_models(self, heads: Sequence[ModelHeads]) -> None:
        if len(self.weights) != len(heads):
            raise ValueError(f"weights must hold {len(heads)} numbers (one per model), got {len(self.weights)}")

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        w = np.array(self.weights)
        return np.tile(w / w.sum(), (len(components[0]), 1)), list(components)


@dataclass(frozen=True)
class LaplaceRouting(Routing):
    """The paper's coefficients ``softmax_k(-t_k(x) / T)`` from the Laplace posterior's traces.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of the standardised trace (default 10).
    standardize : bool
        Standardise each model's trace by its fit-set mean and std (default
        True); False uses raw traces (T then in raw trace units).
    """

    temperature: float = 10.0
    _: KW_ONLY
    standardize: bool = True
    kind = "laplace"

    def __post_init__(self):
        set_checked(
            self,
            temperature=check_positive(self.temperature, "temperature"),
            standardize=check_bool(self.standardize, "standardize"),
        )

    def logits(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """``z`` (n, K) with ``pi = softmax(z / T)``: minus the (standardised) traces."""
        traces = np.stack([c.trace() for c in components], axis=1)
        if self.standardize:
            center = np.array([h.trace_mean for h in heads])
            scale = np.array([h.trace_std for h in heads])
            traces = (traces - center[None, :]) / scale[None, :]
        return -traces

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        return softmax_rows(self.logits(components, heads) / self.temperature), list(components)


@dataclass(frozen=True)
class RankRouting(Routing):
    """Route each query by its models' predicted log-ranks, ``softmax_k(-t_k(q) / T)``.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of ``log(1 + rank per 1,000 candidates)`` (default 1).
    laplace_variances : bool
        Score the Laplace variances (True) or both sides as points (default
        False: the rank head carries no score variance).
    fixed_log_rank : float or None
        None (default): the rank heads' predictions. A number: every model's log-rank taken as it
        for every query (uniform weights), the fallback :meth:`UECEnsemble.fit_confidence
        <crossembed.uec.UECEnsemble.fit_confidence>` sets where the rank heads lose to it on held-out fit pairs.
    """

    temperature: float = 1.0
    _: KW_ONLY
    laplace_variances: bool = False
    fixed_log_rank: Optional[float] = None
    kind = "rank"

    def __post_init__(self):
        set_checked(
            self,
            temperature=check_positive(self.temperature, "temperature"),
            laplace_variances=check_bool(self.laplace_variances, "laplace_variances"),
            fixed_log_rank=_check_log_rank(self.fixed_log_rank),
        )

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        comps = list(components) if self.laplace_variances else as_points(components)
        if role == "passage":  # documents carry no rank
            return uniform_coefficients(len(components[0]), len(components)), comps
        t = _log_ranks(components, heads, self.fixed_log_rank)
        return softmax_rows(-t / self.temperature), comps


def _check_log_rank(value) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"fixed_log_rank must be None or a number, got {type(value).__name__}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"fixed_log_rank must be a finite number >= 0, got {value}")
    return float(value)


def _log_ranks(components, heads: Sequence[ModelHeads], fixed: Optional[float]) -> np.ndarray:
    """``t`` (n, K) float64: each model's rank-head prediction, or ``fixed`` everywhere."""
    if fixed is not None:
        return np.full((len(components[0]), len(components)), fixed)
    return np.stack([h.predicted_log_rank(c.mean) for h, c in zip(heads, components)], axis=1)


#: the log-rank of a random ranking, ``E_u[log(1 + RANK_SCALE u)]`` for ``u ~ U(0, 1)``
CHANCE_LOG_RANK = float(((1.0 + RANK_SCALE) * np.log1p(RANK_SCALE) - RANK_SCALE) / RANK_SCALE)


def _check_languages(languages) -> Tuple[Optional[Tuple[str, ...]], ...]:
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
    return tuple(out)


@dataclass(frozen=True)
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
    identifier : identifier object, ``"langid"`` or None
        Reads the query's language from its text (default ``"langid"``: a new
        :class:`~crossembed.uec.languages.LangidIdentifier`, the ``lang`` extra); None turns the
        text signal off (queries then need no texts). Queries combined without their texts are
        routed without it, with a ``RuntimeWarning``.
    probe : bool
        Multiply by each monolingual model's probe head (default True; the embedders need one).
    prior : float
        The prior probability, before the text is read, that a query is in the fit's languages
        (default 0.7, in (0, 1)).
    fit_languages : sequence of str
        The languages of the fit pairs (default English).
    laplace_variances : bool
        Score the Laplace variances (True) or both sides as points (default False), as :class:`RankRouting`.
    fixed_log_rank : float or None
        As :class:`RankRouting`'s: a number replaces every ``t_k(q)``, so the weights follow ``c_k`` alone
        (uniform where every model reads the query).
    """

    languages: Tuple[Optional[Tuple[str, ...]], ...]
    _: KW_ONLY
    temperature: float = 1.0
    identifier: Any = "langid"
    probe: bool = True
    prior: float = 0.7
    fit_languages: Tuple[str, ...] = ("en",)
    laplace_variances: bool = False
    fixed_log_rank: Optional[float] = None
    kind = "language"

    def __post_init__(self):
        prior = check_positive(self.prior, "prior")
        if prior >= 1.0:
            raise ValueError(f"prior must be in (0, 1), got {prior}")
        fit = self.fit_languages
        if isinstance(fit, str) or not all(isinstance(x, str) for x in fit) or not fit:
            raise TypeError(f"fit_languages must be a non-empty list of language codes, got {fit!r}")
        set_checked(
            self,
            languages=_check_languages(self.languages),
            temperature=check_positive(self.temperature, "temperature"),
            identifier=LangidIdentifier() if self.identifier == "langid" else identifier_from_config(self.identifier),
            probe=check_bool(self.probe, "probe"),
            prior=prior,
            fit_languages=tuple(fit),
            laplace_variances=check_bool(self.laplace_variances, "laplace_variances"),
            fixed_log_rank=_check_log_rank(self.fixed_log_rank),
        )

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

    def log_ranks(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """``t`` (n, K) float64: each model's rank-head prediction of the right document's log-rank
        (``fixed_log_rank`` everywhere when set)."""
        return _log_ranks(components, heads, self.fixed_log_rank)

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        comps = list(components) if self.laplace_variances else as_points(components)
        if role == "passage":  # documents carry no rank
            return uniform_coefficients(len(components[0]), len(components)), comps
        t = self.log_ranks(components, heads)
        c = self.coverage(components, heads, texts)
        return softmax_rows(-(c * t + (1.0 - c) * CHANCE_LOG_RANK) / self.temperature), comps


def default_routing(encoder_names: Sequence[Optional[str]], heads: Sequence[ModelHeads]) -> Routing:
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


def routing_from_config(config: Dict[str, Any]) -> Routing:
    """The routing object a ``get_config()`` dict describes (any registered :class:`Routing` kind)."""
    return from_config(config, Routing.registry, "routing")
