"""How much language (and model-competence) signal the retrieval confidence carries, and its routing bounds.

For each model k and evaluated query q of a ``python -m experiments uec-eval`` task
(cached embeddings, seed 0): the calibrated gap g_k(q) over the documents
(:func:`crossembed.uec.ablations.retrieval_gap`, top 20) and its per-model
z-score over the queries. Reports

* ROC AUC of each model's log gap for "the query is foreign" (0.5: no signal);
* ROC AUC of e5's z-score lead over the best other model for "foreign";
* hard routing on the z-scores (each query to its most confident model):
  e5's share of foreign / English queries and nDCG@10 on the test halves;
* the per-query oracle (the best single model of each query, by its own
  nDCG@10): an upper bound no unsupervised router reaches;
* query-independent fusions, for scale: the calibrated uniform mix, per-query
  z-scored scores (each model's scores standardised over the documents),
  reciprocal-rank fusion (k = 10, 60), and the best fixed weights on a 0.1
  grid of the simplex chosen on each draw's dev half (what any global
  weighting can reach).

    python -m experiments.studies.uec_routing_signal --task freedict --out .uec_work/signal_freedict.json
"""

from __future__ import annotations

import argparse
import json
from typing import Dict, List

import numpy as np

from crossembed.uec import LaplaceEmbedder
from crossembed.uec import ablations as R
from crossembed.uec.metrics import ranking_metrics, roc_auc
from experiments.tasks import dev_test_draws, freedict_task, wordnet_task
from experiments.uec_eval import embed_task

MODELS = ("minilm", "minilm-l3", "e5")


def _unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)


def _ndcg(scores: List[np.ndarray], weights: np.ndarray, relevant) -> np.ndarray:
    """Per-query nDCG@10 of the weighted sum of calibrated cosines (what score mixing ranks by)."""
    mixed = sum(weights[:, k : k + 1] * s for k, s in enumerate(scores))
    return ranking_metrics(np.argsort(-mixed, axis=1)[:, :100], relevant)["ndcg@10"]


def measure(task_name: str) -> Dict[str, object]:
    """The signal and bound figures of one task (module docstring)."""
    ut = wordnet_task(seed=0) if task_name == "wordnet" else freedict_task(seed=0)
    emb = embed_task(ut, MODELS, show_progress_bar=False, num_threads=1)
    ev = ut.eval_queries
    relevant = [ut.task.relevant[i] for i in ev]
    langs = np.array(ut.task.languages)[ev]
    pos = {int(r): i for i, r in enumerate(ev)}
    halves = [
        (np.array([pos[int(r)] for r in dv]), np.array([pos[int(r)] for r in ts]))
        for dv, ts in dev_test_draws(ut, 3, seed=0)
    ]
    tests = [ts for _, ts in halves]
    scores, gaps = [], []
    for m in MODELS:
        e = LaplaceEmbedder(m, hessian="kron", prior_precision="marglik", random_state=0)
        e.fit_embeddings(emb.fit_anchors[m], emb.fit_positives[m])
        q, d = _unit(emb.queries[m][ev]), _unit(emb.docs[m])
        scores.append((q @ d.T) / e.heads_.score_scale)  # calibrated cosines
        gaps.append(R.retrieval_gap(q, d, top=20, scale=e.heads_.score_scale))
    log_gap = np.log(np.maximum(np.stack(gaps, axis=1), 1e-3))
    z = (log_gap - log_gap.mean(axis=0)) / log_gap.std(axis=0)
    k5 = MODELS.index("e5")
    hard = np.eye(len(MODELS))[np.argmax(z, axis=1)]
    nd_hard = _ndcg(scores, hard, relevant)
    single = np.stack([_ndcg(scores, np.eye(len(MODELS))[[k] * len(ev)], relevant) for k in range(len(MODELS))], 1)
    out: Dict[str, object] = {
        "task": ut.name,
        "hard_z_ndcg@10": [100.0 * float(nd_hard[ts].mean()) for ts in tests],
        "oracle_ndcg@10": [100.0 * float(single.max(axis=1)[ts].mean()) for ts in tests],
    }
    out["fusion_ndcg@10"] = _fusions(scores, relevant, halves)
    foreign = langs != "en"
    if foreign.any():
        fo = foreign.astype(float)
        out["auc_log_gap_foreign"] = {m: float(roc_auc(log_gap[:, k], fo)) for k, m in enumerate(MODELS)}
        lead = z[:, k5] - np.delete(z, k5, axis=1).max(axis=1)
        out["auc_e5_z_lead_foreign"] = float(roc_auc(lead, fo))
        out["hard_z_e5_share"] = {
            "foreign": [float(hard[ts[foreign[ts]], k5].mean()) for ts in tests],
            "en": [float(hard[ts[~foreign[ts]], k5].mean()) for ts in tests],
        }
    return out


def _fusions(scores: List[np.ndarray], relevant, halves) -> Dict[str, List[float]]:
    """Test-half nDCG@10 of query-independent fusions of the models' calibrated scores."""

    def ndcg_of(mixed: np.ndarray) -> np.ndarray:
        return ranking_metrics(np.argsort(-mixed, axis=1)[:, :100], relevant)["ndcg@10"]

    def per_test(nd: np.ndarray) -> List[float]:
        return [100.0 * float(nd[ts].mean()) for _, ts in halves]

    z = [(s - s.mean(axis=1, keepdims=True)) / s.std(axis=1, keepdims=True) for s in scores]
    ranks = [np.argsort(np.argsort(-s, axis=1), axis=1) for s in scores]
    out = {
        "uniform_calibrated": per_test(ndcg_of(sum(scores))),
        "per_query_z": per_test(ndcg_of(sum(z))),
        "rrf_10": per_test(ndcg_of(sum(1.0 / (11.0 + r) for r in ranks))),
        "rrf_60": per_test(ndcg_of(sum(1.0 / (61.0 + r) for r in ranks))),
    }
    grid = [(a / 10, b / 10, (10 - a - b) / 10) for a in range(11) for b in range(11 - a)]
    nds = [ndcg_of(sum(w * s for w, s in zip(ws, scores))) for ws in grid]
    best = [max(range(len(grid)), key=lambda g: nds[g][dv].mean()) for dv, _ in halves]
    out["global_weights_chosen_on_dev"] = [100.0 * float(nds[g][ts].mean()) for g, (_, ts) in zip(best, halves)]
    out["global_weights"] = [list(grid[g]) for g in best]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("freedict", "wordnet"), default="freedict")
    ap.add_argument("--out", default=None, help="JSON file (printed as well)")
    args = ap.parse_args()
    res = measure(args.task)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
