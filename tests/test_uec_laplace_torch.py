"""The last-layer posterior forms against laplace-torch (``laplace``) on a tiny classifier.

Cross-entropy classification is the in-batch InfoNCE of
:mod:`crossembed.uec.curvature` when each batch holds one example of each of
the ``C`` classes in class order and the "positives" are the fixed rows
``tau * e_c`` (logit ``s_bc = z_b . tau e_c / tau = z_b[c]``, target ``c = b``):
anchors are linearised with ``M = I`` and inputs the features of the last
Linear, positives with ``M = 0``. Then crossembed's last-dense forms and
laplace-torch's ``subset_of_weights="last_layer"`` see the same loss, the same
prior (isotropic ``lambda``, mean 0) and the same curvature, and must agree.

laplace-torch declares torchvision; the only torchvision wheels on this
project's index are CUDA builds that cannot load next to the CPU torch, so
.ci/run installs laplace-torch without dependencies (see pyproject's test
extra). Skipped where ``laplace`` cannot be imported.
"""

import numpy as np
import pytest

from crossembed.uec.laplace import _log_marginal_likelihood
from crossembed.uec.posteriors import LastDenseDiagPosterior, LastDenseKronPosterior

torch = pytest.importorskip("torch")
try:
    import laplace
    from laplace.curvature import AsdlEF, AsdlGGN, BackPackEF, BackPackGGN, CurvlinopsGGN
except (ImportError, RuntimeError) as exc:  # RuntimeError: a CUDA torchvision next to the CPU torch
    pytest.skip(f"laplace-torch is not importable ({exc})", allow_module_level=True)

C, D_IN, N, LAM = 4, 5, 24, 0.7


class _Side:
    def __init__(self, E, X, scale):
        self.embeddings, self.inputs, self.scale = E, X, scale

    def rmatvec(self, V):
        return np.asarray(V) * self.scale


def _problem(bias):
    torch.manual_seed(0)
    X = torch.randn(N, 3, dtype=torch.float64)
    y = torch.arange(N) % C  # batches of C in class order
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 6),
        torch.nn.Tanh(),
        torch.nn.Linear(6, D_IN),
        torch.nn.Tanh(),
        torch.nn.Linear(D_IN, C, bias=bias),
    ).double()
    with torch.no_grad():
        phi = model[:-1](X).numpy()
        W = model[-1].weight.numpy()
        if bias:
            phi = np.concatenate([phi, np.ones((N, 1))], axis=1)
            W = np.concatenate([W, model[-1].bias.numpy()[:, None]], axis=1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=N)
    return model, loader, X, phi, W


def _crossembed(cls, curvature, phi, W):
    post = cls(weight_sq_norm=float((W * W).sum()))
    totals = None
    for s in range(0, N, C):
        x = phi[s : s + C]
        A = _Side(x @ W.T, x, 1.0)
        P = _Side(np.eye(C), np.zeros_like(x), 0.0)  # tau = 1
        stats = post.batch_statistics(A, P, tau=1.0, curvature=curvature)
        totals = stats if totals is None else {k: totals[k] + stats[k] for k in totals}
    if "count" in totals:
        totals["count"] = np.array(float(N))  # the positives' zero inputs are not data points here
    return post.fit(totals)


def _laplace(model, loader, structure, backend):
    la = laplace.Laplace(
        model,
        "classification",
        subset_of_weights="last_layer",
        hessian_structure=structure,
        backend=backend,
        prior_precision=LAM,
    )
    la.fit(loader)
    return la


@pytest.mark.parametrize(
    "curvature, backend", [("ggn", BackPackGGN), ("ggn", AsdlGGN), ("ef", BackPackEF), ("ef", AsdlEF)]
)
def test_diag_posterior_precision_matches_laplace_torch(curvature, backend):
    model, loader, X, phi, W = _problem(bias=True)
    post = _crossembed(LastDenseDiagPosterior, curvature, phi, W)
    la = _laplace(model, loader, "diag", backend)
    # laplace-torch's parameter vector is [W.ravel(), b]; ours keeps b as the last column
    mine = np.concatenate([post.H[:, :-1].ravel(), post.H[:, -1]]) + LAM
    np.testing.assert_allclose(la.posterior_precision.detach().numpy(), mine, rtol=1e-10, atol=1e-12)
    # the layer output's variance (laplace-torch's GLM functional variance)
    _, f_var = la._glm_predictive_distribution(X)
    np.testing.assert_allclose(
        torch.diagonal(f_var, dim1=1, dim2=2).detach().numpy(), post.output_covariance(phi, LAM)[1], rtol=1e-9
    )


@pytest.mark.parametrize(
    "curvature, backend", [("ggn", BackPackGGN), ("ggn", AsdlGGN), ("ggn", CurvlinopsGGN), ("ef", AsdlEF)]
)
def test_kron_posterior_precision_matches_laplace_torch(curvature, backend):
    # laplace-torch keeps a bias in its own block; ours augments the input with 1, so compare without one
    model, loader, X, phi, W = _problem(bias=False)
    post = _crossembed(LastDenseKronPosterior, curvature, phi, W)
    la = _laplace(model, loader, "kron", backend)
    # row-major vec(W): index i * D_in + j, so the precision is G (x) A
    A = post.u_in @ np.diag(post.s_in) @ post.u_in.T
    G = post.u_out @ np.diag(post.s_out) @ post.u_out.T
    mine = np.kron(G, A) + LAM * np.eye(C * D_IN)
    np.testing.assert_allclose(la.posterior_precision.to_matrix().detach().numpy(), mine, rtol=1e-9, atol=1e-12)
    U, w = post.output_covariance(phi, LAM)
    _, f_var = la._glm_predictive_distribution(X)
    np.testing.assert_allclose(f_var.detach().numpy(), np.einsum("dg,ng,eg->nde", U, w, U), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("structure, cls", [("diag", LastDenseDiagPosterior), ("kron", LastDenseKronPosterior)])
def test_marginal_likelihood_in_lambda_matches_laplace_torch(structure, cls):
    model, loader, X, phi, W = _problem(bias=structure == "diag")
    post = _crossembed(cls, "ggn", phi, W)
    la = _laplace(model, loader, structure, AsdlGGN)
    lams = [0.05, 0.7, 12.0]
    theirs = [float(la.log_marginal_likelihood(torch.tensor(lam, dtype=torch.float64))) for lam in lams]
    mine = [_log_marginal_likelihood(post, lam) for lam in lams]
    # equal up to the data term, which does not depend on lambda
    np.testing.assert_allclose(np.diff(theirs), np.diff(mine), rtol=1e-9)
