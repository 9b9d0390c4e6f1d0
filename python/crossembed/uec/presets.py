"""The published rule sets as choices of objects (what ``--rules`` and ``--uncertainty`` name).

======================  =================================  ====================================
choice                  ``rules="paper"``                  ``rules="official"`` (MLAI-Yonsei/UEC)
======================  =================================  ====================================
variance normalisation  ``v / |mu|^2``                     ``v / |v|_2^2``
Laplace coefficients    :class:`LaplaceRouting`            :class:`PrecisionSumRouting`
similarity              :class:`ProbitScoring`             :class:`BetaCosineScoring`
======================  =================================  ====================================

(the variance normalisation belongs to the scoring object). The default
temperatures per rule set and routing are the ones the dev halves of
``docs/uec.md`` chose (:data:`DEFAULT_TEMPERATURES`).
"""

from __future__ import annotations

from typing import Optional

from crossembed._validation import check_choice
from crossembed.uec.routing import (
    ConfidenceRouting,
    LanguageRouting,
    LaplaceRouting,
    PrecisionSumRouting,
    RankRouting,
)
from crossembed.uec.scoring import BetaCosineScoring, ProbitScoring

__all__ = ["DEFAULT_TEMPERATURES", "RULES", "UNCERTAINTIES", "make_routing", "make_scoring"]

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


def make_scoring(rules: str = "paper", *, beta: float = 1.0, use_variance: bool = True):
    """The similarity of a rule set: the probit (paper) or the beta cosine (official).

    ``beta`` is the official similarity's (ignored by the paper's); ``use_variance=False``
    scores the means only (for the beta cosine that is ``beta = 0``, the plain cosine).
    """
    check_choice(rules, "rules", RULES)
    if rules == "official":
        return BetaCosineScoring(beta if use_variance else 0.0)
    return ProbitScoring(use_variance)


def _laplace(rules: str, temperature: Optional[float], standardize: bool):
    if rules == "official":
        return PrecisionSumRouting(DEFAULT_TEMPERATURES[(rules, "laplace")] if temperature is None else temperature)
    return LaplaceRouting(
        DEFAULT_TEMPERATURES[(rules, "laplace")] if temperature is None else temperature, standardize=standardize
    )


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
):
    """The routing object ``uncertainty`` names under a rule set.

    Parameters
    ----------
    uncertainty : {"language", "rank", "laplace", "confidence", "confidence*laplace"}
        What routes the queries (:mod:`crossembed.uec.routing`).
    rules : {"paper", "official"}
        Picks the Laplace formula (also the confidence routings' fallback) and the default ``T``.
    temperature : float or None
        ``T``; None takes :data:`DEFAULT_TEMPERATURES`.
    standardize : bool
        The paper's Laplace traces standardised per model (default True).
    laplace_variances : bool
        Rank and confidence routings: score the Laplace variances (default False).
    top, center, standardize_confidence
        The confidence routings' ``top``, ``center`` and ``standardize``
        (:class:`~crossembed.uec.routing.ConfidenceRouting`).
    languages, language_options
        ``"language"`` only: the languages each model reads and the other keyword
        arguments of :class:`~crossembed.uec.routing.LanguageRouting` (a dict).
    """
    check_choice(uncertainty, "uncertainty", UNCERTAINTIES)
    check_choice(rules, "rules", RULES)
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
    return ConfidenceRouting(
        T,
        times_laplace=uncertainty == "confidence*laplace",
        laplace_variances=laplace_variances,
        fallback=_laplace(rules, None, standardize),
        top=top,
        center=center,
        standardize=standardize_confidence,
    )
