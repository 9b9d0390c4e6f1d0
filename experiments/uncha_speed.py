"""The retrieval speed line of the UNCHA table: C++ ``lorentz_topk`` against the torch paths."""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import numpy as np
import torch

import crossembed
from crossembed._validation import as_matrix, check_int, check_num_threads, check_positive
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

    Raises
    ------
    ImportError
        When the extension was built without the Lorentz kernels.
    """
    X, Y = as_matrix(X, "X"), as_matrix(Y, "Y")
    k = check_int(k, "k", low=1, high=Y.shape[0])
    repeats = check_int(repeats, "repeats", low=1)
    curvature = check_positive(curvature, "curvature")
    threads = check_num_threads(num_threads)
    try:
        crossembed.lorentz_topk(X[:1], Y[:1], 1, curvature=curvature)
    except (AttributeError, ImportError):
        raise ImportError("crossembed.lorentz_topk is not available in this build") from None
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    prev = torch.get_num_threads()
    torch.set_num_threads(threads or prev)
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
