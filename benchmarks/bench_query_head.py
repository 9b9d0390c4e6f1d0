"""The UEC query head's objective: the library's analytic gradient against torch autograd.

Regime: one step of fitting a query head (``crossembed.uec.query_head``) at
the cap of 4,096 fit pairs, of which 80 % train while the penalty is chosen:
3,277 anchors against their distinct positives (a tenth repeated, as
WordNet's glosses are), D = 384, tau = 0.05, penalty 0.1, at a ``W`` away
from the identity (as mid-fit). L-BFGS calls this 25-90 times per penalty.
The library computes the loss and its gradient in closed form with float32
products. The peer is what a user would write: the same loss in torch
(float32) and ``backward()``. FLOPs per call: 4 n m D + 4 n D^2.
"""

import numpy as np
import pytest

from _bench import run, size, unit_rows
from crossembed.uec.query_head import query_head_objective

N, D, TAU, PENALTY = size("query_head_n", 3277, 400), 384, 0.05, 0.1


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    P = unit_rows(rng, N, D)
    labels = np.arange(N)
    repeat = rng.choice(N, N // 10, replace=False)
    labels[repeat] = rng.integers(0, N, len(repeat))  # a tenth share another anchor's document
    used = np.unique(labels)
    P = P[used]
    labels = np.searchsorted(used, labels)
    A = P[labels] + 0.5 * unit_rows(rng, N, D)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    W = np.eye(D) + 0.02 * rng.standard_normal((D, D))
    return W, np.ascontiguousarray(A), np.ascontiguousarray(P), labels


def _flops(P):
    return 4.0 * N * len(P) * D + 4.0 * N * D * D


def torch_objective(W, A, P, labels):
    """The same objective, float32 products, gradient by autograd (float64 out, as the fit needs)."""
    import torch

    Wt = torch.tensor(W, dtype=torch.float32, requires_grad=True)
    At, Pt = torch.from_numpy(A), torch.from_numpy(P)
    Q = torch.nn.functional.normalize(At @ Wt, dim=1)
    ce = torch.nn.functional.cross_entropy((Q @ Pt.T) / TAU, torch.from_numpy(labels))
    loss = ce + 0.5 * PENALTY * ((Wt - torch.eye(D)) ** 2).sum()
    loss.backward()
    return float(loss.detach()), Wt.grad.double().numpy()


@pytest.mark.benchmark(group="uec_query_head")
def test_query_head_objective_library(benchmark, problem):
    W, A, P, labels = problem
    run(
        benchmark,
        query_head_objective,
        W,
        A,
        P,
        labels,
        tau=TAU,
        penalty=PENALTY,
        role="analytic gradient (numpy float32)",
        flops=_flops(P),
        primary=True,
    )


@pytest.mark.benchmark(group="uec_query_head")
def test_query_head_objective_torch_autograd(benchmark, problem):
    pytest.importorskip("torch")
    W, A, P, labels = problem
    loss, grad = run(benchmark, torch_objective, W, A, P, labels, role="torch autograd float32", flops=_flops(P))
    ref_loss, ref_grad = query_head_objective(W, A, P, labels, tau=TAU, penalty=PENALTY)
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    np.testing.assert_allclose(grad, ref_grad, rtol=2e-3, atol=1e-6)
