"""``uec-eval --confidence --weak-members``: the confidence report, the weak-member rows and the plot, end to end
on the bundled WordNet sample with two hashing encoders (the fixture of test_experiments_commands)."""

from __future__ import annotations

import json

import pytest

from experiments.__main__ import main
from test_experiments_commands import offline  # noqa: F401  (the fixture)

pytest.importorskip("hnswlib")
pytest.importorskip("matplotlib")


def test_confidence_and_weak_members_are_reported(offline, capsys):  # noqa: F811
    out = offline
    argv = ["uec-eval", "--tasks", "wordnet", "--models", "toy-a,toy-b", "--draws", "2", "--row-set", "minimal"]
    argv += ["--no-last-dense", "--confidence", "--weak-members", "trigram", "--quiet"]
    argv += ["--out", str(out / "run.md"), "--confidence-plot", str(out / "conf.png")]
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    res = json.loads((out / "run.json").read_text())[0]
    conf = res["confidence"]
    assert set(conf["auroc"]) == {"confidence", "top1", "margin"}
    assert 0 <= conf["ece"][0] <= 1 and conf["fit_pairs"] > 0
    assert set(conf["risk_coverage"]["confidence"]["accuracy"]) == {f"{c / 10:g}" for c in range(1, 11)}
    weak = res["weak_members"]
    assert set(weak) == {"base", "trigram"} and 0 <= weak["trigram"]["weight"][0] <= 1
    assert set(res["encode_seconds"]) == {"toy-a", "toy-b"}
    md = (out / "run.md").read_text()
    assert "Top-hit confidence of the default" in md and "A weak member added" in md
    assert (out / "conf.png").stat().st_size > 1000
