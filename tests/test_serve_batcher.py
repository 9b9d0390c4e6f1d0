"""SearchBatcher: concurrent searches with one key share a call; each gets its own rows and k; faults stay local."""

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")

from crossembed.serve.batcher import SearchBatcher, SearchKey

pytestmark = pytest.mark.timeout(30)

KEY = SearchKey(False, 20, 40)


class _FakeIndex:
    """``run``: row r of the queries gets scores ``mean[r, 0] - j`` and ids ``1000 * mean[r, 0] + j``, j < k."""

    def __init__(self, delay=0.05):
        self.calls = []
        self.delay = delay
        self.lock = threading.Lock()

    def run(self, mean, var, k, key):
        with self.lock:
            self.calls.append((len(mean), k, key))
        time.sleep(self.delay)
        if (mean < 0).any():
            raise ValueError("mean: negative query")
        j = np.arange(k)
        return (mean[:, :1] - j).astype(np.float32), (1000 * mean[:, :1] + j).astype(np.int64)


def _queries(value, n=1):
    return np.full((n, 3), value, np.float32), np.zeros((n, 3), np.float32)


async def _burst(batcher, specs):
    """Submit ``(value, n, k, key)`` searches after one that occupies the batcher, all at once."""
    first = asyncio.create_task(batcher.search(*_queries(0.0), 1, KEY))
    for _ in range(400):  # until the first call runs (the thread took it); the rest queue behind it
        await asyncio.sleep(0.005)
        if batcher.queued == 0:
            break
    tasks = [asyncio.create_task(batcher.search(*_queries(v, n), k, key)) for v, n, k, key in specs]
    results = await asyncio.gather(first, *tasks, return_exceptions=True)
    await batcher.close()
    return results[1:]


def test_queued_searches_with_one_key_share_a_call_and_get_their_own_k():
    fake = _FakeIndex()
    batcher = SearchBatcher(fake.run, max_batch=64)
    specs = [(float(v), 1 + v % 2, 1 + v % 5, KEY) for v in range(1, 11)]
    results = asyncio.run(_burst(batcher, specs))
    assert [c[0] for c in fake.calls] == [1, sum(n for _, n, _, _ in specs)]  # one call for all ten
    assert fake.calls[1][1] == 5  # the largest k asked for
    for (value, n, k, _), (scores, ids) in zip(specs, results):
        assert scores.shape == ids.shape == (n, k)
        np.testing.assert_array_equal(ids, 1000 * value + np.arange(k)[None, :].repeat(n, 0))
        np.testing.assert_array_equal(scores, value - np.arange(k)[None, :].repeat(n, 0))


def test_different_keys_and_max_batch_split_the_calls():
    fake = _FakeIndex()
    other = SearchKey(True, 0, 0)
    batcher = SearchBatcher(fake.run, max_batch=4)
    specs = [(1.0, 1, 3, KEY), (2.0, 1, 3, other), (3.0, 2, 3, KEY), (4.0, 2, 3, KEY), (5.0, 1, 3, other)]
    results = asyncio.run(_burst(batcher, specs))
    # oldest first: KEY takes 1 + 2 rows (the next 2 would pass max_batch), then `other`, then the rest of KEY
    assert [(n, key) for n, _, key in fake.calls[1:]] == [(3, KEY), (2, other), (2, KEY)]
    for (value, n, k, _), (_, ids) in zip(specs, results):
        assert ids.shape == (n, k) and (ids[:, 0] == 1000 * value).all()


def test_a_failing_request_does_not_fail_the_others_in_its_batch():
    fake = _FakeIndex(delay=0.02)
    batcher = SearchBatcher(fake.run, max_batch=64)
    specs = [(1.0, 1, 2, KEY), (-1.0, 1, 2, KEY), (3.0, 1, 2, KEY)]
    results = asyncio.run(_burst(batcher, specs))
    assert isinstance(results[1], ValueError)
    assert results[0][1][0, 0] == 1000 and results[2][1][0, 0] == 3000
    assert [c[0] for c in fake.calls] == [1, 3, 1, 1, 1]  # the batch, then each request alone


def test_on_batch_sees_every_call_and_the_batcher_restarts_after_close():
    sizes = []
    fake = _FakeIndex(delay=0.0)
    batcher = SearchBatcher(fake.run, max_batch=8, wait_s=0.02, on_batch=sizes.append)

    async def main():
        out = await asyncio.gather(*(batcher.search(*_queries(float(v)), 1, KEY) for v in range(5)))
        await batcher.close()
        again = await batcher.search(*_queries(7.0), 1, KEY)
        await batcher.close()
        return out, again

    out, again = asyncio.run(main())
    assert sizes == [5, 1]  # the bounded wait gathered all five
    assert [int(ids[0, 0]) for _, ids in out] == [0, 1000, 2000, 3000, 4000] and again[1][0, 0] == 7000


def test_requests_with_one_key_get_what_their_own_call_returns():
    """Truncating the group's call (k = the largest) equals each request's own call, also where a
    different candidate count would change the answer (few candidates, a narrow graph search)."""
    from crossembed.serve import ServeConfig
    from crossembed.serve.service import IndexService
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    rng = np.random.default_rng(0)
    docs = GaussianEmbedding(rng.normal(size=(3000, 16)).astype(np.float32), np.full((3000, 16), 0.01, np.float32))
    index = UECIndex(docs, config=IndexConfig(M=4, ef_construction=8, rerank=25))
    service = IndexService(index, ServeConfig())
    q = GaussianEmbedding(rng.normal(size=(40, 16)).astype(np.float32), np.zeros((40, 16), np.float32))
    settings = [(1, False, 2, 2), (1, False, None, None), (3, False, None, None), (25, False, None, None)]
    settings += [(30, False, 2, 2), (10, False, 30, 30), (5, False, 40, None), (40, False, 40, 80)]
    settings += [(8, True, 3, None), (50, True, None, 1)]
    groups = {}
    for i in range(len(q)):
        k, exact, rerank, ef = settings[i % len(settings)]
        groups.setdefault(service.search_key(k, exact, rerank, ef), []).append((i, k, exact, rerank, ef))
    # (m=2, ef=2), (m=25, ef=50): the index's rerank, (m=30, ef=30), (m=40, ef=80), (exact)
    assert sorted((key.rerank, key.ef) for key in groups) == [(0, 0), (2, 2), (25, 50), (30, 30), (40, 80)]
    for key, members in groups.items():
        rows = [i for i, *_ in members]
        kmax = max(k for _, k, *_ in members)
        scores, ids = index.search(q[rows], kmax, exact=key.exact, rerank=key.rerank or None, ef=key.ef or None)
        for j, (i, k, exact, rerank, ef) in enumerate(members):
            own = index.search(q[i : i + 1], k, exact=exact, rerank=rerank, ef=ef)
            np.testing.assert_array_equal(ids[j : j + 1, :k], own[1])
            np.testing.assert_array_equal(scores[j : j + 1, :k], own[0])
    # the settings matter here: with more candidates the few-candidate requests get other answers
    narrow = index.search(q, 1, rerank=2, ef=2)[1]
    wide = index.search(q, 30, rerank=2, ef=2)[1][:, :1]
    assert (narrow != wide).any()


def test_a_failing_search_thread_fails_its_requests_instead_of_hanging():
    def broken_init():
        raise OSError("no threads today")

    batcher = SearchBatcher(_FakeIndex().run, max_batch=8, thread_init=broken_init)

    async def main():
        return await asyncio.gather(batcher.search(*_queries(1.0), 1, KEY), return_exceptions=True)

    (result,) = asyncio.run(main())
    assert isinstance(result, RuntimeError) and "no threads today" in str(result)


def test_the_bounded_wait_ends_at_its_bound_or_when_the_batch_is_full():
    fake = _FakeIndex(delay=0.0)
    sizes = []

    async def one(batcher):
        start = time.perf_counter()
        await batcher.search(*_queries(1.0), 1, KEY)
        return time.perf_counter() - start

    waited = asyncio.run(one(SearchBatcher(fake.run, max_batch=8, wait_s=0.2, on_batch=sizes.append)))
    assert 0.15 < waited < 2.0 and sizes == [1]
    full = asyncio.run(one(SearchBatcher(fake.run, max_batch=1, wait_s=5.0)))
    assert full < 1.0  # a full batch does not wait
