"""API keys of ``crossembed serve``: every route x no key / read-only key / full key, the key file, exposure."""

import socket

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from _serve_text import text_index, wait_ready  # noqa: E402
from crossembed.cli import main  # noqa: E402
from crossembed.serve import ServeConfig, create_app, run_server  # noqa: E402
from crossembed.serve.access import ApiKeys  # noqa: E402
from crossembed.serve.server import BackgroundServer  # noqa: E402

pytestmark = pytest.mark.timeout(60)

FULL = "full-key-0123456789abcdef"
READ = "read-key-0123456789abcdef"

# (method, route, body); each write succeeds once, with the full key
_ROUTES = [
    ("POST", "/search", {"queries": ["apple pie"], "k": 2}),
    ("POST", "/embed", {"texts": ["apple pie"]}),
    ("POST", "/v1/embeddings", {"input": "apple pie", "model": "toy"}),
    ("GET", "/v1/models", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
    ("GET", "/docs", None),
    ("GET", "/redoc", None),
    ("GET", "/docs/oauth2-redirect", None),
    ("POST", "/add", {"texts": ["fig roll"], "ids": [900]}),
    ("POST", "/upsert", {"texts": ["fig roll two"], "ids": [900]}),
    ("POST", "/remove", {"ids": [900]}),
    ("POST", "/save", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
]
_OPEN = {"/healthz", "/readyz"}
_WRITE = {"/add", "/upsert", "/remove", "/save"}


def _expected(route, key, open_metrics):
    if route in _OPEN or (route == "/metrics" and open_metrics):
        return 200
    if key is None or key == "wrong-key-0123456789abcdef":
        return 401
    if route in _WRITE and key == READ:
        return 403
    return 200


def _call(url, method, route, body, headers):
    return httpx.request(method, url + route, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("open_metrics", [False, True])
def test_every_route_by_key(tmp_path, open_metrics):
    keys = ApiKeys(full=[FULL], read_only=[READ], open_metrics=open_metrics)
    config = ServeConfig(api_keys=keys, model_name="toy", save_path=tmp_path / "i.uec")
    with BackgroundServer(create_app(text_index(), config=config)) as server:
        wait_ready(server.url)
        # the write routes last with the full key: each changes the index once
        for key in (None, "wrong-key-0123456789abcdef", READ, FULL):
            for method, route, body in _ROUTES:
                headers = {} if key is None else {"Authorization": f"Bearer {key}"}
                r = _call(server.url, method, route, body, headers)
                want = _expected(route, key, open_metrics)
                assert r.status_code == want, (route, key, r.status_code, r.text)
                if want == 401:
                    assert r.headers["www-authenticate"] == "Bearer"
                    assert r.json()["error"].startswith("authorization:")
                if want == 403:
                    assert r.json()["error"] == f"authorization: {route} needs a full key, not a read-only one"
        assert (tmp_path / "i.uec").exists()
        # the api-key header is accepted too; a key of another scheme is not
        assert _call(server.url, "POST", "/embed", {"texts": ["x"]}, {"api-key": READ}).status_code == 200
        assert _call(server.url, "POST", "/remove", {"ids": [0]}, {"api-key": READ}).status_code == 403
        assert _call(server.url, "GET", "/v1/models", None, {"Authorization": f"Basic {FULL}"}).status_code == 401
        # the key is checked before the body is read: a client without one cannot make the server parse
        r = httpx.post(server.url + "/search", content=b"{" * 100_000)
        assert r.status_code == 401


def test_without_keys_every_route_is_open(tmp_path):
    config = ServeConfig(model_name="toy", save_path=tmp_path / "i.uec")
    with BackgroundServer(create_app(text_index(), config=config)) as server:
        wait_ready(server.url)
        for method, route, body in _ROUTES:
            assert _call(server.url, method, route, body, {}).status_code == 200, route


def test_key_file_format_and_errors(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# comment\n\nfull {FULL}\nread-only   {READ}\n")
    keys = ApiKeys.from_file(path)
    assert keys.full == {FULL} and keys.read_only == {READ}
    assert FULL not in repr(keys) and READ not in repr(keys)
    assert keys.kind(FULL.encode()) == "full" and keys.kind(READ.encode()) == "read"
    assert keys.kind(b"") is None and keys.kind(FULL.encode()[:-1]) is None
    for text, message in [
        ("", "holds no key"),
        (f"admin {FULL}\n", "line 1: expected 'full KEY' or 'read-only KEY'"),
        (f"full {FULL} extra\n", "line 1"),
        ("# ok\nfull short\n", "line 2: a key must be at least 16"),
        (f"full {FULL}\nread-only {FULL}\n", "read_only: a key is also a full key"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            ApiKeys.from_file(path)
    with pytest.raises(ValueError, match="cannot read"):
        ApiKeys.from_file(tmp_path / "missing")
    with pytest.raises(TypeError, match="ApiKeys"):
        ServeConfig(api_keys={"full": [FULL]})


def _non_loopback_address():
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this picks the address of the default route
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_a_non_loopback_address_needs_keys_or_insecure(tmp_path, capsys, caplog):
    index = text_index(1)
    with pytest.raises(ValueError, match="reachable from other machines"):
        run_server(index, host="0.0.0.0", port=0)
    path = tmp_path / "index.uec"
    index.save(path)
    assert main(["serve", str(path), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--api-key-file" in err[0] and "--insecure" in err[0], err
    keys = tmp_path / "keys"
    keys.write_text("full nope\n")
    assert main(["serve", str(path), "--api-key-file", str(keys), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1" in err[0] and "nope" not in err[0], err


def test_keys_are_never_logged(caplog):
    keys = ApiKeys(full=[FULL], read_only=[READ])
    config = ServeConfig(api_keys=keys, model_name="toy")
    with caplog.at_level("DEBUG", logger="crossembed"), caplog.at_level("DEBUG", logger="uvicorn"):
        with BackgroundServer(create_app(text_index(1), config=config)) as server:
            for key in (FULL, READ, "wrong-key-0123456789abcdef"):
                for method, route, body in _ROUTES[:5]:
                    _call(server.url, method, route, body, {"Authorization": f"Bearer {key}"})
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "POST /search" in text  # the requests were logged, their keys not
    assert FULL not in text and READ not in text and "wrong-key" not in text


class _GatedEncoder:
    """A WordEncoder whose calls wait for ``gate`` (a warm-up that takes as long as the test wants)."""

    def __init__(self):
        import threading

        from _word_encoder import WordEncoder

        self.gate = threading.Event()
        self.gate.set()
        self._inner = WordEncoder()

    def encode(self, texts, **kwargs):
        assert self.gate.wait(30)
        return self._inner.encode(texts, **kwargs)


def test_readyz_is_503_until_the_warm_up_is_done_and_healthz_is_liveness():
    encoder = _GatedEncoder()
    index = text_index(1, encoder=encoder)
    encoder.gate.clear()  # the warm-up's first encoding waits
    keys = ApiKeys(full=[FULL])
    with BackgroundServer(create_app(index, config=ServeConfig(api_keys=keys))) as server:
        for _ in range(3):
            r = httpx.get(server.url + "/readyz")  # open, like /healthz
            assert r.status_code == 503 and r.json() == {"status": "starting"}
            assert httpx.get(server.url + "/healthz").status_code == 200
        encoder.gate.set()
        wait_ready(server.url)
        assert httpx.get(server.url + "/readyz").json() == {"status": "ready"}
