"""crossembed._io: every byte under the checksum, strict headers, careful atomic writes (issue 12, item 4)."""

import hashlib
import io
import json
import os
import stat

import numpy as np
import pytest

from crossembed import _io
from crossembed._io import CorruptFileError, atomic_write, load_arrays, save_arrays

KIND = "test.kind"


def _v2(header_obj, payload: bytes) -> bytes:
    """A version-2 file with an arbitrary header and a *valid* trailing digest (a crafted file)."""
    header = json.dumps(header_obj).encode()
    body = _io._MAGIC + len(header).to_bytes(8, "little") + header + payload
    return body + hashlib.sha256(body).digest()


def _payload(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _v1(header_obj, payload: bytes) -> bytes:
    header = json.dumps(header_obj, sort_keys=True).encode()
    return _io._MAGIC + len(header).to_bytes(8, "little") + header + payload


def test_round_trip_and_trailing_digest(tmp_path):
    p = save_arrays(tmp_path / "f.bin", KIND, {"a": np.arange(5)}, {"x": 1, "s": "t"})
    arrays, meta = load_arrays(p, KIND)
    np.testing.assert_array_equal(arrays["a"], np.arange(5))
    assert meta == {"x": 1, "s": "t"}
    blob = p.read_bytes()
    assert hashlib.sha256(blob[:-32]).digest() == blob[-32:]


def test_every_one_byte_edit_is_detected(tmp_path):
    p = save_arrays(tmp_path / "f.bin", KIND, {"a": np.arange(3)}, {"rerank": 100, "M": 16, "temperature": 0.5})
    blob = bytearray(p.read_bytes())
    hlen = int.from_bytes(blob[11:19], "little")
    header_end = 19 + hlen
    positions = list(range(header_end + 40)) + list(range(len(blob) - 40, len(blob)))
    for pos in positions:
        for delta in (1, 0x20):
            bad = bytearray(blob)
            bad[pos] = (bad[pos] + delta) % 256
            q = tmp_path / "bad.bin"
            q.write_bytes(bytes(bad))
            with pytest.raises(CorruptFileError):
                load_arrays(q, KIND)


def test_header_edits_that_keep_valid_json_are_detected(tmp_path):
    p = save_arrays(tmp_path / "f.bin", KIND, {"a": np.arange(3)}, {"rerank": 100, "step": 7})
    blob = p.read_bytes()
    for old, new in (
        (b'"rerank": 100', b'"rerank": 900'),
        (b'"step": 7', b'"step": 8'),
        (b'"version": 2', b'"version": 1'),
    ):
        assert old in blob
        (tmp_path / "e.bin").write_bytes(blob.replace(old, new))
        with pytest.raises(CorruptFileError):
            load_arrays(tmp_path / "e.bin", KIND)


@pytest.mark.parametrize(
    "header",
    [
        [1, 2, 3],
        "a string",
        42,
        None,
        {"version": 2, "meta": {}, "payload_bytes": 0},  # no kind
        {"kind": KIND, "meta": {}, "payload_bytes": 0},  # no version
        {"kind": KIND, "version": 2, "payload_bytes": 0},  # no meta
        {"kind": KIND, "version": 2, "meta": {}},  # no payload_bytes
        {"kind": 5, "version": 2, "meta": {}, "payload_bytes": 0},
        {"kind": KIND, "version": "2", "meta": {}, "payload_bytes": 0},
        {"kind": KIND, "version": 2.0, "meta": {}, "payload_bytes": 0},
        {"kind": KIND, "version": True, "meta": {}, "payload_bytes": 0},
        {"kind": KIND, "version": 2, "meta": [], "payload_bytes": 0},
        {"kind": KIND, "version": 2, "meta": {}, "payload_bytes": "0"},
        {"kind": KIND, "version": 2, "meta": {}, "payload_bytes": 1},
        {"kind": KIND, "version": 3, "meta": {}, "payload_bytes": 0},
        {"kind": "other", "version": 2, "meta": {}, "payload_bytes": 0},
    ],
)
def test_malformed_headers_raise_corrupt_file_error(tmp_path, header):
    payload = _payload(a=np.arange(2))
    if isinstance(header, dict) and header.get("payload_bytes") == 0:
        header = dict(header, payload_bytes=len(payload))
    p = tmp_path / "h.bin"
    p.write_bytes(_v2(header, payload))
    with pytest.raises(CorruptFileError):
        load_arrays(p, KIND)


def test_garbage_payload_and_lengths(tmp_path):
    p = tmp_path / "g.bin"
    p.write_bytes(_v2({"kind": KIND, "version": 2, "meta": {}, "payload_bytes": 5}, b"12345"))
    with pytest.raises(CorruptFileError, match="payload"):
        load_arrays(p, KIND)
    p.write_bytes(_io._MAGIC + (10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(CorruptFileError, match="past the end"):
        load_arrays(p, KIND)
    p.write_bytes(_io._MAGIC + (2).to_bytes(8, "little") + b"[" * 100000 + b"]" * 100000)
    with pytest.raises(CorruptFileError):
        load_arrays(p, KIND)
    p.write_bytes(b"")
    with pytest.raises(CorruptFileError):
        load_arrays(p, KIND)


def test_version_1_files_are_refused_naming_the_version(tmp_path):
    payload = _payload(a=np.arange(4))
    v1 = {
        "kind": KIND,
        "version": 1,
        "meta": {"k": 2},
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
    }
    p = tmp_path / "v1.bin"
    p.write_bytes(_v1(v1, payload))
    with pytest.raises(CorruptFileError, match="format version 1 is not supported \\(expected 2 or 3\\)"):
        load_arrays(p, KIND)
    # a crafted file with a valid digest but an unknown version says the same
    p.write_bytes(_v2(dict(v1, version=7), payload))
    with pytest.raises(ValueError, match="format version 7 is not supported"):
        load_arrays(p, KIND)


def test_atomic_write_keeps_permissions_and_uses_umask_for_new_files(tmp_path):
    p = tmp_path / "perm.bin"
    atomic_write(p, b"one")
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~_io._umask()
    os.chmod(p, 0o640)
    atomic_write(p, b"two")
    assert p.read_bytes() == b"two"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640


def test_atomic_write_fsyncs_the_directory(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write(tmp_path / "d.bin", b"x")
    assert synced == [False, True]  # the file, then its directory after the rename


def test_atomic_write_cleans_stale_temp_files_of_the_same_target(tmp_path):
    target = tmp_path / "t.bin"
    dead = tmp_path / ".t.bin.999999999.abc123.tmp"  # a pid that cannot exist
    alive = tmp_path / f".t.bin.{os.getpid()}.zzz.tmp"  # a writer still running: kept
    legacy_old = tmp_path / ".t.bin.q1w2e3r4.tmp"  # pre-pid name, old: removed
    legacy_new = tmp_path / ".t.bin.a1s2d3f4.tmp"  # pre-pid name, fresh: kept
    other = tmp_path / ".other.bin.999999999.abc.tmp"  # another target's: kept
    for f in (dead, alive, legacy_old, legacy_new, other):
        f.write_bytes(b"junk")
    os.utime(legacy_old, (1e9, 1e9))
    atomic_write(target, b"data")
    assert not dead.exists() and not legacy_old.exists()
    assert alive.exists() and legacy_new.exists() and other.exists()
    assert target.read_bytes() == b"data"
    leftovers = [f.name for f in tmp_path.iterdir() if f.name.startswith(".t.bin.")]
    assert sorted(leftovers) == sorted([alive.name, legacy_new.name])


def test_atomic_write_rejects_directories_and_paths_under_files(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, b"x")
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        atomic_write(f / "sub.bin", b"x")
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "missing" / "x.bin", b"x")


def test_index_and_checkpoint_header_edits_are_detected(tmp_path):
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    rng = np.random.default_rng(0)
    docs = GaussianEmbedding(rng.normal(size=(50, 4)).astype(np.float32), rng.random((50, 4)).astype(np.float32))
    p = UECIndex(docs, config=IndexConfig(M=8, ef_construction=20, rerank=30)).save(tmp_path / "i.uec")
    blob = p.read_bytes()
    for old, new in ((b'"rerank": 30', b'"rerank": 90'), (b'"M": 8', b'"M": 9')):
        assert old in blob
        (tmp_path / "e.uec").write_bytes(blob.replace(old, new))
        with pytest.raises(CorruptFileError):
            UECIndex.load(tmp_path / "e.uec")
    assert UECIndex.load(p).config.rerank == 30


def test_raw_version_3_files_stream_memory_map_and_detect_corruption(tmp_path):
    from crossembed._io import save_raw_arrays

    arrays = {"a": np.arange(10, dtype=np.int64), "h": np.ones((3, 5), np.float16), "e": np.zeros((0, 4), np.float32)}
    p = save_raw_arrays(tmp_path / "r.bin", KIND, arrays, {"x": 1})
    for mmap in (False, True):
        back, meta = load_arrays(p, KIND, mmap=mmap)
        assert meta == {"x": 1} and isinstance(back["a"], np.memmap) == mmap
        for k, v in arrays.items():
            assert back[k].dtype == v.dtype
            np.testing.assert_array_equal(back[k], v)
    back, _ = load_arrays(p, KIND, mmap={"h"})  # only the named arrays mapped
    assert isinstance(back["h"], np.memmap) and not isinstance(back["a"], np.memmap)
    np.testing.assert_array_equal(back["h"], arrays["h"])
    blob = p.read_bytes()
    for bad in (blob[:-3], blob[:40] + bytes([blob[40] ^ 1]) + blob[41:], blob[:-50] + b"\x01" + blob[-49:]):
        (tmp_path / "b.bin").write_bytes(bad)
        with pytest.raises(CorruptFileError):
            load_arrays(tmp_path / "b.bin", KIND, mmap=True)
    with pytest.raises(CorruptFileError, match="expected"):
        load_arrays(p, "other")
    with pytest.raises(TypeError, match="object"):
        save_raw_arrays(tmp_path / "o.bin", KIND, {"o": np.array([object()])})
