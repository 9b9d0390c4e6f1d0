"""CLI: encode / index build / index search with a callable encoder, and user errors."""

import json
import zlib

import numpy as np
import pytest

from crossembed.cli import main
from crossembed.encoders import load_encoder, register_encoder
from experiments.__main__ import main as harness_main


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


@pytest.mark.filterwarnings("ignore:every one of the:RuntimeWarning")
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
                "--dtype",
                "float16",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["n_docs"] == 40 and info["dim"] == 32 + 2  # two models, plus their hubness coordinates
    assert info["confidence"] is True and isinstance(info["rank_heads_kept"], bool)  # calibrated by default
    build = ["index", "build", str(tmp_path / "docs.txt"), "--models", "toy-a,toy-b"]
    build += ["--fit-pairs", str(tmp_path / "pairs.tsv"), "--M", "8", "--json", "--quiet"]
    assert main([*build, "-o", str(tmp_path / "plain.uec"), "--hubness", "0", "--no-query-head"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["dim"] == 32 and plain["query_head"] is False and plain["confidence"] is True
    assert main([*build, "-o", str(tmp_path / "raw.uec"), "--no-confidence"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["confidence"] is False and raw["rank_heads_kept"] is None
    ask = ["--query", "the cow sat", "--confidence", "--json"]
    assert main(["index", "search", str(tmp_path / "raw.uec"), *ask]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "confidence" in err
    assert main(["index", "search", str(tmp_path / "i.uec"), *ask, "--query", "a fish"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [0.0 <= g["confidence"] <= 1.0 for g in got] == [True, True] and "cow" in got[0]["hits"][0]["text"]
    assert main(["index", "search", str(tmp_path / "i.uec"), "--query", "the cow sat", "--confidence"]) == 0
    assert "top hit right with probability" in capsys.readouterr().out
    assert main([*build, "-o", str(tmp_path / "bad.uec"), "--hubness", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hubness" in err and not (tmp_path / "bad.uec").exists()
    for exact in ([], ["--exact"]):
        assert (
            main(["index", "search", str(tmp_path / "i.uec"), "--query", "the cow sat", "-k", "3", "--json", *exact])
            == 0
        )
        hits = json.loads(capsys.readouterr().out)[0]["hits"]
        assert len(hits) == 3 and "cow" in hits[0]["text"]
    # a file of text queries, streamed to .jsonl (encoded batch by batch)
    (tmp_path / "q.txt").write_text("the cow sat\nthe fish sat\nthe dog\n")
    out = tmp_path / "hits.jsonl"
    args = ["index", "search", str(tmp_path / "i.uec"), "--queries", str(tmp_path / "q.txt"), "-o", str(out)]
    assert main([*args, "-k", "3", "--batch-size", "2", "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["query"] for r in rows] == [0, 1, 2] and docs[rows[0]["ids"][0]].split()[1] == "cow"


def test_batch_search_of_gaussian_queries_streams_npy_and_jsonl(tmp_path, capsys):
    from crossembed.cli.batch_search import RESULT_DTYPE
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    rng = np.random.default_rng(0)
    mean = rng.normal(size=(300, 12)).astype(np.float32)
    docs = GaussianEmbedding(mean / np.linalg.norm(mean, axis=1, keepdims=True), np.full((300, 12), 0.01, np.float32))
    index = UECIndex(docs, ids=np.arange(300) * 2, config=IndexConfig(M=8, rerank=30))
    index.save(tmp_path / "g.uec")
    q = docs[:25]
    np.save(tmp_path / "q.npy", np.stack([q.mean, q.var]))
    np.savez(tmp_path / "q.npz", mean=q.mean, var=q.var)
    expected = index.search(q, 4)
    for src in ("q.npy", "q.npz"):
        out = tmp_path / f"r_{src}.npy"
        cmd = ["index", "search", str(tmp_path / "g.uec"), "--queries", str(tmp_path / src), "-o", str(out)]
        assert main([*cmd, "-k", "4", "--batch-size", "7", "--quiet", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["n_queries"] == 25
        got = np.load(out)
        assert got.dtype == RESULT_DTYPE and got.shape == (25, 4)
        np.testing.assert_array_equal(got["id"], expected[1])
        np.testing.assert_array_equal(got["score"], expected[0])
    out = tmp_path / "r.jsonl"
    assert (
        main(
            [
                "index",
                "search",
                str(tmp_path / "g.uec"),
                "--queries",
                str(tmp_path / "q.npy"),
                "-o",
                str(out),
                "--exact",
                "--quiet",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    np.testing.assert_array_equal([r["ids"] for r in rows], index.search(q, 10, exact=True)[1])
    # bad inputs: one line, exit 2, and the earlier output is kept
    np.save(tmp_path / "bad.npy", q.mean)
    before = out.read_bytes()
    base = ["index", "search", str(tmp_path / "g.uec")]
    assert main([*base, "--queries", str(tmp_path / "bad.npy"), "-o", str(out)]) == 2
    assert main([*base, "--queries", str(tmp_path / "q.npy"), "-o", str(tmp_path / "r.csv")]) == 2
    assert main([*base, "--query", "x", "-o", str(out)]) == 2
    assert out.read_bytes() == before
    assert capsys.readouterr().err.count("error:") == 3


def test_user_errors_exit_2(tmp_path, capsys):
    assert main(["encode", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "x.npy")]) == 2
    (tmp_path / "empty.txt").write_text("\n\n")
    assert main(["encode", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "x.npy")]) == 2
    (tmp_path / "bad.uec").write_bytes(b"CROSSEMBED\x00garbage")
    assert main(["index", "search", str(tmp_path / "bad.uec"), "--query", "x"]) == 2
    assert main(["index", "search", str(tmp_path / "bad.uec")]) == 2
    assert harness_main(["uec-eval", "--tasks", "mteb"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") >= 5
