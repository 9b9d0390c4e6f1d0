"""Behaviour objects (GEH's rules and candidate sources, UEC's routing, mixing and scoring): their config
read off the object, the object rebuilt from its config, and the check that an argument is such an object."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple


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


class Registered(Configured):
    """A family of behaviour objects whose classes register themselves by ``kind`` (what :func:`from_config` reads).

    The family's base sets its own ``registry = {}``; a subclass that sets ``kind`` in its class body
    joins it when the class statement runs, so a new kind needs no registry edit: a saved config of
    it rebuilds once its module is imported. A kind taken by a class of another name is a ``ValueError``.
    """

    registry: ClassVar[Dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind:
            taken = cls.registry.get(kind)
            if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
                raise ValueError(f"kind {kind!r} is taken by {taken.__module__}.{taken.__qualname__}")
            cls.registry[kind] = cls


def set_checked(obj, **values) -> None:
    """Store ``values`` (checked and normalised) on ``obj``, a frozen dataclass, from its ``__post_init__``."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


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


def from_config(config: Dict[str, Any], registry: Dict[str, type], name: str):
    """The object a ``get_config()`` dict describes: ``registry[config["kind"]](**arguments)``, an
    argument that is itself a config of this registry built first. A config naming no kind of the
    registry is a ``ValueError`` naming ``name``."""
    if not isinstance(config, dict) or config.get("kind") not in registry:
        raise ValueError(f"{name} config must name a kind in {sorted(registry)}, got {config!r}")
    args = {
        k: from_config(v, registry, name) if isinstance(v, dict) and v.get("kind") in registry else v
        for k, v in config.items()
        if k != "kind"
    }
    return registry[config["kind"]](**args)
