"""When a GEH fit stops growing: ``GEHLinker(stop=StopRule(...))``.

Once growth stops, a round only swaps links and the count oscillates by a
few percent; a rule on the change between consecutive rounds never fires on
such a sequence, a rule on the running maximum does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from crossembed._config import Configured, set_checked
from crossembed._validation import check_fraction, check_int, check_positive

__all__ = ["StopCounter", "StopRule", "turnover"]


@dataclass(frozen=True, kw_only=True)
class StopRule(Configured):
    """A fit ends after ``patience`` stale rounds in a row.

    A round is *stale* when its link count does not beat the best count of
    the earlier rounds by more than ``tol`` (relative), and its link set is
    settled (at most ``turnover`` of its links are new). A round held at its
    size by the growth rule's limit is never stale.

    Parameters
    ----------
    patience : int
        Stale rounds in a row that end the fit (default 3).
    tol : float
        Relative tolerance on the best link count, ``>= 0`` (default 0.02).
    turnover : float or None
        Largest share of new links in a settled round, in ``[0, 1]``
        (default 0.2); None: any round may be stale. Not applied while the
        rounds run on a row sample, whose pool only seeds the final pass.
    unsettled_patience : int or None
        Stale rounds in a row, settled or not, that end the fit anyway
        (default 20): a small fit can hover at the turnover bound for ever.
        None: never.
    """

    kind = "best"
    patience: int = 3
    tol: float = 0.02
    turnover: Optional[float] = 0.2
    unsettled_patience: Optional[int] = 20

    def __post_init__(self):
        set_checked(
            self,
            patience=check_int(self.patience, "patience", low=1),
            tol=check_positive(self.tol, "tol", allow_zero=True),
            turnover=None if self.turnover is None else check_fraction(self.turnover, "turnover", allow_zero=True),
            unsettled_patience=None
            if self.unsettled_patience is None
            else check_int(self.unsettled_patience, "unsettled_patience", low=1),
        )

    def counter(self, *, every_row: bool = True) -> StopCounter:
        """A fresh count for one fit; ``every_row=False`` (rounds on a row sample) ignores ``turnover``."""
        return StopCounter(self, max_turnover=self.turnover if every_row else None)


class StopCounter:
    """The stale rounds of one fit under a :class:`StopRule`."""

    def __init__(self, rule: StopRule, *, max_turnover: Optional[float]):
        self.rule, self.max_turnover = rule, max_turnover
        self.best: Optional[int] = None
        self.stale = self.stale_any = 0

    def update(self, links: int, *, saturated: bool = True, turnover: Optional[float] = None) -> bool:
        """Record one round's link count (and link-set turnover); True when the fit should stop.

        ``saturated=False``: the growth limit held the round's size, so it is not stale.
        """
        stale = self.best is not None and links <= self.best * (1.0 + self.rule.tol)
        settled = self.max_turnover is None or turnover is None or turnover <= self.max_turnover
        self.stale = self.stale + 1 if stale and saturated and settled else 0
        self.stale_any = self.stale_any + 1 if stale and saturated else 0  # settled or not
        self.best = links if self.best is None else max(self.best, links)
        limit = self.rule.unsettled_patience
        return self.stale >= self.rule.patience or (limit is not None and self.stale_any >= limit)


def turnover(links: np.ndarray, previous: np.ndarray, n_b: int) -> float:
    """Share of ``links`` (pairs ``(a, b)``) that were not in ``previous``; 1.0 for a first round."""
    if len(links) == 0:
        return 0.0
    if len(previous) == 0:
        return 1.0
    keys = links[:, 0].astype(np.int64) * n_b + links[:, 1]
    old = previous[:, 0].astype(np.int64) * n_b + previous[:, 1]
    return float(1.0 - np.isin(keys, old).mean())
