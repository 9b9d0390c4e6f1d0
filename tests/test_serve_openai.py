"""Embeddings as a service: ``POST /embed`` and OpenAI's ``/v1/embeddings`` and ``/v1/models``, driven by
the real ``openai`` client against a live server on 127.0.0.1."""

import base64

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from _serve_text import text_index, wait_ready  # noqa: E402
from crossembed.serve import ServeConfig, create_app  # noqa: E402
from crossembed.serve.access import ApiKeys  # noqa: E402
from crossembed.serve.server import BackgroundServer  # noqa: E402

pytestmark = pytest.mark.timeout(60)

KEY = "read-key-0123456789abcdef"
TEXTS = ["apple pie", "a cherry tart, warm", "date loaf 7"]


@pytest.fixture(scope="module")
def served():
    index = text_index(2)
    config = ServeConfig(api_keys=ApiKeys(read_only=[KEY]), model_name="toy-uec")
    with BackgroundServer(create_app(index, config=config)) as server:
        wait_ready(server.url)
        yield index, server.url


def test_the_openai_client_works_unchanged(served):
    index, url = served
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == ["toy-uec"]
    queries = index.ensemble.encode(TEXTS, role="query", show_progress_bar=False)
    # the client's default encoding is base64 (float32 bytes), which it decodes itself
    out = client.embeddings.create(input=TEXTS, model="toy-uec")
    assert out.model == "toy-uec" and [d.index for d in out.data] == [0, 1, 2]
    np.testing.assert_array_equal(np.asarray([d.embedding for d in out.data], np.float32), queries.mean)
    assert out.usage.prompt_tokens == out.usage.total_tokens == 2 + 5 + 3  # words and punctuation marks
    out = client.embeddings.create(input=TEXTS[0], model="toy-uec", encoding_format="float")
    assert len(out.data) == 1
    np.testing.assert_allclose(out.data[0].embedding, queries.mean[0], rtol=1e-6)
    # crossembed's role, through the client's extra_body
    out = client.embeddings.create(input=TEXTS, model="toy-uec", extra_body={"role": "passage"})
    passages = index.ensemble.encode(TEXTS, role="passage", show_progress_bar=False)
    np.testing.assert_array_equal(np.asarray([d.embedding for d in out.data], np.float32), passages.mean)
    out = client.embeddings.create(input=TEXTS[:1], model="toy-uec", dimensions=index.dim)
    assert len(out.data[0].embedding) == index.dim
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(input="x", model="gpt-4o")
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(input="x", model="toy-uec", dimensions=3)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="wrong-key-0123456789abcdef", max_retries=0).models.list()


def test_the_openai_wire_format(served):
    index, url = served
    headers = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(
        url + "/v1/embeddings",
        json={"input": "apple pie", "model": "toy-uec", "encoding_format": "base64"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["data"][0]["object"] == "embedding"
    row = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(row, index.ensemble.encode(["apple pie"], show_progress_bar=False).mean[0])
    for bad, field in [
        ({"input": [1, 2], "model": "toy-uec"}, "input"),  # token ids
        ({"input": [], "model": "toy-uec"}, "input"),
        ({"input": "x"}, "model"),
        ({"input": "x", "model": "toy-uec", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "model": "toy-uec", "role": "doc"}, "role"),
    ]:
        r = httpx.post(url + "/v1/embeddings", json=bad, headers=headers)
        assert r.status_code == 400 and r.json()["error"].startswith(field), (bad, r.text)
    models = httpx.get(url + "/v1/models", headers=headers).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "toy-uec"


def test_embed_gives_means_variances_and_each_models_weight(served):
    index, url = served
    headers = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(url + "/embed", json={"texts": TEXTS, "role": "query"}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    expected = index.ensemble.encode(TEXTS, role="query", show_progress_bar=False)
    np.testing.assert_array_equal(np.asarray(body["mean"], np.float32), expected.mean)
    np.testing.assert_array_equal(np.asarray(body["var"], np.float32), expected.var)
    weights = np.asarray(body["weights"], np.float32)
    np.testing.assert_array_equal(weights, expected.weights)
    assert weights.shape == (3, 2) and np.allclose(weights.sum(axis=1), 1, atol=1e-6)
    assert body["models"] == ["WordEncoder", "WordEncoder"]
    for bad, field in [({"texts": []}, "texts"), ({"texts": ["a"], "role": "x"}, "role"), ({}, "texts")]:
        r = httpx.post(url + "/embed", json=bad, headers=headers)
        assert r.status_code == 400 and r.json()["error"].startswith(field), (bad, r.text)


def test_an_index_without_ensemble_refuses_texts():
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    rng = np.random.default_rng(0)
    mean = rng.normal(size=(20, 8)).astype(np.float32)
    index = UECIndex(GaussianEmbedding(mean, np.zeros_like(mean)), config=IndexConfig(M=4))
    with BackgroundServer(create_app(index)) as server:
        r = httpx.post(server.url + "/embed", json={"texts": ["a"]})
        assert r.status_code == 400 and r.json()["error"].startswith("texts")
        r = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "model": "crossembed"})
        assert r.status_code == 400 and r.json()["error"].startswith("input")
