"""layer="last_dense": the pooled linearisation, its curvature and its variance, on a toy BERT-shaped model.

The real models (minilm) are in test_uec_slow.py; here a float64 stand-in with
the same module layout keeps every check exact and fast.
"""

import numpy as np
import pytest

from crossembed._rows import unit_rows
from crossembed.uec import LaplaceEmbedder
from crossembed.uec.curvature import (
    diag_curvature,
    kron_factors,
    linearised_diag_curvature,
    linearised_kron_factors,
)
from crossembed.uec.linearisation import PooledLinearisation
from crossembed.uec.posteriors import DiagPosterior, KronPosterior, LastDenseDiagPosterior

torch = pytest.importorskip("torch")
from _toy_transformer import Dense, ToyEncoder, forward_with_draws, pairs, sentences  # noqa: E402

TAU = 0.3


@pytest.fixture(scope="module")
def toy():
    return ToyEncoder()


@pytest.fixture(scope="module")
def fitted(toy):
    """One fitted embedder per posterior form, with a prior precision in the linear regime."""
    return {
        h: LaplaceEmbedder(toy, layer="last_dense", hessian=h, prior_precision=300.0, batch_size=16).fit(
            pairs(160), show_progress_bar=False
        )
        for h in ("diag", "kron")
    }


def _dense(toy):
    return toy.torch_model[0].auto_model.encoder.layer[-1].output.dense


def _forward_with(toy, texts, dW):
    """The real model's normalised embeddings with ``[W b] + dW[k]`` for each k (S, n, D)."""
    return forward_with_draws(toy.torch_model, _dense(toy), texts, dW)


class _Explicit:
    """A linearisation with explicit per-input Jacobians ``M[u]`` (for autograd references)."""

    def __init__(self, E, X, M):
        self.embeddings, self.inputs, self.M = E, X, M

    def rmatvec(self, V):
        return np.einsum("nde,nkd->nke", self.M, V)


def _random_linearised(B, D, D_in, seed):
    rng = np.random.default_rng(seed)
    Ea = unit_rows(rng.normal(size=(B, D)))
    Ep = unit_rows(Ea + 0.6 * rng.normal(size=(B, D)))
    sides = []
    for E in (Ea, Ep):
        sides.append(_Explicit(E, rng.normal(size=(B, D_in)), rng.normal(size=(B, D, D)) / np.sqrt(D)))
    return sides


def _surrogate_logits(dW, A, P):
    """Logits of the linearised model ``e_u + M_u dW x_u`` (torch, float64)."""
    za = torch.tensor(A.embeddings) + torch.einsum("nde,ef,nf->nd", torch.tensor(A.M), dW, torch.tensor(A.inputs))
    zp = torch.tensor(P.embeddings) + torch.einsum("nde,ef,nf->nd", torch.tensor(P.M), dW, torch.tensor(P.inputs))
    return za @ zp.T / TAU


def test_linearised_diag_curvature_matches_autograd():
    A, P = _random_linearised(B=4, D=3, D_in=5, seed=0)
    B, D, D_in = 4, 3, 5
    zero = torch.zeros(D, D_in, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda w: _surrogate_logits(w, A, P), zero).reshape(B, B, D * D_in)
    S = _surrogate_logits(zero, A, P)
    ggn = torch.zeros(D * D_in, dtype=torch.float64)
    ef = torch.zeros(D * D_in, dtype=torch.float64)
    for b in range(B):
        p = torch.softmax(S[b], 0)
        ggn += torch.einsum("ck,cd,dk->k", J[b], torch.diag(p) - torch.outer(p, p), J[b])
        g = (p - torch.eye(B, dtype=torch.float64)[b]) @ J[b]  # per-pair gradient
        ef += g**2
    got_ggn = linearised_diag_curvature(A, P, tau=TAU, curvature="ggn")
    got_ef = linearised_diag_curvature(A, P, tau=TAU, curvature="ef")
    np.testing.assert_allclose(got_ggn, ggn.reshape(D, D_in).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_ef, ef.reshape(D, D_in).numpy(), rtol=1e-10, atol=1e-12)


def test_linearised_kron_output_factor_matches_autograd():
    A, P = _random_linearised(B=4, D=3, D_in=5, seed=1)
    B, D = 4, 3
    S = _surrogate_logits(torch.zeros(D, 5, dtype=torch.float64), A, P)
    probs = torch.softmax(S, 1)
    # d logits / d z_u, z_u = dW x_u: the Jacobian of e_u is M_u
    za = torch.zeros(B, D, dtype=torch.float64, requires_grad=True)
    zp = torch.zeros(B, D, dtype=torch.float64, requires_grad=True)

    def logits(za, zp):
        ea = torch.tensor(A.embeddings) + torch.einsum("nde,ne->nd", torch.tensor(A.M), za)
        ep = torch.tensor(P.embeddings) + torch.einsum("nde,ne->nd", torch.tensor(P.M), zp)
        return ea @ ep.T / TAU

    Ja, Jp = torch.autograd.functional.jacobian(logits, (za, zp))  # (B, B, B, D)
    ref = torch.zeros(D, D, dtype=torch.float64)
    for Jz in (Ja, Jp):
        for u in range(B):
            for r in range(B):
                lam = torch.diag(probs[r]) - torch.outer(probs[r], probs[r])
                ref += Jz[r, :, u, :].T @ lam @ Jz[r, :, u, :]
    in_sum, out_ggn, count = linearised_kron_factors(A, P, tau=TAU, curvature="ggn")
    np.testing.assert_allclose(out_ggn, ref.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(in_sum, A.inputs.T @ A.inputs + P.inputs.T @ P.inputs)
    assert count == 2 * B
    loss = -torch.log_softmax(logits(za, zp), 1).diagonal().sum()
    ga, gp = torch.autograd.grad(loss, (za, zp))
    _, out_ef, _ = linearised_kron_factors(A, P, tau=TAU, curvature="ef")
    np.testing.assert_allclose(out_ef, (ga.T @ ga + gp.T @ gp).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_identity_linearisation_is_the_head(curvature):
    rng = np.random.default_rng(2)
    A = unit_rows(rng.normal(size=(6, 4)))
    P = unit_rows(A + 0.5 * rng.normal(size=(6, 4)))
    eye = np.broadcast_to(np.eye(4), (6, 4, 4))
    la, lp = _Explicit(A, A, eye), _Explicit(P, P, eye)
    np.testing.assert_allclose(
        linearised_diag_curvature(la, lp, tau=TAU, curvature=curvature),
        diag_curvature(A, P, tau=TAU, curvature=curvature),
        atol=1e-12,
    )
    for got, ref in zip(
        linearised_kron_factors(la, lp, tau=TAU, curvature=curvature), kron_factors(A, P, tau=TAU, curvature=curvature)
    ):
        np.testing.assert_allclose(got, ref, atol=1e-12)


def test_pooled_jacobian_matches_finite_differences(toy):
    """``e(W + dW) - e(W) ~= M dW x``; the only approximation is the token-averaged LayerNorm rank-one term."""
    from crossembed.uec.last_dense import last_dense_block, linearise_texts

    texts = sentences(6, seed=3)
    block = last_dense_block(toy.torch_model)
    lin = linearise_texts(block, texts, rank=8)
    np.testing.assert_allclose(lin.embeddings, toy.encode64(texts), atol=1e-12)
    rng = np.random.default_rng(0)
    dW = 1e-5 * rng.normal(size=(1, block.dim, block.in_dim))
    de = _forward_with(toy, texts, dW)[0] - lin.embeddings
    pred = np.einsum("nde,ne->nd", lin.jacobian(), lin.inputs @ dW[0].T)
    rel = np.linalg.norm(pred - de, axis=1) / np.linalg.norm(de, axis=1)
    assert rel.max() < 0.1, rel
    # with one token per input (CLS pooling reads token 0 only) the linearisation is exact
    cls = ToyEncoder(pooling="cls")
    block = last_dense_block(cls.torch_model)
    lin = linearise_texts(block, texts, rank=8)
    dW = 1e-6 * rng.normal(size=(1, block.dim, block.in_dim))
    de = _forward_with(cls, texts, dW)[0] - lin.embeddings
    pred = np.einsum("nde,ne->nd", lin.jacobian(), lin.inputs @ dW[0].T)
    np.testing.assert_allclose(pred, de, rtol=1e-4, atol=1e-12 + 1e-4 * np.abs(de).max())


def test_propagate_is_the_diagonal_of_m_c_mt(toy):
    from crossembed.uec.last_dense import last_dense_block, linearise_texts

    lin = linearise_texts(last_dense_block(toy.torch_model), sentences(5, seed=4), rank=3)
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.normal(size=(lin.dim, lin.dim)))
    w = rng.uniform(0.1, 1.0, size=(len(lin), lin.dim))
    M = lin.jacobian()
    ref = np.stack([np.diag(M[i] @ U @ np.diag(w[i]) @ U.T @ M[i].T) for i in range(len(lin))])
    np.testing.assert_allclose(lin.propagate(U, w), ref, rtol=1e-10)
    np.testing.assert_allclose(lin.propagate(None, w), np.einsum("nde,ne->nd", M**2, w), rtol=1e-10)
    V = rng.normal(size=(len(lin), 2, lin.dim))
    np.testing.assert_allclose(lin.rmatvec(V), np.einsum("nde,nkd->nke", M, V), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("hessian", ["diag", "kron"])
def test_last_dense_variance_matches_monte_carlo(toy, fitted, hessian):
    """Sample [W b] from the posterior, run the real model: the empirical variance is the predicted one."""
    lap = fitted[hessian]
    texts = sentences(6, seed=9)
    g = lap.encode(texts)
    np.testing.assert_allclose(g.mean, toy.encode(texts), atol=1e-6)  # the mean is the pretrained embedding
    draws = lap.posterior_.sample(lap.prior_precision_, size=1500, random_state=1)
    emp = _forward_with(toy, texts, draws).var(axis=0)
    pred = g.var.astype(np.float64)
    assert np.corrcoef(pred.ravel(), emp.ravel())[0, 1] > 0.95
    ratio = pred / emp
    assert 0.9 < np.median(ratio) < 1.15, np.median(ratio)
    assert 0.7 < ratio.min() and ratio.max() < 1.4, (ratio.min(), ratio.max())


@pytest.mark.parametrize("posterior_cls", [DiagPosterior, KronPosterior])
def test_posterior_samples_have_the_posterior_covariance(posterior_cls):
    rng = np.random.default_rng(3)
    A = unit_rows(rng.normal(size=(40, 3)))
    P = unit_rows(A + 0.5 * rng.normal(size=(40, 3)))
    post = posterior_cls()
    post.fit(post.batch_statistics(A, P, tau=TAU, curvature="ggn"))
    lam = 2.0
    x = unit_rows(rng.normal(size=(4, 3)))
    draws = post.sample(lam, size=40000, random_state=0)  # (S, D, D)
    emp = np.einsum("sij,nj->sni", draws, x).var(axis=0)
    np.testing.assert_allclose(emp, post.predictive_variance(x, lam), rtol=0.05)


def test_fitted_last_dense_state_and_marglik(fitted, toy):
    from crossembed.uec.last_dense import last_dense_block

    block = last_dense_block(toy.torch_model)
    lap = fitted["diag"]
    assert isinstance(lap.posterior_, LastDenseDiagPosterior)
    assert lap.posterior_.H.shape == (block.dim, block.in_dim)
    assert lap.posterior_.n_params == block.dim * block.in_dim
    W = block.weight_matrix()
    assert lap.posterior_.map_sq_norm == pytest.approx(float((W * W).sum()))
    lam = LaplaceEmbedder(toy, layer="last_dense", hessian="diag", batch_size=16).fit(
        pairs(160), show_progress_bar=False
    )
    grid = np.logspace(-2, 4, 61)
    vals = [lam.log_marginal_likelihood(l) for l in grid]
    assert abs(np.log10(grid[int(np.argmax(vals))]) - np.log10(lam.prior_precision_)) <= 0.11
    assert "last_dense" in repr(lap)


@pytest.mark.parametrize("hessian", ["diag", "kron"])
def test_last_dense_save_load_round_trip(fitted, toy, tmp_path, hessian):
    lap = fitted[hessian]
    path = lap.save(tmp_path / f"ld_{hessian}.ce")
    back = LaplaceEmbedder.load(path, encoder=toy)
    assert back.layer == "last_dense" and back.hessian == hessian
    texts = sentences(4, seed=11)
    a, b = lap.encode(texts), back.encode(texts)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-12)
    assert back.log_marginal_likelihood(10.0) == pytest.approx(lap.log_marginal_likelihood(10.0))
    # a model with another last dense is refused
    other = ToyEncoder(d=12, d_ff=24)
    with pytest.raises(ValueError, match="inputs"):
        LaplaceEmbedder.load(path, encoder=other).encode(texts)


def test_nll_prior_selection_runs_for_last_dense(toy):
    lap = LaplaceEmbedder(toy, layer="last_dense", hessian="kron", prior_precision="nll", batch_size=8)
    lap.fit(pairs(40), show_progress_bar=False)
    assert lap.prior_precision_ > 0 and lap.encode(["the dog"]).var.shape == (1, toy.dim)


def test_last_dense_bad_inputs(toy, fitted):
    from crossembed.encoders import CallableEncoder
    from crossembed.uec.last_dense import last_dense_block

    with pytest.raises(ValueError, match="layer"):
        LaplaceEmbedder(toy, layer="middle")
    black_box = CallableEncoder(lambda t: np.ones((len(t), 4)), name="box")
    with pytest.raises(ValueError, match="torch sentence-transformers"):
        LaplaceEmbedder(black_box, layer="last_dense").fit([("a", "b"), ("c", "d")], show_progress_bar=False)
    with pytest.raises(ValueError, match="layer='head'"):
        LaplaceEmbedder(toy, layer="last_dense").fit_embeddings(np.eye(3), np.eye(3))
    with pytest.raises(ValueError, match="layer='head'"):
        fitted["diag"].transform(np.eye(12))
    with pytest.raises(ValueError, match="ln_rank"):
        LaplaceEmbedder(toy, layer="last_dense", ln_rank=0)
    with pytest.raises(ValueError, match="Dense"):
        last_dense_block(ToyEncoder(extra=(Dense(),)).torch_model)
    with pytest.raises(TypeError, match="SentenceTransformer"):
        last_dense_block(object())
    with pytest.raises(ValueError, match="role"):
        fitted["diag"].encode(["the dog"], role="document")
    with pytest.raises(ValueError, match="inconsistent"):
        PooledLinearisation(np.zeros((2, 3)), np.ones(3), np.zeros((2, 4)), np.ones(3), np.zeros((2, 1, 3)))
