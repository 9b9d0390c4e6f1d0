"""An HTTP/JSON service for a :class:`~crossembed.uec.UECIndex` (FastAPI + uvicorn): ``crossembed serve``.

``create_app(index, config=ServeConfig(...))`` is the ASGI app (search,
add, upsert, remove, save, health and Prometheus metrics, with concurrent
searches micro-batched); :func:`run_server` runs it under uvicorn with a
graceful shutdown. Needs ``pip install "crossembed[serve]"``.
"""

from __future__ import annotations

import importlib

__all__ = ["ServeConfig", "create_app", "run_server"]

# name -> module, imported on first access (PEP 562): the body-decoding process imports
# crossembed.serve.schema, which must not load the index and its encoders
_LAZY = {
    "ServeConfig": "crossembed.serve.config",
    "create_app": "crossembed.serve.app",
    "run_server": "crossembed.serve.server",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'crossembed.serve' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
