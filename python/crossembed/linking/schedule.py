"""How many views a GEH round runs, how many anchors each gets, and the CSLS neighbourhoods."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

from crossembed._config import Configured, set_checked
from crossembed._validation import check_fraction, check_int, check_positive

__all__ = ["Schedule"]


@dataclass(frozen=True, kw_only=True)
class Schedule(Configured):
    """The paper's per-round schedule and CSLS sizes.

    With pool size ``P``, ``g = P / |seeds|`` and ``sf = 1 + c ln g``, a
    round uses ``ceil(m0 sf)`` views of ``max(5, ceil(rho0 P / sf))`` anchors
    (a growth rule may use more views or other view sizes).

    Parameters
    ----------
    m0 : float
        Views per round at the start, ``> 0`` (default 5).
    rho0 : float
        Share of the pool per view at the start, in ``(0, 1]`` (default 0.4).
    c : float
        Growth of the view count with ``ln g``, ``>= 0`` (default 0.3).
    k : int
        Mutual top-``k`` under CSLS (default 5).
    csls_k : int
        Neighbours averaged for the CSLS hubness terms (default 50).
    """

    kind = "paper"
    m0: float = 5
    rho0: float = 0.4
    c: float = 0.3
    k: int = 5
    csls_k: int = 50

    def __post_init__(self):
        set_checked(
            self,
            m0=check_positive(self.m0, "m0"),
            rho0=check_fraction(self.rho0, "rho0"),
            c=check_positive(self.c, "c", allow_zero=True),
            k=check_int(self.k, "k", low=1),
            csls_k=check_int(self.csls_k, "csls_k", low=1),
        )

    def views(self, pool_size: int, n_seeds: int) -> Tuple[int, int]:
        """``(views, anchors per view)`` for a pool of ``pool_size`` grown from ``n_seeds`` seeds."""
        sf = 1.0 + self.c * math.log(max(pool_size / n_seeds, 1.0))
        return math.ceil(self.m0 * sf), max(5, math.ceil(self.rho0 * pool_size / sf))
