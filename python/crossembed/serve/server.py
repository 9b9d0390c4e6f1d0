"""Running the app under uvicorn: a socket bound up front, a graceful stop on SIGTERM/SIGINT, exit status 0.

On SIGTERM (or Ctrl+C) uvicorn stops accepting connections, lets the
requests in flight finish (up to ``graceful_timeout`` seconds when given),
then the app's lifespan finishes queued searches and, when configured, saves
the index atomically. uvicorn re-raises the signal once it is done; here the
signal has already been handled, so the process ends normally.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from crossembed.serve.app import create_app
from crossembed.serve.config import ServeConfig
from crossembed.uec.index import UECIndex

__all__ = ["BackgroundServer", "bind_socket", "check_exposure", "run_server"]

logger = logging.getLogger("crossembed.serve")

#: The GIL switch interval of a serving process, seconds (Python's default is 5 ms). Index calls run in
#: a worker thread and take the GIL back after every C++ call; while the event loop thread is busy with
#: requests, each of those waits up to one interval, which at 5 ms makes batched searches several times slower.
SWITCH_INTERVAL = 0.0005


def _uvicorn():
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - uvicorn is an optional dependency
        raise ImportError('crossembed serve needs uvicorn: pip install "crossembed[serve]"') from exc
    return uvicorn


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port=0``: a free port); OSError when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def check_exposure(sock: socket.socket, config: ServeConfig, *, insecure: bool = False) -> None:
    """ValueError when ``sock`` listens beyond this machine (not a loopback address) and ``config``
    has no API keys, unless ``insecure``: anyone who can reach the port could add, remove and save."""
    address = sock.getsockname()[0]
    if config.api_keys is None and not insecure and not ipaddress.ip_address(address).is_loopback:
        raise ValueError(
            f"--host: {address} is reachable from other machines; give --api-key-file (or pass --insecure)"
        )


def _ignore(signum, frame) -> None:
    """The handler uvicorn finds, restores and re-raises into once it has shut down gracefully."""


@contextmanager
def _graceful_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # uvicorn installs no handlers outside the main thread either
        return
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _loop_and_http() -> str:
    from importlib.util import find_spec

    loop = "uvloop" if find_spec("uvloop") else "asyncio"
    http = "httptools" if find_spec("httptools") else "h11"
    return f"{loop} event loop, {http} HTTP parser"


def run_server(
    index: UECIndex,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: Optional[ServeConfig] = None,
    graceful_timeout: Optional[int] = None,
    sock: Optional[socket.socket] = None,
    insecure: bool = False,
) -> None:
    """Serve ``index`` until SIGTERM/SIGINT (blocking; returns after the graceful shutdown);
    ``config`` as in :func:`~crossembed.serve.create_app`.

    ``sock``, a socket from :func:`bind_socket`, is used instead of binding
    ``host:port``. uvicorn picks the fastest event loop and HTTP parser
    installed (uvloop, httptools). ``graceful_timeout`` (seconds, default
    none: wait for all) bounds the wait for requests in flight at a stop
    (uvicorn's ``timeout_graceful_shutdown``). Raises OSError when the address
    cannot be bound, ValueError when it is not a loopback address and
    ``config`` has no API keys (unless ``insecure``; :func:`check_exposure`),
    RuntimeError when the app does not start, and the save's error when the
    save at shutdown fails.
    """
    uvicorn = _uvicorn()
    config = ServeConfig() if config is None else config
    sock = bind_socket(host, port) if sock is None else sock
    try:
        check_exposure(sock, config, insecure=insecure)
    except ValueError:
        sock.close()
        raise
    app = create_app(index, config=config)
    uv_config = uvicorn.Config(
        app,
        loop="auto",
        http="auto",
        lifespan="on",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=graceful_timeout,
    )
    server = uvicorn.Server(uv_config)
    logger.info("starting on %s:%d (%s)", *sock.getsockname()[:2], _loop_and_http())
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        with _graceful_signals():
            server.run(sockets=[sock])
    finally:
        sys.setswitchinterval(switch)
        sock.close()
    if not server.started:
        raise RuntimeError("the server did not start (see the log above)")
    if app.state.service.save_error is not None:
        raise app.state.service.save_error


class BackgroundServer:
    """An ASGI app under uvicorn in a background thread of this process (tests, notebooks)::

        with BackgroundServer(create_app(index)) as server:
            httpx.post(server.url + "/search", json={...})

    Listens on ``host`` at a free port (:attr:`port`, :attr:`url`); leaving the
    ``with`` block stops uvicorn gracefully (lifespan shutdown included).
    """

    def __init__(self, app, *, host: str = "127.0.0.1", start_timeout: float = 30.0):
        uvicorn = _uvicorn()
        self._sock = bind_socket(host, 0)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(app, lifespan="on", log_config=None, access_log=False, proxy_headers=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._start_timeout = start_timeout

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._sock.close()
                raise RuntimeError("the background server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join()
        self._sock.close()
