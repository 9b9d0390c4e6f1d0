"""Sizes and the timing helper shared by the benchmark modules (see conftest.py for the overview)."""

from __future__ import annotations

import os

import numpy as np

SCALE = os.environ.get("CROSSEMBED_BENCH_SCALE", "full").lower()
if SCALE not in ("full", "small"):
    raise ValueError(f"CROSSEMBED_BENCH_SCALE must be 'full' or 'small', got {SCALE!r}")

ROUNDS = 3
WARMUP = 1 if SCALE == "small" else 0  # full-size calls take seconds: page faults of a first call are noise there


def size(name: str, full: int, small: int) -> int:
    """The size ``name``: env override, else the full or small default."""
    value = os.environ.get(f"CROSSEMBED_BENCH_{name.upper()}")
    return int(value) if value is not None else (full if SCALE == "full" else small)


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Random unit-length float32 rows (what text encoders return)."""
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def clustered_unit_rows(rng: np.random.Generator, q: int, n: int, d: int):
    """(q query rows, n document rows), unit length and clustered like sentence embeddings.

    Anisotropic spectrum, a component every row shares, 500 centroids; each
    query is a document plus a little noise.
    """
    spectrum = (1.0 + np.arange(d)) ** -0.5
    common = rng.standard_normal(d) * spectrum
    centroids = rng.standard_normal((500, d)) * spectrum
    docs = 1.5 * common + centroids[rng.integers(0, 500, n)] + 0.7 * rng.standard_normal((n, d)) * spectrum
    docs = docs.astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[rng.integers(0, n, q)] + 0.05 * rng.standard_normal((q, d)).astype(np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True), docs


def run(benchmark, fn, *args, role: str, flops: float, primary: bool = False, **kwargs):
    """Time ``fn(*args, **kwargs)`` for ROUNDS rounds and record the role and FLOP count for report.py."""
    benchmark.extra_info.update(role=role, flops=float(flops), primary=primary, scale=SCALE)
    return benchmark.pedantic(fn, args=args, kwargs=kwargs, rounds=ROUNDS, iterations=1, warmup_rounds=WARMUP)
