"""When a GEH fit stops growing: the rule behind ``GEHLinker(stop=...)``.

Once growth stops, a round only swaps links, and the count oscillates
(+-4 % over rounds 19-26 of a 10k minilm <-> e5 fit: 2,512 / 2,604 / 2,604 /
2,509 / 2,602 ...). A rule on the change between consecutive rounds never
fires on such a sequence; a rule on the running maximum does.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

STOP_RULES = ("best", "change")


class StopRule:
    """Counts stale rounds and says when ``patience`` of them came in a row.

    Parameters
    ----------
    rule : {"best", "change"}
        ``"best"``: a round is stale when its link count does not exceed the
        best count of the earlier rounds by more than ``tol`` (relative);
        ``"change"``: when it differs from the previous round's count by less
        than ``tol`` (the rule of earlier releases).
    patience : int
        Stale rounds in a row that end the fit.
    tol : float
        Relative tolerance.
    max_turnover : float or None
        A round is stale only while its link set is settled: at most this
        share of its links was not among the previous round's. Measured at
        10k objects: converged fits swap 10-18 % a round, while a fit whose
        pool is still mostly false links (minilm <-> e5 draw 4: precision
        3-10 % for 20 rounds at a flat count) swaps 25-45 % and must go on.

    unsettled_patience : int or None
        Stale rounds in a row that end the fit even while its link set is
        not settled (None: never). Small fits can hover at the turnover
        bound for ever: minilm <-> e5 at 1,500 objects swapped 17-23 % a
        round from round 20 to 86 (F1 51.1 in 47 s); a limit of 20 (or 15)
        stale rounds ended it at round 36 (F1 52.5, 19 s). No 10k fit of the
        link table reaches 10 (minilm <-> e5 and USE, 5 draws each: the same
        rounds and links with a limit of 10 / 15); the 20 flat rounds of
        minilm <-> e5 draw 4 above were an earlier rule's, and that draw now
        ends by itself at round 28.

    A round held at its size by the growth rule (``saturated=False``: the
    growth limit bound) is never stale: stopping there froze minilm <-> e5
    at 465 mostly-wrong links.
    """

    def __init__(
        self,
        rule: str,
        *,
        patience: int,
        tol: float,
        max_turnover: Optional[float] = None,
        unsettled_patience: Optional[int] = None,
    ):
        if rule not in STOP_RULES:
            raise ValueError(f"stop must be one of {STOP_RULES}, got {rule!r}")
        self.rule, self.patience, self.tol, self.max_turnover = rule, patience, tol, max_turnover
        self.unsettled_patience = unsettled_patience
        self.best = self.prev = None
        self.stale = self.stale_any = 0

    def update(self, links: int, *, saturated: bool = True, turnover: Optional[float] = None) -> bool:
        """Record one round's link count (and link-set turnover); True when the fit should stop."""
        ref = self.best if self.rule == "best" else self.prev
        if ref is None:
            stale = False
        elif self.rule == "best":
            stale = links <= ref * (1.0 + self.tol)
        else:
            stale = abs(links - ref) / max(ref, 1) < self.tol
        settled = self.max_turnover is None or turnover is None or turnover <= self.max_turnover
        self.stale = self.stale + 1 if stale and saturated and settled else 0
        self.stale_any = self.stale_any + 1 if stale and saturated else 0  # settled or not
        self.prev = links
        self.best = links if self.best is None else max(self.best, links)
        limit = self.unsettled_patience
        return self.stale >= self.patience or (limit is not None and self.stale_any >= limit)


def turnover(links: np.ndarray, previous: np.ndarray, n_b: int) -> float:
    """Share of ``links`` (pairs ``(a, b)``) that were not in ``previous``; 1.0 for a first round."""
    if len(links) == 0:
        return 0.0
    if len(previous) == 0:
        return 1.0
    keys = links[:, 0].astype(np.int64) * n_b + links[:, 1]
    old = previous[:, 0].astype(np.int64) * n_b + previous[:, 1]
    return float(1.0 - np.isin(keys, old).mean())
