"""UECIndex: exact vs ANN agreement, save/load round trip, corruption detection."""

import numpy as np
import pytest

from crossembed import reference
from crossembed._io import CorruptFileError
from crossembed.uec import GaussianEmbedding, LaplaceEmbedder, UECEnsemble, UECIndex
from crossembed.uec.laplace import normalize_rows

pytest.importorskip("hnswlib")


def _clustered(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = normalize_rows(rng.normal(size=(40, d)))
    x = normalize_rows(centers[rng.integers(0, 40, n)] + 0.35 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


@pytest.fixture(scope="module")
def setup():
    docs = _clustered(3000, 24, 0)
    queries = _clustered(60, 24, 1)
    return docs, queries, UECIndex(docs, M=16, ef_construction=100, rerank=100)


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
    A = normalize_rows(rng.normal(size=(40, 12)))
    P = normalize_rows(A + 0.3 * rng.normal(size=(40, 12)))
    ens = UECEnsemble(
        [
            LaplaceEmbedder("minilm", batch_size=10).fit_embeddings(A, P),
            LaplaceEmbedder("e5", batch_size=10, hessian="diag").fit_embeddings(P, A),
        ],
        temperature=0.5,
        uncertainty="laplace",
    )
    comps = [e.transform(rng.normal(size=(200, 12))) for e in ens.embedders]
    d = ens.combine(comps, role="passage")
    q = ens.combine([e.transform(rng.normal(size=(7, 12))) for e in ens.embedders])
    texts = [f"doc {i} ü" for i in range(200)]
    index = UECIndex(d, ensemble=ens, texts=texts, M=8, rerank=20)
    path = index.save(tmp_path / "idx.uec")
    back = UECIndex.load(path)
    assert back.texts == texts and len(back) == 200 and back.rerank == 20
    assert [e.encoder for e in back.ensemble.embedders] == ["minilm", "e5"]
    assert back.ensemble.temperature == 0.5
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
    with pytest.raises(ValueError, match="larger"):
        index.search(queries, len(docs) + 1, exact=True)
    with pytest.raises(ValueError, match="dimension"):
        index.search(GaussianEmbedding(np.ones((2, 5)), np.zeros((2, 5))), 3)
    with pytest.raises(ValueError, match="no ensemble"):
        index.search(["a text"], 3)
    with pytest.raises(TypeError, match="one string"):
        index.search("a text", 3)
    with pytest.raises(ValueError, match="rerank"):
        index.search(queries, 3, rerank=0)


class _WordEncoder:
    """A deterministic bag-of-characters encoder (16-d) with the encode() protocol."""

    def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
        out = np.full((len(texts), 16), 0.1, dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t:
                out[i, ord(ch) % 16] += 1.0
        return out


def test_build_encodes_texts_as_passages_and_keeps_them():
    rng = np.random.default_rng(3)
    A = normalize_rows(rng.normal(size=(40, 16)))
    P = normalize_rows(A + 0.3 * rng.normal(size=(40, 16)))
    ens = UECEnsemble([LaplaceEmbedder(_WordEncoder(), batch_size=10).fit_embeddings(A, P)])
    texts = ["apple pie", "banana split", "cherry tart", "date loaf", "elderberry jam"] * 4
    index = UECIndex.build(ens, texts, show_progress_bar=False, M=8, rerank=10)
    assert index.texts == texts and index.ensemble is ens
    direct = UECIndex(ens.encode(texts, role="passage", show_progress_bar=False), M=8, rerank=10)
    np.testing.assert_array_equal(index.docs.mean, direct.docs.mean)
    s, i = index.search(["cherry tart"], 3, exact=True)
    assert texts[i[0, 0]] == "cherry tart"
    # a passage GaussianEmbedding is indexed as it is (no texts)
    again = UECIndex.build(ens, direct.docs, M=8)
    assert again.texts is None and len(again) == len(texts)
    with pytest.raises(TypeError, match="UECEnsemble"):
        UECIndex.build(object(), texts)
    with pytest.raises(TypeError, match="one string"):
        UECIndex.build(ens, "one text")


def test_random_state_int_is_the_graph_seed_and_others_draw_one():
    docs = _clustered(50, 8, 4)
    assert UECIndex(docs, M=8, random_state=7).random_state == 7
    a = UECIndex(docs, M=8, random_state=np.random.default_rng(1)).random_state
    b = UECIndex(docs, M=8, random_state=np.random.default_rng(1)).random_state
    assert a == b and isinstance(a, int)
    assert isinstance(UECIndex(docs, M=8, random_state=None).random_state, int)
    with pytest.raises(TypeError, match="random_state"):
        UECIndex(docs, M=8, random_state="seed")


def test_confidence_reference_comes_from_the_documents():
    rng = np.random.default_rng(4)
    A = normalize_rows(rng.normal(size=(40, 16)))
    P = normalize_rows(A + 0.3 * rng.normal(size=(40, 16)))
    texts = ["apple pie", "banana split", "cherry tart", "date loaf", "elderberry jam"] * 4

    def make():
        return UECEnsemble(
            [LaplaceEmbedder(_WordEncoder(), batch_size=10).fit_embeddings(A, P)] * 2, uncertainty="confidence"
        )

    built = make()
    assert built.needs_reference and built.reference_ is None
    index = UECIndex.build(built, texts, show_progress_bar=False, M=8, rerank=10)
    assert built.reference_[0].shape == (20, 16)
    assert texts[index.search(["cherry tart"], 1, exact=True)[1][0, 0]] == "cherry tart"
    # encode() and similarity() never set it implicitly: queries fall back to the Laplace weights (warned)
    other = make()
    other.encode(texts, role="passage", show_progress_bar=False)
    assert other.reference_ is None
    with pytest.warns(RuntimeWarning, match="reference"):
        sims = other.similarity(["cherry tart"], texts)
    assert sims.shape == (1, 20) and texts[int(np.argmax(sims[0]))] == "cherry tart"
