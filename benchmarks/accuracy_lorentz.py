"""Accuracy of Lorentz distances: the C++ kernel against the acosh-via-matmul baselines.

    python benchmarks/accuracy_lorentz.py [--n 400] [--dim 128]

Prints a markdown table of the max absolute and max relative error against
the long-double reference (crossembed.reference) for two regimes: random
pairs (norms 0.1..3) and nearby pairs (distance 1e-4..1e-2, a third of them
displaced along the radius). The baselines are those of bench_lorentz.py.
"""

from __future__ import annotations

import argparse

import numpy as np

import crossembed as ce
from bench_lorentz import numpy_lorentz, torch_lorentz
from crossembed import reference as ref


def random_pairs(rng, n, d):
    scale = lambda: 10.0 ** rng.uniform(-1, 0.5, (n, 1))  # noqa: E731
    return rng.standard_normal((n, d)) / np.sqrt(d) * scale(), rng.standard_normal((n, d)) / np.sqrt(d) * scale()


def nearby_pairs(rng, n, d):
    X = rng.standard_normal((n, d)) / np.sqrt(d) * rng.uniform(0.05, 2.0, (n, 1))
    step = rng.standard_normal((n, d))
    step[: n // 3] = X[: n // 3]
    step /= np.linalg.norm(step, axis=1, keepdims=True)
    step[: n // 3] *= np.sqrt(1 + (X[: n // 3] ** 2).sum(1, keepdims=True))
    return X, X + step * 10.0 ** rng.uniform(-4, -2, (n, 1))


def methods():
    import torch

    def torch32(X, Y):
        with torch.no_grad():
            return torch_lorentz(torch.from_numpy(X), torch.from_numpy(Y)).numpy()

    return {
        "kernel float32": lambda X, Y: ce.lorentz_pairwise(X.astype(np.float32), Y.astype(np.float32)),
        "kernel float64": lambda X, Y: ce.lorentz_pairwise(X, Y),
        "numpy acosh float32": lambda X, Y: numpy_lorentz(X.astype(np.float32), Y.astype(np.float32)),
        "numpy acosh float64": lambda X, Y: numpy_lorentz(X, Y),
        "torch acosh float32": lambda X, Y: torch32(X.astype(np.float32), Y.astype(np.float32)),
    }


def measure(n: int, dim: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    lines = ["| regime | method | max abs error | max rel error |", "|---|---|---|---|"]
    for regime, (X, Y) in (("random", random_pairs(rng, n, dim)), ("nearby 1e-4..1e-2", nearby_pairs(rng, n, dim))):
        for name, fn in methods().items():
            # every method sees the same (float32-representable) points, and so does the reference
            X32, Y32 = X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)
            got = (
                np.diagonal(fn(X32, Y32)).astype(np.float64) if regime != "random" else fn(X32, Y32).astype(np.float64)
            )
            expect = (
                np.array([ref.lorentz_pairwise(X32[i : i + 1], Y32[i : i + 1])[0, 0] for i in range(n)])
                if regime != "random"
                else ref.lorentz_pairwise(X32, Y32)
            )
            err = np.abs(got - expect)
            lines.append(f"| {regime} | {name} | {err.max():.2e} | {(err / expect).max():.2e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args(argv)
    print(measure(args.n, args.dim))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
