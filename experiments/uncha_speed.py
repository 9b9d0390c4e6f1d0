"""The retrieval speed line of the UNCHA table: C++ ``lorentz_topk`` against the torch paths."""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import numpy as np
import torch

import crossembed
from crossembed.hyperbolic import lorentz as L

__all__ = ["benchmark_topk"]


def _best_seconds(f: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def benchmark_topk(
    X: np.ndarray, Y: np.ndarray, k: int, *, curvature: float = 1.0, repeats: int = 3, num_threads: Optional[int] = 1
) -> Dict[str, float]:
    """Best-of-``repeats`` seconds of C++ ``lorentz_topk`` vs torch (stable pairwise + topk, matmul form + topk).

    Parameters
    ----------
    X, Y : float32 arrays (N, n), (M, n)
        Queries and gallery (space components).
    k : int
        Neighbours per query.
    curvature : float
    repeats : int
        Timed calls per path; the fastest counts.
    num_threads : int or None
        Threads for both sides (torch via ``set_num_threads``, restored
        afterwards) so the ratio compares the kernels, not the core counts.
        Default 1; ``None`` means all cores.

    Returns
    -------
    dict
        ``cpp_s``, ``torch_s``, ``torch_matmul_s`` and the two speed-ups over C++.

    """
    X, Y = np.ascontiguousarray(X, np.float32), np.ascontiguousarray(Y, np.float32)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must be matrices of one width, got {X.shape} and {Y.shape}")
    for name, value, high in (("k", k, Y.shape[0]), ("repeats", repeats, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (high and value > high):
            raise ValueError(f"{name} must be an integer in [1, {high or 'inf'}], got {value!r}")
    if not curvature > 0:
        raise ValueError(f"curvature must be > 0, got {curvature!r}")
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    prev = torch.get_num_threads()
    torch.set_num_threads(num_threads or prev)
    try:
        with torch.no_grad():
            times = {
                "cpp_s": _best_seconds(
                    lambda: crossembed.lorentz_topk(X, Y, k, curvature=curvature, num_threads=num_threads), repeats
                ),
                "torch_s": _best_seconds(
                    lambda: torch.topk(L.pairwise_distance(Xt, Yt, curvature), k, dim=1, largest=False), repeats
                ),
                "torch_matmul_s": _best_seconds(
                    lambda: torch.topk(L.pairwise_distance(Xt, Yt, curvature, stable=False), k, dim=1, largest=False),
                    repeats,
                ),
            }
    finally:
        torch.set_num_threads(prev)
    times["speedup_vs_torch"] = times["torch_s"] / times["cpp_s"]
    times["speedup_vs_torch_matmul"] = times["torch_matmul_s"] / times["cpp_s"]
    return times
