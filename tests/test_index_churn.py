"""An index under churn: deleted slots bounded by compaction, every live document reachable, searches during compact()."""

import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from crossembed.ann import MeanGraph
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

_HEADER_BYTES = 96  # hnswlib's file header


def _docs(n, d, seed):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, d)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return GaussianEmbedding(m, np.zeros_like(m))


def _recall(index, qids):
    q = index.get_docs(qids)
    _, exact = index.search(q, 10, exact=True)
    _, ann = index.search(q, 10, rerank=40)
    assert np.array_equal(exact[:, 0], qids)  # every live document is its own top hit
    return float(np.mean([len(np.intersect1d(a, e)) / 10 for a, e in zip(ann, exact)]))


def test_churn_keeps_deleted_slots_bounded_and_every_live_document_reachable():
    rng = np.random.default_rng(0)
    config = IndexConfig(M=8, ef_construction=60, compact_at=0.25)
    index = UECIndex(_docs(1000, 16, 1), config=config, num_threads=2)
    live, next_id = np.arange(1000), 1000
    for r in range(30):
        gone = rng.choice(live, 100, replace=False)
        index.remove(gone)
        index.add(_docs(100, 16, 100 + r), ids=np.arange(next_id, next_id + 100))
        swap = rng.choice(np.setdiff1d(live, gone), 20, replace=False)
        index.upsert(_docs(20, 16, 500 + r), ids=swap)  # replaced documents leave deleted slots too
        live = np.concatenate([np.setdiff1d(live, gone), np.arange(next_id, next_id + 100)])
        next_id += 100
        assert index.wait_for_compaction(timeout=60)
        stats = index.stats()
        assert stats["live"] == len(index) == 1000
        # one update past the bound compacts: at most one batch beyond a quarter of the live set is ever held
        assert stats["deleted"] <= 0.25 * 1000 + 100
    assert len(index.unreachable()) == 0
    assert _recall(index, rng.choice(live, 200, replace=False)) >= 0.99
    np.testing.assert_array_equal(np.sort(index.ids), np.sort(live))


def test_without_compact_at_deleted_slots_stay_until_compact():
    index = UECIndex(_docs(300, 8, 2), config=IndexConfig(M=8, compact_at=None), num_threads=1)
    index.remove(np.arange(200))
    index.add(_docs(50, 8, 3), ids=np.arange(1000, 1050))
    assert index.stats()["deleted"] == 200 and len(index) == 150
    before = index.search(_docs(5, 8, 4), 5, exact=True)
    index.compact()
    stats = index.stats()
    assert stats["deleted"] == 0 and stats["live"] == 150 and stats["capacity"] == 150
    after = index.search(_docs(5, 8, 4), 5, exact=True)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(np.sort(index.ids), np.r_[np.arange(200, 300), np.arange(1000, 1050)])


def test_compact_at_is_validated():
    for bad in (0, -0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="compact_at"):
            IndexConfig(compact_at=bad)
    for bad in ("0.2", True):
        with pytest.raises(TypeError, match="compact_at"):
            IndexConfig(compact_at=bad)
    assert IndexConfig(compact_at=1).compact_at == 1.0 and IndexConfig(**IndexConfig().get_config()) == IndexConfig()


def _cut_bottom_links(graph, tmp_path):
    """``graph`` with every bottom-layer link list emptied (upper layers kept): a graph whose nodes mostly cannot
    be reached, loaded as a new MeanGraph."""
    path = tmp_path / "graph.bin"
    graph.save(path)
    raw = bytearray(path.read_bytes())
    count, size = (int(v) for v in np.frombuffer(bytes(raw[16:32]), "<u8"))
    for i in range(count):
        at = _HEADER_BYTES + i * size
        raw[at : at + 2] = b"\0\0"  # the list's uint16 count; the deleted mark (third byte) stays
    path.write_bytes(bytes(raw))
    return MeanGraph.load(path, dim=graph.dim, storage=graph.storage)


def test_unreachable_finds_cut_off_nodes_and_compact_repairs_them(tmp_path):
    index = UECIndex(_docs(400, 8, 5), config=IndexConfig(M=8), num_threads=1)
    index.remove(np.arange(0, 400, 10))  # deleted nodes, not yet compacted (40 < 0.25 * 360)
    assert len(index.unreachable()) == 0
    cut = _cut_bottom_links(index._graph, tmp_path)
    assert 0 < len(cut.unreachable()) < cut.count
    index._graph.take(cut)  # a damaged graph, as a bug in concurrent linking would leave it
    lost = index.unreachable()
    assert len(lost) > 300 and not np.isin(lost, np.arange(0, 400, 10)).any()  # deleted nodes are not counted
    index.compact()
    assert len(index.unreachable()) == 0 and index.stats()["deleted"] == 0
    _, ann = index.search(index.get_docs(lost[:20]), 1, rerank=10)
    np.testing.assert_array_equal(ann[:, 0], lost[:20])


def test_searches_run_through_compactions_saves_and_concurrent_updates(tmp_path):
    rng = np.random.default_rng(6)
    index = UECIndex(_docs(1500, 16, 7), config=IndexConfig(M=8, ef_construction=40), num_threads=1)
    stable = np.arange(0, 1500, 2)  # never removed: each must stay its own top hit in every search
    churn, next_id = np.arange(1, 1500, 2), 10_000
    queries = index.get_docs(stable[:50])
    stop, errors, searched = threading.Event(), [], [0]

    def search():
        while not stop.is_set():
            try:
                _, ids = index.search(queries, 1, rerank=30)
                assert np.array_equal(ids[:, 0], stable[:50]), "a stable document was lost"
                searched[0] += 1
            except Exception as exc:  # reported below, in the main thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for r in range(8):
            gone = rng.choice(churn, 150, replace=False)
            index.remove(gone)
            new = np.arange(next_id, next_id + 150)
            index.add(_docs(150, 16, 50 + r), ids=new)
            churn, next_id = np.concatenate([np.setdiff1d(churn, gone), new]), next_id + 150
            if r % 3 == 2:
                index.compact()
            if r % 3 == 1:
                index.save(tmp_path / "during.uec")  # waits for updates, not for the searchers
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert searched[0] > 0 and len(index) == 1500
    assert len(index.unreachable()) == 0
    saved = UECIndex.load(tmp_path / "during.uec")
    assert len(saved) == 1500 and np.isin(stable, saved.ids).all()


def test_updates_go_on_while_a_compaction_builds_and_land_in_its_graph(monkeypatch):
    """The update past compact_at starts the rebuild and returns; updates made during it are replayed onto
    the new graph, so after the swap the index holds exactly what they left, none of it lost. The build
    reads the old graph's rows in small parts here, so most removals come before their rows are read."""
    monkeypatch.setattr("crossembed.uec.writer._COMPACT_ROWS", 500)
    rng = np.random.default_rng(10)
    n = 8_000
    index = UECIndex(_docs(n, 32, 11), config=IndexConfig(M=16, ef_construction=200), num_threads=1)
    began = time.perf_counter()
    index.remove(np.arange(0, n, 3))  # 6,667 > 0.25 * 13,333: starts the compaction and returns
    assert time.perf_counter() - began < 1.0 and index.stats()["compacting"]
    live = set(range(n)) - set(range(0, n, 3))
    added = _docs(50, 32, 12)
    index.add(added, ids=np.arange(n, n + 50))
    gone = rng.choice(sorted(live), 40, replace=False)
    index.remove(gone)
    swapped = np.array(sorted(live - set(gone.tolist())))[:30]
    new_rows = _docs(30, 32, 13)
    index.upsert(new_rows, ids=swapped)
    index.remove(np.arange(n + 40, n + 50))  # documents added during the build, removed during it
    live = (live - set(gone.tolist())) | set(range(n, n + 40))
    assert index.stats()["compacting"], "the build ended before the updates: make it longer"
    assert index.wait_for_compaction(timeout=300)
    stats = index.stats()
    assert not stats["compacting"] and stats["live"] == len(live) == len(index)
    assert stats["deleted"] == 40 + 30 + 10  # the removes and replacements replayed onto the new graph
    np.testing.assert_array_equal(np.sort(index.ids), np.array(sorted(live)))
    np.testing.assert_array_equal(index.get_docs(swapped).mean, new_rows.mean)
    np.testing.assert_array_equal(index.get_docs(np.arange(n, n + 40)).mean, added.mean[:40])
    assert len(index.unreachable()) == 0
    probe = np.concatenate([swapped, np.arange(n, n + 40), rng.choice(sorted(live), 100, replace=False)])
    assert _recall(index, probe) >= 0.99


def test_a_process_that_exits_during_a_compaction_waits_for_it():
    script = textwrap.dedent(
        """
        import numpy as np
        from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex
        m = np.random.default_rng(0).standard_normal((4000, 32)).astype(np.float32)
        index = UECIndex(GaussianEmbedding(m, np.zeros_like(m)), config=IndexConfig(M=16), num_threads=1)
        index.remove(np.arange(2000))  # the build of the other 2,000 takes far longer than the next line
        print(index.stats()["compacting"])
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.split() == ["True"], run.stderr


def test_a_compacted_index_saves_and_loads(tmp_path):
    index = UECIndex(_docs(200, 8, 8), texts=[f"t{i}" for i in range(200)], config=IndexConfig(M=8))
    index.remove(np.arange(100))  # starts a compaction (100 > 0.25 * 100)
    assert index.wait_for_compaction(timeout=60) and index.stats()["deleted"] == 0
    index.save(tmp_path / "i")
    back = UECIndex.load(tmp_path / "i")
    assert back.texts == [f"t{i}" for i in range(100, 200)] and back.stats()["deleted"] == 0 and len(back) == 100
    np.testing.assert_array_equal(back.ids, np.arange(100, 200))


def test_metrics_report_what_the_index_holds():
    pytest.importorskip("fastapi")
    pytest.importorskip("prometheus_client")
    from crossembed.serve import create_app

    index = UECIndex(_docs(300, 8, 9), config=IndexConfig(M=8, compact_at=None))
    index.remove(np.arange(40))
    text = create_app(index).state.service.metrics.render().decode()
    assert re.search(r"^crossembed_documents 260\.0$", text, re.M)
    assert re.search(r"^crossembed_index_deleted_slots 40\.0$", text, re.M)
    assert re.search(r"^crossembed_index_compacting 0\.0$", text, re.M)
    graph_bytes = index.stats()["bytes"]["graph"]
    graph = re.search(r'^crossembed_index_bytes\{part="graph"\} (\S+)$', text, re.M)
    assert graph and float(graph.group(1)) == graph_bytes
    rss = re.search(r"^process_resident_memory_bytes (\S+)$", text, re.M)
    assert rss and float(rss.group(1)) > graph_bytes
