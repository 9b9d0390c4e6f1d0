"""``POST /search`` with ``"confidence": true``: the index's calibrated top-hit confidence over HTTP."""

import numpy as np
import pytest

from crossembed.uec import UECEnsemble, UECIndex
from test_uec_confidence import toy  # noqa: F401  (the fixture)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")


def test_the_service_returns_the_confidence(toy):  # noqa: F811
    from crossembed.serve import create_app
    from crossembed.serve.server import BackgroundServer

    fitted, q, docs = toy
    index = UECIndex(docs, ensemble=fitted)
    _, want_ids, want = index.search(q[:4], k=3, exact=True, return_confidence=True)
    body = {"mean": q.mean[:4].tolist(), "var": q.var[:4].tolist(), "k": 3, "exact": True}
    with BackgroundServer(create_app(index)) as server:
        got = httpx.post(f"{server.url}/search", json={**body, "confidence": True}, timeout=30).json()
        plain = httpx.post(f"{server.url}/search", json=body, timeout=30).json()
        refused = httpx.post(f"{server.url}/search", json={**body, "confidence": "yes"}, timeout=30)
    assert "ids" in got, got
    np.testing.assert_array_equal(got["ids"], want_ids)
    np.testing.assert_allclose(got["confidence"], want, rtol=1e-6)
    assert "confidence" not in plain and refused.status_code == 422 or refused.status_code == 400


def test_the_service_refuses_a_confidence_the_ensemble_lacks(toy):  # noqa: F811
    from crossembed.serve import create_app
    from crossembed.serve.server import BackgroundServer

    fitted, q, docs = toy
    index = UECIndex(docs, ensemble=UECEnsemble(fitted.embedders))
    body = {"mean": q.mean[:2].tolist(), "k": 2, "confidence": True}
    with BackgroundServer(create_app(index)) as server:
        r = httpx.post(f"{server.url}/search", json=body, timeout=30)
    assert r.status_code == 400 and "fit_confidence" in r.json()["error"]
