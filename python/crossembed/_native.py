"""The compiled core, :mod:`crossembed._core`, for the modules that wrap it (``kernels``, ``ann``).

A source checkout without a build still imports the package; a call that needs
the core then says how to build it.
"""

from __future__ import annotations

from types import ModuleType

try:
    from crossembed import _core
except ImportError as _exc:  # pragma: no cover - only without a build
    _core = None
    _CORE_ERROR = str(_exc)

__all__ = ["core"]


def core() -> ModuleType:
    """:mod:`crossembed._core` (ImportError saying how to build it when it is missing)."""
    if _core is None:  # pragma: no cover
        raise ImportError(
            f"crossembed._core (the C++ extension) is not built: run `pip install .` from the source tree ({_CORE_ERROR})"
        )
    return _core
