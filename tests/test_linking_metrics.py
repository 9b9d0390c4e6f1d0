"""experiments.linking_metrics: the translation protocol's top-1, mean rank and FOSCTTM."""

import numpy as np
import pytest

from experiments.linking_metrics import translation_metrics


def test_identity_is_perfect_and_a_swap_is_counted():
    X = np.eye(4, dtype=np.float32)
    assert translation_metrics(X, X) == {"top1": 1.0, "mean_rank": 1.0, "foscttm": 0.0}
    Y = X[[1, 0, 2, 3]]  # rows 0 and 1 point at each other's partner
    m = translation_metrics(X, Y)
    assert m["top1"] == 0.5 and m["mean_rank"] == 1.5
    # rows 0 and 1: one of 3 other rows above the partner, both directions; rows 2 and 3: none
    assert m["foscttm"] == pytest.approx((1 / 3 + 1 / 3) / 4)


def test_chunks_are_scored_on_their_own():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 6)).astype(np.float32)
    Y = X + 0.01 * rng.normal(size=X.shape).astype(np.float32)
    whole, chunked = translation_metrics(X, Y[::-1]), translation_metrics(X, Y[::-1], chunk=5)
    assert whole["top1"] <= 0.2
    # a chunk holds fewer rows to rank against: ranks cannot grow
    assert chunked["mean_rank"] <= whole["mean_rank"]


@pytest.mark.parametrize("shapes", [((3, 2), (4, 2)), ((3,), (3,))])
def test_bad_shapes_are_refused(shapes):
    with pytest.raises(ValueError, match="XA and XB"):
        translation_metrics(np.zeros(shapes[0]), np.zeros(shapes[1]))


def test_bad_chunk_is_refused():
    with pytest.raises(ValueError, match="chunk"):
        translation_metrics(np.eye(3), np.eye(3), chunk=1)
