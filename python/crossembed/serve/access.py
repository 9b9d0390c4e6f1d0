"""API keys of a served index (:class:`ApiKeys`): full keys may write, read-only keys may search and embed.

A key file holds one key a line, its kind first::

    # crossembed serve --api-key-file
    full       0b7e5c1d9a8f4e2b6c3d7a1f
    read-only  5d2a8c4e1b9f7a3e6d0c2b8f

Blank lines and lines starting with ``#`` are skipped. A key is at least 16
visible ASCII characters (no spaces). Clients send it as
``Authorization: Bearer KEY`` (what the ``openai`` client sends) or as an
``api-key: KEY`` header. Keys are compared with :func:`hmac.compare_digest`
against every configured key (the time does not say which key, or how much
of one, matched) and never logged or shown: :class:`ApiKeys`'s repr counts them.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Tuple, Union

__all__ = ["FULL", "READ", "ApiKeys", "request_key"]

READ = "read"  #: search, embed, models, metrics
FULL = "full"  #: also add, upsert, remove, save

_KINDS = {"full": FULL, "read-only": READ}
_MIN_LENGTH = 16


def _check_key(key: str, where: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"{where}: a key must be a str, got {type(key).__name__}")
    if len(key) < _MIN_LENGTH or not all("!" <= ch <= "~" for ch in key):
        raise ValueError(f"{where}: a key must be at least {_MIN_LENGTH} visible ASCII characters without spaces")
    return key.encode("ascii")


@dataclass(frozen=True)
class ApiKeys:
    """The keys a server accepts.

    Attributes
    ----------
    full : iterable of str
        Keys that may use every route.
    read_only : iterable of str
        Keys that may search, embed and read the models and metrics, not write.
    open_metrics : bool
        Let ``GET /metrics`` be read without a key (default False: a key of either kind).
    """

    full: Iterable[str] = ()
    read_only: Iterable[str] = ()
    open_metrics: bool = False
    _keys: Tuple[Tuple[bytes, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        full = frozenset(_check_key(k, "full") for k in self.full)
        read = frozenset(_check_key(k, "read_only") for k in self.read_only)
        if not full and not read:
            raise ValueError("keys: give at least one full or read-only key")
        if full & read:
            raise ValueError("read_only: a key is also a full key")
        if not isinstance(self.open_metrics, bool):
            raise TypeError(f"open_metrics must be a bool, got {type(self.open_metrics).__name__}")
        object.__setattr__(self, "full", frozenset(k.decode() for k in full))
        object.__setattr__(self, "read_only", frozenset(k.decode() for k in read))
        object.__setattr__(self, "_keys", tuple([(k, FULL) for k in full] + [(k, READ) for k in read]))

    def __repr__(self) -> str:
        metrics = ", open_metrics=True" if self.open_metrics else ""
        return f"ApiKeys(<{len(self.full)} full>, <{len(self.read_only)} read-only>{metrics})"

    @classmethod
    def from_file(cls, path: Union[str, Path], *, open_metrics: bool = False) -> ApiKeys:
        """The keys of a key file (the format above); ValueError naming the file and line otherwise."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"api key file {str(path)!r}: cannot read it ({exc})") from None
        full, read = [], []
        for number, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            where = f"api key file {str(path)!r} line {number}"
            if len(words) != 2 or words[0] not in _KINDS:
                raise ValueError(f"{where}: expected 'full KEY' or 'read-only KEY'")
            _check_key(words[1], where)
            (full if _KINDS[words[0]] == FULL else read).append(words[1])
        if not full and not read:
            raise ValueError(f"api key file {str(path)!r}: holds no key")
        return cls(full=full, read_only=read, open_metrics=open_metrics)

    def kind(self, key: Optional[bytes]) -> Optional[str]:
        """:data:`FULL` or :data:`READ` for a known key, else None; compares with every key in constant time."""
        if not key:
            return None
        found = None
        for known, kind in self._keys:
            if hmac.compare_digest(key, known):
                found = kind
        return found


def request_key(headers) -> Optional[bytes]:
    """The key of an ASGI request: ``Authorization: Bearer KEY``, else ``api-key: KEY``."""
    api_key = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip()
        elif name == b"api-key":
            api_key = value.strip()
    return api_key
