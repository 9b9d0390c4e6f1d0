"""Last-layer Laplace fit: crossembed's posterior forms against laplace-torch on the same problem.

The problem is the one tests/test_uec_laplace_torch.py proves both libraries
fit identically: cross-entropy over ``C`` classes on the features of a small
MLP, posterior over its last Linear (``C x D_IN``, no bias), GGN curvature,
prior precision 1. crossembed states it as in-batch InfoNCE (batches of
``C`` examples in class order, fixed class rows as the "positives") and fits
:class:`~crossembed.uec.posteriors.LastDenseDiagPosterior` /
:class:`~crossembed.uec.posteriors.LastDenseKronPosterior` with the
closed-form GEMMs of :mod:`crossembed.uec.curvature`; laplace-torch runs
``Laplace(..., subset_of_weights="last_layer")`` with the ASDL GGN backend.
Both timings include the feature forward pass and, for kron, the
eigendecompositions. FLOPs: 0 (not recorded; compare the times).
Skipped where laplace-torch is not importable.
"""

import numpy as np
import pytest

from _bench import run, size
from crossembed.uec.posteriors import LastDenseDiagPosterior, LastDenseKronPosterior

torch = pytest.importorskip("torch")
try:
    import laplace
    from laplace.curvature import AsdlGGN
except (ImportError, RuntimeError) as exc:  # RuntimeError: a CUDA torchvision next to the CPU torch
    pytest.skip(f"laplace-torch is not importable ({exc})", allow_module_level=True)

C, D_IN = size("laplace_c", 64, 16), size("laplace_d", 384, 32)
N = C * (size("laplace_n", 10_000, 512) // C)


class _Side:
    def __init__(self, E, X, scale):
        self.embeddings, self.inputs, self.scale = E, X, scale

    def rmatvec(self, V):
        return np.asarray(V) * self.scale


@pytest.fixture(scope="module")
def problem():
    torch.manual_seed(0)
    X = torch.randn(N, 16, dtype=torch.float64)
    y = torch.arange(N) % C
    model = torch.nn.Sequential(
        torch.nn.Linear(16, D_IN), torch.nn.Tanh(), torch.nn.Linear(D_IN, C, bias=False)
    ).double()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=256)
    return model, X, loader


def _crossembed_fit(model, X, cls):
    with torch.no_grad():
        phi = model[:-1](X).numpy()
        W = model[-1].weight.numpy()
    post = cls(weight_sq_norm=float((W * W).sum()))
    totals = None
    positives = _Side(np.eye(C), np.zeros((C, D_IN)), 0.0)
    for s in range(0, N, C):
        x = phi[s : s + C]
        stats = post.batch_statistics(_Side(x @ W.T, x, 1.0), positives, tau=1.0, curvature="ggn")
        totals = stats if totals is None else {k: totals[k] + stats[k] for k in totals}
    if "count" in totals:
        totals["count"] = np.array(float(N))
    return post.fit(totals)


def _laplace_fit(model, loader, structure):
    la = laplace.Laplace(
        model, "classification", subset_of_weights="last_layer", hessian_structure=structure, backend=AsdlGGN
    )
    la.fit(loader)
    return la


@pytest.mark.parametrize("structure, cls", [("diag", LastDenseDiagPosterior), ("kron", LastDenseKronPosterior)])
def test_laplace_fit_crossembed(benchmark, problem, structure, cls):
    benchmark.group = f"laplace_fit_{structure}"
    model, X, _ = problem
    run(benchmark, _crossembed_fit, model, X, cls, role="crossembed", flops=0.0, primary=True)


@pytest.mark.parametrize("structure", ["diag", "kron"])
def test_laplace_fit_laplace_torch(benchmark, problem, structure):
    benchmark.group = f"laplace_fit_{structure}"
    model, X, loader = problem
    la = run(benchmark, _laplace_fit, model, loader, structure, role="laplace-torch", flops=0.0)
    if structure == "diag":  # the same posterior, not just the same speed
        mine = _crossembed_fit(model, X, LastDenseDiagPosterior).H.ravel() + 1.0
        np.testing.assert_allclose(la.posterior_precision.detach().numpy(), mine, rtol=1e-8)
