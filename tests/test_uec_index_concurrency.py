"""UECIndex under concurrent searches and updates; k above the live count; upsert."""

import threading
import time

import numpy as np
import pytest

from crossembed._rows import unit_rows
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex
from crossembed.uec import rerank as rerank_mod
from crossembed.uec import writer as writer_mod
from crossembed.uec.locking import ReadWriteLock


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


def _fresh_exact(docs, ids, q, k):
    return UECIndex(docs, ids=ids, config=IndexConfig(M=8)).search(q, k, exact=True)


def test_k_above_the_live_count_pads_with_minus_one_and_minus_inf():
    docs, q = _docs(50, 16, 0), _docs(4, 16, 1)
    index = UECIndex(docs, ids=np.arange(50) + 7, config=IndexConfig(M=8))
    for exact in (False, True):
        s, i = index.search(q, 100, exact=exact)
        assert s.shape == i.shape == (4, 100) and s.dtype == np.float32
        np.testing.assert_array_equal(np.sort(i[:, :50], axis=1), np.tile(np.arange(50) + 7, (4, 1)))
        assert (i[:, 50:] == -1).all() and np.isneginf(s[:, 50:]).all()
        s10, i10 = index.search(q, 10, exact=True)
        np.testing.assert_array_equal(i[:, :10], i10)
        np.testing.assert_array_equal(s[:, :10], s10)
    assert (index.candidates(q, 80)[:, 50:] == -1).all()


def test_an_emptied_index_answers_padding_and_refills():
    docs, q = _docs(30, 8, 2), _docs(3, 8, 3)
    index = UECIndex(docs, config=IndexConfig(M=8))
    index.remove(np.arange(30))
    assert len(index) == 0
    for exact in (False, True):
        s, i = index.search(q, 5, exact=exact)
        assert (i == -1).all() and np.isneginf(s).all()
    assert (index.candidates(q, 4) == -1).all()
    index.add(docs[:5], ids=[100, 101, 102, 103, 104])
    np.testing.assert_array_equal(index.search(q, 5)[1], _fresh_exact(docs[:5], np.arange(100, 105), q, 5)[1])


def test_upsert_replaces_existing_ids_and_adds_new_ones():
    docs, q = _docs(400, 16, 4), _docs(20, 16, 5)
    new = _docs(100, 16, 6)
    index = UECIndex(docs, config=IndexConfig(M=8, ef_construction=60))
    ids = np.concatenate([np.arange(350, 400), np.arange(1000, 1050)])  # 50 replaced, 50 new
    assert np.array_equal(index.upsert(new, ids=ids), ids)
    assert len(index) == 450
    mean = np.concatenate([docs.mean[:350], new.mean])
    var = np.concatenate([docs.var[:350], new.var])
    final_ids = np.concatenate([np.arange(350), ids])
    expected = _fresh_exact(GaussianEmbedding(mean, var), final_ids, q, 10)
    for got in (index.search(q, 10, exact=True), index.search(q, 10, rerank=450, ef=450)):
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(index.get_docs([399]).mean, new.mean[49:50])
    with pytest.raises(ValueError, match="repeated"):
        index.upsert(new[:2], ids=[5, 5])
    with pytest.raises(TypeError, match="ids"):
        index.upsert(new[:1], ids=["a"])


def test_upsert_keeps_texts_in_step():
    docs = _docs(10, 8, 7)
    index = UECIndex(docs, texts=[f"t{i}" for i in range(10)], config=IndexConfig(M=8))
    index.upsert(docs[:2], ids=[3, 42], texts=["three", "forty-two"])
    assert index.get_texts([3, 42, 4, 77]) == ["three", "forty-two", "t4", None]
    with pytest.raises(ValueError, match="texts"):
        index.upsert(docs[:1], ids=[1])


def _hammer(index, q, k, n_readers, writer, seconds_cap=60.0):
    """Run ``writer(ever)`` once while ``n_readers`` threads search; returns (errors, foreign ids seen, searches).

    ``ever`` holds the ids ever in the index (and -1, the padding); the writer adds ids to it before adding them.
    """
    errors, foreign, count = [], [], [0]
    done = threading.Event()
    ever = set(index.ids.tolist()) | {-1}

    def read():
        try:
            while not done.is_set():
                for exact in (False, True):
                    s, i = index.search(q, k, exact=exact, rerank=30)
                    seen = set(np.unique(i).tolist())
                    if not seen <= ever:
                        foreign.append(seen - ever)
                    if not np.all(np.diff(s, axis=1) <= 0):
                        errors.append("scores not sorted")
                    count[0] += 1
        except Exception as exc:  # reported by the test
            errors.append(repr(exc))

    readers = [threading.Thread(target=read) for _ in range(n_readers)]
    for th in readers:
        th.start()
    try:
        writer(ever)
    finally:
        done.set()
        for th in readers:
            th.join(seconds_cap)
    return errors, foreign, count[0]


def test_searches_during_adds_removes_and_upserts_see_consistent_states(monkeypatch):
    monkeypatch.setattr(writer_mod, "_WRITE_CHUNK_MAX", 64)  # many chunks: searches interleave with each update
    base, q = _docs(2000, 16, 8), _docs(16, 16, 9)
    pool = _docs(3000, 16, 10)
    index = UECIndex(base, num_threads=1, config=IndexConfig(M=8, ef_construction=40))
    state = {i: (base.mean[i], base.var[i]) for i in range(2000)}
    rng = np.random.default_rng(11)

    def writer(ever):
        next_id = 5000
        for step in range(30):
            rows = rng.choice(3000, 150, replace=False)
            op = step % 3
            if op == 0:  # add new ids
                ids = np.arange(next_id, next_id + 150)
                next_id += 150
                ever.update(ids.tolist())  # announced before they can appear
                index.add(GaussianEmbedding(pool.mean[rows], pool.var[rows]), ids=ids)
            elif op == 1:  # remove some live ids
                ids = rng.choice(sorted(state), 150, replace=False)
                index.remove(ids)
            else:  # upsert: half live ids, half new
                live = rng.choice(sorted(state), 75, replace=False)
                ids = np.concatenate([live, np.arange(next_id, next_id + 75)])
                next_id += 75
                ever.update(ids.tolist())
                index.upsert(GaussianEmbedding(pool.mean[rows], pool.var[rows]), ids=ids)
            for j, i in enumerate(ids):
                if op == 1:
                    state.pop(int(i))
                else:
                    state[int(i)] = (pool.mean[rows[j]], pool.var[rows[j]])

    errors, foreign, searches = _hammer(index, q, 20, 3, writer)
    assert not errors, errors[:3]
    assert not foreign, foreign[:3]
    assert searches > 10
    ids = np.array(sorted(state))
    final = GaussianEmbedding(np.stack([state[i][0] for i in ids]), np.stack([state[i][1] for i in ids]))
    expected = _fresh_exact(final, ids, q, 20)
    got = index.search(q, 20, exact=True)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert sorted(index.ids.tolist()) == ids.tolist()


def test_a_search_sees_a_state_the_index_was_in():
    # Each add is one chunk here, so every search must see either none or all of a pair of ids added
    # together; the pair sits at the query itself, so both are in its top 2 once added.
    base, q = _docs(500, 16, 12), _docs(1, 16, 13)
    index = UECIndex(base, num_threads=1, config=IndexConfig(M=8))
    pair = GaussianEmbedding(np.repeat(q.mean, 2, 0), np.zeros((2, 16), np.float32))
    torn = []

    def writer(ever):
        for r in range(40):
            ids = [10_000 + 2 * r, 10_001 + 2 * r]
            ever.update(ids)
            index.add(pair, ids=ids)
            index.remove(ids)

    def check():
        try:
            while not done.is_set():
                i = index.search(q, 2, exact=True)[1][0]
                if (i >= 10_000).sum() == 1:
                    torn.append(i.tolist())
        except Exception as exc:  # reported by the assertion below
            torn.append(repr(exc))

    done = threading.Event()
    th = threading.Thread(target=check)
    th.start()
    errors, foreign, _ = _hammer(index, q, 5, 1, writer)
    done.set()
    th.join(30)
    assert not errors and not foreign and not torn


def test_readers_writer_lock_excludes_writers_and_prefers_them():
    lock, log = ReadWriteLock(), []
    inside = threading.Event()
    release = threading.Event()

    def reader(name, hold):
        with lock.read():
            log.append(f"{name} in")
            if hold:
                inside.set()
                release.wait(5)
            log.append(f"{name} out")

    def writer():
        with lock.write():
            log.append("w in")
            log.append("w out")

    r1 = threading.Thread(target=reader, args=("r1", True))
    r1.start()
    inside.wait(5)
    w = threading.Thread(target=writer)
    w.start()
    time.sleep(0.1)  # the writer is now waiting behind r1
    r2 = threading.Thread(target=reader, args=("r2", False))
    r2.start()
    time.sleep(0.1)
    assert log == ["r1 in"]  # r2 waits behind the waiting writer; the writer behind r1
    release.set()
    for th in (r1, w, r2):
        th.join(5)
    assert log == ["r1 in", "r1 out", "w in", "w out", "r2 in", "r2 out"]


def test_searches_after_an_update_rebuild_panels_only_once_they_pay(monkeypatch):
    monkeypatch.setattr(rerank_mod, "_BLOCK", 256)  # 8 blocks
    monkeypatch.setattr(rerank_mod, "_ROWS_PER_CACHED_BLOCK", 16)  # blocks pay from 8 x 16 = 128 candidate rows
    docs, q = _docs(2048, 16, 14), _docs(64, 16, 15)
    index = UECIndex(docs, config=IndexConfig(M=8, ef_construction=40, rerank=8))
    expected = index.search(q, 5)
    assert len(index._panels) == 0  # 64 x 8 candidates < 2048 rows: nothing packed ahead of need
    for s in range(0, 64, 2):  # 16 rows a search: too few for blocks to pay, so they never count
        np.testing.assert_array_equal(index.search(q[s : s + 2], 5)[1], expected[1][s : s + 2])
    assert len(index._panels) == 0
    for _ in range(2):
        index.search(q, 5)
    assert len(index._panels) == 0  # 3 x 512 rows packed so far, fewer than the index's 2048
    got = index.search(q, 5)  # the fourth: the packing has paid for the blocks
    assert len(index._panels) == 8
    np.testing.assert_array_equal(got[1], expected[1])
    index.remove([3])  # drops block 0 only
    assert len(index._panels) == 7
    index.search(q[:1], 5)
    assert len(index._panels) == 7  # 8 candidate rows do not pay for packing 255


def test_ids_filters_and_candidate_counts_are_named_when_malformed():
    docs, q = _docs(40, 8, 16), _docs(2, 8, 17)
    index = UECIndex(docs, config=IndexConfig(M=8))
    for bad in ([[1, 2], [3]], [1, [2, 3]]):
        with pytest.raises(ValueError, match="filter must be a rectangular"):
            index.search(q, 3, filter=bad)
        with pytest.raises(ValueError, match="ids must be a rectangular"):
            index.remove(bad)
    for name in ("rerank", "ef"):
        with pytest.raises(ValueError, match=f"{name} must be <="):
            index.search(q, 3, **{name: 2**64})
    with pytest.raises(ValueError, match="M must be <="):
        UECIndex(docs, config=IndexConfig(M=2**64))
    with pytest.raises(ValueError, match="k=.* too large"):
        index.search(q, 2**70)
    assert len(index) == 40


def test_readers_waiting_at_a_writers_release_go_before_its_next_hold():
    lock, log = ReadWriteLock(), []
    holding = threading.Event()
    go = threading.Event()

    def writer():
        for chunk in range(3):  # one update in three chunks, each taking the lock again at once
            with lock.write():
                log.append(f"w{chunk}")
                if chunk == 0:
                    holding.set()
                    go.wait(5)

    def reader(name):
        with lock.read():
            log.append(name)

    w = threading.Thread(target=writer)
    w.start()
    holding.wait(5)
    readers = [threading.Thread(target=reader, args=(f"r{i}",)) for i in range(2)]
    for th in readers:
        th.start()
    time.sleep(0.1)  # both readers now wait behind the first chunk
    go.set()
    for th in [w, *readers]:
        th.join(5)
    assert log[0] == "w0" and sorted(log[1:3]) == ["r0", "r1"] and log[3:] == ["w1", "w2"]


def test_chunks_grow_while_nobody_searches_and_shrink_when_searches_come(monkeypatch):
    """A chunk after one during which nobody read the index is sized for the idle hold; after one during
    which someone did, for the short hold (the sizes follow the measured time a row)."""
    monkeypatch.setattr(writer_mod, "_WRITE_CHUNK_FIRST", 4)
    monkeypatch.setattr(writer_mod, "_WRITE_HOLD_S", 1e-9)  # one row a chunk once searches come
    monkeypatch.setattr(writer_mod, "_WRITE_HOLD_IDLE_S", 10.0)  # the largest chunk while none come
    index = UECIndex(_docs(50, 16, 40), config=IndexConfig(M=8))
    sizes, busy = [], []

    def record(n, apply, chunk=None):
        def spy(part):
            sizes.append(part.stop - part.start)
            if busy:
                index._writer.lock.reads += 1  # what a search arriving during this chunk leaves behind
            apply(part)

        return writer_mod.IndexWriter.chunked(index._writer, n, spy, chunk)

    monkeypatch.setattr(index._writer, "chunked", record)
    index.add(_docs(300, 16, 41))
    assert sizes == [4, 296]  # nobody read: the rest in one chunk
    sizes.clear()
    busy.append(True)
    index.add(_docs(6, 16, 42))
    assert sizes == [4, 1, 1]  # searches came: one row a chunk
