"""``crossembed demo`` end to end on the bundled data, with two hashed bag-of-words encoders standing in for
the real models (the real ones run in the README's first command)."""

import json
import zlib

import numpy as np
import pytest

from crossembed.cli import main
from crossembed.encoders import load_encoder, register_encoder


def _words(seed: int):
    def encode(texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(w.encode(), seed) % 64] += 1.0
        return out

    return encode


@pytest.fixture(scope="module", autouse=True)
def word_encoders():
    for seed, name in enumerate(("words-a", "words-b")):
        register_encoder(name, lambda name=name, seed=seed, **kw: load_encoder(_words(seed), name=name, dim=64))


@pytest.mark.filterwarnings("ignore:every one of the:RuntimeWarning")
def test_demo_reports_the_calibrated_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CROSSEMBED_CACHE", str(tmp_path / "cache"))
    assert main(["demo", "--models", "words-a,words-b", "--json", "--quiet", "--num-threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    check = out["uec_routing_check"]
    assert check["n_queries"] == out["fit"] + out["fit_words"] and isinstance(check["rank_heads_kept"], bool)
    for task, rows in out["retrieval"].items():
        conf = out["uec_confidence"][task]
        assert 0.0 <= conf["mean_confidence"] <= 1.0 and 0.0 <= conf["ece"] <= 1.0
        default = next(r for r in rows if r["method"].startswith("UEC (default"))
        assert conf["top1_accuracy_confident_half"] <= 2 * conf["top1_accuracy"] + 1e-12
        assert default["mrr"] >= conf["top1_accuracy"]  # a right top hit is a reciprocal rank of 1
