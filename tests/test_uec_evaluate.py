"""Retrieval metrics against hand computations, and the evaluation harness on tiny synthetic data."""

import json
import math

import numpy as np
import pytest

from crossembed.uec.metrics import expected_calibration_error, ranking_metrics, roc_auc
from experiments.tasks import RetrievalTask, UECTask, dev_test_draws
from experiments.uec_eval import TaskEmbeddings, evaluate_task, render_markdown
from experiments.uec_metrics import fit_confidence_temperature, top1_confidence


def test_ranking_metrics_by_hand():
    top = np.array([[5, 1, 2, 3, 4, 0, 6, 7, 8, 9, 10, 11], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 10]])
    m = ranking_metrics(top, [(1,), (10, 3)])
    assert m["ndcg@10"][0] == pytest.approx(1 / math.log2(3))
    idcg = 1 + 1 / math.log2(3)
    assert m["ndcg@10"][1] == pytest.approx((1 / math.log2(8)) / idcg)
    assert m["recall@10"].tolist() == [1.0, 0.5]
    assert m["recall@100"].tolist() == [1.0, 1.0]
    assert m["mrr"].tolist() == pytest.approx([0.5, 1 / 7])
    assert m["hit@1"].tolist() == [0.0, 0.0] and m["hit@10"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="relevant"):
        ranking_metrics(top, [(1,)])


def test_roc_auc_and_ece_by_hand():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([1, 1, 1], [0, 1, 1]) == pytest.approx(0.5)  # ties count half
    assert math.isnan(roc_auc([1, 2], [1, 1]))
    conf = np.array([0.05, 0.15, 0.95, 0.95])
    corr = np.array([0, 1, 1, 0])
    # bins: [0.0,0.067): 0.05 vs 0; [0.133,0.2): 0.15 vs 1; last bin: 0.95 vs 0.5
    expected = 0.25 * 0.05 + 0.25 * 0.85 + 0.5 * 0.45
    assert expected_calibration_error(conf, corr) == pytest.approx(expected)
    with pytest.raises(ValueError):
        expected_calibration_error([1.5], [1])


def test_confidence_temperature_recovers_a_calibrated_tau():
    rng = np.random.default_rng(0)
    scores = np.sort(rng.normal(size=(4000, 20)), axis=1)[:, ::-1] * 0.1
    p = top1_confidence(scores, 0.05)
    correct = rng.random(4000) < p
    tau = fit_confidence_temperature(scores, correct)
    assert 0.035 < tau < 0.07
    assert expected_calibration_error(top1_confidence(scores, tau), correct) < 0.03


def _tiny_task(seed=0):
    """Two 'models' of a 12-d world: model a is good for 'en', model b for 'de'."""
    rng = np.random.default_rng(seed)
    n_docs, D = 60, 12
    truth = rng.normal(size=(n_docs, D))
    docs_txt = [f"doc{i}" for i in range(n_docs)]
    q_lang = ["en"] * 40 + ["de"] * 40
    target = rng.integers(0, n_docs, 80)
    task = RetrievalTask("tiny", [f"q{i}" for i in range(80)], docs_txt, [(int(t),) for t in target], q_lang)
    fit = [(f"f{i}", docs_txt[i % n_docs]) for i in range(64)]
    uec = UECTask("tiny", task, np.arange(80), fit, ["en"] * 32 + ["de"] * 32)
    emb = TaskEmbeddings()
    for name, good in (("a", "en"), ("b", "de")):
        noise = np.array([0.3 if l == good else 2.0 for l in q_lang])[:, None]
        emb.queries[name] = (truth[target] + noise * rng.normal(size=(80, D))).astype(np.float32)
        emb.docs[name] = truth.astype(np.float32)
        emb.fit_anchors[name] = (truth[np.arange(64) % n_docs] + 0.5 * rng.normal(size=(64, D))).astype(np.float32)
        emb.fit_positives[name] = truth[np.arange(64) % n_docs].astype(np.float32)
    return uec, emb


def test_dev_test_draws_are_disjoint_and_stratified():
    uec, _ = _tiny_task()
    draws = dev_test_draws(uec, 3, seed=1)
    assert len(draws) == 3
    for dev, test in draws:
        assert not set(dev) & set(test) and len(dev) + len(test) == 80
        assert (np.array(uec.task.languages)[dev] == "en").sum() == 20
    assert not np.array_equal(draws[0][0], draws[1][0])
    with pytest.raises(ValueError):
        dev_test_draws(uec, 0)


def test_a_routing_given_by_object_or_name_is_a_row_of_its_own():
    from crossembed.uec import UniformRouting

    uec, emb = _tiny_task()
    res = evaluate_task(
        uec,
        emb,
        models=["a", "b"],
        n_draws=1,
        row_set="core",
        routings=["crossembed.uec:LaplaceRouting", UniformRouting()],
        show_progress_bar=False,
    )
    named, given = "routing: crossembed.uec:LaplaceRouting", "routing: UniformRouting()"
    assert {named, given} <= set(res["rows"])
    assert list(res["rows"][named]["chosen"][0]) == ["temperature"]  # T chosen on dev: the routing has one
    assert "chosen" not in res["rows"][given]  # nothing to tune
    assert 0.0 <= res["rows"][given]["ndcg@10"][0] <= 100.0  # in percent


def test_evaluate_task_end_to_end():
    uec, emb = _tiny_task()
    res = evaluate_task(uec, emb, models=["a", "b"], n_draws=2, multilingual="b", show_progress_bar=False)
    rows = res["rows"]
    assert set(rows) >= {
        "a",
        "b",
        "paper: kron, score mixing",
        "official: diag, embedding mixing",
        "official: kron, score mixing",
        "confidence (sigma^2 in the probit, score mixing)",
        "UEC default (as shipped)",
        "UEC default - Unc Conv",
        "UEC default - hubness",
        "a + hubness (CSLS)",
        "uniform ensemble (calibrated scores) + hubness (CSLS)",
        "a + query head + hubness",
        "uniform ensemble (calibrated scores) + query head + hubness",
        "UEC default - query head",
    }
    # only the default's kron posteriors carry query heads (the diag rows score without them)
    assert all(isinstance(p["query_head_penalty"], float) for k, p in res["posteriors"].items() if k.endswith("/kron"))
    assert all(p["query_head_penalty"] is None for k, p in res["posteriors"].items() if k.endswith("/diag"))
    if np.isfinite(res["posteriors"]["a/kron"]["query_head_penalty"]):  # a head that moved a's queries
        assert rows["a + query head + hubness"]["ndcg@10"] != rows["a + hubness (CSLS)"]["ndcg@10"]
    # the hubness rows differ from their plain twins; the baselines and variants score without it
    assert rows["a + hubness (CSLS)"]["ndcg@10"] != rows["a"]["ndcg@10"]
    assert rows["UEC default - hubness"]["ndcg@10"] != rows["UEC default (as shipped)"]["ndcg@10"]
    # last_dense needs a torch model: absent here, so its rows are skipped with a reason
    assert "last_dense: paper, score mixing" not in rows and res["skipped"]["last_dense"]
    for row in rows.values():
        for key in ("ndcg@10", "recall@10", "recall@100", "mrr", "auc@10", "ece", "ndcg@10[en]", "ndcg@10[de]"):
            mean, std = row[key]
            assert (math.isnan(mean) and key == "auc@10") or (mean >= 0 and std >= 0)
    # the per-language experts: a wins on en, b on de
    assert rows["a"]["ndcg@10[en]"][0] > rows["b"]["ndcg@10[en]"][0]
    assert rows["b"]["ndcg@10[de]"][0] > rows["a"]["ndcg@10[de]"][0]
    # confidence routing sends the 'de' queries to b (its expert) more than the 'en' ones
    conf = rows["confidence (sigma^2 in the probit, score mixing)"]
    assert conf["w_multi[foreign]"][0] > conf["w_multi[en]"][0] + 0.1
    assert conf["ndcg@10"][0] > rows["uniform ensemble (calibrated scores)"]["ndcg@10"][0]
    assert res["best_dev_variant"] in rows
    for per_lang in res["coefficients"].values():
        for w in per_lang.values():
            assert sum(w) == pytest.approx(1.0, abs=1e-5)
    md = render_markdown([res], command="python -m experiments uec-eval --test")
    assert "| paper: kron, score mixing |" in md and "Findings" in md and "uec-eval --test" in md
    assert "w(b) foreign" in md and "vs uniform ensemble (calibrated scores) + hubness (CSLS)" in md
    assert "vs uniform ensemble (calibrated scores) + query head + hubness" in md and "| query head |" in md
    json.dumps(res, default=float)
    core = evaluate_task(uec, emb, models=["a", "b"], n_draws=2, row_set="core", show_progress_bar=False)
    assert "UEC default (as shipped)" in core["rows"] and "paper: diag, score mixing" not in core["rows"]
    assert core["rows"]["UEC default (as shipped)"]["ndcg@10"] == rows["UEC default (as shipped)"]["ndcg@10"]
    with pytest.raises(ValueError, match="row_set"):
        evaluate_task(uec, emb, models=["a", "b"], row_set="some", show_progress_bar=False)


def test_perf_benchmarks_on_a_small_synthetic_index():
    from experiments.uec_perf import benchmark_fit, benchmark_search, render_perf_markdown

    run = benchmark_search(2000, 64, n_queries=50, reranks=(20, 2000), M=8, ef_construction=50, show_progress_bar=False)
    assert run["n_docs"] == 2000 and [a["rerank"] for a in run["ann"]] == [20, 2000]
    assert run["ann"][-1]["recall@10_vs_exact"] > 0.99  # reranking every document is exact
    assert run["float16_exact_recall@10"] > 0.95
    assert run["store_bytes_per_doc"] == 9 and run["graph_bytes_per_doc"] >= 64 * 4  # no variances; means once
    half = benchmark_search(
        300,
        16,
        n_queries=10,
        reranks=(20,),
        M=8,
        ef_construction=20,
        dtype="float16",
        var_scale=0.016,
        show_progress_bar=False,
    )
    assert half["store_bytes_per_doc"] == 16 * 2 + 9 and "float16_exact_recall@10" not in half
    fits = benchmark_fit(200, 64)
    assert {(f["hessian"], f["curvature"]) for f in fits} == {(h, c) for h in ("kron", "diag") for c in ("ggn", "ef")}
    md = render_perf_markdown([run], fits=fits, command="python -m experiments uec-perf --test")
    assert "| 2,000 | 64 | float32 | none |" in md and "uec-perf --test" in md


def test_perf_reuses_a_saved_index_with_the_same_settings(tmp_path):
    from experiments.uec_perf import benchmark_search

    kw = dict(n_queries=20, reranks=(10,), M=8, ef_construction=20, show_progress_bar=False, index_dir=tmp_path)
    built = benchmark_search(500, 32, **kw)
    (saved,) = tmp_path.glob("*.uec")
    again = benchmark_search(500, 32, **kw)  # read back: same build record, same queries, same answers
    assert again["build_seconds"] == built["build_seconds"]
    assert again["ann"][0]["recall@10_vs_exact"] == built["ann"][0]["recall@10_vs_exact"]
    benchmark_search(500, 32, **{**kw, "seed": 1})  # another draw is another file
    assert len(list(tmp_path.glob("*.uec"))) == 2
    saved.with_name(saved.name + ".run").write_bytes(b"not a run file")
    with pytest.raises(ValueError, match="index_dir"):
        benchmark_search(500, 32, **kw)


def test_row_options_build_the_behaviour_objects():
    from crossembed.uec import (
        EmbeddingMixing,
        FixedRouting,
        LaplaceEmbedder,
        ProbitScoring,
        RankRouting,
        ScoreMixing,
        UniformRouting,
    )
    from crossembed.uec.ablations import BetaCosineScoring, PrecisionSumRouting
    from experiments.uec_configs import build_ensemble
    from experiments.uec_rules import CalibratedConfidenceRouting

    uec, emb = _tiny_task()
    embs = [
        LaplaceEmbedder(None, prior_precision=2.0).fit_embeddings(emb.fit_anchors[m], emb.fit_positives[m])
        for m in "ab"
    ]
    default = build_ensemble(embs)
    assert type(default.routing) is RankRouting and type(default.mixing) is ScoreMixing
    assert type(default.scoring) is ProbitScoring and default.mixing.hubness == 0.5
    assert type(build_ensemble(embs, weights="uniform").routing) is UniformRouting
    assert type(build_ensemble(embs, weights=[1.0, 3.0]).routing) is FixedRouting
    off = build_ensemble(embs, uncertainty="laplace", rules="official", beta=0.0)
    assert type(off.routing) is PrecisionSumRouting and type(off.scoring) is BetaCosineScoring
    assert off.scoring.beta == 0.0 and off.mixing.hubness == 0.0 and off.mixing.query_head is False
    conf = build_ensemble(embs, uncertainty="confidence", confidence_scoring="laplace", standardize_confidence=True)
    assert type(conf.routing) is CalibratedConfidenceRouting and conf.routing.laplace_variances
    assert conf.routing.standardize
    assert type(build_ensemble(embs, mixing="embedding").mixing) is EmbeddingMixing
    assert build_ensemble(embs, use_variance=False).scoring.use_variance is False
    with pytest.raises(ValueError, match="unknown ensemble options"):
        build_ensemble(embs, confidence_top=5)
    with pytest.raises(ValueError, match="confidence_scoring"):
        build_ensemble(embs, confidence_scoring="add")
    with pytest.raises(ValueError, match="mixing"):
        build_ensemble(embs, mixing="average")
    with pytest.raises(ValueError, match="hubness"):
        build_ensemble(embs, mixing="embedding", hubness=0.5)
    # a routing object or an importable class name, at the row's temperature
    given = build_ensemble(embs, routing=RankRouting(0.3, laplace_variances=True), temperature=2.0)
    assert given.routing == RankRouting(2.0, laplace_variances=True)
    assert build_ensemble(embs, routing="crossembed.uec:LaplaceRouting", temperature=3.0).routing.temperature == 3.0
    with pytest.raises(TypeError, match="Routing"):
        build_ensemble(embs, routing="crossembed.uec:UECEnsemble")


def test_perf_out_replaces_its_block_and_keeps_the_guide(tmp_path):
    from pathlib import Path

    from experiments.__main__ import main

    runs = Path(__file__).resolve().parents[1] / "docs" / "uec_perf.json"
    doc = tmp_path / "perf.md"
    doc.write_text("<!-- uec-perf:start -->\nstale table\n<!-- uec-perf:end -->\n\n## The runs\n\nhand-written guide\n")
    argv = ["uec-perf", "--sizes", "", "--fit-pairs", "0", "--from-json", str(runs), "--out", str(doc), "--quiet"]
    assert main(argv) == 0
    text = doc.read_text()
    assert "stale table" not in text and "# UEC throughput" in text and "| 1,000,000 | 1152 | float16 |" in text
    assert text.endswith("## The runs\n\nhand-written guide\n")
