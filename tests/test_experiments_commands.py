"""Every command of the research harness (``python -m experiments``) at its smallest setting.

The drivers behind docs/ run here end to end (tasks, fits, tables, files written) in seconds: on a
WordNet written from the bundled sample (every part of speech gets the same 200 synsets) and two
hashing encoders registered in-process, so they need no installed data set and no model. A new
command must get a smallest run here, or in the test module named in ``ELSEWHERE``.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from crossembed.data import load_bundled_wordnet
from crossembed.encoders import load_encoder, register_encoder
from experiments.__main__ import build_parser, main

pytest.importorskip("hnswlib")

TESTS = Path(__file__).resolve().parent
#: commands whose smallest run lives in another test module (it needs its own generated data)
ELSEWHERE = {"uncha-table": "test_hyperbolic_commands.py", "uncha-curve": "test_hyperbolic_commands.py"}


def _smallest(out: Path) -> dict:
    """Each command's smallest setting and the files it must write (under ``out``)."""
    toy = ["--models", "toy-a,toy-b"]
    return {
        "uec-eval": (
            ["uec-eval", "--tasks", "wordnet", *toy, "--draws", "1", "--row-set", "core", "--no-last-dense"]
            + ["--cache-dir", out / "cache", "--out", out / "uec.md", "--plot", out / "uec.png", "--quiet"],
            ["uec.md", "uec.json", "uec.png"],
        ),
        "uec-perf": (
            ["uec-perf", "--sizes", "200x16", "--queries", "20", "--reranks", "10", "--fit-pairs", "0"]
            + ["--index-dir", out / "indexes", "--out", out / "perf.md", "--quiet"],
            ["perf.md"],
        ),
        "link-table": (
            ["link-table", "--pairs", "toy-a:toy-b:120", "--settings", "0.5:15", "--draws", "1", "--n-objects", "60"]
            + ["--max-iter", "1", "--results", out / "links.json", "--out", out / "linking.md"],
            ["links.json", "linking.md"],
        ),
        "link-scale": (
            ["link-scale", "--sizes", "16", "--view-sizes", "256", "--max-iter", "1"]
            + ["--results", out / "scale.json", "--plot", out / "scale.png"],
            ["scale.json", "scale.png"],
        ),
    }


def _commands() -> set:
    sub = build_parser()._subparsers._group_actions[0]
    return set(sub.choices)


def _hashing_encoder(name: str):
    """Bag of hashed words (the hash seeded by ``name``, so the two encoders differ), unit rows."""

    def encode(texts):
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(f"{name}:{word}".encode()) % 16] += 1.0
            out[i, len(text) % 16] += 0.1
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return encode


def _wordnet_line(synset, letter: str) -> str:
    """``synset`` as a line of WordNet's ``data.*`` files (no pointers; the gloss then its quoted examples)."""
    words = " ".join(f"{lemma.replace(' ', '_')} 0" for lemma in synset.lemmas)
    examples = "; ".join(f'"{e}"' for e in synset.examples)
    return f"{synset.offset:08d} 00 {letter} {len(synset.lemmas):02x} {words} 000 | {synset.gloss}; {examples}\n"


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """A WordNet from the bundled sample, two hashing encoders, and the caches under ``tmp_path``."""
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    synsets = load_bundled_wordnet()[:200]
    for pos, letter in (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")):
        (wordnet / f"data.{pos}").write_text("".join(_wordnet_line(s, letter) for s in synsets), encoding="utf-8")
    monkeypatch.setenv("CROSSEMBED_WORDNET_DIR", str(wordnet))
    monkeypatch.setenv("CROSSEMBED_CACHE", str(tmp_path / "cache"))
    for name in ("toy-a", "toy-b"):
        register_encoder(name, lambda name=name, **_: load_encoder(_hashing_encoder(name), name=name), overwrite=True)
    out = tmp_path / "out"
    out.mkdir()
    return out


def test_every_command_has_a_smallest_run():
    commands = _commands()
    covered = set(_smallest(Path("out"))) | set(ELSEWHERE)
    assert commands <= covered, sorted(commands - covered)
    for command, module in ((c, m) for c, m in ELSEWHERE.items() if c in commands):
        assert f'"{command}"' in (TESTS / module).read_text(encoding="utf-8"), (command, module)


@pytest.mark.parametrize("command", sorted(_smallest(Path("out"))))
def test_the_smallest_setting_runs(offline, capsys, command):
    argv, files = _smallest(offline)[command]
    assert main([str(a) for a in argv]) == 0, capsys.readouterr().err[-2000:]
    for name in files:
        assert (offline / name).stat().st_size > 0, name
    for name in (n for n in files if n.endswith(".json")):
        assert json.loads((offline / name).read_text(encoding="utf-8"))
