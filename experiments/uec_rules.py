"""The rule sets and routings the UEC evaluation compares, built on the library's public classes.

* :func:`make_routing` / :func:`make_scoring` - the published rule sets by name (what a row's
  ``rules`` and ``uncertainty`` switches say), with :data:`DEFAULT_TEMPERATURES`:

  ======================  =================================  ====================================
  choice                  ``rules="paper"``                  ``rules="official"`` (MLAI-Yonsei/UEC)
  ======================  =================================  ====================================
  variance normalisation  ``v / |mu|^2``                     ``v / |v|_2^2``
  Laplace coefficients    ``LaplaceRouting``                 ``PrecisionSumRouting``
  similarity              ``ProbitScoring``                  ``BetaCosineScoring``
  ======================  =================================  ====================================

* :class:`CalibratedConfidenceRouting`, :class:`ConfidenceLaplaceRouting` - retrieval confidence
  centred (or z-scored) per model on calibration queries, and multiplied by the Laplace trace.
* :class:`TrueLanguageRouting`, :class:`NoRankHeadRouting` - a bound and an ablation of
  ``LanguageRouting`` (the queries' labelled languages; no rank head).
* :func:`routing_named` - any routing class by its importable name (``"package.module:Class"``),
  so a new routing is evaluated without editing this module.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import KW_ONLY, dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from crossembed.uec import LanguageRouting, LaplaceRouting, ProbitScoring, RankRouting, Routing
from crossembed.uec.ablations import BetaCosineScoring, ConfidenceRouting, PrecisionSumRouting
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.routing import as_points

__all__ = [
    "DEFAULT_TEMPERATURES",
    "RULES",
    "UNCERTAINTIES",
    "CalibratedConfidenceRouting",
    "ConfidenceLaplaceRouting",
    "NoRankHeadRouting",
    "TrueLanguageRouting",
    "make_routing",
    "make_scoring",
    "routing_named",
]

RULES = ("paper", "official")
UNCERTAINTIES = ("language", "rank", "laplace", "confidence", "confidence*laplace")
#: ``T`` per (rules, uncertainty) when none is given (chosen on the dev halves of docs/uec.md)
DEFAULT_TEMPERATURES = {
    ("paper", "laplace"): 10.0,
    ("official", "laplace"): 1.0,
    ("paper", "confidence"): 2.0,
    ("official", "confidence"): 1.0,
    ("paper", "confidence*laplace"): 1.0,
    ("official", "confidence*laplace"): 1.0,
    ("paper", "rank"): 1.0,
    ("official", "rank"): 0.5,
    ("paper", "language"): 1.0,
    ("official", "language"): 0.5,
}


def _check(value: str, name: str, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


# --------------------------------------------------------------------------- retrieval-confidence variants
@dataclass(frozen=True)
class CalibratedConfidenceRouting(ConfidenceRouting):
    """Retrieval confidence with each model's ``log sigma_k^2`` centred by its mean over calibration
    queries (the fit anchors), and with ``standardize`` divided by its standard deviation there.

    A fitted rule: :meth:`calibrated` returns the copy that holds ``center`` and ``spread`` (K
    numbers each), fresh for each ensemble; routing before that is a ``ValueError``.
    """

    _: KW_ONLY
    standardize: bool = False
    center: Tuple[float, ...] = ()
    spread: Tuple[float, ...] = ()
    kind = "confidence_calibrated"

    def calibrated(self, reference, queries: Sequence[GaussianEmbedding], heads) -> CalibratedConfidenceRouting:
        """A copy calibrated on ``queries`` (one GaussianEmbedding per model) over ``reference``.

        A spread below 1e-12 (one query, or a model whose confidence never moves) counts as 1.
        """
        points = [GaussianEmbedding(q.mean, np.zeros_like(q.mean)) for q in queries]
        t = np.log(np.asarray(self.confidence_variance(points, heads, reference), dtype=np.float64))
        sd = t.std(axis=0)
        return dataclasses.replace(
            self, center=tuple(t.mean(axis=0).tolist()), spread=tuple(np.where(sd > 1e-12, sd, 1.0).tolist())
        )

    def log_variance(self, variance, components, heads) -> np.ndarray:
        if not self.center:
            raise ValueError("CalibratedConfidenceRouting needs calibrated(reference, queries, heads) first")
        t = np.log(variance) - np.array(self.center)[None, :]
        return t / np.array(self.spread)[None, :] if self.standardize else t


@dataclass(frozen=True)
class ConfidenceLaplaceRouting(ConfidenceRouting):
    """Retrieval confidence times the Laplace posterior: ``sigma_k^2(q) tr(Sigma_k(q))`` over the
    model's mean fit trace; documents weighted by ``fallback``'s coefficients at this routing's ``T``."""

    temperature: float = 1.0
    kind = "confidence*laplace"

    def log_variance(self, variance, components, heads) -> np.ndarray:
        tr = np.stack([c.trace() for c in components], axis=1)
        return np.log(variance) + np.log(np.maximum(tr, 1e-300) / np.array([h.trace_mean for h in heads])[None, :])

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None):
        if role != "passage":
            return super().route(components, heads, role=role, reference=reference, texts=texts)
        comps = list(components)
        pi = dataclasses.replace(self.fallback, temperature=self.temperature).route(comps, heads, role=role)[0]
        return pi, comps if self.laplace_variances else as_points(comps)


# --------------------------------------------------------------------------- language routing: bound and ablation
@dataclass(frozen=True)
class TrueLanguageRouting(LanguageRouting):
    """``c_k(q) = 1`` when query q's labelled language is one model k reads, else 0 (no identifier, no probe).

    ``query_languages``: the labelled language of each evaluated query (it routes those queries only).
    """

    _: KW_ONLY
    query_languages: Tuple[str, ...] = ()
    identifier: object = None
    probe: bool = False
    kind = "true_language"

    def coverage(self, components, heads, texts=None) -> np.ndarray:
        labels = np.asarray(self.query_languages)
        if len(components[0]) != len(labels):
            raise ValueError("TrueLanguageRouting routes the evaluated queries only")
        c = np.ones((len(labels), len(components)))
        for k, langs in enumerate(self.languages):
            if langs is not None:
                c[:, k] = np.isin(labels, langs)
        return c


@dataclass(frozen=True)
class NoRankHeadRouting(LanguageRouting):
    """``LanguageRouting`` with each model's rank head replaced by its mean prediction on the fit anchors."""

    kind = "language_without_rank_head"

    def log_ranks(self, components, heads) -> np.ndarray:
        t = np.array([h.predicted_log_rank(h.hub_reference).mean() for h in heads])[None, :]
        return np.broadcast_to(t, (len(components[0]), len(heads)))


# --------------------------------------------------------------------------- by name
def make_scoring(rules: str = "paper", *, beta: float = 1.0, use_variance: bool = True):
    """The similarity of a rule set: the probit (paper) or the beta cosine (official).

    ``beta`` is the official similarity's (ignored by the paper's); ``use_variance=False``
    scores the means only (for the beta cosine that is ``beta = 0``, the plain cosine).
    """
    if _check(rules, "rules", RULES) == "official":
        return BetaCosineScoring(beta if use_variance else 0.0)
    return ProbitScoring(use_variance)


def _laplace(rules: str, temperature: Optional[float], standardize: bool) -> Routing:
    T = DEFAULT_TEMPERATURES[(rules, "laplace")] if temperature is None else temperature
    return PrecisionSumRouting(T) if rules == "official" else LaplaceRouting(T, standardize=standardize)


def make_routing(
    uncertainty: str = "rank",
    rules: str = "paper",
    *,
    temperature: Optional[float] = None,
    standardize: bool = True,
    laplace_variances: bool = False,
    top: int = 20,
    center: bool = False,
    standardize_confidence: bool = False,
    languages=None,
    language_options=None,
) -> Routing:
    """The routing object ``uncertainty`` names under a rule set.

    Parameters
    ----------
    uncertainty : {"language", "rank", "laplace", "confidence", "confidence*laplace"}
        What routes the queries.
    rules : {"paper", "official"}
        Picks the Laplace formula (also the confidence routings' fallback) and the default ``T``.
    temperature : float or None
        ``T``; None takes :data:`DEFAULT_TEMPERATURES`.
    standardize : bool
        The paper's Laplace traces standardised per model (default True).
    laplace_variances : bool
        Rank and confidence routings: score the Laplace variances (default False).
    top, center, standardize_confidence
        The confidence routings' ``top``; ``center`` / ``standardize_confidence`` give a
        :class:`CalibratedConfidenceRouting` (``"confidence"`` only).
    languages, language_options
        ``"language"`` only: the languages each model reads and the other keyword
        arguments of ``LanguageRouting`` (a dict).
    """
    _check(uncertainty, "uncertainty", UNCERTAINTIES)
    _check(rules, "rules", RULES)
    T = DEFAULT_TEMPERATURES[(rules, uncertainty)] if temperature is None else temperature
    if uncertainty == "laplace":
        return _laplace(rules, T, standardize)
    if uncertainty == "rank":
        return RankRouting(T, laplace_variances=laplace_variances)
    if uncertainty == "language":
        if languages is None:
            raise ValueError("uncertainty='language' needs the languages each model reads")
        return LanguageRouting(
            languages, temperature=T, laplace_variances=laplace_variances, **dict(language_options or {})
        )
    options = {"top": top, "laplace_variances": laplace_variances, "fallback": _laplace(rules, None, standardize)}
    if uncertainty == "confidence*laplace":
        if center or standardize_confidence:
            raise ValueError("the confidence*laplace routing is not calibrated (center, standardize_confidence)")
        return ConfidenceLaplaceRouting(T, **options)
    if center or standardize_confidence:
        return CalibratedConfidenceRouting(T, standardize=standardize_confidence, **options)
    return ConfidenceRouting(T, **options)


def routing_named(name: str, **options) -> Routing:
    """``Class(**options)`` of the routing class an importable name ``"package.module:Class"`` names."""
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a routing name is 'package.module:Class', got {name!r}")
    cls = getattr(importlib.import_module(module), attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Routing)):
        raise TypeError(f"{name} is not a crossembed.uec.Routing subclass")
    return cls(**options)
