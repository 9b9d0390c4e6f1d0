"""``crossembed.serve`` over real HTTP: uvicorn on 127.0.0.1 in a thread, httpx as the client.

Served results equal in-process ``UECIndex.search`` (ids exactly, scores
through the float32 -> JSON -> float32 round trip), concurrent requests are
coalesced, text goes through the ensemble, updates under concurrent load
give no 5xx and no id that never existed, and every bad request is a 4xx
whose message starts with the field.
"""

import asyncio
import json
import re

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from _word_encoder import WordEncoder  # noqa: E402
from crossembed import reference  # noqa: E402
from crossembed._rows import unit_rows  # noqa: E402
from crossembed.serve import ServeConfig, create_app  # noqa: E402
from crossembed.serve.server import BackgroundServer  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, LaplaceEmbedder, UECEnsemble, UECIndex  # noqa: E402

pytestmark = pytest.mark.timeout(60)

DIM = 24


def _gaussians(n, seed, d=DIM):
    rng = np.random.default_rng(seed)
    centers = unit_rows(rng.normal(size=(30, d)))
    x = unit_rows(centers[rng.integers(0, 30, n)] + 0.35 * rng.normal(size=(n, d)))
    return GaussianEmbedding(x.astype(np.float32), (0.02 * rng.random((n, d))).astype(np.float32))


def _body(q, **kw):
    return {"mean": q.mean.tolist(), "var": q.var.tolist(), **kw}


def _as_result(payload):
    """JSON ``ids``/``scores`` as int64 and float32 arrays (null -> -inf)."""
    scores = [[-np.inf if s is None else s for s in row] for row in payload["scores"]]
    return np.asarray(scores, np.float32), np.asarray(payload["ids"], np.int64)


def _assert_same(payload, expected):
    scores, ids = _as_result(payload)
    np.testing.assert_array_equal(ids, expected[1])
    np.testing.assert_array_equal(scores, expected[0])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A 3,000-document index behind a server (searches only: tests that update make their own)."""
    index = UECIndex(_gaussians(3000, 0), config=IndexConfig(M=16, ef_construction=100, rerank=30))
    path = tmp_path_factory.mktemp("serve") / "index.uec"
    config = ServeConfig(max_body_bytes=1 << 20, max_batch=16, max_k=500, save_path=path)
    with BackgroundServer(create_app(index, config=config)) as server:
        yield index, server.url, path


async def _post_all(url, bodies, route="/search"):
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await asyncio.gather(*(client.post(route, json=b) for b in bodies))


def _batch_histogram(url):
    text = httpx.get(url + "/metrics").text
    total = float(re.search(r"^crossembed_search_batch_queries_sum (\S+)$", text, re.M).group(1))
    count = float(re.search(r"^crossembed_search_batch_queries_count (\S+)$", text, re.M).group(1))
    return total, count


def test_concurrent_single_queries_equal_in_process_search_and_are_coalesced(served):
    index, url, _ = served
    queries = _gaussians(64, 1)
    settings = [
        {"k": 1 + i % 10, **({"rerank": 40} if i % 3 == 0 else {}), **({"ef": 90} if i % 4 == 1 else {})}
        for i in range(64)
    ]
    for i in (2, 11, 20, 29):  # k above rerank (the candidates are k), ef below it (the breadth is the candidates)
        settings[i] = {"k": 45, "rerank": 20, "ef": 5 + i}
    settings[5]["exact"] = True
    for i in (40, 41, 42):  # the same filter: these may share a call too
        settings[i] = {"k": 6, "filter": [11, 12, 13, 500, 1500, 2999]}
    bodies = [_body(queries[i], **s) for i, s in enumerate(settings)]
    bodies[7].pop("var")  # var defaults to zeros
    before = _batch_histogram(url)
    responses = asyncio.run(_post_all(url, bodies))
    after = _batch_histogram(url)
    for i, (r, s) in enumerate(zip(responses, settings)):
        assert r.status_code == 200, r.text
        q = queries[i] if i != 7 else GaussianEmbedding(queries.mean[7:8], np.zeros((1, DIM), np.float32))
        _assert_same(r.json(), index.search(q, **s))
    queries_searched, calls = after[0] - before[0], after[1] - before[1]
    assert queries_searched == 64 and calls < 64  # some requests shared an index call


def test_multi_query_filter_and_padding(served):
    index, url, _ = served
    q = _gaussians(20, 2)
    allowed = [3, 17, 256, 1024, 2999, 10**9]  # an id not in the index is ignored
    cases = [
        ({"k": 8, "filter": allowed}, {"k": 8, "filter": allowed}),  # 5 documents allowed: 3 pads per row
        ({"k": 4, "filter": []}, {"k": 4, "filter": []}),  # nothing allowed: all padding
        ({"k": 12, "rerank": 25}, {"k": 12, "rerank": 25}),  # 20 queries > max_batch: one direct call
        ({"k": 5, "exact": True}, {"k": 5, "exact": True}),
    ]
    for body, kw in cases:
        r = httpx.post(url + "/search", json=_body(q, **body))
        assert r.status_code == 200, r.text
        payload = r.json()
        _assert_same(payload, index.search(q, **kw))
        pads = np.asarray(payload["ids"]) == -1
        assert all(s is None for row, p in zip(payload["scores"], pads) for s, pad in zip(row, p) if pad)
    assert (np.asarray(httpx.post(url + "/search", json=_body(q, k=4, filter=[])).json()["ids"]) == -1).all()
    many = _gaussians(400, 20)  # a body over 256 KB: decoded in the decoding process, not on the event loop
    r = httpx.post(url + "/search", json=_body(many, k=3))
    assert r.status_code == 200 and len(r.request.content) > 256 << 10
    _assert_same(r.json(), index.search(many, 3))


def _text_index():
    rng = np.random.default_rng(3)
    A = unit_rows(rng.normal(size=(40, 16)))
    P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
    ens = UECEnsemble([LaplaceEmbedder(WordEncoder(), batch_size=10).fit_embeddings(A, P)])
    texts = [f"{w} {i}" for i, w in enumerate(["apple pie", "banana split", "cherry tart", "date loaf"] * 10)]
    return UECIndex.build(ens, texts, show_progress_bar=False, config=IndexConfig(M=8, rerank=10)), texts


def test_text_queries_and_text_adds_go_through_the_ensemble():
    index, texts = _text_index()
    with BackgroundServer(create_app(index)) as server:
        url = server.url
        queries = ["cherry tart 2", "date loaf", "apple"]
        responses = asyncio.run(_post_all(url, [{"queries": [t], "k": 3} for t in queries]))
        for t, r in zip(queries, responses):
            assert r.status_code == 200, r.text
            _assert_same(r.json(), index.search([t], 3))
        r = httpx.post(url + "/search", json={"queries": queries, "k": 4, "exact": True})
        _assert_same(r.json(), index.search(queries, 4, exact=True))
        r = httpx.post(url + "/add", json={"texts": ["elderberry jam"], "ids": [500]})
        assert r.status_code == 200 and r.json() == {"ids": [500]}
        assert index.get_texts([500]) == ["elderberry jam"]
        r = httpx.post(url + "/search", json={"queries": ["elderberry jam"], "k": 1, "exact": True})
        assert r.json()["ids"] == [[500]]
        # vectors need their texts on an index that keeps texts
        d = index.get_docs([0])
        r = httpx.post(url + "/add", json={"mean": d.mean.tolist(), "var": d.var.tolist()})
        assert r.status_code == 400 and r.json()["error"].startswith("texts")
        r = httpx.post(
            url + "/upsert", json={"mean": d.mean.tolist(), "var": d.var.tolist(), "texts": ["x"], "ids": [0]}
        )
        assert r.status_code == 200 and index.get_texts([0]) == ["x"]


_Q = _gaussians(2, 5)
_ROW = _Q.mean[0].tolist()
_VAR = _Q.var[0].tolist()
_BAD = [
    # (route, raw body or JSON, status, the field the message starts with)
    ("/search", b'{"mean": [[1, 2]', 400, "body"),
    ("/search", b"[1, 2]", 400, "body"),
    ("/search", {"mean": [[1.0, 2.0]]}, 400, "mean"),
    ("/search", {"mean": [_ROW, _ROW[:-1]]}, 400, "mean"),
    ("/search", {"mean": [_ROW], "var": [_VAR, _VAR]}, 400, "var"),
    ("/search", {"mean": [_ROW], "var": [_VAR[:-1]]}, 400, "var"),
    ("/search", {"mean": [_ROW], "var": [[-0.1] + _VAR[1:]]}, 400, "var"),
    ("/search", b'{"mean": [[NaN' + b", 0.5" * (DIM - 1) + b"]]}", 400, "mean"),
    ("/search", b'{"mean": [[Infinity' + b", 0.5" * (DIM - 1) + b"]]}", 400, "mean"),
    ("/search", b'{"mean": [[1e300' + b", 0.5" * (DIM - 1) + b"]]}", 400, "mean"),  # inf as float32
    ("/search", {"mean": [["0.5"] * DIM]}, 400, "mean[0][0]"),
    ("/search", {"mean": _ROW}, 400, "mean[0]"),
    ("/search", {"mean": [_ROW], "k": 0}, 400, "k"),
    ("/search", {"mean": [_ROW], "k": -3}, 400, "k"),
    ("/search", {"mean": [_ROW], "k": 501}, 400, "k"),
    ("/search", {"mean": [_ROW], "k": "5"}, 400, "k"),
    ("/search", {"mean": [_ROW], "k": 2.5}, 400, "k"),
    ("/search", {"mean": [_ROW], "exact": 1}, 400, "exact"),
    ("/search", {"mean": [_ROW], "rerank": 0}, 400, "rerank"),
    ("/search", {"mean": [_ROW], "ef": 10**6}, 400, "ef"),
    ("/search", {"mean": [_ROW], "filter": [1, "x"]}, 400, "filter[1]"),
    ("/search", {"mean": [_ROW], "filter": [2**64]}, 400, "filter[0]"),
    ("/search", {"mean": [], "k": 1}, 400, "mean"),
    ("/search", {"queries": ["a text"]}, 400, "queries"),
    ("/search", {"k": 3}, 400, "mean"),
    ("/search", {"mean": [_ROW], "vars": [_VAR]}, 400, "vars"),
    ("/add", {"mean": [_ROW]}, 400, "var"),
    ("/add", {"texts": ["a text"]}, 400, "texts"),
    ("/add", {"mean": [_ROW], "var": [_VAR], "ids": [1, 2]}, 400, "ids"),
    ("/add", {"mean": [_ROW], "var": [_VAR], "ids": [-1]}, 400, "ids[0]"),
    ("/add", {"mean": [_ROW], "var": [_VAR], "ids": [7]}, 409, "ids"),  # 7 is in the index
    ("/upsert", {"mean": [_ROW], "var": [_VAR]}, 400, "ids"),
    ("/remove", {"ids": [123456]}, 404, "ids"),
    ("/remove", {"ids": [5, 5]}, 400, "ids"),
    ("/remove", {}, 400, "ids"),
    ("/save", {"path": "/tmp/elsewhere.uec"}, 403, "path"),
]


@pytest.mark.parametrize("route, body, status, field", _BAD, ids=[f"{r}:{i}" for i, (r, *_) in enumerate(_BAD)])
def test_bad_requests_are_4xx_naming_the_field(served, route, body, status, field):
    index, url, _ = served
    n = len(index)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(url + route, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error.startswith(field + ":") or error.startswith(field + " "), error
    assert len(index) == n  # nothing changed


def test_bodies_over_the_limit_are_413_and_routes_are_json_errors(served):
    _, url, _ = served
    big = b'{"mean": [' + b"0.5," * 300_000 + b"0.5]}"
    r = httpx.post(url + "/search", content=big)
    assert r.status_code == 413 and r.json()["error"].startswith("body")

    def chunks():  # no Content-Length: the limit applies while reading
        for _ in range(300):
            yield b" " * 10_000

    r = httpx.post(url + "/search", content=chunks())
    assert r.status_code == 413 and r.json()["error"].startswith("body")
    r = httpx.get(url + "/nowhere")
    assert r.status_code == 404 and r.json()["error"].startswith("path")
    r = httpx.get(url + "/search")
    assert r.status_code == 405 and r.json()["error"].startswith("method")


def _exact_ids(docs, ids, queries, k):
    """Reference top-k ids: float64 probit scores, ties to the lower id."""
    s = reference.probit_scores(queries.mean, queries.var, docs.mean, docs.var)
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return ids[order]


async def _load(url, queries, extra, rounds=6):
    """Searchers hammering /search while a writer adds, upserts and removes; every response kept."""
    seen, statuses = [], []

    async def searcher(client, i):
        for r in range(rounds * 4):
            q = queries[(i + r) % len(queries)]
            resp = await client.post("/search", json=_body(q, k=10, **({"exact": True} if r % 5 == 0 else {})))
            statuses.append(resp.status_code)
            if resp.status_code == 200:
                seen.extend(np.asarray(resp.json()["ids"]).ravel().tolist())

    async def writer(client):
        for r in range(rounds):
            part = extra[r * 50 : (r + 1) * 50]
            ids = list(range(10_000 + r * 50, 10_000 + (r + 1) * 50))
            for route, body in (
                ("/add", _body(part, ids=ids)),
                ("/upsert", _body(extra[:50], ids=list(range(r * 50, r * 50 + 50)))),  # existing ids
                ("/remove", {"ids": ids[:25] + list(range(2000 + 40 * r, 2000 + 40 * r + 40))}),
            ):
                resp = await client.post(route, json=body)
                statuses.append(resp.status_code)

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await asyncio.gather(writer(client), *(searcher(client, i) for i in range(12)))
    return seen, statuses


def test_updates_under_concurrent_load_have_no_5xx_and_no_foreign_ids():
    docs = _gaussians(2500, 7)
    index = UECIndex(docs, config=IndexConfig(M=16, ef_construction=80, rerank=30))
    extra, queries = _gaussians(300, 8), _gaussians(40, 9)
    ever = set(range(2500)) | set(range(10_000, 10_300)) | {-1}
    with BackgroundServer(create_app(index)) as server:
        seen, statuses = asyncio.run(_load(server.url, queries, extra))
        assert set(statuses) == {200}, sorted(set(statuses))
        assert set(seen) <= ever, sorted(set(seen) - ever)[:10]
        # writers stopped: served == in-process == a fresh build's exact search
        live = index.docs
        r = httpx.post(server.url + "/search", json=_body(queries, k=10, exact=True))
        _assert_same(r.json(), index.search(queries, 10, exact=True))
        np.testing.assert_array_equal(r.json()["ids"], _exact_ids(live, index.ids, queries, 10))
        fresh = UECIndex(live, ids=index.ids, config=IndexConfig(M=16, rerank=30))
        np.testing.assert_array_equal(r.json()["ids"], fresh.search(queries, 10, exact=True)[1])
        assert httpx.get(server.url + "/healthz").json()["documents"] == len(index) == 2500 + 6 * (50 - 25 - 40)


def test_save_health_and_metrics(served, tmp_path):
    index, url, path = served
    health = httpx.get(url + "/healthz").json()
    assert health == {"status": "ok", "documents": len(index), "dim": DIM, "ensemble": False, "queued": 0}
    r = httpx.post(url + "/save")
    assert r.status_code == 200 and r.json()["path"] == str(path)
    back = UECIndex.load(path)
    np.testing.assert_array_equal(back.ids, index.ids)
    q = _gaussians(3, 11)
    np.testing.assert_array_equal(back.search(q, 5)[1], index.search(q, 5)[1])
    text = httpx.get(url + "/metrics").text
    assert re.search(r'^crossembed_requests_total\{route="/search",status="200"\} [1-9]', text, re.M)
    assert re.search(r'^crossembed_request_seconds_count\{route="/save"\} [1-9]', text, re.M)
    assert re.search(rf"^crossembed_documents {len(index)}\.0$", text, re.M)
    assert "crossembed_search_batch_queries_bucket" in text
    # another app has its own registry: nothing is shared through prometheus' global one
    other = create_app(UECIndex(_gaussians(50, 12), config=IndexConfig(M=8)))
    assert other.state.service.metrics.registry is not create_app(index).state.service.metrics.registry


def test_save_path_from_the_client_only_when_allowed(tmp_path):
    index = UECIndex(_gaussians(200, 13), config=IndexConfig(M=8))
    config = ServeConfig(allow_save_path=True)
    with BackgroundServer(create_app(index, config=config)) as server:
        r = httpx.post(server.url + "/save")
        assert r.status_code == 409 and r.json()["error"].startswith("path")  # no default path
        r = httpx.post(server.url + "/save", json={"path": str(tmp_path / "copy.uec")})
        assert r.status_code == 200 and len(UECIndex.load(tmp_path / "copy.uec")) == 200
        r = httpx.post(server.url + "/save", json={"path": str(tmp_path / "no" / "dir.uec")})
        assert r.status_code == 400 and r.json()["error"].startswith("path")


def test_config_is_checked():
    with pytest.raises(ValueError, match="max_batch"):
        ServeConfig(max_batch=0)
    with pytest.raises(ValueError, match="save_path"):
        ServeConfig(save_on_exit=True)
    with pytest.raises(TypeError, match="ServeConfig"):
        create_app(UECIndex(_gaussians(20, 14), config=IndexConfig(M=4)), config={"max_batch": 4})


def test_a_server_fault_is_a_logged_500_and_the_routes_are_in_the_openapi_schema(caplog):
    index = UECIndex(_gaussians(100, 15), config=IndexConfig(M=8))
    app = create_app(index)
    schema = app.openapi()
    assert set(schema["paths"]) >= {"/search", "/add", "/upsert", "/remove", "/save", "/healthz", "/metrics"}
    assert (
        "mean"
        in schema["paths"]["/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    )

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    index.search = broken  # not a ValueError/TypeError: the server's fault, not the request's
    with BackgroundServer(app) as server, caplog.at_level("ERROR", logger="crossembed.serve"):
        r = httpx.post(server.url + "/search", json=_body(_gaussians(1, 16)))
        assert r.status_code == 500 and r.json() == {"error": "internal server error (RuntimeError)"}
        assert httpx.get(server.url + "/healthz").status_code == 200  # still serving
        text = httpx.get(server.url + "/metrics").text
        assert re.search(r'^crossembed_requests_total\{route="/search",status="500"\} 1\.0$', text, re.M)
    assert any("disk on fire" in (r.exc_text or "") for r in caplog.records)
