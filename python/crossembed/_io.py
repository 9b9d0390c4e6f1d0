"""Atomic, checksummed files.

Every file crossembed writes goes through :func:`atomic_write`: the bytes go to
a temporary file in the same directory, are fsync'ed, and replace the target
with ``os.replace`` so a crash never leaves a half-written file and never
destroys the previous one. :func:`save_arrays` / :func:`load_arrays` add a
versioned header and a SHA-256 over the payload so truncation or edits are
detected on load.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Tuple, Union

import numpy as np

PathLike = Union[str, os.PathLike]
_MAGIC = b"CROSSEMBED\x00"
FORMAT_VERSION = 1


class CorruptFileError(ValueError):
    """A crossembed file failed its format, version or checksum check."""


def atomic_write(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"directory {str(path.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_arrays(path: PathLike, kind: str, arrays: Dict[str, np.ndarray], meta: Dict[str, Any] | None = None) -> Path:
    """Save named arrays plus JSON metadata as one checksummed file.

    Layout: magic, 8-byte header length, JSON header (kind, version, meta,
    sha256 of the payload), then an ``.npz`` payload.
    """
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    payload = buf.getvalue()
    header = json.dumps(
        {
            "kind": kind,
            "version": FORMAT_VERSION,
            "meta": meta or {},
            "sha256": hashlib.sha256(payload).hexdigest(),
            "payload_bytes": len(payload),
        },
        sort_keys=True,
    ).encode()
    blob = _MAGIC + len(header).to_bytes(8, "little") + header + payload
    return atomic_write(path, blob)


def load_arrays(path: PathLike, kind: str) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Load a file written by :func:`save_arrays`; raise CorruptFileError on any mismatch."""
    path = Path(path)
    blob = path.read_bytes()
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 8:
        raise CorruptFileError(f"{path}: not a crossembed file (bad magic)")
    pos = len(_MAGIC)
    hlen = int.from_bytes(blob[pos : pos + 8], "little")
    pos += 8
    try:
        header = json.loads(blob[pos : pos + hlen].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"{path}: unreadable header ({exc})") from None
    payload = blob[pos + hlen :]
    if header.get("kind") != kind:
        raise CorruptFileError(f"{path}: holds a {header.get('kind')!r}, expected {kind!r}")
    if header.get("version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{path}: format version {header.get('version')} is not supported (expected {FORMAT_VERSION})"
        )
    if len(payload) != header.get("payload_bytes") or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CorruptFileError(f"{path}: checksum mismatch (file truncated or modified)")
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return arrays, header["meta"]
