"""UECIndex: exact vs ANN agreement, save/load round trip, corruption detection."""

import numpy as np
import pytest

from _word_encoder import WordEncoder
from crossembed import reference
from crossembed._io import CorruptFileError
from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, LaplaceEmbedder, UECEnsemble, UECIndex
from crossembed.uec.ablations import BetaCosineScoring, ConfidenceRouting, PrecisionSumRouting, beta_topk
from crossembed.uec.mixing import EmbeddingMixing
from crossembed.uec.routing import LaplaceRouting
from crossembed.uec.scoring import ProbitScoring


def _clustered(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(40, d)))
    x = unit_rows(centers[rng.integers(0, 40, n)] + 0.35 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


@pytest.fixture(scope="module")
def setup():
    docs = _clustered(3000, 24, 0)
    queries = _clustered(60, 24, 1)
    return docs, queries, UECIndex(docs, config=IndexConfig(M=16, ef_construction=100, rerank=100))


def test_exact_search_matches_reference(setup):
    docs, queries, index = setup
    s, i = index.search(queries, 10, exact=True)
    rs, ri = reference.probit_topk(queries.mean, queries.var, docs.mean, docs.var, 10)
    np.testing.assert_allclose(s, rs, rtol=1e-5, atol=1e-6)
    assert (i == ri).mean() > 0.99  # float32 near-ties may swap


def test_ann_agrees_with_exact(setup):
    docs, queries, index = setup
    _, exact = index.search(queries, 10, exact=True)
    _, ann = index.search(queries, 10, rerank=200)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(ann, exact)])
    assert recall >= 0.97
    # reranking every document is the exact answer
    s_all, i_all = index.search(queries, 10, rerank=len(docs), ef=len(docs))
    s_ex, _ = index.search(queries, 10, exact=True)
    np.testing.assert_allclose(s_all, s_ex, rtol=1e-6)


def test_save_load_round_trip(tmp_path, setup):
    docs, queries, _ = setup
    rng = np.random.default_rng(2)
    A = unit_rows(rng.normal(size=(40, 12)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 12)))
    ens = UECEnsemble(
        [
            LaplaceEmbedder("minilm", batch_size=10).fit_embeddings(A, P),
            LaplaceEmbedder("e5", batch_size=10, hessian="diag").fit_embeddings(P, A),
        ],
        routing=LaplaceRouting(0.5),
    )
    comps = [e.transform(rng.normal(size=(200, 12))) for e in ens.embedders]
    d = ens.combine(comps, role="passage")
    q = ens.combine([e.transform(rng.normal(size=(7, 12))) for e in ens.embedders])
    texts = [f"doc {i} ü" for i in range(200)]
    index = UECIndex(d, ensemble=ens, texts=texts, config=IndexConfig(M=8, rerank=20))
    path = index.save(tmp_path / "idx.uec")
    back = UECIndex.load(path)
    assert back.texts == texts and len(back) == 200 and back.config == index.config
    assert [e.encoder for e in back.ensemble.embedders] == ["minilm", "e5"]
    assert back.ensemble.routing.get_config() == ens.routing.get_config()
    for exact in (True, False):
        s1, i1 = index.search(q, 5, exact=exact)
        s2, i2 = back.search(q, 5, exact=exact)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)
    blob = path.read_bytes()
    (tmp_path / "trunc.uec").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(CorruptFileError):
        UECIndex.load(tmp_path / "trunc.uec")
    edited = bytearray(blob)
    edited[len(blob) - 4000] ^= 0x01  # inside the payload (graph or arrays)
    (tmp_path / "edit.uec").write_bytes(bytes(edited))
    with pytest.raises(CorruptFileError, match="checksum"):
        UECIndex.load(tmp_path / "edit.uec")
    with pytest.raises(FileNotFoundError):
        UECIndex.load(tmp_path / "missing.uec")
    # a failed save never destroys the previous file
    with pytest.raises(FileNotFoundError):
        index.save(tmp_path / "no_such_dir" / "x.uec")
    assert UECIndex.load(path).texts == texts


def test_bad_inputs(setup):
    docs, queries, index = setup
    with pytest.raises(TypeError):
        UECIndex(docs.mean)
    with pytest.raises(ValueError, match="empty"):
        UECIndex(docs[np.zeros(len(docs), bool)])
    with pytest.raises(ValueError, match="texts"):
        UECIndex(docs[:5], texts=["a"])
    with pytest.raises(ValueError, match="k"):
        index.search(queries, 0)
    with pytest.raises(ValueError, match="k=.* too large"):
        index.search(queries, 1 << 28)
    with pytest.raises(ValueError, match="dimension"):
        index.search(GaussianEmbedding(np.ones((2, 5)), np.zeros((2, 5))), 3)
    with pytest.raises(ValueError, match="no ensemble"):
        index.search(["a text"], 3)
    with pytest.raises(TypeError, match="one string"):
        index.search("a text", 3)
    with pytest.raises(TypeError, match="queries must be"):
        index.search(None, 3)
    with pytest.raises(ValueError, match="rerank"):
        index.search(queries, 3, rerank=0)


def test_build_encodes_texts_as_passages_and_keeps_them():
    rng = np.random.default_rng(3)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    ens = UECEnsemble([LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P)])
    texts = ["apple pie", "banana split", "cherry tart", "date loaf", "elderberry jam"] * 4
    index = UECIndex.build(ens, texts, show_progress_bar=False, config=IndexConfig(M=8, rerank=10))
    assert index.texts == texts and index.ensemble is ens
    direct = UECIndex(ens.encode(texts, role="passage", show_progress_bar=False), config=IndexConfig(M=8, rerank=10))
    np.testing.assert_array_equal(index.docs.mean, direct.docs.mean)
    s, i = index.search(["cherry tart"], 3, exact=True)
    assert texts[i[0, 0]] == "cherry tart"
    with pytest.raises(TypeError, match="UECIndex\\(docs"):  # encoded documents go to the constructor
        UECIndex.build(ens, direct.docs)
    with pytest.raises(TypeError, match="UECEnsemble"):
        UECIndex.build(object(), texts)
    with pytest.raises(TypeError, match="one string"):
        UECIndex.build(ens, "one text")


def test_random_state_int_is_the_graph_seed_and_others_draw_one():
    docs = _clustered(50, 8, 4)
    assert UECIndex(docs, config=IndexConfig(M=8, random_state=7)).config.random_state == 7
    a = UECIndex(docs, config=IndexConfig(M=8, random_state=np.random.default_rng(1))).config.random_state
    b = UECIndex(docs, config=IndexConfig(M=8, random_state=np.random.default_rng(1))).config.random_state
    assert a == b and isinstance(a, int)
    assert isinstance(UECIndex(docs, config=IndexConfig(M=8, random_state=None)).config.random_state, int)
    with pytest.raises(TypeError, match="random_state"):
        UECIndex(docs, config=IndexConfig(M=8, random_state="seed"))


def test_confidence_reference_comes_from_the_documents_and_the_ensemble_is_not_changed(tmp_path):
    rng = np.random.default_rng(4)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    texts = ["apple pie", "banana split", "cherry tart", "date loaf", "elderberry jam"] * 4

    def make():
        return UECEnsemble(
            [LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P)] * 2, routing=ConfidenceRouting()
        )

    built = make()
    assert built.needs_reference and not built.has_reference
    arrays, meta = built.get_state()
    index = UECIndex.build(built, texts, show_progress_bar=False, config=IndexConfig(M=8, rerank=10))
    # the index holds a copy with the reference; the ensemble passed in is left as it was
    assert index.ensemble is not built and index.ensemble.has_reference
    assert index.ensemble.reference_.documents[0].shape == (20, 16)
    assert not built.has_reference
    after_arrays, after_meta = built.get_state()
    assert after_meta == meta and after_arrays.keys() == arrays.keys()
    for name, value in arrays.items():
        np.testing.assert_array_equal(after_arrays[name], value)
    assert texts[index.search(["cherry tart"], 1, exact=True)[1][0, 0]] == "cherry tart"
    # the copy (with its reference) is what the index saves and loads
    back = UECIndex.load(index.save(tmp_path / "conf.uec"), encoders=[WordEncoder(), WordEncoder()])
    assert back.ensemble.has_reference
    np.testing.assert_array_equal(
        back.search(["cherry tart"], 3, exact=True)[1], index.search(["cherry tart"], 3, exact=True)[1]
    )
    # an ensemble that already has its reference is used as given
    again = UECIndex.build(index.ensemble, texts, show_progress_bar=False, config=IndexConfig(M=8, rerank=10))
    assert again.ensemble is index.ensemble
    # encode() and similarity() never set it implicitly: queries fall back to the Laplace weights (warned)
    other = make()
    other.encode(texts, role="passage", show_progress_bar=False)
    assert not other.has_reference
    with pytest.warns(RuntimeWarning, match="reference"):
        sims = other.similarity(["cherry tart"], texts)
    assert sims.shape == (1, 20) and texts[int(np.argmax(sims[0]))] == "cherry tart"


def test_the_index_scores_with_its_scoring_object(tmp_path, monkeypatch):
    from crossembed.uec import rerank as rerank_mod

    monkeypatch.setattr(rerank_mod, "_BLOCK", 64)  # several blocks: the block merge is exercised too
    docs, q = _clustered(300, 12, 5), _clustered(9, 12, 6)
    assert UECIndex(docs[:10], config=IndexConfig(M=8)).scoring.get_config() == ProbitScoring().get_config()
    beta = UECIndex(docs, scoring=BetaCosineScoring(beta=0.5), num_threads=1, config=IndexConfig(M=8))
    s, i = beta.search(q, 7, exact=True)
    rs, ri = beta_topk(q.mean, q.var, docs.mean, docs.var, 7, beta=0.5)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(s, rs)
    packed = UECIndex(
        docs, scoring=BetaCosineScoring(beta=0.5), num_threads=1, config=IndexConfig(M=8, panel_cache_bytes=0)
    )
    for rerank in (10, 300):
        np.testing.assert_array_equal(beta.search(q, 7, rerank=rerank)[1], packed.search(q, 7, rerank=rerank)[1])
        np.testing.assert_array_equal(beta.search(q, 7, rerank=rerank)[0], packed.search(q, 7, rerank=rerank)[0])
    np.testing.assert_array_equal(beta.search(q, 7, rerank=300, ef=300)[1], ri)
    # the scoring is saved with the index
    means = UECIndex(docs, scoring=ProbitScoring(use_variance=False), config=IndexConfig(M=8))
    back = UECIndex.load(means.save(tmp_path / "means.uec"))
    assert back.scoring.get_config() == {"kind": "probit", "use_variance": False}
    dot = GaussianEmbedding(docs.mean, np.zeros_like(docs.var))
    _, expected = UECIndex(dot, config=IndexConfig(M=8)).search(
        GaussianEmbedding(q.mean, np.zeros_like(q.var)), 5, exact=True
    )
    np.testing.assert_array_equal(back.search(q, 5, exact=True)[1], expected)
    assert UECIndex.load(beta.save(tmp_path / "beta.uec")).scoring.get_config() == beta.scoring.get_config()
    with pytest.raises(TypeError, match="scoring"):
        UECIndex(docs, scoring="probit")


def test_an_ensemble_index_scores_with_the_ensembles_scoring():
    rng = np.random.default_rng(7)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    official = {"routing": PrecisionSumRouting(), "mixing": EmbeddingMixing(), "scoring": BetaCosineScoring()}
    for options in ({}, {"scoring": ProbitScoring(use_variance=False)}, official):
        ens = UECEnsemble([LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P)], **options)
        index = UECIndex.build(
            ens, ["apple pie", "banana split", "cherry tart"] * 3, show_progress_bar=False, config=IndexConfig(M=8)
        )
        assert index.scoring.get_config() == ens.scoring.get_config()
