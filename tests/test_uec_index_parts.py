"""The parts a UECIndex is made of, each on its own: IndexConfig, IndexWriter, PanelCache, RerankPlanner, IndexFile."""

import dataclasses

import numpy as np
import pytest

from crossembed import reference
from crossembed._rows import unit_rows
from crossembed.ann import MeanGraph
from crossembed.uec import GaussianEmbedding, IndexConfig
from crossembed.uec import rerank as rerank_mod
from crossembed.uec.index_file import IndexFile
from crossembed.uec.rerank import PanelCache, RerankPlanner
from crossembed.uec.scoring import ProbitScoring
from crossembed.uec.store import DocStore
from crossembed.uec.writer import IndexWriter


def _docs(n, d, seed, var=0.02):
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.normal(size=(n, d))).astype(np.float32)
    return GaussianEmbedding(x, (var * rng.random((n, d))).astype(np.float32))


def _parts(docs, budget=1 << 30):
    """A store, graph, cache, planner and writer over ``docs`` (ids 0..n-1), composed as UECIndex composes them."""
    store = DocStore.empty(docs.dim, "float32", capacity=len(docs), keep_texts=False)
    graph = MeanGraph(docs.dim, max_elements=len(docs), M=8, random_seed=0)
    cache = PanelCache(store, graph, ProbitScoring(), budget)
    changed = []

    def on_change(slots):
        changed.append(np.array(slots))
        cache.forget(slots)

    def new_graph(capacity):
        return MeanGraph(docs.dim, max_elements=capacity, M=8, random_seed=0)

    writer = IndexWriter(store, graph, on_change=on_change, new_graph=new_graph, num_threads=1)
    writer.insert(docs, np.arange(len(docs), dtype=np.int64), None, chunk=len(docs))
    return store, graph, cache, RerankPlanner(store, graph, cache), writer, changed


def test_index_config_is_validated_once_frozen_and_rebuilt_from_its_config():
    config = IndexConfig(M=8, dtype=np.float16, random_state=np.random.default_rng(0))
    assert config.dtype == "float16" and isinstance(config.random_state, int)
    assert IndexConfig(**config.get_config()) == config and hash(config) == hash(IndexConfig(**config.get_config()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.M = 16
    for bad in ({"M": 1}, {"ef_construction": 0}, {"rerank": 0}, {"dtype": "int4"}, {"panel_cache_bytes": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            IndexConfig(**bad)
    with pytest.raises(ValueError, match="random_state"):
        IndexConfig(random_state=-1)


def test_writer_applies_updates_in_chunks_and_reports_the_slots_it_changed():
    docs = _docs(40, 8, 0)
    store, graph, cache, planner, writer, changed = _parts(docs[:30])
    assert len(store) == 30 and graph.count == 30 and np.array_equal(changed[0], np.arange(30))
    writer.remove([3, 4])
    assert np.array_equal(changed[-1], [3, 4]) and graph.deleted_count == 2
    ids = writer.add(docs[30:33], None, None)  # new slots: removed ones stay deleted until a compaction
    assert np.array_equal(ids, [30, 31, 32]) and np.array_equal(changed[-1], [30, 31, 32])
    writer.upsert(docs[33:35], [0, 99], None)  # one replaced (its slot deleted, a new one taken), one added
    assert np.array_equal(changed[-2], [0, 33]) and np.array_equal(changed[-1], [34])
    assert store.contains(np.array([0, 99])).all() and len(store) == 32 and store.deleted == graph.deleted_count == 3
    writer.compact()
    assert store.n_slots == graph.count == 32 and store.deleted == graph.deleted_count == 0
    assert np.array_equal(changed[-1], np.arange(35)) and len(store.ids) == 32
    np.testing.assert_array_equal(graph.rows(store.slots_of(np.array([0, 99]))), docs.mean[33:35])
    with pytest.raises(ValueError, match="already in the index"):
        writer.add(docs[35:36], [1], None)
    sizes = []
    writer.chunked(100, lambda part: sizes.append(part.stop - part.start), chunk=30)
    assert sizes == [30, 30, 30, 10]
    writer.reserve(500)
    assert store.capacity == 500 and graph.max_elements == 500


def test_planner_answers_exact_and_ann_searches_and_pads_them():
    docs, q = _docs(200, 8, 1), _docs(6, 8, 2)
    store, graph, cache, planner, writer, _ = _parts(docs)
    expected = np.argsort(-reference.probit_scores(q.mean, q.var, docs.mean, docs.var), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(planner.search(q, 5, 5, 10, None, exact=True, nt=1)[1], expected)
    np.testing.assert_array_equal(planner.search(q, 5, 200, 400, None, exact=False, nt=1)[1], expected)
    s, i = planner.search(q, 5, 5, 10, np.array([7, 9, 1000]), exact=False, nt=1)  # two allowed: then padding
    assert set(i[0, :2]) == {7, 9} and (i[:, 2:] == -1).all() and np.isneginf(s[:, 2:]).all()


def test_panel_cache_rebuilds_missing_blocks_once_the_rows_packed_pay_for_them(monkeypatch):
    monkeypatch.setattr(rerank_mod, "_BLOCK", 50)
    monkeypatch.setattr(rerank_mod, "_ROWS_PER_CACHED_BLOCK", 10)
    docs = _docs(200, 8, 3)
    store, graph, cache, planner, writer, _ = _parts(docs)
    assert cache.fits() and [b for b, _ in cache.live_blocks()] == [0, 1, 2, 3]
    assert not cache.worth_using(39)  # fewer than 10 rows a block: never, and not counted
    assert not cache.worth_using(120) and not cache.worth_using(40)  # 160 rows packed of the 200 missing
    assert cache.worth_using(40)  # 200: the rebuild has paid
    planner.search(_docs(3, 8, 4), 5, 5, 10, None, exact=True, nt=1)  # builds the blocks
    assert len(cache) == 4 and cache.worth_using(40)
    writer.remove([60])  # block 1 changes: dropped
    assert len(cache) == 3 and not cache.worth_using(40)
    assert not PanelCache(store, graph, ProbitScoring(), 0).fits()  # no budget: nothing kept


def test_index_file_round_trip_gives_back_every_part(tmp_path):
    docs, q = _docs(120, 8, 5), _docs(4, 8, 6)
    store, graph, cache, planner, writer, _ = _parts(docs)
    writer.remove([2, 50])
    config = IndexConfig(M=8, rerank=7, random_state=0)
    IndexFile(store, graph, config, ProbitScoring(use_variance=False), None).write(tmp_path / "p.uec")
    back = IndexFile.read(tmp_path / "p.uec")
    assert back.config == config and back.ensemble is None
    assert back.scoring.get_config() == ProbitScoring(use_variance=False).get_config()
    assert back.store.n_slots == 120 and len(back.store) == 118 and back.graph.count == 120
    np.testing.assert_array_equal(back.graph.rows(np.arange(3, 10)), graph.rows(np.arange(3, 10)))
    again = RerankPlanner(back.store, back.graph, PanelCache(back.store, back.graph, ProbitScoring(), 1 << 30))
    for exact in (True, False):
        np.testing.assert_array_equal(
            again.search(q, 5, 20, 40, None, exact=exact, nt=1), planner.search(q, 5, 20, 40, None, exact=exact, nt=1)
        )
