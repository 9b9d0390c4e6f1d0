"""Atomic, checksummed files.

Every file crossembed writes goes through :func:`atomic_write`: the bytes go to
a temporary file in the same directory, are fsync'ed, and replace the target
with ``os.replace`` (then the directory is fsync'ed too), so a crash never
leaves a half-written file and never destroys the previous one. An existing
target keeps its permission bits; a new file gets the usual ``0o666 & ~umask``.
Temporary files that a crashed writer of the same target left behind are
removed.

:func:`save_arrays` / :func:`load_arrays` add a versioned header and a SHA-256
so truncation or edits anywhere in the file are detected on load.

Format version 2 (written since crossembed's reliability pass)::

    magic (11 bytes) | header length (8, little endian) | JSON header | .npz payload | SHA-256 (32)

the digest covering every byte before it (header included). The header is a
JSON object ``{"kind": str, "version": 2, "meta": object, "payload_bytes": int}``.
Version 1 files (no trailing digest; the header held the payload's SHA-256
and was itself unchecked) still load, with the same strict header checks.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, Tuple, Union

import numpy as np

PathLike = Union[str, os.PathLike]
_MAGIC = b"CROSSEMBED\x00"
FORMAT_VERSION = 2
_DIGEST = 32  # bytes of the trailing SHA-256 (version 2)
_STALE_SECONDS = 3600  # a temp file of unknown owner this old is abandoned


class CorruptFileError(ValueError):
    """A crossembed file failed its format, version or checksum check."""


# --------------------------------------------------------------------------- atomic writes
def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _clean_stale_temps(path: Path) -> None:
    """Remove ``.{name}.{pid}.*.tmp`` files of dead writers (and ownerless old ones) next to ``path``."""
    pattern = re.compile(r"\." + re.escape(path.name) + r"\.(?:(\d+)\.)?[^/]*\.tmp$")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or not entry.is_file(follow_symlinks=False):
            continue
        pid = m.group(1)
        try:
            stale = (not _pid_alive(int(pid))) if pid else now - entry.stat().st_mtime > _STALE_SECONDS
            if stale:
                os.unlink(entry.path)
        except OSError:
            pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse
        pass
    finally:
        os.close(fd)


def atomic_write(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync)."""
    path = Path(path)
    parent = path.parent
    if not parent.exists():
        raise FileNotFoundError(f"directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise NotADirectoryError(f"{str(parent)!r} is not a directory")
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory")
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    _clean_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(parent)
    return path


# --------------------------------------------------------------------------- checksummed arrays
def save_arrays(path: PathLike, kind: str, arrays: Dict[str, np.ndarray], meta: Dict[str, Any] | None = None) -> Path:
    """Save named arrays plus JSON metadata as one checksummed file (format version 2, above)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    payload = buf.getvalue()
    header = json.dumps(
        {"kind": kind, "version": FORMAT_VERSION, "meta": meta or {}, "payload_bytes": len(payload)},
        sort_keys=True,
    ).encode()
    body = _MAGIC + len(header).to_bytes(8, "little") + header + payload
    return atomic_write(path, body + hashlib.sha256(body).digest())


def _header(path: Path, raw: bytes) -> Dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptFileError(f"{path}: unreadable header ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise CorruptFileError(f"{path}: the header is a JSON {type(header).__name__}, not an object")
    for key, types in (("kind", str), ("version", int), ("meta", dict), ("payload_bytes", int)):
        if key not in header:
            raise CorruptFileError(f"{path}: the header has no {key!r}")
        if not isinstance(header[key], types) or isinstance(header[key], bool):
            raise CorruptFileError(f"{path}: the header's {key!r} is a {type(header[key]).__name__}")
    return header


def load_arrays(path: PathLike, kind: str) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Load a file written by :func:`save_arrays`; raise CorruptFileError on any mismatch."""
    path = Path(path)
    blob = path.read_bytes()
    start = len(_MAGIC) + 8
    if not blob.startswith(_MAGIC) or len(blob) < start:
        raise CorruptFileError(f"{path}: not a crossembed file (bad magic)")
    hlen = int.from_bytes(blob[len(_MAGIC) : start], "little")
    if hlen > len(blob) - start:
        raise CorruptFileError(f"{path}: header length {hlen} runs past the end of the file (truncated?)")
    intact_v2 = len(blob) >= start + hlen + _DIGEST and hashlib.sha256(blob[:-_DIGEST]).digest() == blob[-_DIGEST:]
    header = _header(path, blob[start : start + hlen])
    version = header["version"]
    if version == 2:
        if not intact_v2:
            raise CorruptFileError(f"{path}: checksum mismatch (file truncated or modified)")
        payload = blob[start + hlen : -_DIGEST]
    elif version == 1:
        payload = blob[start + hlen :]
        digest = header.get("sha256")
        if not isinstance(digest, str) or hashlib.sha256(payload).hexdigest() != digest:
            raise CorruptFileError(f"{path}: checksum mismatch (file truncated or modified)")
    else:
        raise CorruptFileError(f"{path}: format version {version} is not supported (expected 1 or {FORMAT_VERSION})")
    if len(payload) != header["payload_bytes"]:
        raise CorruptFileError(f"{path}: checksum mismatch (payload of {len(payload)} bytes, header says otherwise)")
    if header["kind"] != kind:
        raise CorruptFileError(f"{path}: holds a {header['kind']!r}, expected {kind!r}")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CorruptFileError(f"{path}: unreadable payload ({exc})") from None
    return arrays, header["meta"]
