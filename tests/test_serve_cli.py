"""``crossembed serve`` as a process: a request in flight at SIGTERM is answered, the index is saved, exit 0."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import crossembed  # noqa: E402
from crossembed.cli import main  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex  # noqa: E402

pytestmark = pytest.mark.timeout(60)

_PYTHON_DIR = str(Path(crossembed.__file__).resolve().parents[1])


def _gaussians(n, seed, d=16):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(n, d)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return GaussianEmbedding(m, (0.02 * rng.random((n, d))).astype(np.float32))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(path, port, *extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_PYTHON_DIR, os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "crossembed", "serve", str(path), "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"crossembed serve did not start: {proc.communicate()}")


def test_sigterm_answers_the_request_in_flight_saves_and_exits_0(tmp_path):
    path = tmp_path / "index.uec"
    UECIndex(_gaussians(400, 0), config=IndexConfig(M=8, rerank=20)).save(path)
    port = _free_port()
    proc = _serve(path, port, "--save-on-exit", "--log-level", "debug")
    url = f"http://127.0.0.1:{port}"
    new = _gaussians(30, 1)
    r = httpx.post(url + "/add", json={"mean": new.mean.tolist(), "var": new.var.tolist()})
    assert r.status_code == 200 and r.json()["ids"] == list(range(400, 430))
    q = _gaussians(3, 2)
    body = json.dumps({"mean": q.mean.tolist(), "var": q.var.tolist(), "k": 5, "exact": True}).encode()
    head = f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(head.encode() + body[:100])  # a request in flight: half its body sent
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(OSError):  # no new connections once stopping
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        conn.sendall(body[100:])
        response = b""
        while b"\r\n\r\n" not in response or len(response.split(b"\r\n\r\n", 1)[1]) < int(
            response.lower().split(b"content-length:")[1].split(b"\r\n")[0]
        ):
            chunk = conn.recv(65536)
            assert chunk, response
            response += chunk
    assert response.startswith(b"HTTP/1.1 200"), response
    answer = json.loads(response.split(b"\r\n\r\n", 1)[1])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == ""  # logging only, on stderr: no prints
    assert "saved 430 documents" in err and "POST /search 200" in err and "serving 400 documents" in err
    back = UECIndex.load(path)
    assert len(back) == 430 and set(back.ids.tolist()) == set(range(430))
    np.testing.assert_array_equal(answer["ids"], back.search(q, 5, exact=True)[1])


def test_without_save_on_exit_the_file_is_left_alone_and_sigint_also_exits_0(tmp_path):
    path = tmp_path / "index.uec"
    UECIndex(_gaussians(100, 3), config=IndexConfig(M=8)).save(path)
    before = path.read_bytes()
    port = _free_port()
    proc = _serve(path, port, "--log-level", "warning")
    new = _gaussians(2, 4)
    assert httpx.post(
        f"http://127.0.0.1:{port}/add", json={"mean": new.mean.tolist(), "var": new.var.tolist()}
    ).is_success
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert path.read_bytes() == before


def test_user_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing.uec"), "--port", "0"]) == 2
    assert "missing.uec" in capsys.readouterr().err
    path = tmp_path / "index.uec"
    UECIndex(_gaussians(20, 5), config=IndexConfig(M=4)).save(path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert main(["serve", str(path), "--port", str(busy.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("crossembed serve: error: --host/--port: cannot listen"), err
    assert main(["serve", str(path), "--save-on-exit", "--save-path", str(tmp_path / "no" / "x.uec")]) == 2
    assert "--save-path" in capsys.readouterr().err


def test_the_docs_examples_run(tmp_path, monkeypatch):
    """docs/serve.md: the index-making block, the curl session and the Python client, as written."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    python_blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    bash_blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(python_blocks[0], "serve.md", "exec"), {})
    port = _free_port()
    proc = _serve(tmp_path / "demo.uec", port, "--log-level", "warning")
    try:
        outputs = []
        for line in bash_blocks[1].strip().splitlines():
            line = line.replace("localhost:8000", f"localhost:{port}")
            outputs.append(subprocess.run(line, shell=True, capture_output=True, text=True, check=True).stdout)
        assert json.loads(outputs[0])["documents"] == 1000
        assert json.loads(outputs[2]) == {"ids": [5000]}
        assert json.loads(outputs[3])["ids"] == [[5000, 7]]
        assert json.loads(outputs[5]) == {"error": "mean: rows have 2 values but the index has dimension 8"}
        assert json.loads(outputs[6])["documents"] == 1000
        client = python_blocks[1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        exec(compile(client, "serve.md", "exec"), {})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
