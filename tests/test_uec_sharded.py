"""ShardedUECIndex on a dask.distributed LocalCluster equals one local UECIndex."""

import numpy as np
import pytest

distributed = pytest.importorskip("dask.distributed")

from crossembed._rows import unit_rows  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex  # noqa: E402
from crossembed.uec.sharded import ShardedUECIndex  # noqa: E402


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(10, d)))
    x = unit_rows(centers[rng.integers(0, 10, n)] + 0.4 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


@pytest.mark.parametrize("n_shards", [1, 3])
def test_sharded_search_equals_the_local_index(client, n_shards):
    docs, q = _docs(500, 16, 0), _docs(15, 16, 1)
    ids = np.arange(500, dtype=np.int64) * 3 + 7
    local = UECIndex(docs, ids=ids, config=IndexConfig(M=8, ef_construction=60))
    sharded = ShardedUECIndex(client, docs, ids=ids, n_shards=n_shards, config=IndexConfig(M=8, ef_construction=60))
    assert len(sharded) == 500 and min(sharded.shard_sizes()) > 400 / n_shards  # strided ids spread evenly
    s0, i0 = local.search(q, 10, exact=True)
    s1, i1 = sharded.search(q, 10, exact=True)
    np.testing.assert_array_equal(i1, i0)
    np.testing.assert_array_equal(s1, s0)
    # every candidate reranked: the ANN path is exact too, shard by shard
    _, i2 = sharded.search(q, 10, rerank=500, ef=500)
    np.testing.assert_array_equal(i2, i0)
    _, i3 = sharded.search(q, 10, rerank=40)
    assert np.mean([len(set(a) & set(e)) / 10 for a, e in zip(i3, i0)]) >= 0.95
    allowed = ids[::5]
    np.testing.assert_array_equal(
        sharded.search(q, 4, filter=allowed)[1], local.search(q, 4, filter=allowed, exact=True)[1]
    )


def test_sharded_updates_and_files(client, tmp_path):
    docs, extra, q = _docs(300, 8, 2), _docs(40, 8, 3), _docs(6, 8, 4)
    local = UECIndex(docs, config=IndexConfig(M=8))
    sharded = ShardedUECIndex(client, docs, n_shards=2, config=IndexConfig(M=8))
    for index in (local, sharded):
        index.remove(np.arange(0, 300, 4))
        index.add(extra, ids=np.arange(1000, 1040))
        index.upsert(extra[:10], ids=np.arange(5, 15))  # 8, 12 were removed: added back; the others replaced
    assert len(sharded) == len(local) == 300 - 75 + 40 + 2
    np.testing.assert_array_equal(sharded.search(q, 8, exact=True)[1], local.search(q, 8, exact=True)[1])
    paths = sharded.save(str(tmp_path / "shard{shard}.uec"))
    back = ShardedUECIndex.load(client, paths)
    np.testing.assert_array_equal(back.search(q, 8, exact=True)[1], local.search(q, 8, exact=True)[1])
    with pytest.raises(ValueError, match="shard"):
        sharded.save(str(tmp_path / "x.uec"))
    with pytest.raises(TypeError, match="client"):
        ShardedUECIndex(object(), docs)
    with pytest.raises(ValueError, match="no ensemble"):
        sharded.search(["text"], 3)
    for bad in (None, "one text"):  # the same query checks as UECIndex.search
        with pytest.raises(TypeError, match="queries must be"):
            sharded.search(bad, 3)
    with pytest.raises(ValueError, match="dimension"):
        sharded.add(_docs(2, 5, 0), ids=[5000, 5001])


def test_failed_updates_change_nothing(client):
    """An update refused by one shard is refused before any shard applies it."""
    docs, extra, q = _docs(200, 8, 10), _docs(4, 8, 11), _docs(5, 8, 12)
    sharded = ShardedUECIndex(client, docs, n_shards=3, config=IndexConfig(M=8))
    before = sharded.search(q, 7, exact=True)
    with pytest.raises(ValueError, match=r"ids \[150\] are already"):
        sharded.add(extra, ids=[150, 500, 501, 502])  # 500..502 land on other shards than 150
    with pytest.raises(ValueError, match=r"ids \[700\] are not in the index"):
        sharded.remove([1, 2, 3, 700])
    assert len(sharded) == 200
    np.testing.assert_array_equal(sharded.search(q, 7, exact=True)[1], before[1])


def test_k_above_the_live_count_pads(client):
    docs, q = _docs(50, 8, 13), _docs(4, 8, 14)
    local = UECIndex(docs, config=IndexConfig(M=8))
    sharded = ShardedUECIndex(client, docs, n_shards=3, config=IndexConfig(M=8))
    for kwargs in ({"exact": True}, {}):
        s, i = sharded.search(q, 100, **kwargs)
        assert s.shape == i.shape == (4, 100)
        assert (i[:, 50:] == -1).all() and np.isneginf(s[:, 50:]).all()
        np.testing.assert_array_equal(np.sort(i[:, :50], axis=1), np.tile(np.arange(50), (4, 1)))
    np.testing.assert_array_equal(sharded.search(q, 100, exact=True)[0], local.search(q, 100, exact=True)[0])
    s, i = sharded.search(q, 6, filter=[3, 4, 5_000_000], exact=True)  # two allowed documents, on any shards
    assert (i[:, 2:] == -1).all() and np.isneginf(s[:, 2:]).all() and set(i[:, :2].ravel()) == {3, 4}
    s, i = sharded.search(q, 3, filter=[5_000_000])  # allows nothing: all padding, no shard asked
    assert (i == -1).all() and np.isneginf(s).all()
    sharded.remove(np.arange(50))  # every document: allowed, searches pad
    assert len(sharded) == 0 and (sharded.search(q, 2, exact=True)[1] == -1).all()


def test_a_busy_shard_times_out_within_the_bound(client):
    """A call never waits past its timeout: a shard stuck behind another task gives ShardTimeoutError."""
    import time

    from crossembed.uec.sharded import ShardTimeoutError

    docs, q = _docs(100, 8, 15), _docs(3, 8, 16)
    sharded = ShardedUECIndex(client, docs, n_shards=2, config=IndexConfig(M=8))
    busy = client.submit(time.sleep, 2, workers=[sharded.shard_workers()[1]], pure=False)  # one thread per worker
    t0 = time.monotonic()
    with pytest.raises(ShardTimeoutError, match=r"shards \[1\]") as err:
        sharded.search(q, 5, timeout=0.5)
    assert time.monotonic() - t0 < 2.0
    assert isinstance(err.value, RuntimeError) and err.value.workers == [sharded.shard_workers()[1]]
    busy.result()
    assert sharded.search(q, 5)[1].shape == (3, 5)  # the shard answers again
    with pytest.raises(ValueError, match="timeout"):
        sharded.search(q, 5, timeout=0)


def test_shards_score_with_the_given_scoring_or_the_ensembles(client, tmp_path):
    from crossembed.uec import LaplaceEmbedder, UECEnsemble
    from crossembed.uec.ablations import BetaCosineScoring
    from crossembed.uec.routing import LaplaceRouting
    from crossembed.uec.scoring import ProbitScoring

    docs, q = _docs(200, 8, 7), _docs(5, 8, 8)
    beta = ShardedUECIndex(client, docs, n_shards=2, scoring=BetaCosineScoring(0.5), config=IndexConfig(M=8))
    local = UECIndex(docs, scoring=BetaCosineScoring(0.5), config=IndexConfig(M=8))
    np.testing.assert_array_equal(beta.search(q, 6, exact=True)[0], local.search(q, 6, exact=True)[0])
    back = ShardedUECIndex.load(client, beta.save(str(tmp_path / "b{shard}.uec")))
    np.testing.assert_array_equal(back.search(q, 6, exact=True)[1], local.search(q, 6, exact=True)[1])
    rng = np.random.default_rng(9)
    A = unit_rows(rng.normal(size=(40, 8)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 8)))
    ens = UECEnsemble(
        [LaplaceEmbedder(None, batch_size=10).fit_embeddings(A, P)],
        routing=LaplaceRouting(),
        scoring=ProbitScoring(use_variance=False),
    )
    d = ens.combine([e.transform(rng.normal(size=(150, 8))) for e in ens.embedders], role="passage")
    qq = ens.combine([e.transform(rng.normal(size=(4, 8))) for e in ens.embedders])
    assert d.var.max() > 0 and qq.var.max() > 0  # the variances would change the scores
    sharded = ShardedUECIndex(client, d, ensemble=ens, n_shards=2, config=IndexConfig(M=8))
    np.testing.assert_array_equal(
        sharded.search(qq, 5, exact=True)[0],
        UECIndex(d, ensemble=ens, config=IndexConfig(M=8)).search(qq, 5, exact=True)[0],
    )
    assert not np.array_equal(
        sharded.search(qq, 5, exact=True)[0], UECIndex(d, config=IndexConfig(M=8)).search(qq, 5, exact=True)[0]
    )


def test_worker_processes_hold_their_own_shards():
    """Real worker processes (what `dask worker` starts on other machines): inputs and results are pickled."""
    docs, q = _docs(200, 8, 5), _docs(4, 8, 6)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        sharded = ShardedUECIndex(c, docs, config=IndexConfig(M=8))
        assert len(set(sharded.shard_workers())) == 2
        np.testing.assert_array_equal(
            sharded.search(q, 6, exact=True)[1], UECIndex(docs, config=IndexConfig(M=8)).search(q, 6, exact=True)[1]
        )


def test_searches_run_beside_updates(client):
    """Threads search while another adds, upserts and removes: no error, only ids that were in the index."""
    import threading

    docs, extra, q = _docs(300, 8, 17), _docs(200, 8, 18), _docs(8, 8, 19)
    sharded = ShardedUECIndex(client, docs, n_shards=3, config=IndexConfig(M=8))
    local = UECIndex(docs, config=IndexConfig(M=8))
    known = set(range(300)) | set(range(1000, 1200))
    errors, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                ids = sharded.search(q, 10, exact=True)[1]
                assert set(ids.ravel().tolist()) <= known
            except Exception as exc:  # collected for the assertion below
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for step in range(10):
            block = np.arange(1000 + 20 * step, 1020 + 20 * step)
            for index in (sharded, local):
                index.add(extra[block - 1000], ids=block)
                index.upsert(extra[np.arange(100, 105) + step], ids=np.arange(5 * step, 5 * step + 5))
                index.remove([299 - step])
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:3]
    np.testing.assert_array_equal(sharded.search(q, 10, exact=True)[1], local.search(q, 10, exact=True)[1])


def test_stats_add_up_the_shards_and_feed_the_metrics(client):
    """stats() holds each shard's UECIndex.stats (a local index of the same rows and updates) and their sums."""
    from prometheus_client.parser import text_string_to_metric_families

    from crossembed.serve.metrics import ServeMetrics
    from crossembed.uec.sharded import shard_of

    docs, extra = _docs(240, 8, 20), _docs(30, 8, 21)
    config = IndexConfig(M=8, compact_at=None)  # the removed documents stay as deleted slots
    sharded = ShardedUECIndex(client, docs, n_shards=2, config=config)
    removed, added = np.arange(0, 240, 6), np.arange(1000, 1030)
    sharded.remove(removed)
    sharded.add(extra, ids=added)
    locals_ = []
    for s in range(2):
        rows = np.flatnonzero(shard_of(np.arange(240), 2) == s)
        local = UECIndex(docs[rows], ids=rows, config=config)
        local.remove(removed[shard_of(removed, 2) == s])
        mine = np.flatnonzero(shard_of(added, 2) == s)
        local.add(extra[mine], ids=added[mine])
        locals_.append(local.stats())
    stats = sharded.stats()
    assert stats["shards"] == locals_
    assert stats["live"] == len(sharded) == 240 - 40 + 30
    assert stats["deleted"] == 40
    assert stats["capacity"] == sum(s["capacity"] for s in locals_)
    assert stats["bytes"] == {part: sum(s["bytes"][part] for s in locals_) for part in locals_[0]["bytes"]}
    assert stats["bytes"]["graph"] > 0
    text = ServeMetrics(index_stats=sharded.stats, queued=lambda: 0).render().decode()
    samples = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for family in text_string_to_metric_families(text)
        for x in family.samples
    }
    assert samples[("crossembed_documents", ())] == 230 and samples[("crossembed_index_deleted_slots", ())] == 40
    assert samples[("crossembed_index_bytes", (("part", "graph"),))] == stats["bytes"]["graph"]
