"""Anchor signatures (GEH): the fused C++ kernel against numpy and torch (GEMM + exp + normalise) at A = 64, 256, 512.

Both get the same explicit sigma so only the signature work is timed.
FLOPs per call: 2 * N * A * D (the cosine GEMM).
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size
from crossembed.cli.kernel_peers import numpy_signatures, torch_signatures

N, D = size("signatures_n", 100_000, 5000), size("signatures_d", 384, 384)
ANCHORS = [64, 256, 512]
SIGMA = 0.5


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(3)
    return rng.standard_normal((N, D), dtype=np.float32), rng.standard_normal((max(ANCHORS), D), dtype=np.float32)


@pytest.mark.parametrize("A", ANCHORS)
@pytest.mark.benchmark(group="anchor_signatures")
def test_signatures_kernel(benchmark, points, A):
    X, anchors = points
    benchmark.group = f"anchor_signatures A={A}"
    run(
        benchmark, ce.anchor_signatures, X, anchors[:A], sigma=SIGMA, role="kernel", flops=2.0 * N * A * D, primary=True
    )


@pytest.mark.parametrize("A", ANCHORS)
@pytest.mark.benchmark(group="anchor_signatures")
def test_signatures_numpy_baseline(benchmark, points, A):
    X, anchors = points
    benchmark.group = f"anchor_signatures A={A}"
    got = run(benchmark, numpy_signatures, X, anchors[:A], SIGMA, role="numpy float32", flops=2.0 * N * A * D)
    np.testing.assert_allclose(got[:1000], ce.anchor_signatures(X[:1000], anchors[:A], sigma=SIGMA), atol=1e-4)


@pytest.mark.parametrize("A", ANCHORS)
@pytest.mark.benchmark(group="anchor_signatures")
def test_signatures_torch_baseline(benchmark, points, A):
    torch = pytest.importorskip("torch")
    X, anchors = points
    benchmark.group = f"anchor_signatures A={A}"
    tx, ta = torch.from_numpy(X), torch.from_numpy(np.ascontiguousarray(anchors[:A]))
    got = run(benchmark, torch_signatures, tx, ta, SIGMA, role="torch float32", flops=2.0 * N * A * D)
    np.testing.assert_allclose(got[:1000].numpy(), ce.anchor_signatures(X[:1000], anchors[:A], sigma=SIGMA), atol=1e-4)
