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

Format version 2 (:func:`save_arrays`)::

    magic (11 bytes) | header length (8, little endian) | JSON header | .npz payload | SHA-256 (32)

the digest covering every byte before it (header included). The header is a
JSON object ``{"kind": str, "version": 2, "meta": object, "payload_bytes": int}``.

Format version 3 (:func:`save_raw_arrays`, for files too large to hold twice
in memory)::

    magic | header length (8) | JSON header | zero pad | raw arrays, each at a 64-byte boundary | SHA-256 (32)

the header adding ``"arrays": {name: {"dtype", "shape", "offset"}}`` (offsets
from the first array byte, which is the first 64-byte boundary after the
header). It is written and checked in streamed chunks, so neither step holds
the file in memory, and :func:`load_arrays` with ``mmap=True`` returns
read-only memory maps of a version 3 file (after checking its digest).
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
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Collection, Dict, Iterator, Tuple, Union

import numpy as np

PathLike = Union[str, os.PathLike]
_MAGIC = b"CROSSEMBED\x00"
FORMAT_VERSION = 2
RAW_FORMAT_VERSION = 3
_DIGEST = 32  # bytes of the trailing SHA-256 (versions 2 and 3)
_ALIGN = 64  # raw arrays start at multiples of this (cache lines, any dtype)
_CHUNK = 1 << 24  # bytes per streamed write / hash step
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


@contextmanager
def atomic_open(path: PathLike) -> Iterator[BinaryIO]:
    """A binary file handle whose contents replace ``path`` atomically when the block ends.

    The bytes go to a temporary file next to ``path``; on a clean exit it is
    fsync'ed and renamed over ``path`` (then the directory is fsync'ed), on an
    exception it is removed and ``path`` is untouched. For writers that stream
    more than fits in memory; :func:`atomic_write` is the one-buffer form.
    """
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
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(parent)


def atomic_write(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync)."""
    with atomic_open(path) as fh:
        fh.write(data)
    return Path(path)


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


def _pad(n: int) -> int:
    return -n % _ALIGN


def save_raw_arrays(
    path: PathLike, kind: str, arrays: Dict[str, np.ndarray], meta: Dict[str, Any] | None = None
) -> Path:
    """Save named arrays as one checksummed, memory-mappable file (format version 3, above).

    Arrays (memory maps included) are streamed in chunks: nothing the size of
    the file is ever held in memory. Object arrays are refused.
    """
    table, offset = {}, 0
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.hasobject:
            raise TypeError(f"{name} has dtype {a.dtype}: object arrays cannot be saved")
        table[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
        offset += a.nbytes + _pad(a.nbytes)
    header = json.dumps(
        {"kind": kind, "version": RAW_FORMAT_VERSION, "meta": meta or {}, "payload_bytes": offset, "arrays": table},
        sort_keys=True,
    ).encode()
    digest = hashlib.sha256()
    with atomic_open(path) as fh:

        def put(b) -> None:
            digest.update(b)
            fh.write(b)

        prefix = _MAGIC + len(header).to_bytes(8, "little") + header
        put(prefix + b"\0" * _pad(len(prefix)))
        for a in arrays.values():
            flat = np.asarray(a).reshape(-1)
            step = max(1, _CHUNK // max(1, flat.itemsize))
            for s in range(0, flat.size, step):
                put(memoryview(np.ascontiguousarray(flat[s : s + step])).cast("B"))
            put(b"\0" * _pad(flat.nbytes))
        fh.write(digest.digest())
    return Path(path)


def _file_digest(fh: BinaryIO, end: int) -> bytes:
    digest = hashlib.sha256()
    fh.seek(0)
    left = end
    while left > 0:
        chunk = fh.read(min(_CHUNK, left))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.digest()


def _raw_table(path: Path, header: Dict[str, Any]) -> Dict[str, Tuple[np.dtype, Tuple[int, ...], int]]:
    table = header.get("arrays")
    if not isinstance(table, dict):
        raise CorruptFileError(f"{path}: the version 3 header has no array table")
    out = {}
    for name, entry in table.items():
        try:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(x) for x in entry["shape"])
            offset = int(entry["offset"])
        except (TypeError, KeyError, ValueError) as exc:
            raise CorruptFileError(f"{path}: bad entry for array {name!r} ({exc})") from None
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if dtype.hasobject or min(shape, default=0) < 0 or offset < 0 or offset + nbytes > header["payload_bytes"]:
            raise CorruptFileError(f"{path}: array {name!r} does not fit the payload")
        out[name] = (dtype, shape, offset)
    return out


def _load_raw(path: Path, fh: BinaryIO, size: int, start: int, header: Dict[str, Any], mmap: bool):
    data_start = start + _pad(start)
    if size != data_start + header["payload_bytes"] + _DIGEST:
        raise CorruptFileError(f"{path}: checksum mismatch (file of {size} bytes, header says otherwise)")
    fh.seek(size - _DIGEST)
    stored = fh.read(_DIGEST)
    if _file_digest(fh, size - _DIGEST) != stored:
        raise CorruptFileError(f"{path}: checksum mismatch (file truncated or modified)")
    arrays = {}
    for name, (dtype, shape, offset) in _raw_table(path, header).items():
        count = int(np.prod(shape, dtype=np.int64))
        if count and (mmap is True or (mmap is not False and name in mmap)):
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", offset=data_start + offset, shape=shape)
        else:
            fh.seek(data_start + offset)
            arrays[name] = np.fromfile(fh, dtype=dtype, count=count).reshape(shape)
    return arrays


def load_arrays(
    path: PathLike, kind: str, *, mmap: Union[bool, Collection[str]] = False
) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Load a file written by :func:`save_arrays` or :func:`save_raw_arrays`; raise CorruptFileError on any mismatch.

    With ``mmap=True`` a version 3 file's arrays are read-only memory maps
    (its digest is still checked, by a streamed read); a collection of names
    maps only those arrays (default False: none). A version 2 file is
    read into memory either way. Any other version raises CorruptFileError
    naming the version found and the ones supported.
    """
    path = Path(path)
    start = len(_MAGIC) + 8
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(start)
        if not head.startswith(_MAGIC) or len(head) < start:
            raise CorruptFileError(f"{path}: not a crossembed file (bad magic)")
        hlen = int.from_bytes(head[len(_MAGIC) :], "little")
        if hlen > size - start:
            raise CorruptFileError(f"{path}: header length {hlen} runs past the end of the file (truncated?)")
        raw_header = fh.read(hlen)
        header = _header(path, raw_header)
        if header["version"] == RAW_FORMAT_VERSION:
            if header["kind"] != kind:
                _load_raw(path, fh, size, start + hlen, header, False)  # a corrupt file says so first
                raise CorruptFileError(f"{path}: holds a {header['kind']!r}, expected {kind!r}")
            return _load_raw(path, fh, size, start + hlen, header, mmap), header["meta"]
        fh.seek(0)
        blob = fh.read()
    intact = len(blob) >= start + hlen + _DIGEST and hashlib.sha256(blob[:-_DIGEST]).digest() == blob[-_DIGEST:]
    if header["version"] != FORMAT_VERSION:
        raise CorruptFileError(
            f"{path}: format version {header['version']} is not supported "
            f"(expected {FORMAT_VERSION} or {RAW_FORMAT_VERSION})"
        )
    if not intact:
        raise CorruptFileError(f"{path}: checksum mismatch (file truncated or modified)")
    payload = blob[start + hlen : -_DIGEST]
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
