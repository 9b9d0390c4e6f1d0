"""UECIndex ids, add/remove, filters, float16 storage, memory-mapped load and the file version."""

import numpy as np
import pytest

from crossembed import reference
from crossembed._io import CorruptFileError, load_arrays, save_raw_arrays
from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex, index_file
from crossembed.uec import rerank as rerank_mod


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(12, d)))
    x = unit_rows(centers[rng.integers(0, 12, n)] + 0.4 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


def _exact_ids(docs, ids, queries, k):
    """Reference top-k ids: float64 probit scores, ties to the lower id."""
    s = reference.probit_scores(queries.mean, queries.var, docs.mean, docs.var)
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return ids[order]


def test_ids_are_returned_and_default_to_positions():
    docs, q = _docs(300, 16, 0), _docs(9, 16, 1)
    plain = UECIndex(docs, num_threads=1, config=IndexConfig(M=8))  # one build thread: the same graph twice
    ids = np.arange(300, dtype=np.int64)[::-1] * 7 + 2**40  # not positions, not in order
    named = UECIndex(docs, ids=ids, num_threads=1, config=IndexConfig(M=8))
    for exact in (True, False):
        s0, i0 = plain.search(q, 5, exact=exact)
        s1, i1 = named.search(q, 5, exact=exact)
        np.testing.assert_array_equal(s0, s1)
        np.testing.assert_array_equal(ids[i0], i1)
    np.testing.assert_array_equal(named.search(q, 5, exact=True)[1], _exact_ids(docs, ids, q, 5))
    np.testing.assert_array_equal(named.ids, ids)
    np.testing.assert_array_equal(named.candidates(q, 4), ids[plain.candidates(q, 4)])


def test_add_and_remove_equal_a_fresh_index():
    docs, extra, q = _docs(400, 16, 2), _docs(150, 16, 3), _docs(12, 16, 4)
    index = UECIndex(docs[:250], config=IndexConfig(M=8, ef_construction=60))
    new_ids = index.add(docs[250:])
    np.testing.assert_array_equal(new_ids, np.arange(250, 400))
    gone = np.arange(0, 400, 3)
    index.remove(gone)
    assert len(index) == 400 - len(gone)
    assert index.wait_for_compaction(timeout=60)  # removing 134 of 400 compacted: slots 0..265 are live
    got = index.add(extra, ids=np.arange(1000, 1150))
    assert index._store.n_slots == 400 + 150 - len(gone) and len(index) == 400 - len(gone) + 150
    keep = np.setdiff1d(np.arange(400), gone)
    all_docs = GaussianEmbedding(
        np.concatenate([docs.mean[keep], extra.mean]), np.concatenate([docs.var[keep], extra.var])
    )
    all_ids = np.concatenate([keep, got])
    expected = _exact_ids(all_docs, all_ids, q, 10)
    _, exact = index.search(q, 10, exact=True)
    np.testing.assert_array_equal(exact, expected)
    _, ann = index.search(q, 10, rerank=len(index), ef=len(index))  # every candidate: the exact answer
    np.testing.assert_array_equal(ann, expected)
    _, ann = index.search(q, 10, rerank=60)
    assert not np.isin(ann, gone).any()
    assert np.mean([len(set(a) & set(e)) / 10 for a, e in zip(ann, expected)]) >= 0.95
    # a removed id may come back
    index.add(docs[:1], ids=[0])
    assert 0 in index.search(docs[:1], 1, exact=True)[1]


def test_update_errors_name_the_argument():
    docs = _docs(50, 8, 5)
    index = UECIndex(docs, config=IndexConfig(M=8))
    with pytest.raises(ValueError, match="already in the index"):
        index.add(docs[:2], ids=[3, 60])
    with pytest.raises(ValueError, match="repeated"):
        index.add(docs[:2], ids=[70, 70])
    with pytest.raises(ValueError, match="3 ids"):
        index.add(docs[:3], ids=[80, 81])
    with pytest.raises(ValueError, match="not in the index"):
        index.remove([1, 999])
    assert len(index) == 50  # nothing removed by the failed call
    with pytest.raises(ValueError, match="dimension"):
        index.add(_docs(2, 5, 0))
    with pytest.raises(TypeError, match="docs"):
        index.add(docs.mean)
    with pytest.raises(ValueError, match="texts"):
        index.add(docs[:1], texts=["t"])
    with pytest.raises(TypeError, match="ids"):
        UECIndex(docs, ids=np.zeros(50))  # floats are not ids
    with pytest.raises(ValueError, match="ids"):
        UECIndex(docs, ids=np.arange(50) - 1)  # -1 is the padding of results
    with pytest.raises(ValueError, match="dtype"):
        UECIndex(docs, config=IndexConfig(dtype="float64"))


def test_filter_restricts_results_exactly_or_through_the_graph(monkeypatch):
    docs, q = _docs(600, 16, 6), _docs(10, 16, 7)
    ids = np.arange(600, dtype=np.int64) + 10_000
    index = UECIndex(docs, ids=ids, config=IndexConfig(M=8, ef_construction=60))
    allowed = ids[::4]
    sub = docs[np.arange(0, 600, 4)]
    expected = _exact_ids(sub, allowed, q, 5)
    for exact in (True, False):  # a small filter is searched exactly either way
        np.testing.assert_array_equal(
            index.search(q, 5, exact=exact, filter=np.concatenate([allowed, [-5, 99]]))[1], expected
        )
    monkeypatch.setattr(rerank_mod, "_EXACT_FILTER_ROWS", 0)  # force the graph's filtered search
    _, ann = index.search(q, 5, filter=allowed, rerank=50)
    assert np.isin(ann, allowed).all()
    assert np.mean([len(set(a) & set(e)) / 5 for a, e in zip(ann, expected)]) >= 0.9
    # nothing allowed: padding only; fewer allowed than k: those, then padding
    s, i = index.search(q, 5, filter=[1, 2])
    assert (i == -1).all() and np.isneginf(s).all()
    s, i = index.search(q, 5, filter=ids[:3])
    np.testing.assert_array_equal(np.sort(i[:, :3], axis=1), np.tile(ids[:3], (len(q), 1)))
    assert (i[:, 3:] == -1).all() and np.isneginf(s[:, 3:]).all() and np.isfinite(s[:, :3]).all()


def test_float16_store_halves_memory_and_keeps_the_ranking():
    docs, q = _docs(500, 32, 8), _docs(20, 32, 9)
    f32 = UECIndex(docs, config=IndexConfig(M=8))
    f16 = UECIndex(docs, config=IndexConfig(M=8, dtype="float16"))
    mem16, mem32 = f16.memory_usage(), f32.memory_usage()
    saved = mem32["store"] + mem32["graph"] - mem16["store"] - mem16["graph"]
    assert f16.config.dtype == "float16" and saved == 2 * 500 * 32 * 2  # means (in the graph) and variances halved
    _, a = f32.search(q, 10, exact=True)
    _, b = f16.search(q, 10, exact=True)
    assert np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b)]) >= 0.95
    with pytest.raises(ValueError, match="float16"):
        f16.add(GaussianEmbedding(np.full((1, 32), 1e6, np.float32), np.zeros((1, 32), np.float32)))


def test_exact_blocks_are_cached_within_budget_and_refreshed_on_update(monkeypatch):
    monkeypatch.setattr(rerank_mod, "_BLOCK", 64)
    docs, q = _docs(300, 8, 10), _docs(5, 8, 11)
    index = UECIndex(docs, config=IndexConfig(M=8))
    first = index.search(q, 7, exact=True)
    assert len(index._panels) == 5
    index.remove([5, 200])
    assert len(index._panels) == 3  # the two blocks touched are packed again
    keep = np.setdiff1d(np.arange(300), [5, 200])
    np.testing.assert_array_equal(index.search(q, 7, exact=True)[1], _exact_ids(docs[keep], keep, q, 7))
    none = UECIndex(docs, config=IndexConfig(M=8, panel_cache_bytes=0))
    np.testing.assert_array_equal(none.search(q, 7, exact=True)[1], first[1])
    assert not len(none._panels)


@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_keeps_ids_removals_and_texts(tmp_path, mmap):
    docs, q = _docs(200, 16, 12), _docs(6, 16, 13)
    texts = [f"doc {i}" for i in range(200)]
    index = UECIndex(docs, ids=np.arange(200) + 5, texts=texts, config=IndexConfig(M=8, dtype="float16"))
    index.remove([5, 6, 100])
    path = index.save(tmp_path / "i.uec")
    back = UECIndex.load(path, mmap=mmap)
    assert len(back) == 197 and back.config.dtype == "float16"
    assert isinstance(back._store.var, np.memmap) == mmap
    for exact in (True, False):
        np.testing.assert_array_equal(back.search(q, 5, exact=exact)[1], index.search(q, 5, exact=exact)[1])
    assert back.get_texts([7, -1]) == ["doc 2", None]
    assert back.texts == [t for i, t in enumerate(texts) if i + 5 not in (5, 6, 100)]
    back.add(docs[:2], ids=[5, 6], texts=["a", "b"])  # a memory-mapped store is copied first
    assert back.get_texts([5, 6]) == ["a", "b"] and len(back) == 199
    blob = path.read_bytes()
    edited = bytearray(blob)
    edited[len(blob) // 2] ^= 1
    (tmp_path / "e.uec").write_bytes(bytes(edited))
    with pytest.raises(CorruptFileError, match="checksum"):
        UECIndex.load(tmp_path / "e.uec", mmap=mmap)
    (tmp_path / "t.uec").write_bytes(blob[:-100])
    with pytest.raises(CorruptFileError):
        UECIndex.load(tmp_path / "t.uec", mmap=mmap)


def test_load_keeps_the_saved_config_the_panel_budget_included(tmp_path):
    docs, q = _docs(300, 8, 20), _docs(5, 8, 21)
    config = IndexConfig(M=6, ef_construction=30, rerank=17, dtype="float16", panel_cache_bytes=0, random_state=3)
    index = UECIndex(docs, config=config)
    back = UECIndex.load(index.save(tmp_path / "c.uec"))
    assert back.config == config and back.config.get_config() == config.get_config()
    np.testing.assert_array_equal(back.search(q, 5, exact=True)[1], index.search(q, 5, exact=True)[1])
    assert len(back._panels) == 0  # a budget of 0 stays 0: nothing cached after a load
    cached = UECIndex.load(UECIndex(docs, config=IndexConfig(M=6)).save(tmp_path / "d.uec"))
    cached.search(q, 5, exact=True)
    assert len(cached._panels) == 1


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 7, None])
def test_index_files_of_another_version_are_refused(tmp_path, version):
    path = UECIndex(_docs(40, 8, 14), config=IndexConfig(M=8)).save(tmp_path / "now.uec")
    arrays, meta = load_arrays(path, index_file._KIND)
    if version is None:
        del meta["index_version"]
    else:
        meta["index_version"] = version
    save_raw_arrays(tmp_path / "old.uec", index_file._KIND, arrays, meta)
    with pytest.raises(
        ValueError, match=f"version {version} is not supported \\(expected {index_file.INDEX_VERSION}\\)"
    ):
        UECIndex.load(tmp_path / "old.uec")


def test_reserve_makes_room_without_changing_results():
    docs, q = _docs(300, 12, 18), _docs(8, 12, 19)
    grown = UECIndex(docs[:100], num_threads=1, config=IndexConfig(M=8))
    grown.reserve(300)
    grown_mem, whole_mem = grown.memory_usage(), UECIndex(docs, config=IndexConfig(M=8)).memory_usage()
    assert grown_mem["store"] == whole_mem["store"] and grown._graph.max_elements == 300
    grown.add(docs[100:])
    whole = UECIndex(docs, num_threads=1, config=IndexConfig(M=8))
    for exact in (True, False):
        s0, i0 = grown.search(q, 6, exact=exact)
        s1, i1 = whole.search(q, 6, exact=exact)
        np.testing.assert_array_equal(i0, i1)
        np.testing.assert_array_equal(s0, s1)
    grown.reserve(10)  # never shrinks
    assert len(grown) == 300
    with pytest.raises(ValueError, match="capacity"):
        grown.reserve(0)


def test_rerank_on_cached_panels_equals_rerank_on_packed_candidates(monkeypatch):
    monkeypatch.setattr(rerank_mod, "_BLOCK", 50)
    docs, q = _docs(400, 12, 16), _docs(30, 12, 17)
    cached = UECIndex(docs, num_threads=1, config=IndexConfig(M=8))
    packed = UECIndex(docs, num_threads=1, config=IndexConfig(M=8, panel_cache_bytes=0))
    cached.remove([3, 120])
    packed.remove([3, 120])
    for rerank in (10, 40, 398):
        s0, i0 = cached.search(q, 7, rerank=rerank)
        s1, i1 = packed.search(q, 7, rerank=rerank)
        np.testing.assert_array_equal(i0, i1)
        np.testing.assert_array_equal(s0, s1)
    assert len(cached._panels) == 8 and not len(packed._panels)
    keep = np.setdiff1d(np.arange(400), [3, 120])
    np.testing.assert_array_equal(cached.search(q, 7, rerank=398, ef=398)[1], _exact_ids(docs[keep], keep, q, 7))
