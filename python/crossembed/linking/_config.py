"""The config of GEH's behaviour objects: what they were built with, read off the object."""

from __future__ import annotations

from typing import Any, Dict, Tuple


class Configured:
    """``get_config()`` and ``__repr__`` from an object's public attributes (its constructor arguments).

    A subclass sets ``kind``, its registry name; attributes starting with
    ``_`` (a Dask client, per-fit caches) are left out. A nested object
    contributes its own config.
    """

    kind = "object"

    def get_config(self) -> Dict[str, Any]:
        """``{"kind": ..., argument: value, ...}``, JSON-able for the built-in objects."""
        config: Dict[str, Any] = {"kind": self.kind}
        for name, value in vars(self).items():
            if not name.startswith("_"):
                config[name] = value.get_config() if hasattr(value, "get_config") else value
        return config

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def check_plugin(obj, name: str, methods: Tuple[str, ...], example: str, *, optional: bool = False):
    """``obj`` if it is an object with every method in ``methods`` (``"__call__"``: callable), else a
    ``TypeError`` naming the argument ``name``. ``optional``: None passes too."""
    if obj is None and optional:
        return None
    if not isinstance(obj, type) and all(
        callable(obj) if m == "__call__" else callable(getattr(obj, m, None)) for m in methods
    ):
        return obj
    what = ", ".join(f"{m}()" for m in methods)
    got = f"the class {obj.__name__} (pass an object)" if isinstance(obj, type) else type(obj).__name__
    raise TypeError(f"{name} must be an object with {what}, e.g. {example}; got {got}")
