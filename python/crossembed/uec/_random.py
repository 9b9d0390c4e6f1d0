"""One integer seed from a ``random_state`` (for what must be saved and rebuilt)."""

from __future__ import annotations

import numbers

from crossembed._validation import check_random_state

__all__ = ["int_seed"]


def int_seed(random_state) -> int:
    """An int seed is kept as it is (so saved objects rebuild the same); None or a Generator draws one.

    Used where the seed itself must be stored: HNSW graphs, ensemble projections.
    """
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).integers(2**31 - 1))
