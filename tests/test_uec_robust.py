"""A weak member barely moves the default ensemble: the rank head routes it almost no weight."""

import numpy as np
import pytest

from crossembed.uec import LaplaceEmbedder, UECEnsemble, UniformRouting
from crossembed.uec.metrics import ranking_metrics


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


_FIT, _TEST = slice(0, 300), slice(300, None)


def _views(rng, topics, noise):
    """A model: ``(anchors, positives)``, noisy views of the shared topics in its own rotated space."""
    n, d = topics.shape
    mix = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return tuple(_unit((topics + noise * rng.standard_normal((n, d))) @ mix) for _ in range(2))


@pytest.fixture(scope="module")
def task():
    """Three useful models and two weak ones (unrelated noise; views buried in noise), each fitted once."""
    rng = np.random.default_rng(0)
    topics = rng.standard_normal((500, 8))
    good = [_views(rng, topics, 0.5) for _ in range(3)]
    weak = {
        "noise": tuple(_unit(rng.standard_normal(topics.shape)) for _ in range(2)),
        "faint": _views(rng, topics, 3.0),
    }
    fitted = {}
    for name, (A, P) in [*enumerate(good), *weak.items()]:
        fitted[name] = (LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(A[_FIT], P[_FIT]), A, P)
    return [fitted[k] for k in range(3)], {name: fitted[name] for name in weak}


def _ndcg(members, routing=None):
    embedders = [e for e, _, _ in members]
    test = _TEST
    embs = [(A, P) for _, A, P in members]
    ens = UECEnsemble(embedders, routing=routing)
    q = ens.combine([e.transform(A[test]) for e, (A, _) in zip(embedders, embs)])
    d = ens.combine([e.transform(P[test]) for e, (_, P) in zip(embedders, embs)], role="passage")
    _, idx = ens.topk(q, d, 10)
    relevant = [(i,) for i in range(len(q))]
    return 100 * ranking_metrics(idx, relevant)["ndcg@10"].mean(), q.weights


@pytest.mark.parametrize("weak", ["noise", "faint"])
def test_a_weak_member_costs_the_default_little_and_gets_little_weight(task, weak):
    good, weak_members = task
    base, _ = _ndcg(good)
    with_weak, weights = _ndcg(good + [weak_members[weak]])
    alone, _ = _ndcg([weak_members[weak]])
    assert alone < base - 20  # it is weak
    assert with_weak >= base - 0.5
    assert weights[:, -1].mean() <= 0.1
    # the uniform ensemble, which cannot tell, pays more for it
    uniform_base, _ = _ndcg(good, UniformRouting())
    uniform_weak, _ = _ndcg(good + [weak_members[weak]], UniformRouting())
    assert uniform_base - uniform_weak > base - with_weak


@pytest.mark.parametrize("weak", ["noise", "faint"])
def test_the_routing_check_keeps_the_rank_heads_when_a_weak_member_is_in(task, weak):
    # fit_confidence falls back to uniform weights where the rank heads do not help; with a weak member they do
    members = task[0] + [task[1][weak]]
    embedders = [e for e, _, _ in members]
    fit = [[e.transform(x[_FIT]) for e, x in zip(embedders, side)] for side in zip(*[(A, P) for _, A, P in members])]
    fitted = UECEnsemble(embedders).fit_confidence_components(fit[0], fit[1])
    check = fitted.routing_check_
    assert check.kept and check.routed - check.fixed > 0.01 and fitted.routing.fixed_log_rank is None
