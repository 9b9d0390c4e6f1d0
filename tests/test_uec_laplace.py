"""Laplace head math against brute-force float64 / torch.autograd computations."""

import math

import numpy as np
import pytest

from crossembed._io import CorruptFileError
from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, LaplaceEmbedder
from crossembed.uec.curvature import diag_curvature, kron_factors
from crossembed.uec.posteriors import DiagPosterior, KronPosterior

torch = pytest.importorskip("torch")
TAU = 0.3


def _pairs(B=5, D=4, seed=0):
    rng = np.random.default_rng(seed)
    A = unit_rows(rng.normal(size=(B, D)))
    P = unit_rows(A + 0.7 * rng.normal(size=(B, D)))
    return A, P


def _torch_logits(W, A, P):
    return (A @ W.T) @ (P @ W.T).T / TAU


def test_diag_ggn_matches_autograd():
    A, P = _pairs()
    B, D = A.shape
    At, Pt = torch.tensor(A), torch.tensor(P)
    W = torch.eye(D, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda w: _torch_logits(w, At, Pt), W)  # (B, B, D, D)
    S = _torch_logits(W, At, Pt)
    ref = torch.zeros(D, D, dtype=torch.float64)
    for b in range(B):
        p = torch.softmax(S[b], 0)
        lam = torch.diag(p) - torch.outer(p, p)
        Jb = J[b].reshape(B, D * D)
        ref += torch.einsum("ck,cd,dk->k", Jb, lam, Jb).reshape(D, D)
    np.testing.assert_allclose(diag_curvature(A, P, tau=TAU, curvature="ggn"), ref.numpy(), rtol=1e-10, atol=1e-12)


def test_diag_empirical_fisher_matches_per_pair_gradients():
    A, P = _pairs(B=6, D=3, seed=1)
    B, D = A.shape
    At, Pt = torch.tensor(A), torch.tensor(P)
    ref = torch.zeros(D, D, dtype=torch.float64)
    for b in range(B):
        W = torch.eye(D, dtype=torch.float64, requires_grad=True)
        loss = -torch.log_softmax(_torch_logits(W, At, Pt)[b], 0)[b]
        (g,) = torch.autograd.grad(loss, W)
        ref += g**2
    np.testing.assert_allclose(diag_curvature(A, P, tau=TAU, curvature="ef"), ref.numpy(), rtol=1e-10, atol=1e-12)


def test_kron_factors_match_autograd():
    A, P = _pairs(B=4, D=3, seed=2)
    B, D = A.shape
    Za = torch.tensor(A, requires_grad=True)
    Zp = torch.tensor(P, requires_grad=True)
    S = Za @ Zp.T / TAU
    loss = -torch.log_softmax(S, 1).diagonal().sum()
    ga, gp = torch.autograd.grad(loss, (Za, Zp))
    in_sum, out_ef, count = kron_factors(A, P, tau=TAU, curvature="ef")
    np.testing.assert_allclose(in_sum, A.T @ A + P.T @ P, rtol=1e-12)
    assert count == 2 * B
    np.testing.assert_allclose(out_ef, (ga.T @ ga + gp.T @ gp).numpy(), rtol=1e-10, atol=1e-12)
    # GGN output factor: sum over inputs u of sum_rows J_u^T Lambda_row J_u
    f = lambda za, zp: za @ zp.T / TAU  # noqa: E731
    Ja, Jp = torch.autograd.functional.jacobian(f, (torch.tensor(A), torch.tensor(P)))  # (B,B,B,D) each
    probs = torch.softmax(torch.tensor(A) @ torch.tensor(P).T / TAU, 1)
    ref = torch.zeros(D, D, dtype=torch.float64)
    for J in (Ja, Jp):
        for u in range(B):
            for r in range(B):
                lam = torch.diag(probs[r]) - torch.outer(probs[r], probs[r])
                ref += J[r, :, u, :].T @ lam @ J[r, :, u, :]
    _, out_ggn, _ = kron_factors(A, P, tau=TAU, curvature="ggn")
    np.testing.assert_allclose(out_ggn, ref.numpy(), rtol=1e-10, atol=1e-12)


def _brute_variance(emb, H):
    """Var(W h) from the full D^2 x D^2 posterior covariance (vec index j*D + i)."""
    st = emb.posterior_
    D = H.shape[1]
    lam = emb.prior_precision_
    if emb.hessian == "diag":
        prec = np.diag(st.H.T.ravel() + lam)
    else:
        Af = st.u_in @ np.diag(st.s_in) @ st.u_in.T
        Gf = st.u_out @ np.diag(st.s_out) @ st.u_out.T
        prec = np.kron(Af, Gf) + lam * np.eye(D * D)
    cov = np.linalg.inv(prec)
    out = []
    for h in H:
        J = np.kron(h[None, :], np.eye(D))  # dz_i / dW_ij = h_j at index j*D + i
        out.append(np.diag(J @ cov @ J.T))
    return np.array(out)


@pytest.mark.parametrize("hessian", ["diag", "kron"])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_predictive_variance_matches_full_covariance(hessian, curvature):
    rng = np.random.default_rng(3)
    A, P = _pairs(B=40, D=4, seed=3)
    emb = LaplaceEmbedder(
        None, hessian=hessian, curvature=curvature, prior_precision=0.7, loss_temperature=TAU, batch_size=8
    ).fit_embeddings(A, P)
    H = rng.normal(size=(6, 4))
    g = emb.transform(H)
    np.testing.assert_allclose(g.var, _brute_variance(emb, unit_rows(H)), rtol=2e-5)


def test_identity_head_keeps_the_mean():
    rng = np.random.default_rng(4)
    A, P = _pairs(B=30, D=5, seed=4)
    emb = LaplaceEmbedder(None, loss_temperature=TAU, batch_size=10).fit_embeddings(A, P)
    X = rng.normal(size=(7, 5)) * 3.0
    g = emb.transform(X)
    assert isinstance(g, GaussianEmbedding) and g.mean.dtype == np.float32 and g.var.dtype == np.float32
    np.testing.assert_allclose(g.mean, X / np.linalg.norm(X, axis=1, keepdims=True), rtol=1e-6)
    assert (g.var > 0).all()


@pytest.mark.parametrize("hessian", ["diag", "kron"])
def test_marglik_closed_form_and_argmax(hessian):
    A, P = _pairs(B=24, D=3, seed=5)
    emb = LaplaceEmbedder(None, hessian=hessian, loss_temperature=TAU, batch_size=8).fit_embeddings(A, P)
    st, D = emb.posterior_, 3
    if hessian == "diag":
        H = np.diag(st.H.ravel())
    else:
        H = np.kron(st.u_in @ np.diag(st.s_in) @ st.u_in.T, st.u_out @ np.diag(st.s_out) @ st.u_out.T)
    for lam in (0.1, 2.0, 50.0):
        brute = 0.5 * D * D * math.log(lam) - 0.5 * np.linalg.slogdet(H + lam * np.eye(D * D))[1] - 0.5 * lam * D
        assert emb.log_marginal_likelihood(lam) == pytest.approx(brute, rel=1e-9)
    lam = emb.prior_precision_
    best = emb.log_marginal_likelihood(lam)
    assert best >= emb.log_marginal_likelihood(lam * 1.2) and best >= emb.log_marginal_likelihood(lam / 1.2)


def test_kron_variance_grows_off_the_fit_span():
    # fit inputs span a random 3-D subspace of R^6: kron gives directions outside
    # it twice the trace (all 6 outputs at 1/lambda instead of 3); diag cannot tell
    rng = np.random.default_rng(6)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    A = unit_rows(rng.normal(size=(200, 3)) @ Q[:, :3].T)
    P = unit_rows(A + 0.2 * rng.normal(size=(200, 3)) @ Q[:, :3].T)
    ratio = {}
    for hessian in ("kron", "diag"):
        emb = LaplaceEmbedder(None, hessian=hessian, prior_precision=1.0, batch_size=20).fit_embeddings(A, P)
        ratio[hessian] = emb.transform(Q[:, 3:].T).trace().mean() / emb.transform(A[:20]).trace().mean()
    assert ratio["kron"] > 1.9
    assert ratio["kron"] > 1.3 * ratio["diag"]


def test_nll_prior_selection_runs_and_is_on_grid():
    A, P = _pairs(B=60, D=4, seed=7)
    emb = LaplaceEmbedder(None, prior_precision="nll", loss_temperature=TAU, batch_size=10).fit_embeddings(A, P)
    assert emb.prior_precision_ > 0 and emb.n_pairs_ == 60


def test_save_load_round_trip_and_corruption(tmp_path):
    A, P = _pairs(B=20, D=4, seed=8)
    for hessian in ("diag", "kron"):
        emb = LaplaceEmbedder("minilm", hessian=hessian, batch_size=5).fit_embeddings(A, P)
        path = emb.save(tmp_path / f"{hessian}.lap")
        back = LaplaceEmbedder.load(path)
        assert back.encoder == "minilm" and back.hessian == hessian
        np.testing.assert_array_equal(back.transform(A).var, emb.transform(A).var)
        saved, loaded = emb.heads_.get_state(), back.heads_.get_state()
        assert set(saved) == set(loaded)
        for name in saved:
            np.testing.assert_array_equal(loaded[name], saved[name])
        blob = bytearray(path.read_bytes())
        blob[-10] ^= 0xFF
        (tmp_path / "bad.lap").write_bytes(bytes(blob))
        with pytest.raises(CorruptFileError):
            LaplaceEmbedder.load(tmp_path / "bad.lap")
        (tmp_path / "short.lap").write_bytes(path.read_bytes()[:-50])
        with pytest.raises(CorruptFileError):
            LaplaceEmbedder.load(tmp_path / "short.lap")


def test_hessian_string_class_and_instance_are_one_form():
    A, P = _pairs(B=24, D=3, seed=9)
    X = np.random.default_rng(9).normal(size=(5, 3))
    fits = [
        LaplaceEmbedder(None, hessian=h, prior_precision="marglik", batch_size=8).fit_embeddings(A, P)
        for h in ("diag", DiagPosterior, DiagPosterior())
    ]
    for e in fits:
        assert e.hessian == "diag" and isinstance(e.posterior_, DiagPosterior)
        np.testing.assert_array_equal(e.transform(X).var, fits[0].transform(X).var)
    kron = LaplaceEmbedder(None, hessian=KronPosterior, batch_size=8).fit_embeddings(A, P)
    assert kron.hessian == "kron" and set(kron.get_state()[0]) >= set(KronPosterior.array_names)
    # a template instance is copied, never fitted in place (refits start afresh)
    template = KronPosterior()
    LaplaceEmbedder(None, hessian=template, batch_size=8).fit_embeddings(A, P)
    assert not template.is_fitted
    with pytest.raises(TypeError, match="hessian"):
        LaplaceEmbedder(None, hessian=3)
    with pytest.raises(TypeError, match="hessian"):
        LaplaceEmbedder(None, hessian=int)


def test_saved_state_keeps_its_array_names():
    # the array names are the file format (each name's owner: the embedder, its heads, the posterior)
    A, P = _pairs(B=20, D=4, seed=10)
    for hessian, names in (("diag", {"H"}), ("kron", {"s_in", "u_in", "s_out", "u_out"})):
        arrays, meta = LaplaceEmbedder(None, hessian=hessian, batch_size=5).fit_embeddings(A, P).get_state()
        assert (
            set(arrays)
            == {
                "dim",
                "prior_precision",
                "n_pairs",
                "trace_stats",
                "score_scale",
                "rank_head",
                "hub_reference",
                "hub_positives",
                "hub_groups",
                "query_head",
                "query_head_penalty",
            }
            | names
        )
        assert meta["hessian"] == hessian and meta["format"] == 2


def test_a_state_of_another_format_version_is_refused():
    A, P = _pairs(B=20, D=4, seed=10)
    arrays, meta = LaplaceEmbedder(None, batch_size=5).fit_embeddings(A, P).get_state()
    for found in (None, 1, 3):
        old = {k: v for k, v in meta.items() if k != "format"} | ({} if found is None else {"format": found})
        with pytest.raises(ValueError, match=f"format version {found!r}.*reads version 2"):
            LaplaceEmbedder.from_state(arrays, old)
    with pytest.raises(CorruptFileError, match="hub_reference"):
        LaplaceEmbedder.from_state({k: v for k, v in arrays.items() if k != "hub_reference"}, meta)


def test_encode_uses_the_encoder_with_roles():
    seen = []

    class Enc:
        def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
            seen.append(role)
            return np.array([[len(t), 1.0, (i % 3)] for i, t in enumerate(texts)], dtype=np.float32)

    texts = [f"text {'x' * i}" for i in range(12)]
    emb = LaplaceEmbedder(Enc(), batch_size=4).fit(list(zip(texts, texts[::-1])), show_progress_bar=False)
    assert seen == ["query", "passage", "query"]  # anchors, positives, then scrambled anchors (the probe head)
    assert emb.heads_.probe_head is not None
    g = emb.encode(["a", "bb"], role="passage")
    assert g.mean.shape == (2, 3) and seen[-1] == "passage"
    emb.encoder = lambda texts: np.ones((len(texts), 3), dtype=np.float32)  # a new encoder replaces the loaded one
    np.testing.assert_allclose(emb.encode(["a", "bb"]).mean, np.full((2, 3), 3**-0.5), rtol=1e-6)
    assert seen[-1] == "passage"


class _CharEncoder:
    """A 6-d character-count encoder with a name (so encode_cached can key its files)."""

    name = "chars"

    def __init__(self):
        self.calls = 0

    def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
        self.calls += 1
        out = np.full((len(texts), 6), 0.1 if role == "query" else 0.2, dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t:
                out[i, ord(ch) % 6] += 1.0
        return out


def _text_pairs(n=30):
    words = ["river bank", "money bank", "tree bark", "dog bark", "light beam", "heavy stone"]
    return [(f"{words[i % 6]} {i}", f"the gloss of {words[(i + 1) % 6]} number {i}") for i in range(n)]


def test_fit_from_texts_is_fit_embeddings_of_the_roles_and_the_scrambled_anchors(tmp_path):
    from crossembed.uec.probe import scramble_sample

    pairs, enc = _text_pairs(), _CharEncoder()
    anchors, positives = [a for a, _ in pairs], [p for _, p in pairs]
    by_hand = LaplaceEmbedder(None, batch_size=8, random_state=3).fit_embeddings(
        enc.encode(anchors),
        enc.encode(positives, role="passage"),
        scrambled=enc.encode(scramble_sample(anchors, random_state=3)),
    )
    fits = {
        "encoder": LaplaceEmbedder(enc, batch_size=8, random_state=3).fit(pairs, show_progress_bar=False),
        "encode": LaplaceEmbedder(None, batch_size=8, random_state=3).fit(
            pairs, encode=lambda texts, role: enc.encode(texts, role=role), show_progress_bar=False
        ),
        "cache": LaplaceEmbedder(enc, batch_size=8, random_state=3).fit(
            pairs, cache_dir=tmp_path, show_progress_bar=False
        ),
        "probe_seed": LaplaceEmbedder(enc, batch_size=8, random_state=5).fit(
            pairs, probe_seed=3, show_progress_bar=False
        ),
    }
    ref = by_hand.heads_.probe_head.to_array()
    for how, fitted in fits.items():
        np.testing.assert_array_equal(fitted.heads_.probe_head.to_array(), ref, err_msg=how)
    for name, value in by_hand.posterior_.to_arrays().items():
        np.testing.assert_array_equal(fits["cache"].posterior_.to_arrays()[name], value)
    calls = enc.calls
    LaplaceEmbedder(enc, batch_size=8, random_state=3).fit(pairs, cache_dir=tmp_path, show_progress_bar=False)
    assert enc.calls == calls  # every text read back from the cache
    with pytest.raises(ValueError, match="not both"):
        LaplaceEmbedder(enc).fit(pairs, encode=lambda texts, role: enc.encode(texts), cache_dir=tmp_path)


def test_bad_inputs():
    with pytest.raises(ValueError, match="hessian"):
        LaplaceEmbedder(None, hessian="full")
    with pytest.raises(ValueError, match="curvature"):
        LaplaceEmbedder(None, curvature="hessian")
    with pytest.raises(ValueError, match="layer"):
        LaplaceEmbedder(None, layer="middle")
    with pytest.raises(ValueError, match="prior_precision"):
        LaplaceEmbedder(None, prior_precision=-1.0)
    with pytest.raises(ValueError, match="prior_precision"):
        LaplaceEmbedder(None, prior_precision="evidence")
    with pytest.raises(ValueError, match="batch_size"):
        LaplaceEmbedder(None, batch_size=1)
    emb = LaplaceEmbedder(None)
    with pytest.raises(ValueError, match="not fitted"):
        emb.transform(np.ones((2, 3)))
    A, P = _pairs(B=8, D=3)
    with pytest.raises(ValueError, match="positives"):
        emb.fit_embeddings(A, P[:, :2])
    with pytest.raises(ValueError, match="finite"):
        emb.fit_embeddings(A * np.nan, P)
    emb.fit_embeddings(A, P)
    with pytest.raises(ValueError, match="dimension"):
        emb.transform(np.ones((2, 5)))
    with pytest.raises(ValueError, match="no encoder"):
        emb.encode(["x"])
    with pytest.raises(TypeError, match="pairs"):
        LaplaceEmbedder(None).fit([("a", 1), ("b", "c")])


def test_score_scale_is_the_spread_of_unrelated_cosines():
    rng = np.random.default_rng(11)
    A = rng.standard_normal((40, 8))
    P = A + 0.3 * rng.standard_normal((40, 8))
    emb = LaplaceEmbedder(None, prior_precision=1.0).fit_embeddings(A, P)
    a = A / np.linalg.norm(A, axis=1, keepdims=True)
    p = P / np.linalg.norm(P, axis=1, keepdims=True)
    cross = a @ p.T
    expected = cross[~np.eye(40, dtype=bool)].std()
    assert emb.heads_.score_scale == pytest.approx(expected, rel=1e-5)


def _cos(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_score_scale_leaves_out_the_matching_pairs():
    # Definition: the std of the cosines between anchor i and positive j of
    # *another* pair (i != j). Positives are near-copies of their anchors, so
    # counting the matching pairs (cosine ~1) would move the estimate a lot.
    rng = np.random.default_rng(12)
    m = 30
    A = rng.standard_normal((m, 6))
    P = A + 0.05 * rng.standard_normal((m, 6))
    unrelated = [_cos(A[i], P[j]) for i in range(m) for j in range(m) if i != j]
    matching = [_cos(A[i], P[i]) for i in range(m)]
    emb = LaplaceEmbedder(None, prior_precision=1.0, batch_size=10).fit_embeddings(A, P)
    assert emb.heads_.score_scale == pytest.approx(np.std(unrelated), rel=1e-6)
    assert abs(np.std(unrelated + matching) - np.std(unrelated)) > 0.01  # the test can tell the two apart


def test_score_scale_of_orthogonal_unrelated_texts_is_the_floor():
    # anchor i and positive i are the same basis vector: every unrelated cosine is exactly 0,
    # so the spread is 0 (floored at 1e-12); the matching pairs alone would give sqrt(m-1)/m
    A = np.eye(12)
    emb = LaplaceEmbedder(None, prior_precision=1.0, batch_size=4).fit_embeddings(A, A.copy())
    assert emb.heads_.score_scale == pytest.approx(1e-12)


def test_a_loaded_encoder_is_saved_under_its_name(tmp_path):
    from crossembed.encoders import CallableEncoder

    enc = CallableEncoder(lambda t: np.ones((len(t), 4)), name="toy-name", dim=4)
    rng = np.random.default_rng(0)
    lap = LaplaceEmbedder(enc, hessian="diag", prior_precision=1.0).fit_embeddings(
        rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    )
    assert lap.encoder_name == "toy-name"
    path = lap.save(tmp_path / "lap.cemb")
    assert LaplaceEmbedder.load(path).encoder == "toy-name"
    assert LaplaceEmbedder(lambda t: t).encoder_name is None  # a bare callable has no stable name
