"""TextBatcher: texts queued while the encoders run share one encoder call (by role, within the text and
token budgets), each request gets its own rows, a batch's searches share one index call, faults stay local;
over HTTP, concurrent text searches are encoded together and answer as in-process search does."""

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")

from _word_encoder import WordEncoder
from crossembed._rows import unit_rows
from crossembed.serve import ServeConfig
from crossembed.serve.batcher import SearchBatcher, SearchKey
from crossembed.serve.service import IndexService
from crossembed.serve.text_batcher import TextBatcher, estimate_tokens
from crossembed.uec import IndexConfig, LaplaceEmbedder, UECEnsemble, UECIndex
from crossembed.uec.gaussian import GaussianEmbedding

pytestmark = pytest.mark.timeout(60)

KEY = SearchKey(False, 20, 40)


class _FakeEncoder:
    """Text ``"<v> ..."`` encodes to mean ``[v, role, 0]`` (role 0 query, 1 passage); ``"bad"`` fails."""

    def __init__(self, delay=0.05):
        self.calls = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, texts, role):
        with self.lock:
            self.calls.append((list(texts), role))
        time.sleep(self.delay)
        if "bad" in texts:
            raise ValueError("texts: bad text")
        mean = np.array([[float(t.split()[0]), float(role == "passage"), 0.0] for t in texts], np.float32)
        return GaussianEmbedding(mean, np.zeros_like(mean), np.full((len(texts), 2), 0.5, np.float32))


class _FakeIndex:
    """Row r's top-k ids are ``1000 * mean[r, 0] + j``."""

    def __init__(self):
        self.calls = []

    def run(self, mean, var, k, key):
        self.calls.append(len(mean))
        j = np.arange(k)
        return (mean[:, :1] - j).astype(np.float32), (1000 * mean[:, :1] + j).astype(np.int64)


def _batchers(max_batch=64, max_tokens=10_000, delay=0.05):
    enc, index = _FakeEncoder(delay), _FakeIndex()
    searches = SearchBatcher(index.run, max_batch=max_batch)
    texts = TextBatcher(enc, searches, max_batch=max_batch, max_batch_tokens=max_tokens)
    return enc, index, searches, texts


async def _after_a_busy_call(texts, coros):
    """Run ``coros`` queued behind one encoder call already running."""
    first = asyncio.create_task(texts.encode(["0"], "query"))
    for _ in range(200):  # the first call is running once the encoder has seen it
        await asyncio.sleep(0.005)
        if texts.queued == 0:
            break
    results = await asyncio.gather(first, *coros, return_exceptions=True)
    return results[1:]


def test_texts_queued_meanwhile_share_one_encoder_call_and_get_their_own_rows():
    enc, _, searches, texts = _batchers()

    async def main():
        specs = [[f"{v} a", f"{v + 0.5} b"][: 1 + v % 2] for v in range(1, 9)]
        out = await _after_a_busy_call(texts, [texts.encode(s, "query") for s in specs])
        await texts.close()
        await searches.close()
        return specs, out

    specs, out = asyncio.run(main())
    assert [len(c[0]) for c in enc.calls] == [1, sum(len(s) for s in specs)]  # one call for all eight
    for s, g in zip(specs, out):
        np.testing.assert_array_equal(g.mean[:, 0], [float(t.split()[0]) for t in s])
        assert g.weights.shape == (len(s), 2)


def test_roles_never_share_a_call_and_the_budgets_split_calls():
    enc, _, searches, texts = _batchers(max_batch=4, max_tokens=3 * estimate_tokens("1 x"))

    async def main():
        coros = [
            texts.encode(["1 x"], "query"),
            texts.encode(["2 x"], "passage"),
            texts.encode(["3 x", "4 x"], "query"),  # with 1: 3 texts, 3 x the tokens of one: fits
            texts.encode(["5 x"], "query"),  # a fourth text would pass the token budget
            texts.encode(["6 x"] * 5, "query"),  # more than max_batch texts: a call of its own
        ]
        out = await _after_a_busy_call(texts, coros)
        await texts.close()
        await searches.close()
        return out

    out = asyncio.run(main())
    calls = [(sorted(t), role) for t, role in enc.calls[1:]]
    assert calls == [
        (["1 x", "3 x", "4 x"], "query"),
        (["2 x"], "passage"),
        (["5 x"], "query"),
        (["6 x"] * 5, "query"),
    ]
    assert [g.mean[0, 1] for g in out] == [0.0, 1.0, 0.0, 0.0, 0.0]  # each got its own role's rows


def test_the_searches_of_one_encoded_batch_share_one_index_call():
    enc, index, searches, texts = _batchers()

    async def main():
        coros = [texts.search([f"{v} q"], 1 + v % 3, KEY) for v in range(1, 11)]
        out = await _after_a_busy_call(texts, coros)
        await texts.close()
        await searches.close()
        return out

    out = asyncio.run(main())
    assert [len(c[0]) for c in enc.calls] == [1, 10]
    assert index.calls == [10]  # handed over together: one index call
    for v, (scores, ids) in zip(range(1, 11), out):
        assert ids.shape == scores.shape == (1, 1 + v % 3) and ids[0, 0] == 1000 * v


def test_clients_that_send_on_each_answer_keep_sharing_one_call():
    # a batch's searches run before the next batch is taken, and the next call waits (briefly) for as
    # many texts as the last one had: the clients answered together come back together, instead of
    # splitting into half-sized batches that take turns
    enc, index, searches, texts = _batchers(delay=0.2)
    slow_run = index.run
    index.run = lambda *args: (time.sleep(0.02), slow_run(*args))[1]

    async def client(c):
        for _ in range(6):
            _, ids = await texts.search([f"{c + 1} q"], 1, KEY)
            assert ids[0, 0] == 1000 * (c + 1)
            await asyncio.sleep(0.001 * c)  # the answered clients come back within a few ms of each other

    async def main():
        await asyncio.gather(*(client(c) for c in range(8)))
        await texts.close()
        await searches.close()

    asyncio.run(main())
    sizes = [len(c[0]) for c in enc.calls]
    assert sum(sizes) == 48 and sizes[-4:] == [8, 8, 8, 8], sizes
    assert index.calls[-4:] == [8, 8, 8, 8]


def test_a_failing_text_does_not_fail_the_others_in_its_batch():
    enc, _, searches, texts = _batchers(delay=0.02)

    async def main():
        coros = [texts.encode(["1 a"], "query"), texts.encode(["bad"], "query"), texts.search(["3 c"], 1, KEY)]
        out = await _after_a_busy_call(texts, coros)
        await texts.close()
        await searches.close()
        return out

    ok, bad, (_, ids) = asyncio.run(main())
    assert ok.mean[0, 0] == 1.0 and ids[0, 0] == 3000
    assert isinstance(bad, ValueError) and "bad text" in str(bad)
    assert [len(c[0]) for c in enc.calls[1:]] == [3, 1, 1, 1]  # the batch, then each alone


def test_estimate_tokens_grows_with_the_text():
    assert estimate_tokens("") == 2
    assert estimate_tokens("abcd") == 3
    assert estimate_tokens("a" * 400) == 102


def _text_index():
    rng = np.random.default_rng(3)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    ens = UECEnsemble([LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P)])
    texts = [f"{w} {i}" for i, w in enumerate(["apple pie", "banana split", "cherry tart", "date loaf"] * 10)]
    return UECIndex.build(ens, texts, show_progress_bar=False, config=IndexConfig(M=8, rerank=10))


def test_the_service_batches_text_searches_and_its_encoder_and_index_calls_take_turns():
    index = _text_index()
    queries = [f"{w} {i}" for i, w in enumerate(["cherry", "date loaf", "apple pie", "banana"] * 6)]
    alone = [index.search([t], 3) for t in queries]
    vectors = index.get_docs(index.ids[:6])
    service = IndexService(index, ServeConfig(max_batch=64))
    spans = []  # (kind, start, end, rows) of every encoder and index call

    running = {"encode": threading.Event(), "search": threading.Event()}

    def timed(kind, fn, pause):
        def call(*args, **kwargs):
            start = time.perf_counter()
            running[kind].set()
            time.sleep(pause)  # long enough for the other thread to overlap, were it let
            out = fn(*args, **kwargs)
            spans.append((kind, start, time.perf_counter(), len(args[0])))
            return out

        return call

    index.ensemble.encode = timed("encode", index.ensemble.encode, 0.2)
    index.search = timed("search", index.search, 0.01)
    key = service.search_key(3, False, None, None)

    async def main():
        first = asyncio.ensure_future(service.texts.search(queries[:1], 3, key))
        while not running["encode"].is_set():  # the first text's encoder call runs; the rest queue behind it
            await asyncio.sleep(0.002)
        texts = [asyncio.ensure_future(service.texts.search([t], 3, key)) for t in queries[1:]]
        vecs = [service.batcher.search(vectors.mean[i : i + 1], vectors.var[i : i + 1], 3, key) for i in range(6)]
        out = await asyncio.gather(first, *texts, *vecs)
        await service.close()
        return out[: len(queries)]

    served = asyncio.run(main())
    for (scores, ids), (own_scores, own_ids) in zip(served, alone):
        np.testing.assert_array_equal(ids, own_ids)
        np.testing.assert_allclose(scores, own_scores, rtol=0, atol=1e-5)
    # the texts queued behind the first one's call shared the next
    assert sorted(s[3] for s in spans if s[0] == "encode") == [1, len(queries) - 1]
    spans.sort(key=lambda s: s[1])
    for before, after in zip(spans, spans[1:]):
        assert before[2] <= after[1], f"{before[0]} and {after[0]} calls overlapped"


def test_max_batch_tokens_is_checked():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        ServeConfig(max_batch_tokens=0)
    assert ServeConfig().max_batch_tokens >= ServeConfig().max_batch  # a batch of short texts fits


def test_bench_serve_text_user_errors(capsys):
    from crossembed.cli import main

    assert main(["bench", "serve", "--text", "--duration", "0"]) == 2
    assert "--duration" in capsys.readouterr().err
    assert main(["bench", "serve", "--text", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
