"""CLI: encode / index build / index search with a callable encoder, and user errors."""

import json
import zlib

import numpy as np
import pytest

from crossembed.cli import main
from crossembed.encoders import load_encoder, register_encoder

pytest.importorskip("hnswlib")


def _toy(texts):
    out = np.zeros((len(texts), 16), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, zlib.crc32(w.encode()) % 16] += 1.0  # deterministic across processes
        out[i, len(t) % 16] += 0.1
    return out


@pytest.fixture(scope="module", autouse=True)
def toy_encoders():
    for name in ("toy-a", "toy-b"):
        register_encoder(name, lambda name=name, **kw: load_encoder(_toy, name=name, dim=16), overwrite=True)


def test_encode_build_search(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CROSSEMBED_CACHE", str(tmp_path / "cache"))  # keep the toy embeddings out of the user cache
    docs = [f"the {w} sat on the mat number {i}" for i, w in enumerate(["cat", "dog", "bird", "fish", "cow"] * 8)]
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n\n")
    pairs = "\n".join(f"{d}\t{d.replace('the', 'a')}" for d in docs)
    (tmp_path / "pairs.tsv").write_text(pairs)
    assert (
        main(
            [
                "encode",
                str(tmp_path / "docs.txt"),
                "-o",
                str(tmp_path / "e.npy"),
                "--model",
                "toy-a",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    assert np.load(tmp_path / "e.npy").shape == (40, 16)
    capsys.readouterr()
    assert (
        main(
            [
                "index",
                "build",
                str(tmp_path / "docs.txt"),
                "-o",
                str(tmp_path / "i.uec"),
                "--models",
                "toy-a,toy-b",
                "--fit-pairs",
                str(tmp_path / "pairs.tsv"),
                "--M",
                "8",
                "--rerank",
                "20",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["n_docs"] == 40 and info["dim"] == 32
    for exact in ([], ["--exact"]):
        assert (
            main(["index", "search", str(tmp_path / "i.uec"), "--query", "the cow sat", "-k", "3", "--json", *exact])
            == 0
        )
        hits = json.loads(capsys.readouterr().out)[0]["hits"]
        assert len(hits) == 3 and "cow" in hits[0]["text"]


def test_user_errors_exit_2(tmp_path, capsys):
    assert main(["encode", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "x.npy")]) == 2
    (tmp_path / "empty.txt").write_text("\n\n")
    assert main(["encode", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "x.npy")]) == 2
    (tmp_path / "bad.uec").write_bytes(b"CROSSEMBED\x00garbage")
    assert main(["index", "search", str(tmp_path / "bad.uec"), "--query", "x"]) == 2
    assert main(["index", "search", str(tmp_path / "bad.uec")]) == 2
    assert main(["uec-eval", "--tasks", "mteb"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") >= 5
