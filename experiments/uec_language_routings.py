"""Routings the evaluation uses as ablations and bounds of :class:`~crossembed.uec.routing.LanguageRouting`.

Not library objects: one reads the queries' true languages (a bound on what
any language signal can give), the other drops the rank head (what the
language signals give without it).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from crossembed._rows import softmax_rows
from crossembed.uec.routing import CHANCE_LOG_RANK, LanguageRouting

__all__ = ["NoRankHeadRouting", "TrueLanguageRouting"]


class TrueLanguageRouting(LanguageRouting):
    """``c_k(q) = 1`` when query q's labelled language is one model k reads, else 0 (no identifier, no probe)."""

    kind = "true_language"

    def __init__(self, languages, query_languages: Sequence[str], *, temperature: float = 1.0):
        super().__init__(languages, temperature=temperature, identifier=None, probe=False)
        self._query_languages = np.asarray(list(query_languages))

    def coverage(self, components, heads, texts=None) -> np.ndarray:
        if len(components[0]) != len(self._query_languages):
            raise ValueError("TrueLanguageRouting routes the evaluated queries only")
        c = np.ones((len(self._query_languages), len(components)))
        for k, langs in enumerate(self.languages):
            if langs is not None:
                c[:, k] = np.isin(self._query_languages, langs)
        return c


class NoRankHeadRouting(LanguageRouting):
    """:class:`LanguageRouting` with each model's rank head replaced by its mean prediction on the fit anchors."""

    kind = "language_without_rank_head"

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None):
        pi, comps = super().route(components, heads, role=role, reference=reference, texts=texts)
        if role == "passage":
            return pi, comps
        t = np.array([h.predicted_log_rank(h.hub_reference).mean() for h in heads])[None, :]
        c = self.coverage(components, heads, texts)
        return softmax_rows(-(c * t + (1.0 - c) * CHANCE_LOG_RANK) / self.temperature), comps
