"""Fixtures shared by the whole test-suite."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def client():
    """A two-worker in-process dask.distributed cluster (tests that use it importorskip dask first)."""
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture
def rng():
    """A fresh, seeded generator per test, so tests do not depend on their order."""
    return np.random.default_rng(12345)


def _check_topk(ref_values, tol, got_values, got_index, *, largest=True):
    """Assert that (got_values, got_index) is a valid top-k of ``ref_values`` per row.

    ``ref_values`` (R, N) are the exact (reference) values, ``tol`` (R, N) the
    entry-wise error the kernel is allowed. Valid means: distinct in-range
    indices; returned values within ``tol`` of the reference at those
    indices; sorted best first; exact ties in the returned values listed by
    ascending index; and no omitted entry better than a returned one by more
    than both tolerances. Where the reference gaps exceed the tolerances this
    is exactly "the same indices as the reference".
    """
    sign = 1.0 if largest else -1.0
    got_values = np.asarray(got_values, dtype=np.float64)
    for r in range(ref_values.shape[0]):
        idx, val = got_index[r], got_values[r]
        assert len(set(idx.tolist())) == idx.size, f"row {r}: repeated index {idx}"
        assert idx.min() >= 0 and idx.max() < ref_values.shape[1], f"row {r}: index out of range {idx}"
        err = np.abs(val - ref_values[r, idx])
        bad = err > tol[r, idx]
        assert not bad.any(), (
            f"row {r}: value off at positions {np.nonzero(bad)[0][:5]}: got {val[bad][:5]}, "
            f"expected {ref_values[r, idx][bad][:5]} (tol {tol[r, idx][bad][:5]})"
        )
        assert (np.diff(sign * val) <= 0).all(), f"row {r}: not sorted best first: {val}"
        tied = np.diff(val) == 0
        assert (np.diff(idx)[tied] > 0).all(), f"row {r}: tied values not in index order: {idx}, {val}"
        omitted = np.ones(ref_values.shape[1], dtype=bool)
        omitted[idx] = False
        if omitted.any():
            best_omitted = (sign * ref_values[r, omitted] - tol[r, omitted]).max()
            worst_returned = (sign * ref_values[r, idx] + tol[r, idx]).min()
            assert best_omitted <= worst_returned, (
                f"row {r}: an omitted candidate beats a returned one: best omitted "
                f"{np.nonzero(omitted)[0][np.argmax(sign * ref_values[r, omitted] - tol[r, omitted])]} "
                f"({sign * best_omitted}) vs returned {idx}"
            )


@pytest.fixture(scope="session")
def check_topk():
    """The validity check of a top-k result against a reference (see ``_check_topk``)."""
    return _check_topk
