"""No request can stall the others: a valid-JSON, wrong-shape body of 1, 10 and 60 MB (a flat list where
rows of numbers belong) is refused quickly with one message while ``/healthz`` probes keep answering, and
SIGTERM during one stops ``crossembed serve`` within its graceful timeout. A real server process."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import crossembed  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex  # noqa: E402

pytestmark = pytest.mark.timeout(120)

_PYTHON_DIR = str(Path(crossembed.__file__).resolve().parents[1])
PROBE_LIMIT_S = 0.1  # a /healthz answer slower than this counts as a stall (or 3x the worst before the body)
ANSWER_LIMIT_S = 5.0  # the malformed body's 4xx


def flat_body(megabytes):
    """``{"mean": [0.1, 0.1, ...]}`` of about ``megabytes`` MB: valid JSON, the wrong shape."""
    return b'{"mean": [' + b"0.1," * (megabytes * 250_000) + b"0.1]}"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """``crossembed serve`` on a 500-document index, ready; yields (process, url)."""
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(500, 16)).astype(np.float32)
    path = tmp_path / "index.uec"
    UECIndex(GaussianEmbedding(mean, np.zeros_like(mean)), config=IndexConfig(M=8)).save(path)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_PYTHON_DIR, os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "crossembed", "serve", str(path), "--port", str(port), "--graceful-timeout", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server did not get ready"
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


class Probes:
    """``GET /healthz`` every 20 ms from a thread, each answer's latency kept."""

    def __init__(self, url):
        self.url, self.latencies, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    client.get(self.url + "/healthz")
                except httpx.TransportError:
                    return  # the server stopped
                self.latencies.append(time.perf_counter() - start)
                self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("megabytes", [1, 10, 60])
def test_a_malformed_body_is_refused_quickly_and_probes_keep_answering(server, megabytes):
    _, url = server
    body = flat_body(megabytes)
    with Probes(url) as before:  # what this (shared, loaded) machine gives without the body
        time.sleep(1.0)
    limit = max(PROBE_LIMIT_S, 3 * max(before.latencies))
    with httpx.Client(timeout=60) as client:
        with Probes(url) as probes:
            time.sleep(0.1)
            start = time.perf_counter()
            r = client.post(url + "/search", content=body, headers={"content-type": "application/json"})
            seconds = time.perf_counter() - start
            time.sleep(0.1)
    error = r.json()["error"] if r.status_code == 400 else r.text[:200]
    assert error.startswith("mean[0]: Input should be a valid") and len(error) < 100, error  # one message
    assert seconds <= ANSWER_LIMIT_S, seconds
    assert len(probes.latencies) >= 5
    # 100 ms on a quiet machine; on a loaded one no worse than 3x the probes before, or a tenth of the
    # body's answer (the event loop blocked by the decode would hold a probe for all of it)
    worst = sorted(probes.latencies)[-3:]
    assert worst[-1] < max(limit, seconds / 10), (worst, limit, seconds)


def test_sigterm_during_a_large_body_stops_within_the_graceful_timeout(server):
    proc, url = server
    body = flat_body(60)
    result = {}

    def post():
        try:
            result["response"] = httpx.post(url + "/search", content=body, timeout=60)
        except httpx.TransportError as exc:
            result["error"] = exc

    sender = threading.Thread(target=post, daemon=True)
    sender.start()
    time.sleep(0.8)  # the body is sent and being decoded
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    seconds = time.monotonic() - start
    sender.join(30)
    assert proc.returncode == 0, err
    assert seconds < 2 + 1.5, (seconds, err)  # --graceful-timeout 2, and the process's own exit
