"""ShardedUECIndex when a worker process dies: a bounded, clear error, or the shard reloaded and replayed.

A LocalCluster of three worker processes (one thread each); a worker is
killed with SIGKILL, as the OOM killer or a lost machine would. Its Nanny
starts a fresh process under a new address, so Dask tasks pinned to the old
address would wait forever: the index must notice and answer within its bound.
"""

import os
import signal
import time

import numpy as np
import pytest

distributed = pytest.importorskip("dask.distributed")

from crossembed._rows import unit_rows  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex  # noqa: E402
from crossembed.uec.sharded import ShardedUECIndex, ShardLostError, shard_of  # noqa: E402

pytestmark = pytest.mark.timeout(120)  # a regression to waiting forever fails here instead of hanging the suite

BOUND_S = 30.0  # the index's timeout in these tests; losses must be reported well within it


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


@pytest.fixture(scope="module")
def processes():
    """Three worker processes; a killed one is restarted by its Nanny under a new address."""
    cluster = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        yield c


def _kill(client, address):
    """SIGKILL the worker process at ``address`` and wait until the scheduler has dropped it."""
    os.kill(client.run(os.getpid)[address], signal.SIGKILL)
    t0 = time.monotonic()
    while address in client.nthreads():
        assert time.monotonic() - t0 < 20, f"the scheduler still lists {address}"
        time.sleep(0.05)


class _Mirror:
    """The documents the sharded index should hold, kept on the driver to build the local reference."""

    def __init__(self, docs, ids):
        self.rows = {int(i): (docs.mean[r], docs.var[r]) for r, i in enumerate(ids)}

    def put(self, docs, ids):
        self.rows.update({int(i): (docs.mean[r], docs.var[r]) for r, i in enumerate(ids)})

    def drop(self, ids):
        for i in ids:
            del self.rows[int(i)]

    def index(self):
        ids = np.array(sorted(self.rows), np.int64)
        mean = np.stack([self.rows[i][0] for i in ids])
        var = np.stack([self.rows[i][1] for i in ids])
        return UECIndex(GaussianEmbedding(mean, var), ids=ids, config=IndexConfig(M=8))


def test_a_lost_shard_never_saved_raises_a_clear_error_promptly(processes):
    docs, q = _docs(300, 8, 0), _docs(5, 8, 1)
    sharded = ShardedUECIndex(processes, docs, n_shards=3, timeout=BOUND_S, config=IndexConfig(M=8))
    assert sharded.search(q, 5, exact=True)[1].shape == (5, 5)
    victim = sharded.shard_workers()[1]
    _kill(processes, victim)
    t0 = time.monotonic()
    with pytest.raises(ShardLostError, match=r"shards \[1\].*never saved.*save\(pattern\)") as err:
        sharded.search(q, 5, exact=True)
    elapsed = time.monotonic() - t0
    assert elapsed < 5.0, f"the loss took {elapsed:.1f} s to report (bound {BOUND_S} s)"
    assert isinstance(err.value, RuntimeError)
    assert err.value.shards == [1] and err.value.workers == [victim] and victim in str(err.value)
    t0 = time.monotonic()
    with pytest.raises(ShardLostError, match="never saved"):  # updates too, and again, within the bound
        sharded.add(_docs(30, 8, 2), ids=np.arange(1000, 1030))
    assert time.monotonic() - t0 < 5.0


def test_a_lost_shard_is_reloaded_and_its_updates_replayed(processes, tmp_path):
    docs, more, q = _docs(400, 8, 3), _docs(120, 8, 4), _docs(12, 8, 5)
    ids = np.arange(400, dtype=np.int64) * 7 + 3
    mirror = _Mirror(docs, ids)
    sharded = ShardedUECIndex(processes, docs, ids=ids, n_shards=3, timeout=BOUND_S, config=IndexConfig(M=8))
    sharded.save(str(tmp_path / "shard{shard}.uec"))
    # updates after the save, on every shard: only the driver's log holds them
    sharded.add(more[:60], ids=np.arange(5000, 5060))
    mirror.put(more[:60], np.arange(5000, 5060))
    sharded.remove(ids[::5])
    mirror.drop(ids[::5])
    upserted = np.concatenate([ids[1:40:3], np.arange(6000, 6010)])  # replaced and new
    sharded.upsert(more[60 : 60 + len(upserted)], ids=upserted)
    mirror.put(more[60 : 60 + len(upserted)], upserted)
    assert all(np.isin(np.arange(3), shard_of(np.arange(5000, 5060), 3)))

    expected = mirror.index().search(q, 15, exact=True)
    victim = sharded.shard_workers()[0]
    _kill(processes, victim)
    t0 = time.monotonic()
    scores, got = sharded.search(q, 15, exact=True)  # reloaded from shard0.uec, the log replayed, retried
    assert time.monotonic() - t0 < BOUND_S / 2
    np.testing.assert_array_equal(got, expected[1])
    np.testing.assert_array_equal(scores, expected[0])
    assert sharded.shard_workers()[0] != victim and victim not in sharded.shard_workers()
    assert len(sharded) == len(mirror.rows)

    # an update after the recovery joins the log; a second loss, met by an update, replays it too
    sharded.upsert(more[100:110], ids=np.arange(7000, 7010))
    mirror.put(more[100:110], np.arange(7000, 7010))
    _kill(processes, sharded.shard_workers()[0])
    sharded.remove(np.arange(5000, 5030))  # interrupted by the loss: recovered, then applied
    mirror.drop(np.arange(5000, 5030))
    expected = mirror.index().search(q, 15, exact=True)
    np.testing.assert_array_equal(sharded.search(q, 15, exact=True)[1], expected[1])
    s, i = sharded.search(q, len(mirror.rows) + 5, exact=True)  # k above the live count pads after recovery too
    assert (i[:, -5:] == -1).all() and np.isneginf(s[:, -5:]).all()


def test_loaded_shards_are_recoverable_without_a_save(processes, tmp_path):
    docs, q = _docs(200, 8, 6), _docs(4, 8, 7)
    paths = ShardedUECIndex(processes, docs, n_shards=2, config=IndexConfig(M=8)).save(str(tmp_path / "s{shard}.uec"))
    sharded = ShardedUECIndex.load(processes, paths, timeout=BOUND_S)
    sharded.remove(np.arange(0, 200, 3))
    _kill(processes, sharded.shard_workers()[1])
    local = UECIndex(
        docs[np.arange(200) % 3 != 0], ids=np.flatnonzero(np.arange(200) % 3 != 0), config=IndexConfig(M=8)
    )
    np.testing.assert_array_equal(sharded.search(q, 9, exact=True)[1], local.search(q, 9, exact=True)[1])


def _free_port_pair():
    """Two consecutive free TCP ports on 127.0.0.1 (the restarted worker gets its old port back)."""
    import socket

    for base in range(42000, 43000, 2):
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", base))
                b.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base
    pytest.skip("no two consecutive free ports")


def test_a_shard_rebuilt_by_dask_on_a_restarted_worker_is_never_served_stale(tmp_path):
    """Workers on fixed ports come back under the same address; Dask then recomputes the shard from its
    original build task (without the later updates). The update count the driver sends catches it."""
    docs, more, q = _docs(300, 8, 8), _docs(30, 8, 9), _docs(5, 8, 10)
    base = _free_port_pair()
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", worker_port=f"{base}:{base + 1}"
    )
    with cluster, distributed.Client(cluster) as client:
        sharded = ShardedUECIndex(client, docs, n_shards=2, timeout=BOUND_S, config=IndexConfig(M=8))
        sharded.save(str(tmp_path / "s{shard}.uec"))
        sharded.add(more, ids=np.arange(1000, 1030))
        victim = sharded.shard_workers()[0]
        _kill(client, victim)
        t0 = time.monotonic()
        while victim not in client.nthreads():
            assert time.monotonic() - t0 < 30, "the worker did not come back"
            time.sleep(0.05)
        all_ids = np.r_[np.arange(300), np.arange(1000, 1030)]
        both = GaussianEmbedding(np.vstack([docs.mean, more.mean]), np.vstack([docs.var, more.var]))
        expected = UECIndex(both, ids=all_ids, config=IndexConfig(M=8)).search(q, 40, exact=True)[1]
        np.testing.assert_array_equal(sharded.search(q, 40, exact=True)[1], expected)
        assert len(sharded) == 330


def test_a_shard_file_no_worker_can_read_gives_a_clear_error(processes, tmp_path):
    docs, q = _docs(150, 8, 11), _docs(3, 8, 12)
    sharded = ShardedUECIndex(processes, docs, n_shards=3, timeout=BOUND_S, config=IndexConfig(M=8))
    paths = sharded.save(str(tmp_path / "u{shard}.uec"))
    os.remove(paths[2])
    _kill(processes, sharded.shard_workers()[2])
    t0 = time.monotonic()
    with pytest.raises(ShardLostError, match=r"shards \[2\] could not be reloaded.*FileNotFoundError.*every worker"):
        sharded.search(q, 4)
    assert time.monotonic() - t0 < 5.0
