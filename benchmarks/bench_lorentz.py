"""Lorentz distances (UNCHA inference): the C++ kernel against the acosh form via matmul in numpy and torch.

Baselines compute d = acosh(-c <x, y>_L) / sqrt(c) with <x, y>_L = X Y^T - x_t y_t^T
(the textbook form, one GEMM; it loses all precision for nearby points, which
the kernel's asinh form keeps: see tests/test_kernels_lorentz.py).
FLOPs per call: 2 * NX * NY * D.
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size
from crossembed.cli.kernel_peers import numpy_lorentz, numpy_lorentz_topk, torch_lorentz, torch_lorentz_topk

NX, NY, D, K = size("lorentz_nx", 4096, 512), size("lorentz_ny", 4096, 512), size("lorentz_d", 128, 128), 10
FLOPS = 2.0 * NX * NY * D


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(5)
    scale = lambda n: 10.0 ** rng.uniform(-1, 0.5, (n, 1))  # noqa: E731  norms ~0.1 .. 3
    X = rng.standard_normal((NX, D)) / np.sqrt(D) * scale(NX)
    Y = rng.standard_normal((NY, D)) / np.sqrt(D) * scale(NY)
    return X.astype(np.float32), Y.astype(np.float32)


@pytest.mark.benchmark(group="lorentz_pairwise")
def test_lorentz_kernel_float32(benchmark, points):
    run(benchmark, ce.lorentz_pairwise, *points, role="kernel", flops=FLOPS, primary=True)


@pytest.mark.benchmark(group="lorentz_pairwise")
def test_lorentz_kernel_float64(benchmark, points):
    X, Y = (p.astype(np.float64) for p in points)
    run(benchmark, ce.lorentz_pairwise, X, Y, role="kernel float64", flops=FLOPS)


@pytest.mark.benchmark(group="lorentz_pairwise")
def test_lorentz_numpy_float32(benchmark, points):
    got = run(benchmark, numpy_lorentz, *points, role="numpy float32", flops=FLOPS)
    far = got > 0.5  # where the acosh form is accurate enough to compare
    np.testing.assert_allclose(got[far], ce.lorentz_pairwise(*points)[far], rtol=1e-3)


@pytest.mark.benchmark(group="lorentz_pairwise")
def test_lorentz_numpy_float64(benchmark, points):
    X, Y = (p.astype(np.float64) for p in points)
    run(benchmark, numpy_lorentz, X, Y, role="numpy float64", flops=FLOPS)


@pytest.mark.benchmark(group="lorentz_pairwise")
def test_lorentz_torch_float32(benchmark, points):
    torch = pytest.importorskip("torch")
    X, Y = (torch.from_numpy(p) for p in points)
    with torch.no_grad():
        run(benchmark, torch_lorentz, X, Y, role="torch float32", flops=FLOPS)


@pytest.mark.benchmark(group="lorentz_topk")
def test_lorentz_topk_kernel(benchmark, points):
    run(benchmark, ce.lorentz_topk, *points, K, role="kernel", flops=FLOPS, primary=True)


@pytest.mark.benchmark(group="lorentz_topk")
def test_lorentz_topk_numpy(benchmark, points):
    got = run(benchmark, numpy_lorentz_topk, *points, K, role="numpy float32", flops=FLOPS)
    kernel = ce.lorentz_topk(*points, K)
    overlap = np.mean([len(set(a) & set(b)) / K for a, b in zip(got[1], kernel[1])])
    assert overlap > 0.99, f"the baseline computes something else (top-k overlap {overlap:.3f})"


@pytest.mark.benchmark(group="lorentz_topk")
def test_lorentz_topk_torch(benchmark, points):
    torch = pytest.importorskip("torch")
    X, Y = (torch.from_numpy(p) for p in points)
    run(benchmark, torch_lorentz_topk, X, Y, K, role="torch float32", flops=FLOPS)
