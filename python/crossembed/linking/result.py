"""The output of every linker in :mod:`crossembed.linking` (GEH and the baselines)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from crossembed._io import atomic_write

__all__ = ["LinkResult"]


@dataclass
class LinkResult:
    """Links between rows of A and rows of B, one-to-one, seeds excluded.

    Attributes
    ----------
    links : ndarray, shape (L, 2), int64
        ``links[r] = (i, j)``: row ``i`` of A and row ``j`` of B are the same object.
    posterior : ndarray, shape (L,), float64
        Confidence per link: the Beta posterior mean for GEH, the cosine of the
        matched pair for the baselines.
    votes : ndarray, shape (L,), int64
        Views that proposed the link (0 for the baselines).
    history : list of dict
        One entry per round (GEH) or iteration (bootstrap): pool size, views,
        anchors per view, proposals, promoted links, threshold, seconds.
    seeds_found : ndarray, shape (s, 2), int64, or None
        The seed pairs a linker called without seeds found itself (they are
        links too, left out of ``links`` as given seeds are); None when seeds were given.
    seed_confidence : float or None
        With ``seeds_found``: the share of them re-found out of sample, in [0, 1]
        (docs/methods.md#geh-seedless); None when seeds were given.
    """

    links: np.ndarray
    posterior: np.ndarray
    votes: np.ndarray
    history: List[Dict[str, Any]] = field(default_factory=list)
    seeds_found: Optional[np.ndarray] = None
    seed_confidence: Optional[float] = None

    def __post_init__(self):
        self.links = np.ascontiguousarray(np.asarray(self.links, dtype=np.int64).reshape(-1, 2))
        self.posterior = np.asarray(self.posterior, dtype=np.float64).reshape(-1)
        self.votes = np.asarray(self.votes, dtype=np.int64).reshape(-1)
        if not (len(self.links) == len(self.posterior) == len(self.votes)):
            raise ValueError("links, posterior and votes must have the same length")
        if self.seeds_found is not None:
            self.seeds_found = np.asarray(self.seeds_found, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return len(self.links)

    def __repr__(self) -> str:
        return f"LinkResult(links={len(self)}, rounds={len(self.history)})"

    def to_csv(self, path) -> None:
        """Write ``a,b,posterior,votes`` rows (atomically: a crash leaves the old file)."""
        buf = io.StringIO()
        buf.write("a,b,posterior,votes\n")
        for (i, j), p, v in zip(self.links, self.posterior, self.votes):
            buf.write(f"{i},{j},{p:.6f},{v}\n")
        atomic_write(path, buf.getvalue().encode())

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready summary (links as lists)."""
        return {
            "n_links": len(self),
            "links": self.links.tolist(),
            "posterior": [round(float(p), 6) for p in self.posterior],
            "votes": self.votes.tolist(),
            "history": self.history,
            **(
                {}
                if self.seeds_found is None
                else {"seeds_found": self.seeds_found.tolist(), "seed_confidence": self.seed_confidence}
            ),
        }
