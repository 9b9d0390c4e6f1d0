"""One GEH round's view signatures: 20 views of 256 anchors drawn from a pool of 2,600 (a 10k fit's
late rounds), over 6,500 rows of one side.

* kernel: the round's cosines to the union of the views' anchors (one GEMM), checked once
  (``AnchorCosines``), then the ``signatures_from_cosines`` kernel per view (what
  ``ValidatedPromotion`` does);
* per-view GEMM: ``anchor_signatures`` per view;
* numpy: the same union GEMM, then gather + exp + normalise in numpy per view.

FLOPs per call: the per-view path's 2 * N * D * (views x anchors).
"""

import numpy as np
import pytest

import crossembed as ce
from _bench import run, size, unit_rows
from crossembed.cli.kernel_peers import numpy_signatures_from_cosines
from crossembed.kernels import AnchorCosines

N, D = size("view_signatures_n", 6500, 1500), 384
POOL, VIEWS, PER_VIEW, SIGMA = 2600, 20, 256, 0.5
FLOPS = 2.0 * N * D * VIEWS * PER_VIEW


@pytest.fixture(scope="module")
def round_inputs():
    rng = np.random.default_rng(7)
    X, pool = unit_rows(rng, N, D), unit_rows(rng, POOL, D)
    views = [np.sort(rng.choice(int(0.7 * POOL), PER_VIEW, replace=False)) for _ in range(VIEWS)]
    return X, pool, views


def _from_cosines(X, pool, views, one_view, wrap=lambda C: C):
    cols = np.unique(np.concatenate(views))
    C = wrap(X @ pool[cols].T)
    return [one_view(C, np.searchsorted(cols, v)) for v in views]


def kernel_round(X, pool, views):
    return _from_cosines(X, pool, views, lambda C, at: C.signatures(at, sigma=SIGMA), wrap=AnchorCosines)


def numpy_round(X, pool, views):
    return _from_cosines(X, pool, views, lambda C, at: numpy_signatures_from_cosines(C, at, SIGMA))


def per_view_round(X, pool, views):
    return [ce.anchor_signatures(X, pool[v], sigma=SIGMA) for v in views]


@pytest.mark.benchmark(group="view_signatures")
def test_view_signatures_kernel(benchmark, round_inputs):
    run(benchmark, kernel_round, *round_inputs, role="kernel", flops=FLOPS, primary=True)


@pytest.mark.benchmark(group="view_signatures")
def test_view_signatures_per_view_gemm(benchmark, round_inputs):
    got = run(benchmark, per_view_round, *round_inputs, role="per-view anchor_signatures", flops=FLOPS)
    np.testing.assert_allclose(got[0], kernel_round(*round_inputs)[0], atol=1e-5)


@pytest.mark.benchmark(group="view_signatures")
def test_view_signatures_numpy_baseline(benchmark, round_inputs):
    got = run(benchmark, numpy_round, *round_inputs, role="numpy float32", flops=FLOPS)
    np.testing.assert_allclose(got[0], kernel_round(*round_inputs)[0], atol=1e-5)
