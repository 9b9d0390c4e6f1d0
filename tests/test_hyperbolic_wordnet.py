"""WordNet hierarchy embedding: closure construction, reconstruction metrics, a tiny training run."""

import numpy as np
import pytest
import torch

from crossembed.hyperbolic.wordnet_embedding import (
    Hierarchy,
    embed_hierarchy,
    load_hierarchy,
    reconstruction,
    resolve_synset,
)

torch.set_num_threads(1)


def _star():
    # root 0 with children 1, 2, 3: closure (child, ancestor)
    return Hierarchy(["r", "a", "b", "c"], np.arange(4), np.array([[1, 0], [2, 0], [3, 0]]), np.array([0, 1, 1, 1]))


def test_reconstruction_perfect_and_hand_computed():
    h = _star()
    good = np.zeros((4, 3), np.float32)
    good[1:, :] = np.eye(3)  # root at the origin, children on orthogonal axes
    m = reconstruction(good, h)
    assert m["mean_rank"] == 1.0 and m["map"] == 1.0 and m["pairs_scored"] == 6
    bad = np.zeros((4, 3), np.float32)
    bad[0] = [5, 0, 0]
    bad[1:] = np.eye(3) * 0.1
    m = reconstruction(bad, h)
    # each child: the root is behind its 2 siblings -> rank 3, AP 1/3; the root has no unrelated nodes -> rank 1, AP 1
    assert m["mean_rank"] == pytest.approx(2.0)
    assert m["map"] == pytest.approx((3 * (1 / 3) + 1) / 4)


def test_tiny_embedding_learns_the_star():
    h = _star()
    emb, losses = embed_hierarchy(
        h, dim=3, epochs=60, batch_size=8, negatives=3, lr=0.1, burn_in=5, show_progress_bar=False
    )
    assert losses[-1] < losses[0]
    assert reconstruction(emb, h)["mean_rank"] == 1.0


def test_real_wordnet_subtree():
    try:
        off = resolve_synset("mammal.n.01")
    except FileNotFoundError:
        pytest.skip("wordnet-base not installed")
    assert off == 1861778
    h = load_hierarchy("canine.n.02")
    assert h.names[0] == "canine" and "dog" in h.names and "wolf" in h.names
    assert h.depth[0] == 0 and (h.depth[1:] >= 1).all()
    # closure is transitive: every ancestor of an ancestor is an ancestor
    anc = {}
    for a, b in h.closure:
        anc.setdefault(int(a), set()).add(int(b))
    for bs in anc.values():
        for b in bs:
            assert anc.get(b, set()) <= bs
    assert all(0 in bs for bs in anc.values())  # everything is below the root
    with pytest.raises(ValueError, match="noun sense"):
        resolve_synset("run.v.01")
    with pytest.raises(ValueError, match="no noun"):
        resolve_synset("qwzx.n.01")
