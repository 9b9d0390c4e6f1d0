"""The UEC table's rows as option dicts, turned into the library's behaviour objects.

A row of ``docs/uec.md`` is a small dict of named switches (``rules``,
``uncertainty``, ``weights``, ``use_variance``, ...), the vocabulary of the
table and its ablations; :func:`build_ensemble` maps it onto
:class:`~crossembed.uec.UECEnsemble` ``(routing, mixing, scoring)``. A row's
``routing`` may also be any routing object or the importable name of a routing
class (``"package.module:Class"``): a new routing needs no new switch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

from crossembed.uec import EmbeddingMixing, FixedRouting, LaplaceEmbedder, ScoreMixing, UECEnsemble, UniformRouting
from crossembed.uec.languages import model_languages
from crossembed.uec.routing import default_routing
from experiments.uec_rules import make_routing, make_scoring, routing_named

__all__ = ["OPTIONS", "build_ensemble"]

#: the switches a row may set, with their defaults (the library's defaults)
OPTIONS: Dict[str, Any] = {
    "rules": "paper",  # "paper" or "official" (uec_rules.make_scoring / make_routing)
    # a routing object or "package.module:Class" (T from "temperature" when set); None: the switches below
    "routing": None,
    # what routes: None (the library's default routing), "language", "rank", "laplace", "confidence",
    # "confidence*laplace"
    "uncertainty": None,
    "weights": "uncertainty",  # "uncertainty" (the routing above), "uniform" or K fixed numbers
    "temperature": None,  # T of the routing (None: uec_rules.DEFAULT_TEMPERATURES, or the routing object's own)
    "standardize": True,  # the paper's Laplace traces standardised per model
    "confidence_scoring": "replace",  # "replace" (sigma^2 / points) or "laplace" (the Laplace variances)
    "center_confidence": False,
    "standardize_confidence": False,
    "mixing": "score",  # "score" or "embedding"
    "calibrate_scores": True,
    "hubness": None,  # None: 1/2 under the probit, 0 otherwise
    "query_head": None,  # None: on where every model has one and the scoring decomposes
    "use_variance": True,  # False: the means only ("- Unc Sim")
    "beta": 1.0,  # the official similarity's beta
    # LanguageRouting's other arguments (identifier, probe, prior, fit_languages), for "language"
    "language": {},
}


def _given_routing(routing, temperature: Optional[float]):
    """A row's own routing object (or the class an importable name names), at the row's ``T`` when it sets one."""
    if isinstance(routing, str):
        return routing_named(routing, **({} if temperature is None else {"temperature": temperature}))
    return routing if temperature is None else dataclasses.replace(routing, temperature=temperature)


def _routing(o: Dict[str, Any], embedders: Sequence[LaplaceEmbedder]):
    if o["routing"] is not None:
        return _given_routing(o["routing"], o["temperature"])
    weights: Union[str, Sequence[float]] = o["weights"]
    if isinstance(weights, str):
        if weights not in ("uncertainty", "uniform"):
            raise ValueError(f"weights must be 'uncertainty', 'uniform' or K numbers, got {weights!r}")
        if weights == "uniform":
            return UniformRouting()
    else:
        return FixedRouting(np.asarray(weights, dtype=np.float64))
    uncertainty, language = o["uncertainty"], dict(o["language"])
    if uncertainty is None:  # the library's default, with the row's temperature / variances where it sets them
        default = default_routing([e.encoder_name for e in embedders], [e.heads_ for e in embedders])
        uncertainty = default.kind
        language = {"probe": getattr(default, "probe", True), **language}
    return make_routing(
        uncertainty,
        o["rules"],
        temperature=o["temperature"],
        standardize=o["standardize"],
        laplace_variances=o["confidence_scoring"] == "laplace",
        center=o["center_confidence"],
        standardize_confidence=o["standardize_confidence"],
        languages=[model_languages(e.encoder_name) for e in embedders],
        language_options=language,
    )


def build_ensemble(embedders: Sequence[LaplaceEmbedder], **options) -> UECEnsemble:
    """The ensemble a row's options describe (keys of :data:`OPTIONS`; the rest take its defaults)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown ensemble options {unknown}; known: {sorted(OPTIONS)}")
    o = {**OPTIONS, **options}
    if o["confidence_scoring"] not in ("replace", "laplace"):
        raise ValueError(f"confidence_scoring must be 'replace' or 'laplace', got {o['confidence_scoring']!r}")
    if o["mixing"] == "embedding":
        if o["hubness"] or o["query_head"]:
            raise ValueError("hubness and query heads need mixing='score'")
        mixing: Optional[Any] = EmbeddingMixing()
    elif o["mixing"] == "score":
        mixing = ScoreMixing(calibrate=o["calibrate_scores"], hubness=o["hubness"], query_head=o["query_head"])
    else:
        raise ValueError(f"mixing must be 'score' or 'embedding', got {o['mixing']!r}")
    scoring = make_scoring(o["rules"], beta=o["beta"], use_variance=o["use_variance"])
    return UECEnsemble(embedders, routing=_routing(o, embedders), mixing=mixing, scoring=scoring)
