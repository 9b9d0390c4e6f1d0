"""UEC coefficients, Gaussian convolution and score-space mixing against hand formulas."""

import math

import numpy as np
import pytest

from crossembed import reference
from crossembed._rows import softmax_rows, unit_rows
from crossembed.uec import (
    EmbeddingMixing,
    FixedRouting,
    GaussianEmbedding,
    LaplaceEmbedder,
    LaplaceRouting,
    ProbitScoring,
    RankRouting,
    ScoreMixing,
    UECEnsemble,
    UniformRouting,
)
from crossembed.uec.mixing import convolve


def _embedder(D, seed, **kw):
    rng = np.random.default_rng(seed)
    A = unit_rows(rng.normal(size=(64, D)))
    P = unit_rows(A + 0.5 * rng.normal(size=(64, D)))
    return LaplaceEmbedder(None, batch_size=16, prior_precision=kw.pop("prior_precision", 2.0), **kw).fit_embeddings(
        A, P
    )


@pytest.fixture(scope="module")
def trio():
    return [_embedder(8, s, hessian=h) for s, h in ((0, "kron"), (1, "diag"), (2, "kron"))]


def _components(embedders, n=9, seed=10):
    rng = np.random.default_rng(seed)
    return [e.transform(rng.normal(size=(n, e.dim))) for e in embedders]


def test_coefficients_sum_to_one_and_follow_the_formula(trio):
    comps = _components(trio)
    for standardize in (True, False):
        ens = UECEnsemble(trio, routing=LaplaceRouting(0.7, standardize=standardize))
        pi = ens.coefficients(comps)
        tr = np.stack([c.trace() for c in comps], axis=1)
        if standardize:
            tr = (tr - [e.heads_.trace_mean for e in trio]) / [e.heads_.trace_std for e in trio]
        ref = np.exp(-tr / 0.7) / np.exp(-tr / 0.7).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(pi, ref, rtol=1e-10)
        np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-12)


def test_coefficient_limits():
    tr = np.array([[1.0, 2.0, 3.0], [5.0, 1.0, 1.0]])
    np.testing.assert_allclose(softmax_rows(-tr / 1e6), 1 / 3, rtol=1e-5)
    cold = softmax_rows(-tr / 1e-3)
    np.testing.assert_allclose(cold[0], [1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(cold[1], [0, 0.5, 0.5], atol=1e-12)  # tie split evenly


def test_convolution_formula():
    rng = np.random.default_rng(1)
    comps = [GaussianEmbedding(rng.normal(size=(4, 5)), rng.random((4, 5))) for _ in range(3)]
    w = rng.dirichlet(np.ones(3), size=4)
    g = convolve(comps, w)
    mu = sum(w[:, [k]] * comps[k].mean.astype(np.float64) for k in range(3))
    var = sum(w[:, [k]] ** 2 * comps[k].var.astype(np.float64) for k in range(3))
    np.testing.assert_allclose(g.mean, mu, rtol=1e-5)
    np.testing.assert_allclose(g.var, var, rtol=1e-5)


def test_embedding_mixing_normalises_the_convolution(trio):
    ens = UECEnsemble(trio, routing=LaplaceRouting(0.5), mixing=EmbeddingMixing())
    comps = _components(trio)
    g = ens.combine(comps)
    pi = ens.coefficients(comps)
    mu = sum(pi[:, [k]] * comps[k].mean.astype(np.float64) for k in range(3))
    var = sum(pi[:, [k]] ** 2 * comps[k].var.astype(np.float64) for k in range(3))
    norm = np.linalg.norm(mu, axis=1, keepdims=True)
    np.testing.assert_allclose(g.mean, mu / norm, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g.var, var / norm**2, rtol=1e-5)
    np.testing.assert_allclose(g.weights, pi, rtol=1e-4)


@pytest.mark.parametrize("calibrate", [True, False])
def test_score_mixing_is_the_probit_of_the_weighted_score_sum(trio, calibrate):
    ens = UECEnsemble(
        trio, routing=LaplaceRouting(0.5), mixing=ScoreMixing(calibrate=calibrate, hubness=0, query_head=False)
    )
    qc, dc = _components(trio, n=5, seed=3), _components(trio, n=7, seed=4)
    q, d = ens.combine(qc, role="query"), ens.combine(dc, role="passage")
    assert q.dim == 24 and d.dim == 24
    pi = ens.coefficients(qc)
    # calibration: model k's score is divided by its cosine spread s_k (relative to their geometric mean)
    s = np.array([e.heads_.score_scale for e in trio])
    c = np.exp(np.log(s).mean()) / s if calibrate else np.ones(3)
    assert np.all(s > 0)
    mu_s = np.zeros((5, 7))
    sig2 = np.zeros((5, 7))
    for k in range(3):
        _, m, v = reference.probit_scores(qc[k].mean, qc[k].var, dc[k].mean, dc[k].var, return_moments=True)
        mu_s += pi[:, [k]] * c[k] * m
        sig2 += (pi[:, [k]] * c[k]) ** 2 * v
    expected = mu_s / np.sqrt(1 + math.pi / 8 * sig2)
    np.testing.assert_allclose(ens.similarity(q, d), expected, rtol=2e-4, atol=2e-5)


def test_uniform_fixed_weights_and_no_variance(trio):
    qc, dc = _components(trio, n=4, seed=5), _components(trio, n=6, seed=6)
    uni = UECEnsemble(trio, routing=UniformRouting(), mixing=EmbeddingMixing())
    np.testing.assert_allclose(uni.combine(qc).weights, 1 / 3)
    fixed = UECEnsemble(trio, routing=FixedRouting([2.0, 1.0, 1.0]))
    np.testing.assert_allclose(fixed.combine(qc).weights, np.tile([0.5, 0.25, 0.25], (4, 1)))
    cos = UECEnsemble(
        trio, routing=LaplaceRouting(), mixing=EmbeddingMixing(), scoring=ProbitScoring(use_variance=False)
    )
    q, d = cos.combine(qc), cos.combine(dc, role="passage")
    np.testing.assert_allclose(cos.similarity(q, d), q.mean.astype(np.float64) @ d.mean.T, rtol=1e-5, atol=1e-6)


def test_variance_shrinks_scores_towards_zero(trio):
    ens = UECEnsemble(trio, routing=LaplaceRouting(), mixing=EmbeddingMixing())
    qc, dc = _components(trio, n=4, seed=7), _components(trio, n=5, seed=8)
    q, d = ens.combine(qc), ens.combine(dc, role="passage")
    s = ens.similarity(q, d)
    cos = q.mean.astype(np.float64) @ d.mean.T
    assert (np.abs(s) <= np.abs(cos) + 1e-6).all()
    np.testing.assert_allclose(s, reference.probit_scores(q.mean, q.var, d.mean, d.var), rtol=2e-4, atol=2e-5)


def test_different_dimensions():
    embs = [_embedder(8, 0), _embedder(6, 1)]
    rng = np.random.default_rng(2)
    comps = [embs[0].transform(rng.normal(size=(3, 8))), embs[1].transform(rng.normal(size=(3, 6)))]
    g = UECEnsemble(embs, routing=LaplaceRouting(), mixing=EmbeddingMixing()).combine(comps)
    assert g.dim == 6
    np.testing.assert_allclose(np.linalg.norm(g.mean, axis=1), 1.0, rtol=1e-5)
    # the projection is orthonormal: a projected unit block keeps its variance total when it spans everything
    assert UECEnsemble(embs, routing=LaplaceRouting(), mixing=ScoreMixing(hubness=0)).combine(comps).dim == 14
    assert UECEnsemble(embs, routing=LaplaceRouting()).combine(comps).dim == 14 + 2  # hubness


def test_state_round_trip(trio):
    for routing, mixing in (
        (FixedRouting([1, 2, 3]), EmbeddingMixing(random_state=4)),
        (LaplaceRouting(0.3, standardize=False), ScoreMixing(calibrate=False, hubness=0.7, hubness_k=3)),
        (RankRouting(0.4, laplace_variances=True), ScoreMixing(query_head=False)),
    ):
        ens = UECEnsemble(trio, routing=routing, mixing=mixing, scoring=ProbitScoring(use_variance=False))
        arrays, meta = ens.get_state()
        back = UECEnsemble.from_state(arrays, meta)
        comps = _components(trio)
        np.testing.assert_array_equal(back.combine(comps).mean, ens.combine(comps).mean)
        np.testing.assert_array_equal(back.combine(comps, role="passage").mean, ens.combine(comps, role="passage").mean)
        for name in ("routing", "mixing", "scoring"):  # each object's config survives, with its type
            assert type(getattr(back, name)) is type(getattr(ens, name))
            assert getattr(back, name).get_config() == getattr(ens, name).get_config()
        assert back.scoring.use_variance is False


def test_save_load_gives_bit_identical_encodings_and_search(tmp_path):
    from _word_encoder import WordEncoder
    from crossembed._io import CorruptFileError
    from crossembed.uec import IndexConfig, UECIndex
    from crossembed.uec.ablations import ConfidenceRouting

    rng = np.random.default_rng(5)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    texts = ["apple pie", "banana split", "cherry tart", "date loaf", "elderberry jam"] * 4
    queries = ["cherry pie", "banana jam", "date"]
    fitted = [
        LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P),
        LaplaceEmbedder(WordEncoder(), batch_size=10, hessian="diag").fit_embeddings(P, A),
    ]
    default = UECEnsemble(fitted)
    comps = default.encode_components(texts, role="passage", show_progress_bar=False)
    confident = UECEnsemble(fitted, routing=ConfidenceRouting()).with_reference(comps)
    for ens in (default, confident):
        back = UECEnsemble.load(ens.save(tmp_path / "ens.uec"), encoders=[WordEncoder(), WordEncoder()])
        assert back.has_reference == ens.has_reference and repr(back.routing) == repr(ens.routing)
        for role, items in (("query", queries), ("passage", texts)):
            a = ens.encode(items, role=role, show_progress_bar=False)
            b = back.encode(items, role=role, show_progress_bar=False)
            np.testing.assert_array_equal(a.mean, b.mean)
            np.testing.assert_array_equal(a.var, b.var)
        config = IndexConfig(M=8, rerank=10)
        here = UECIndex.build(ens, texts, config=config, num_threads=1, show_progress_bar=False)
        there = UECIndex.build(back, texts, config=config, num_threads=1, show_progress_bar=False)
        for exact in (True, False):
            np.testing.assert_array_equal(here.search(queries, 5, exact=exact), there.search(queries, 5, exact=exact))
    blob = bytearray((tmp_path / "ens.uec").read_bytes())
    blob[len(blob) // 2] ^= 1
    (tmp_path / "bad.uec").write_bytes(bytes(blob))
    with pytest.raises(CorruptFileError, match="checksum"):
        UECEnsemble.load(tmp_path / "bad.uec")
    with pytest.raises(CorruptFileError, match="expected 'crossembed.uec.UECEnsemble'"):
        UECEnsemble.load(fitted[0].save(tmp_path / "one.lap"))


def test_bad_inputs(trio):
    with pytest.raises(ValueError, match="at least one"):
        UECEnsemble([])
    with pytest.raises(TypeError, match="LaplaceEmbedder"):
        UECEnsemble([object()])
    with pytest.raises(ValueError, match="fitted"):
        UECEnsemble([LaplaceEmbedder(None)])
    with pytest.raises(ValueError, match="temperature"):
        LaplaceRouting(temperature=0)
    with pytest.raises(TypeError, match="mixing"):
        UECEnsemble(trio, mixing="average")
    with pytest.raises(TypeError, match="routing"):
        UECEnsemble(trio, routing="laplace")
    with pytest.raises(TypeError, match="scoring"):
        UECEnsemble(trio, scoring="probit")
    with pytest.raises(ValueError, match="weights"):
        UECEnsemble(trio, routing=FixedRouting([1, 2]))
    with pytest.raises(ValueError, match="weights"):
        FixedRouting([0.0, 0.0, 0.0])
    with pytest.raises(TypeError, match="standardize"):
        LaplaceRouting(standardize="yes")
    ens = UECEnsemble(trio, routing=LaplaceRouting())
    comps = _components(trio)
    with pytest.raises(ValueError, match="components"):
        ens.combine(comps[:2])
    with pytest.raises(ValueError, match="rows"):
        ens.combine([comps[0], comps[1][:3], comps[2]])
    with pytest.raises(ValueError, match="role"):
        ens.combine(comps, role="doc")
    with pytest.raises(TypeError, match="GaussianEmbedding"):
        ens.similarity(np.ones((2, 24)), np.ones((2, 24)))
    with pytest.raises(ValueError, match="dimension"):
        ens.similarity(comps[0], comps[1])
    with pytest.raises(ValueError, match="non-negative"):
        GaussianEmbedding(np.ones((2, 3)), -np.ones((2, 3)))
    with pytest.raises(ValueError, match="shape"):
        GaussianEmbedding(np.ones((2, 3)), np.ones((2, 4)))


def _anisotropic(D, seed, offset):
    """An embedder whose texts share a common direction (like e5): unrelated cosines bunch up."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(64, D)) + offset
    P = A + 0.5 * rng.normal(size=(64, D))
    return LaplaceEmbedder(None, batch_size=16, prior_precision=2.0).fit_embeddings(A, P)


def test_score_calibration_puts_models_on_one_footing_and_keeps_the_overall_scale():
    # Read the per-model factor c_k off the query blocks (uniform weights, unit means:
    # block k has norm c_k / K) and check it against its definition: c_k * s_k is the
    # same for every model (one footing) and prod_k c_k = 1 (overall magnitude kept).
    models = [_anisotropic(8, 0, 0.0), _anisotropic(6, 1, 0.6), _anisotropic(8, 2, 1.5)]
    s = np.array([e.heads_.score_scale for e in models])
    assert s.max() > 1.5 * s.min()  # the models' spreads differ, so the factors must too
    qc = _components(models, n=6, seed=7)
    ens = UECEnsemble(models, routing=UniformRouting(), mixing=ScoreMixing(hubness=0))
    D = [e.dim for e in models]
    cuts = np.cumsum(D)[:-1]
    blocks = np.split(ens.combine(qc, role="query").mean.astype(np.float64), cuts, axis=1)
    c = np.array([np.linalg.norm(b, axis=1).mean() * len(models) for b in blocks])
    np.testing.assert_allclose(c * s, (c * s)[0], rtol=1e-5)
    assert math.prod(c) == pytest.approx(1.0, rel=1e-5)
    # documents stay unweighted unit blocks
    for b in np.split(ens.combine(qc, role="passage").mean.astype(np.float64), cuts, axis=1):
        np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, rtol=1e-5)


def test_random_state_seeds_the_projections_and_old_files_are_refused():
    embs = [_embedder(8, 0), _embedder(6, 1)]
    comps = _components(embs)
    ens = UECEnsemble(embs, routing=LaplaceRouting(), mixing=EmbeddingMixing(random_state=3))
    arrays, meta = ens.get_state()
    assert meta["mixing"] == {"kind": "embedding", "random_state": 3}
    back = UECEnsemble.from_state(arrays, meta)
    np.testing.assert_array_equal(back.combine(comps).mean, ens.combine(comps).mean)
    other = UECEnsemble(embs, routing=LaplaceRouting(), mixing=EmbeddingMixing(random_state=4))
    assert not np.array_equal(other.combine(comps).mean, ens.combine(comps).mean)
    drawn = EmbeddingMixing(random_state=np.random.default_rng(5))
    assert isinstance(drawn.random_state, int)
    with pytest.raises(TypeError, match="random_state"):
        EmbeddingMixing(random_state="x")
    old = {k: v for k, v in meta.items() if k != "format"}  # a file from before the behaviour objects
    with pytest.raises(ValueError, match="format version None.*version 5"):
        UECEnsemble.from_state(arrays, old)
    with pytest.raises(ValueError, match="format version 4.*version 5"):  # before the confidence read the drop
        UECEnsemble.from_state(arrays, {**meta, "format": 4})
    with pytest.raises(ValueError, match="routing config"):
        UECEnsemble.from_state(arrays, {**meta, "routing": {"kind": "learned"}})


def test_with_reference_leaves_the_ensemble_as_it_was(trio):
    from crossembed.uec.ablations import ConfidenceRouting

    ens = UECEnsemble(trio, routing=ConfidenceRouting())
    assert ens.needs_reference and not ens.has_reference
    docs = _components(trio, n=30, seed=11)
    ref = ens.with_reference(docs)
    assert ref is not ens and ref.has_reference and not ens.has_reference
    assert ref.routing is ens.routing and ref.scoring is ens.scoring
    with pytest.raises(TypeError, match="reference"):
        UECEnsemble(trio, reference=[d.mean for d in docs])


def _mutable_parts(obj, found=None):
    """Every mutable object reachable from ``obj`` (lists, dicts, sets, writeable arrays, instances that are no
    frozen dataclass), by id; frozen dataclasses and tuples are walked, not counted."""
    import dataclasses

    found = {} if found is None else found
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return found
    if isinstance(obj, tuple):
        for item in obj:
            _mutable_parts(item, found)
        return found
    if isinstance(obj, np.ndarray):
        if obj.flags.writeable:
            found[id(obj)] = obj
        return found
    frozen = dataclasses.is_dataclass(obj) and type(obj).__dataclass_params__.frozen
    if not frozen:
        found[id(obj)] = obj
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, set)) else vars(obj).values()
    for item in items:
        _mutable_parts(item, found)
    return found


def test_default_behaviour_objects_are_frozen_and_two_ensembles_share_no_mutable_part():
    from dataclasses import FrozenInstanceError, fields

    pytest.importorskip("langid")  # the default routing of a monolingual model reads the query language
    rng = np.random.default_rng(4)
    embedders = []
    for name, D in (("minilm", 8), ("e5", 6)):
        A = unit_rows(rng.normal(size=(64, D)))
        P = unit_rows(A + 0.5 * rng.normal(size=(64, D)))
        S = unit_rows(rng.normal(size=(32, D)))
        embedders.append(LaplaceEmbedder(name, batch_size=16, prior_precision=2.0).fit_embeddings(A, P, scrambled=S))
    pairs = [(UECEnsemble(embedders), UECEnsemble(embedders))]
    pairs.append(tuple(UECEnsemble(embedders, mixing=EmbeddingMixing(), routing=FixedRouting([1, 2])) for _ in "ab"))
    for a, b in pairs:
        for part in ("routing", "mixing", "scoring"):
            x, y = getattr(a, part), getattr(b, part)
            assert x == y
            shared = set(_mutable_parts(x)) & set(_mutable_parts(y))
            assert not shared, f"{part}: {[type(_mutable_parts(x)[i]).__name__ for i in shared]}"
            with pytest.raises(FrozenInstanceError):
                setattr(x, fields(x)[0].name if fields(x) else "kind", None)
    assert type(pairs[0][0].routing).__name__ == "LanguageRouting"
    with pytest.raises(FrozenInstanceError):
        pairs[0][0].routing.temperature = 5.0
