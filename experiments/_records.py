"""Results read back from JSON (``--results``, ``--from-json``): decoded and shape-checked on the way in.

A file that is missing raises ``FileNotFoundError``; one that is not UTF-8
JSON, or whose value lacks a field a report reads (or holds the wrong kind
of value there), raises ``ValueError`` naming the option, the file and the
place. The renderers then only ever see the shapes they were written for.

A shape is ``"number"`` (int or float, not bool), ``"int"``, ``"str"``,
``"any"``, ``"number?"`` (a number or null), a one-element list ``[shape]``
(a list of that shape), a tuple of shapes (a list of exactly those), or a
dict of field name to shape: ``"name?"`` marks an optional field and ``"*"``
gives the shape of every value of a dict keyed by free names. Fields a shape
does not name are allowed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["check_loaded", "check_shape", "read_checked", "read_json"]

_SCALARS = {
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "number?": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "any": lambda v: True,
}
_KIND = {"number": "a number", "number?": "a number or null", "int": "an integer", "str": "a string"}


def read_json(path, source: str) -> Any:
    """The JSON value of the file at ``path``; ``source`` (e.g. ``"--results"``) names it in errors."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{source} file {str(path)!r} does not exist")
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{source} file {str(path)!r} is not UTF-8 text") from None
    except RecursionError:
        raise ValueError(f"{source} file {str(path)!r} nests too deeply to be a results file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} file {str(path)!r} is not JSON ({exc.msg}, line {exc.lineno})") from None


def read_checked(path, source: str, shape) -> Any:
    """:func:`read_json`, then :func:`check_loaded`."""
    return check_loaded(read_json(path, source), shape, path, source)


def check_loaded(value, shape, path, source: str) -> Any:
    """``value`` (read from ``path``) if it has ``shape``, else a ValueError naming ``source``, the file and the place."""
    try:
        check_shape(value, shape)
    except ValueError as exc:
        raise ValueError(f"{source} file {str(path)!r} is not a results file of this command: {exc}") from None
    return value


def _type_name(value) -> str:
    return "null" if value is None else type(value).__name__


def check_shape(value, shape, where: str = "") -> None:
    """Raise ``ValueError`` naming the place (``where``, then the keys and indices below it, e.g.
    ``[3]['f1']``) unless ``value`` has ``shape``."""
    place = where or "the top level"
    if isinstance(shape, str):
        if not _SCALARS[shape](value):
            raise ValueError(f"{place} must be {_KIND[shape]}, got {_type_name(value)}")
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ValueError(f"{place} must be a list, got {_type_name(value)}")
        for i, item in enumerate(value):
            check_shape(item, shape[0], f"{where}[{i}]")
    elif isinstance(shape, tuple):
        if not isinstance(value, list) or len(value) != len(shape):
            raise ValueError(f"{place} must be a list of {len(shape)} values, got {_type_name(value)}")
        for i, (item, sub) in enumerate(zip(value, shape)):
            check_shape(item, sub, f"{where}[{i}]")
    else:
        if not isinstance(value, dict):
            raise ValueError(f"{place} must be an object, got {_type_name(value)}")
        for key, sub in shape.items():
            name = key.rstrip("?")
            if key == "*":
                for field, item in value.items():
                    check_shape(item, sub, f"{where}[{field!r}]")
            elif name in value:
                check_shape(value[name], sub, f"{where}[{name!r}]")
            elif not key.endswith("?"):
                raise ValueError(f"{place} lacks the field {name!r}")
