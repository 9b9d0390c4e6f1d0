"""The unseen-language task of uec-eval: dev / test languages, its draws, rows and report (synthetic embeddings)."""

import numpy as np
import pytest

from experiments.tasks import RetrievalTask
from experiments.uec_eval import (
    DEFAULT_ROW,
    RANK_ROW,
    TRUE_LANGUAGE_ROW,
    TaskEmbeddings,
    evaluate_task,
    render_markdown,
)
from experiments.uec_languages import LanguageTransferTask, language_draws, unseen_language_task

EN = ["dog", "house", "water", "tree", "garden", "window", "kitchen", "mother", "winter", "bread"]
DE = ["Hund", "Haus", "Wasser", "Baum", "Garten", "Fenster", "Küche", "Mutter", "Winterzeit", "Brot"]
IT = ["cane", "casa", "acqua", "albero", "giardino", "finestra", "cucina", "madre", "inverno", "pane"]


def _task(seed=0, n=30, D=12):
    """'minilm' reads English only (noisy elsewhere), 'e5' every language a little worse."""
    rng = np.random.default_rng(seed)
    words = {"en": EN, "de": DE, "it": IT}
    queries, langs, target = [], [], []
    for lang, ws in words.items():
        for i in range(n):
            queries.append(f"{ws[i % 10]}" + ("" if i < 10 else f" {ws[(i * 3) % 10]}"))
            langs.append(lang)
            target.append(i)
    task = RetrievalTask("toy-languages", queries, [f"gloss {i}" for i in range(n)], [(t,) for t in target], langs)
    fit = [(f"fit {i}", f"gloss {i % n}") for i in range(60)]
    uec = LanguageTransferTask(
        "toy-languages", task, np.arange(len(queries)), fit, ["en"] * 60, dev_languages=["de"], test_languages=["it"]
    )
    truth = rng.normal(size=(n, D))
    emb = TaskEmbeddings()
    for name, noise in (("minilm", {"en": 0.3, "de": 3.0, "it": 3.0}), ("e5", {"en": 0.8, "de": 0.8, "it": 0.8})):
        sd = np.array([noise[l] for l in langs])[:, None]
        emb.queries[name] = (truth[target] + sd * rng.normal(size=(len(queries), D))).astype(np.float32)
        emb.docs[name] = truth.astype(np.float32)
        emb.fit_anchors[name] = (truth[np.arange(60) % n] + 0.5 * rng.normal(size=(60, D))).astype(np.float32)
        emb.fit_positives[name] = truth[np.arange(60) % n].astype(np.float32)
        emb.fit_scrambled[name] = rng.normal(size=(40, D)).astype(np.float32)
    return uec, emb


def test_language_draws_keep_test_languages_off_the_dev_side():
    uec, _ = _task()
    langs = np.array(uec.task.languages)
    draws = language_draws(uec, 3, seed=0)
    for dev, test in draws:
        assert set(langs[dev]) == {"en", "de"} and set(langs[test]) == {"en", "it"}
        assert not set(dev) & set(test)
        assert (langs[dev] == "en").sum() == 15 and (langs[test] == "it").sum() == 15
    assert not np.array_equal(draws[0][1], draws[1][1])


def test_unseen_language_task_checks_its_languages():
    with pytest.raises(ValueError, match="disjoint"):
        unseen_language_task(dev_languages=["de"], test_languages=["de"])
    with pytest.raises(ValueError, match="exclude 'en'"):
        unseen_language_task(dev_languages=["en"], test_languages=["it"])
    with pytest.raises(ValueError, match="at least one"):
        unseen_language_task(dev_languages=["de"], test_languages=[])


def test_language_task_end_to_end():
    pytest.importorskip("langid")
    uec, emb = _task()
    res = evaluate_task(
        uec, emb, models=["minilm", "e5"], n_draws=2, row_set="languages", last_dense=False, show_progress_bar=False
    )
    rows = res["rows"]
    assert {"minilm", "e5", RANK_ROW, DEFAULT_ROW, TRUE_LANGUAGE_ROW, "UEC default - langid"} <= set(rows)
    assert res["languages"] == ["en", "it"] and res["dev_languages"] == ["de"]
    assert "ndcg@10[it]" in rows[DEFAULT_ROW] and "dev_ndcg@10[de]" in rows[DEFAULT_ROW]
    assert "ndcg@10[de]" not in rows[DEFAULT_ROW]
    # the true languages put e5 first on every foreign query
    truth = rows[TRUE_LANGUAGE_ROW]
    assert truth["w_multi[foreign]"][0] > truth["w_multi[en]"][0] + 0.1
    assert all(len(c) == 1 for c in rows["UEC default, prior chosen on dev"]["chosen"])
    md = render_markdown([res])
    assert "dev halves: the dev languages" in md and "UEC default >= best single model" in md
    assert "| e5 |" in md
