"""An HTTP/JSON service for a :class:`~crossembed.uec.UECIndex` (FastAPI + uvicorn): ``crossembed serve``.

``create_app(index, config=ServeConfig(...))`` is the ASGI app (search,
add, upsert, remove, save, health and Prometheus metrics, with concurrent
searches micro-batched); :func:`run_server` runs it under uvicorn with a
graceful shutdown. Needs ``pip install "crossembed[serve]"``.
"""

from crossembed.serve.app import create_app
from crossembed.serve.config import ServeConfig
from crossembed.serve.server import run_server

__all__ = ["ServeConfig", "create_app", "run_server"]
