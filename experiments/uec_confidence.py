"""How good the default ensemble's top-hit confidence is: AUROC, ECE, risk-coverage, reliability.

The confidence (:meth:`crossembed.uec.UECEnsemble.fit_confidence`) is calibrated on the task's
fit pairs, cross-fitted (each fold's anchors searched, among the distinct fit positives and the
task's documents, by heads fitted on the other folds; no evaluated query or label is read). Each
test half of each draw then gets:

* ROC AUC for "the top-1 hit is relevant" of the confidence and of the two plain baselines, the
  top-1 score and the top-1 minus top-2 margin (the same ranking, the same queries);
* the expected calibration error of the confidence (15 equal-width bins);
* the risk-coverage curve: top-1 accuracy and nDCG@10 of the most confident x % of the queries,
  per signal, and its area (mean top-1 error over the coverages, lower is better).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from crossembed.uec.confidence import DEPTH, FEATURES
from crossembed.uec.metrics import expected_calibration_error, ranking_metrics, roc_auc

__all__ = ["COVERAGES", "SIGNALS", "evaluate_confidence", "plot_confidence", "render_confidence"]

COVERAGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: what ranks the queries: the calibrated confidence and the two plain baselines
SIGNALS = ("confidence", "top1", "margin")
_BINS = 10


def _summary(values) -> List[float]:
    a = np.asarray(values, dtype=np.float64)
    return [float(a.mean()), float(a.std())]


def _by_signal(signal: np.ndarray, hit: np.ndarray, ndcg: np.ndarray) -> Dict[str, Any]:
    """Top-1 accuracy and nDCG@10 of the most confident fraction, per coverage (stable order on ties)."""
    order = np.argsort(-signal, kind="stable")
    out = {}
    for c in COVERAGES:
        top = order[: max(1, int(round(c * len(order))))]
        out[f"{c:g}"] = (float(hit[top].mean()), float(ndcg[top].mean()))
    return out


def evaluate_confidence(fitted, queries, docs, relevant: Sequence[Sequence[int]], draws, *, texts=None) -> dict:
    """The confidence's report on one task (module docstring), JSON-ready.

    Parameters
    ----------
    fitted : UECEnsemble
        The ensemble whose confidence is judged (the default after ``fit_confidence``).
    queries, docs : list of K GaussianEmbeddings
        The evaluated queries and the documents, per model.
    relevant : list of sequences of int
        Relevant documents per evaluated query.
    draws : list of (dev, test) position arrays
        Only the test halves are scored (the confidence tunes nothing on dev).
    texts : list of str or None
        The evaluated queries' texts (for a routing that reads them).
    """
    q = fitted.combine(queries, role="query", texts=texts if fitted.needs_texts else None)
    d = fitted.combine(docs, role="passage")
    scores, idx = fitted.topk(q, d, min(100, len(d)))
    metrics = ranking_metrics(idx, relevant)
    hit, ndcg = metrics["hit@1"].astype(bool), metrics["ndcg@10"]
    conf, feats = [], []
    for s in range(0, len(q), 512):
        block = (q[s : s + 512], scores[s : s + 512, :DEPTH], d.mean[idx[s : s + 512, :DEPTH]])
        conf.append(fitted.top_hit_confidence(*block))
        feats.append(fitted.search_features(*block))
    signals = {"confidence": np.concatenate(conf)}
    f = np.concatenate(feats)
    signals["top1"], signals["margin"] = f[:, FEATURES.index("top1")], f[:, FEATURES.index("margin")]
    auroc: Dict[str, list] = {name: [] for name in SIGNALS}
    ece, accuracy, curves = [], [], {name: [] for name in SIGNALS}
    for _, ts in draws:
        for name in SIGNALS:
            auroc[name].append(roc_auc(signals[name][ts], hit[ts]))
            curves[name].append(_by_signal(signals[name][ts], hit[ts], ndcg[ts]))
        ece.append(expected_calibration_error(signals["confidence"][ts], hit[ts]))
        accuracy.append(hit[ts].mean())
    ts = draws[0][1]
    which = np.minimum((signals["confidence"][ts] * _BINS).astype(int), _BINS - 1)
    reliability = [
        [
            float(signals["confidence"][ts][which == b].mean()),
            float(hit[ts][which == b].mean()),
            int((which == b).sum()),
        ]
        for b in range(_BINS)
        if (which == b).any()
    ]
    c = fitted.confidence_
    risk = {
        name: {
            "accuracy": {cov: _summary([r[cov][0] for r in curves[name]]) for cov in curves[name][0]},
            "ndcg@10": {cov: _summary([r[cov][1] for r in curves[name]]) for cov in curves[name][0]},
            "aurc": _summary([np.mean([1.0 - v[0] for v in r.values()]) for r in curves[name]]),
        }
        for name in SIGNALS
    }
    return {
        "auroc": {name: _summary(v) for name, v in auroc.items()},
        "ece": _summary(ece),
        "test_accuracy": _summary(accuracy),
        "mean_confidence": _summary([signals["confidence"][t].mean() for _, t in draws]),
        "fit_accuracy": c.fit_accuracy,
        "fit_pairs": c.n_pairs,
        "coef": dict(zip(FEATURES, c.coef)),
        "risk_coverage": risk,
        "reliability": reliability,
    }


def render_confidence(res: Dict[str, Any]) -> List[str]:
    """Markdown tables of one task's :func:`evaluate_confidence` (``res["confidence"]``)."""
    c = res["confidence"]

    def f(pair, digits=3):
        return f"{pair[0]:.{digits}f} ± {pair[1]:.{digits}f}"

    lines = [
        f"Top-hit confidence of the default (calibrated on {c['fit_pairs']} fit pairs, top-1 accuracy there "
        f"{c['fit_accuracy']:.3f}; test top-1 accuracy {f(c['test_accuracy'])}, mean confidence "
        f"{f(c['mean_confidence'])}, ECE {f(c['ece'])}):",
        "",
        "| signal | AUROC (top-1 relevant) | AURC (lower is better) | "
        + " | ".join(f"acc@{cov}" for cov in ("0.1", "0.3", "0.5", "1"))
        + " |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in SIGNALS:
        r = c["risk_coverage"][name]
        accs = " | ".join(f"{r['accuracy'][cov][0]:.3f}" for cov in ("0.1", "0.3", "0.5", "1"))
        lines.append(f"| {name} | {f(c['auroc'][name])} | {f(r['aurc'])} | {accs} |")
    lines += [
        "",
        "Logistic coefficients (standardised features): " + ", ".join(f"{k} {v:+.2f}" for k, v in c["coef"].items()),
        "",
    ]
    return lines


def plot_confidence(results: Sequence[Dict[str, Any]], path) -> None:
    """PNG: per task with a confidence report, the reliability diagram and the risk-coverage curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [r for r in results if "confidence" in r]
    if not tasks:
        raise ValueError("no result has a confidence report (run uec-eval with --confidence)")
    fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7.5), squeeze=False)
    for j, res in enumerate(tasks):
        c = res["confidence"]
        ax = axes[0, j]
        rel = np.array(c["reliability"])
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        ax.plot(rel[:, 0], rel[:, 1], "o-", color="C0")
        for x, y, n in rel:
            ax.annotate(f"{int(n)}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1),
            xlabel="confidence",
            ylabel="top-1 accuracy",
            title=f"{res['task']}: reliability (ECE {c['ece'][0]:.3f})",
        )
        ax = axes[1, j]
        for name, color in zip(SIGNALS, ("C0", "C1", "C2")):
            acc = c["risk_coverage"][name]["accuracy"]
            ax.plot(
                [float(k) for k in acc],
                [v[0] for v in acc.values()],
                "o-",
                color=color,
                ms=3,
                label=f"{name} (AUROC {c['auroc'][name][0]:.3f})",
            )
        ax.set(
            xlabel="coverage (most confident fraction answered)",
            ylabel="top-1 accuracy",
            title=f"{res['task']}: risk-coverage",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
