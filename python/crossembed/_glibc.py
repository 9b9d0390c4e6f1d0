"""glibc's allocator knobs (no-ops elsewhere): hand freed heap back, cap the number of arenas."""

from __future__ import annotations

import ctypes
import os
from typing import Optional

_M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


def _libc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both exist only on glibc
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def malloc_trim() -> bool:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim(0)``); False where there is none."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


def limit_arenas(n: int) -> bool:
    """Cap glibc's malloc arenas at ``n`` (>= 1) unless ``MALLOC_ARENA_MAX`` is set in the environment, which
    wins. Only arenas created later are affected: call it before the threads that allocate start. Returns
    whether the cap was set."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if _LIBC is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, int(n)))
