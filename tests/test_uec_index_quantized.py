"""UECIndex with dtype int8 / bf16: codes in the graph, float32 means beside it (memory-mapped after a load).

Exact search equal to the float32 index's, ANN recall, save/load/mmap round trips, updates and
compaction on a loaded index, refused dtypes and files whose means are missing or wrong.
"""

import numpy as np
import pytest

from crossembed import reference
from crossembed._io import CorruptFileError, load_arrays, save_raw_arrays
from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex, index_file

CODED = ("int8", "bf16")


def _docs(n, d, seed, var=0.02):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(12, d)))
    x = unit_rows(centers[rng.integers(0, 12, n)] + 0.4 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (var * rng.random((n, d))).astype(np.float32))


def _exact_ids(docs, ids, queries, k):
    """Reference top-k ids: float64 probit scores, ties to the lower id."""
    s = reference.probit_scores(queries.mean, queries.var, docs.mean, docs.var)
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return ids[order]


def _recall(got, truth):
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(got, truth)]))


@pytest.mark.parametrize("dtype", CODED)
@pytest.mark.parametrize("var", [0.02, 0.0])
def test_exact_search_is_the_float32_index_and_ann_recall_holds(dtype, var):
    docs, q = _docs(800, 24, 0, var), _docs(40, 24, 1, var)
    plain = UECIndex(docs, config=IndexConfig(M=8, ef_construction=80), num_threads=1)
    coded = UECIndex(docs, config=IndexConfig(M=8, ef_construction=80, dtype=dtype), num_threads=1)
    assert coded._graph.storage == dtype and coded.config.dtype == dtype
    for a, b in zip(coded.search(q, 10, exact=True), plain.search(q, 10, exact=True)):
        np.testing.assert_array_equal(a, b)  # the rerank reads the float32 means: the same scores, bit for bit
    truth = _exact_ids(docs, np.arange(800), q, 10)
    np.testing.assert_array_equal(coded.search(q, 10, exact=True)[1], truth)
    scores, ids = coded.search(q, 10, rerank=40)
    assert _recall(ids, truth) >= max(0.97, _recall(plain.search(q, 10, rerank=40)[1], truth) - 0.02)
    exact_scores = reference.probit_scores(q.mean, q.var, docs.mean, docs.var)
    np.testing.assert_allclose(scores, np.take_along_axis(exact_scores, ids, axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(coded.docs.mean, docs.mean)  # contents are the float32 means, not codes
    assert coded.memory_usage()["graph"] < plain.memory_usage()["graph"]


@pytest.mark.parametrize("dtype", CODED)
def test_memory_mapped_load_then_updates_and_compaction(dtype, tmp_path):
    docs, more, q = _docs(500, 16, 2), _docs(120, 16, 3), _docs(12, 16, 4)
    index = UECIndex(docs, ids=np.arange(500) + 7, config=IndexConfig(M=8, dtype=dtype, compact_at=None))
    index.remove([7, 8, 300])
    path = index.save(tmp_path / "c.uec")
    back = UECIndex.load(path, mmap=True)
    assert isinstance(back._store.means.base, np.memmap) and back.config.dtype == dtype
    for exact in (True, False):
        for a, b in zip(back.search(q, 5, exact=exact), index.search(q, 5, exact=exact)):
            np.testing.assert_array_equal(a, b)

    # the reference: every document the index should hold, by id
    held = {i + 7: (docs.mean[i], docs.var[i]) for i in range(500) if i + 7 not in (7, 8, 300)}
    back.add(more[:60], ids=np.arange(1000, 1060))
    held.update({1000 + i: (more.mean[i], more.var[i]) for i in range(60)})
    back.upsert(more[60:80], ids=np.arange(20, 40))  # replaced: new slots, in memory beside the mapped ones
    held.update({20 + i: (more.mean[60 + i], more.var[60 + i]) for i in range(20)})
    back.remove([1000, 50])
    del held[1000], held[50]
    assert isinstance(back._store.means.base, np.memmap)  # the means were not copied into memory

    def check(ix):
        ids = np.array(sorted(held))
        ref = GaussianEmbedding(np.stack([held[i][0] for i in ids]), np.stack([held[i][1] for i in ids]))
        truth = _exact_ids(ref, ids, q, 5)
        np.testing.assert_array_equal(ix.search(q, 5, exact=True)[1], truth)
        assert _recall(ix.search(q, 5, rerank=60)[1], truth) >= 0.95
        np.testing.assert_array_equal(ix.get_docs(ids[::7]).mean, ref.mean[::7])
        assert len(ix) == len(ids)

    check(back)
    again = UECIndex.load(back.save(tmp_path / "d.uec"))  # base + tail written as one array
    check(again)
    back.compact()
    assert back._store.deleted == 0 and not isinstance(back._store.means.base, np.memmap)
    check(back)


def test_dtypes_refused_and_named():
    assert IndexConfig(dtype=np.int8).dtype == "int8" and IndexConfig(dtype="bf16").dtype == "bf16"
    for bad in ("int4", "bfloat16", np.float64, None):
        with pytest.raises(ValueError, match="dtype"):
            IndexConfig(dtype=bad)


@pytest.mark.parametrize("dtype", CODED)
def test_files_with_missing_or_wrong_means_are_refused(dtype, tmp_path):
    docs = _docs(60, 8, 5)
    path = UECIndex(docs, config=IndexConfig(M=8, dtype=dtype)).save(tmp_path / "i.uec")
    arrays, meta = load_arrays(path, index_file._KIND)
    assert arrays["means"].dtype == np.float32 and arrays["means"].shape == (60, 8)
    cases = {
        "missing": {k: v for k, v in arrays.items() if k != "means"},
        "short": dict(arrays, means=arrays["means"][:-1]),
        "float64": dict(arrays, means=arrays["means"].astype(np.float64)),
    }
    for name, edited in cases.items():
        save_raw_arrays(tmp_path / f"{name}.uec", index_file._KIND, edited, meta)
        with pytest.raises(CorruptFileError, match="means"):
            UECIndex.load(tmp_path / f"{name}.uec")
    plain_path = UECIndex(docs, config=IndexConfig(M=8)).save(tmp_path / "p.uec")
    plain, plain_meta = load_arrays(plain_path, index_file._KIND)
    save_raw_arrays(tmp_path / "extra.uec", index_file._KIND, dict(plain, means=arrays["means"]), plain_meta)
    with pytest.raises(CorruptFileError, match="means"):  # a float32 index keeps no means beside its graph
        UECIndex.load(tmp_path / "extra.uec")
    blob = bytearray(path.read_bytes())
    blob[-200] ^= 1
    (tmp_path / "flipped.uec").write_bytes(bytes(blob))
    with pytest.raises(CorruptFileError, match="checksum"):
        UECIndex.load(tmp_path / "flipped.uec", mmap=True)
