"""Rated word / document pairs (gensim's test data format) and the STS evaluation of uec-eval."""

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from experiments.rated_pairs import find_sts_dir, lee_documents, load_rated_pairs, simlex999, wordsim353
from experiments.tasks import UECTask
from experiments.uec_eval import TaskEmbeddings
from experiments.uec_sts import (
    DEFAULT_STS_ROW,
    evaluate_sts,
    load_all_results,
    render_all_markdown,
    render_sts_markdown,
    spearman,
)


@pytest.fixture
def sts_dir(tmp_path):
    (tmp_path / "wordsim353.tsv").write_text(
        "# The WordSimilarity-353 Test Collection\n# Word 1\tWord 2\tHuman (mean)\n"
        "love\tsex\t6.77\ntiger\tcat\t7.35\ntiger\ttiger\t10.00\nbook\tpaper\t7.46\n"
    )
    (tmp_path / "simlex999.txt").write_text(
        "# SimLex\n# Word 1\tWord 2\tHuman (mean)\nold\tnew\t1.58\nsmart\tbright\t9.2\n"
    )
    docs = ["The cat sat on the mat.", "Dogs bark at night £5.", "A cat and a dog.", "Markets fell today."]
    (tmp_path / "lee.cor").write_bytes("\n".join(docs).encode("latin-1") + b"\n")
    sim = np.triu(np.full((4, 4), 0.2), 1) + np.eye(4)
    sim[0, 2] = 0.8
    np.savetxt(tmp_path / "similarities0-1.txt", sim, delimiter="\t")
    return tmp_path


def test_rated_pairs_load(sts_dir, monkeypatch):
    ws = wordsim353(sts_dir)
    assert ws.name == "wordsim353" and len(ws) == 4 and ws.left[1] == "tiger" and ws.right[1] == "cat"
    np.testing.assert_allclose(ws.ratings, [6.77, 7.35, 10.0, 7.46])
    assert ws.texts == ["love", "tiger", "book", "sex", "cat", "paper"]
    assert len(simlex999(sts_dir)) == 2
    lee = lee_documents(sts_dir)
    assert len(lee) == 6 and lee.left[1] == "The cat sat on the mat." and lee.right[1] == "A cat and a dog."
    assert lee.ratings[1] == pytest.approx(0.8) and "£5" in lee.right[0]
    monkeypatch.setenv("CROSSEMBED_STS_DIR", str(sts_dir))
    assert len(load_rated_pairs("lee")) == 6
    with pytest.raises(ValueError, match="name"):
        load_rated_pairs("stsb")


def test_rated_pairs_errors(tmp_path, sts_dir, monkeypatch):
    with pytest.raises(FileNotFoundError, match="wordsim353"):
        find_sts_dir(tmp_path / "nowhere")
    (sts_dir / "simlex999.txt").write_text("old\tnew\tfour\n")
    with pytest.raises(ValueError, match="not a number"):
        simlex999(sts_dir)
    (sts_dir / "simlex999.txt").write_text("old new 4\n")
    with pytest.raises(ValueError, match="expected"):
        simlex999(sts_dir)
    np.savetxt(sts_dir / "similarities0-1.txt", np.eye(3))
    with pytest.raises(ValueError, match="3 x 3|expected 4 x 4"):
        lee_documents(sts_dir)
    monkeypatch.delenv("CROSSEMBED_STS_DIR", raising=False)
    monkeypatch.setattr("importlib.metadata.distribution", _no_gensim)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gensim"):
        find_sts_dir()


def _no_gensim(name):
    from importlib.metadata import PackageNotFoundError

    raise PackageNotFoundError(name)


def test_spearman_matches_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    y[:5] = y[5]  # ties
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert spearman(x, -x) == pytest.approx(-1.0)


def _fit_setup(seed=0, D=10):
    rng = np.random.default_rng(seed)
    emb = TaskEmbeddings()
    for name in ("a", "b"):
        A = rng.normal(size=(40, D)).astype(np.float32)
        emb.fit_anchors[name] = A
        emb.fit_positives[name] = (A + 2.0 * rng.normal(size=A.shape)).astype(np.float32)  # some found, some not
        emb.fit_scrambled[name] = rng.normal(size=(20, D)).astype(np.float32)
        emb.docs[name] = rng.normal(size=(30, D)).astype(np.float32)  # the fit task's documents (distractors)
    task = UECTask("toy", None, np.arange(0), [("x", "y")] * 40)
    return task, emb


def test_evaluate_sts_end_to_end(sts_dir, tmp_path):
    task, emb = _fit_setup()
    sets = [wordsim353(sts_dir), lee_documents(sts_dir)]
    rng = np.random.default_rng(1)
    text_emb = {
        p.name: {
            role: {m: rng.normal(size=(len(p.texts), 10)).astype(np.float32) for m in "ab"}
            for role in ("query", "passage")
        }
        for p in sets
    }
    res = evaluate_sts(task, emb, sets, text_emb, models=["a", "b"], prior_precision=2.0)
    rows = res["rows"]
    assert {"a", "b", DEFAULT_STS_ROW, "UEC default, retrieval form (query -> passage, one way)"} <= set(rows)
    for per_set in rows.values():
        assert set(per_set) == {"wordsim353", "lee"}
        assert all(-100 <= rho <= 100 and std >= 0 for rho, std in per_set.values())
    assert set(res["asymmetry"]) == {"wordsim353", "lee"}
    md = "\n".join(render_sts_markdown(res))
    assert "| UEC default: similarity(a, b) (both directions averaged) |" in md and "Spearman" in md
    # the default is the ensemble after fit_confidence: its routing was checked on held-out fit pairs
    assert res["routing_check"]["n_queries"] == 40 and "Routing check of the default" in md
    # saved next to a report and rendered again
    path = tmp_path / "sts.json"
    path.write_text(json.dumps([res]))
    back = load_all_results(path)
    assert back[0]["task"] == "sts" and "STS" in render_all_markdown(back)
    path.write_text(json.dumps([{**res, "rows": {"a": {"lee": [1.0]}}}]))
    with pytest.raises(ValueError, match="results file"):
        load_all_results(path)
