"""Retrieval evaluation of single models, baseline ensembles and UEC variants.

Everything the tables in ``docs/uec.md`` show is computed here:

* metrics per query: nDCG@10, Recall@10, Recall@100, MRR (within the top 100);
* AUC@10: ROC AUC of ``-sig2_s`` (the similarity variance of the top-1
  result) as a predictor of a hit in the top 10 - does low variance mean a
  hit? Every row has Laplace variances (rows that rank by cosine still carry
  them), so every row gets an AUC;
* ECE (15 equal-width bins) of the top-1 confidence
  ``softmax(top-100 scores / tau)[0]`` against "top-1 is relevant", with one
  ``tau`` per row fitted on the dev half by binary NLL;
* random dev/test halves (:func:`crossembed.experiments.tasks.dev_test_draws`): the
  temperature ``T`` and the weighted ensemble's weights are chosen on dev,
  metrics are reported on test as mean +- std over the draws.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed.experiments.tasks import UECTask, dev_test_draws
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.metrics import (
    expected_calibration_error,
    fit_confidence_temperature,
    ranking_metrics,
    roc_auc,
    top1_confidence,
)

__all__ = [
    "DEFAULT_MODELS",
    "TEMPERATURES",
    "TaskEmbeddings",
    "embed_task",
    "evaluate_task",
]

DEFAULT_MODELS = ("minilm", "minilm-l3", "e5")
#: temperatures searched on dev (in units of the standardised trace; raw traces scale it by their std)
TEMPERATURES = (0.1, 0.3, 1.0, 3.0, 10.0)
TOP = 100


# --------------------------------------------------------------------------- embeddings
@dataclass
class TaskEmbeddings:
    """Raw (encoder-output) embeddings of one task, per model name."""

    queries: Dict[str, np.ndarray] = field(default_factory=dict)
    docs: Dict[str, np.ndarray] = field(default_factory=dict)
    fit_anchors: Dict[str, np.ndarray] = field(default_factory=dict)
    fit_positives: Dict[str, np.ndarray] = field(default_factory=dict)
    seconds: Dict[str, float] = field(default_factory=dict)


def _lookup_or_encode(encode: Callable, texts: List[str], known: List[str], known_emb: np.ndarray) -> np.ndarray:
    """Rows of ``known_emb`` for texts already encoded, the encoder for the rest."""
    pos = {t: i for i, t in enumerate(known)}
    missing = list(dict.fromkeys(t for t in texts if t not in pos))
    extra = encode(missing) if missing else np.zeros((0, known_emb.shape[1]), np.float32)
    extra_pos = {t: i for i, t in enumerate(missing)}
    return np.stack([known_emb[pos[t]] if t in pos else extra[extra_pos[t]] for t in texts])


def embed_task(
    uec_task: UECTask,
    models: Sequence[str] = DEFAULT_MODELS,
    *,
    cache_dir=None,
    num_threads: Optional[int] = None,
    show_progress_bar: bool = True,
) -> TaskEmbeddings:
    """Encode queries, documents and fit pairs with every model (disk-cached by text hash)."""
    from crossembed.encoders import encode_cached, load_encoder

    out = TaskEmbeddings()
    t = uec_task.task
    for name in tqdm(list(models), desc=f"encode {uec_task.name}", disable=not show_progress_bar, unit="model"):
        t0 = time.perf_counter()
        enc = load_encoder(name, **({"num_threads": num_threads} if num_threads else {}))

        def run(texts, role, enc=enc):
            return encode_cached(enc, texts, role=role, cache_dir=cache_dir, batch_size=64, show_progress_bar=False)

        out.queries[name] = run(t.queries, "query")
        out.docs[name] = run(t.documents, "passage")
        anchors = [a for a, _ in uec_task.fit_pairs]
        positives = [p for _, p in uec_task.fit_pairs]
        out.fit_anchors[name] = _lookup_or_encode(lambda x: run(x, "query"), anchors, t.queries, out.queries[name])
        out.fit_positives[name] = _lookup_or_encode(lambda x: run(x, "passage"), positives, t.documents, out.docs[name])
        out.seconds[name] = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- one configuration
@dataclass
class Ranking:
    """Top-100 of one configuration over the evaluated queries."""

    scores: np.ndarray  # (Q, TOP) float32
    indices: np.ndarray  # (Q, TOP) int64
    sig2_top1: np.ndarray  # (Q,) similarity variance of the top-1 pair
    weights: np.ndarray  # (Q, K) coefficients
    metrics: Dict[str, np.ndarray]


def rank(
    ens: UECEnsemble,
    q_comps: List[GaussianEmbedding],
    d_comps: List[GaussianEmbedding],
    relevant: Sequence[Sequence[int]],
) -> Ranking:
    """Score every query against every document (fused probit top-k kernel)."""
    q = ens.combine(q_comps, role="query")
    d = ens.combine(d_comps, role="passage")
    vq = q.var if ens.use_variance else np.zeros_like(q.var)
    vd = d.var if ens.use_variance else np.zeros_like(d.var)
    top = min(TOP, len(d))
    scores, idx = kernels.probit_topk(q.mean, vq, d.mean, vd, top)
    m1, v1 = d.mean[idx[:, 0]].astype(np.float64), d.var[idx[:, 0]].astype(np.float64)
    qm, qv = q.mean.astype(np.float64), q.var.astype(np.float64)
    sig2 = (qm**2 * v1).sum(1) + (m1**2 * qv).sum(1) + (qv * v1).sum(1)
    return Ranking(scores, idx, sig2, q.weights, ranking_metrics(idx, relevant))


# --------------------------------------------------------------------------- the whole table
@dataclass
class RowSpec:
    name: str
    hessian: str
    kwargs: Dict[str, Any]
    tune: bool = False  # choose T on dev
    raw_traces: bool = False  # T grid in units of the raw trace std
    models: Optional[List[str]] = None  # single-model rows
    dev_weights: bool = False  # weighted ensemble: weights = dev nDCG@10 of the single models


def row_specs(models: Sequence[str], default_hessian: str = "kron", default_mixing: str = "score") -> List[RowSpec]:
    """The rows of the UEC table (single models, baselines, UEC variants, ablations)."""
    rows = [RowSpec(m, default_hessian, {"use_variance": False}, models=[m]) for m in models]
    rows += [
        RowSpec(
            "uniform ensemble (mean of vectors)",
            default_hessian,
            {"weights": "uniform", "mixing": "embedding", "use_variance": False},
        ),
        RowSpec(
            "uniform ensemble (mean of scores)",
            default_hessian,
            {"weights": "uniform", "mixing": "score", "use_variance": False, "calibrate_scores": False},
        ),
        RowSpec(
            "weighted ensemble (dev nDCG weights)",
            default_hessian,
            {"mixing": "score", "use_variance": False, "calibrate_scores": False},
            dev_weights=True,
        ),
        RowSpec(
            "UEC paper rules (diag, embedding mixing, raw traces)",
            "diag",
            {"mixing": "embedding", "standardize": False},
            tune=True,
            raw_traces=True,
        ),
        RowSpec("UEC diag (score mixing, standardised traces)", "diag", {"mixing": "score"}, tune=True),
        RowSpec("UEC kron (embedding mixing)", "kron", {"mixing": "embedding"}, tune=True),
        RowSpec(
            "UEC kron (score mixing, uncalibrated scores)",
            "kron",
            {"mixing": "score", "calibrate_scores": False},
            tune=True,
        ),
        RowSpec("UEC kron (score mixing)", "kron", {"mixing": "score"}, tune=True),
    ]
    d = {"mixing": default_mixing}
    rows += [
        RowSpec("UEC default - Unc Sim", default_hessian, {**d, "use_variance": False}, tune=True),
        RowSpec("UEC default - Unc Conv", default_hessian, {**d, "weights": "uniform"}),
        RowSpec("UEC default - both", default_hessian, {**d, "weights": "uniform", "use_variance": False}),
    ]
    return rows


def _summary(values: List[float]) -> Tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    a = a[~np.isnan(a)]
    return (float(a.mean()), float(a.std())) if a.size else (float("nan"), float("nan"))


def evaluate_task(
    uec_task: UECTask,
    emb: TaskEmbeddings,
    *,
    models: Sequence[str] = DEFAULT_MODELS,
    n_draws: int = 3,
    seed: int = 0,
    prior_precision="marglik",
    curvature: str = "ggn",
    default_hessian: str = "kron",
    default_mixing: str = "score",
    show_progress_bar: bool = True,
) -> Dict[str, Any]:
    """Every row of the table on one task; returns a JSON-ready dict.

    Keys: ``rows`` (name -> metric -> [mean, std] and per-language nDCG),
    ``temperatures`` (chosen T per tuned row and draw), ``coefficients``
    (mean UEC weights per language and model for the kron and diag rows),
    ``posteriors`` (prior precision, fit seconds per model and form), sizes.
    """
    models = list(models)
    t = uec_task.task
    ev = uec_task.eval_queries
    relevant = [t.relevant[i] for i in ev]
    langs = np.array(t.languages)[ev]
    pos_in_eval = {int(r): i for i, r in enumerate(ev)}
    draws = [
        (np.array([pos_in_eval[int(r)] for r in dv]), np.array([pos_in_eval[int(r)] for r in ts]))
        for dv, ts in dev_test_draws(uec_task, n_draws, seed=seed)
    ]

    embedders: Dict[str, List[LaplaceEmbedder]] = {}
    posteriors: Dict[str, Any] = {}
    comps: Dict[str, Tuple[List[GaussianEmbedding], List[GaussianEmbedding]]] = {}
    for hessian in ("kron", "diag"):
        lst = []
        for m in models:
            e = LaplaceEmbedder(
                m, hessian=hessian, curvature=curvature, prior_precision=prior_precision, random_state=seed
            ).fit_embeddings(emb.fit_anchors[m], emb.fit_positives[m])
            lst.append(e)
            posteriors[f"{m}/{hessian}"] = {
                "prior_precision": e.prior_precision_,
                "fit_seconds": e.fit_seconds_,
                "n_pairs": e.n_pairs_,
                "trace_mean": e.trace_mean_,
                "trace_std": e.trace_std_,
            }
        embedders[hessian] = lst
        comps[hessian] = (
            [e.transform(emb.queries[m][ev]) for e, m in zip(lst, models)],
            [e.transform(emb.docs[m]) for e, m in zip(lst, models)],
        )

    def run(spec: RowSpec, T: float = 1.0, weights=None) -> Ranking:
        lst = embedders[spec.hessian]
        qc, dc = comps[spec.hessian]
        if spec.models:
            k = models.index(spec.models[0])
            lst, qc, dc = [lst[k]], [qc[k]], [dc[k]]
        kw = dict(spec.kwargs)
        if weights is not None:
            kw["weights"] = weights
        return rank(UECEnsemble(lst, temperature=T, **kw), qc, dc, relevant)

    specs = row_specs(models, default_hessian, default_mixing)
    results: Dict[str, Any] = {}
    chosen_T: Dict[str, List[float]] = {}
    rankings: Dict[str, List[Ranking]] = {}  # per draw
    single_ndcg: Dict[str, np.ndarray] = {}
    bar = tqdm(specs, desc=f"rows {uec_task.name}", disable=not show_progress_bar, unit="row")
    for spec in bar:
        if spec.tune:
            scale = float(np.mean([e.trace_std_ for e in embedders[spec.hessian]])) if spec.raw_traces else 1.0
            grid = {T * scale: run(spec, T * scale) for T in TEMPERATURES}
            per_draw = []
            for dv, _ in draws:
                best = max(grid, key=lambda T: grid[T].metrics["ndcg@10"][dv].mean())
                per_draw.append(best)
            chosen_T[spec.name] = per_draw
            rankings[spec.name] = [grid[T] for T in per_draw]
        elif spec.dev_weights:
            rs = []
            for dv, _ in draws:
                w = np.array([single_ndcg[m][dv].mean() for m in models])
                rs.append(run(spec, weights=w))
            rankings[spec.name] = rs
        else:
            r = run(spec)
            rankings[spec.name] = [r] * len(draws)
            if spec.models:
                single_ndcg[spec.models[0]] = r.metrics["ndcg@10"]
    for name, rs in rankings.items():
        row: Dict[str, Any] = {}
        per_metric: Dict[str, List[float]] = {}
        for r, (dv, ts) in zip(rs, draws):
            for key, vals in r.metrics.items():
                per_metric.setdefault(key, []).append(100.0 * vals[ts].mean())
            per_metric.setdefault("auc@10", []).append(100.0 * roc_auc(-r.sig2_top1[ts], r.metrics["hit@10"][ts]))
            tau = fit_confidence_temperature(r.scores[dv], r.metrics["hit@1"][dv])
            per_metric.setdefault("ece", []).append(
                expected_calibration_error(top1_confidence(r.scores[ts], tau), r.metrics["hit@1"][ts])
            )
            for lang in dict.fromkeys(langs):
                sel = ts[langs[ts] == lang]
                per_metric.setdefault(f"ndcg@10[{lang}]", []).append(100.0 * r.metrics["ndcg@10"][sel].mean())
        row = {k: _summary(v) for k, v in per_metric.items()}
        if name in chosen_T:
            row["T"] = chosen_T[name]
        results[name] = row

    coefficients = {}
    for name in (
        "UEC kron (score mixing)",
        "UEC paper rules (diag, embedding mixing, raw traces)",
        "UEC diag (score mixing, standardised traces)",
    ):
        r = rankings[name][0]
        coefficients[name] = {lang: r.weights[langs == lang].mean(axis=0).tolist() for lang in dict.fromkeys(langs)}
    return {
        "task": uec_task.name,
        "models": models,
        "n_queries_eval": int(len(ev)),
        "n_documents": len(t.documents),
        "n_fit_pairs": len(uec_task.fit_pairs),
        "n_draws": n_draws,
        "languages": list(dict.fromkeys(langs)),
        "rows": results,
        "coefficients": coefficients,
        "posteriors": posteriors,
        "encode_seconds": emb.seconds,
    }


# --------------------------------------------------------------------------- reporting
_MAIN_METRICS = (
    ("ndcg@10", "nDCG@10"),
    ("recall@10", "R@10"),
    ("recall@100", "R@100"),
    ("mrr", "MRR"),
    ("auc@10", "AUC@10"),
    ("ece", "ECE"),
)


def _fmt(pair, digits=2) -> str:
    mean, std = pair
    if isinstance(mean, float) and math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


_INTRO = """# UEC: uncertainty-driven embedding convolution - retrieval results

Generated by `crossembed uec-eval` (the command line is at the end); every
number below is measured by `crossembed.experiments.uec_eval`. Models: K off-the-shelf
encoders, each given a post-hoc last-layer Laplace posterior
(`LaplaceEmbedder`, identity head on the normalised embedding, GGN of an
in-batch InfoNCE loss with tau = 0.05 on the task's fit pairs, prior
precision by marginal likelihood).

Rows:

* single models and the baselines rank by the cosine of the means (variances
  are still used for AUC@10);
* *uniform ensemble (mean of vectors)*: average of the K unit vectors;
  *(mean of scores)*: average of the K cosines; *weighted ensemble*: fixed
  weights proportional to each model's dev nDCG@10, score space;
* *UEC paper rules*: diagonal posterior, coefficients softmax(-tr / T) of the
  raw traces, Gaussian convolution of the embeddings, probit similarity;
* *UEC diag / kron*: traces standardised per model (fit-set mean and std);
  *embedding mixing* convolves the vectors, *score mixing* keeps the K spaces
  side by side so the coefficients mix per-model scores (see
  `crossembed/uec/ensemble.py`); score mixing divides each model's score by
  its cosine spread between unrelated fit texts (`calibrate_scores`, e5's
  spread is ~4x smaller than minilm's), except in the row marked
  *uncalibrated scores* and in the plain uniform/weighted baselines;
* ablations of the default (kron, score mixing): *- Unc Sim* ranks by the
  mean score without the variance, *- Unc Conv* uses uniform coefficients,
  *- both* is then identical to the uniform mean of scores by construction.

T is chosen per draw on the dev half from {T_GRID} (times the mean raw trace
std for the paper row). AUC@10 = ROC AUC of -sig2_s of the top-1 pair for
"a relevant document is in the top 10" (50 = uninformative, < 50 = high
variance goes with hits). ECE: 15 bins, top-1 confidence = softmax of the
top-100 scores / tau with tau fitted on dev, label = top-1 relevant.
"""


def _verdicts(res: Dict[str, Any]) -> List[str]:
    rows = res["rows"]
    nd = {name: row["ndcg@10"][0] for name, row in rows.items()}
    singles = {m: nd[m] for m in res["models"] if m in nd}
    best_single = max(singles, key=singles.get)
    uec = "UEC kron (score mixing)"
    out = ["Findings (computed from the table above):", ""]
    for base in (
        "uniform ensemble (mean of vectors)",
        "uniform ensemble (mean of scores)",
        "weighted ensemble (dev nDCG weights)",
        best_single,
    ):
        d = nd[uec] - nd[base]
        out.append(f"* {uec} vs {base}: {d:+.2f} nDCG@10 ({'better' if d > 0 else 'not better'}).")
    d = nd["UEC kron (score mixing)"] - nd["UEC kron (embedding mixing)"]
    out.append(f"* score vs embedding mixing (kron): {d:+.2f} nDCG@10.")
    d = nd["UEC kron (score mixing)"] - nd["UEC diag (score mixing, standardised traces)"]
    out.append(
        f"* kron vs diag posterior (score mixing): {d:+.2f} nDCG@10; "
        f"kron vs paper rules: {nd[uec] - nd['UEC paper rules (diag, embedding mixing, raw traces)']:+.2f}."
    )
    if len(res["languages"]) > 1:
        for lang in res["languages"]:
            per = {m: rows[m][f"ndcg@10[{lang}]"][0] for m in res["models"]}
            best = max(per, key=per.get)
            w = res["coefficients"][uec].get(lang)
            wtxt = ", ".join(f"{m} {x:.2f}" for m, x in zip(res["models"], w)) if w else "n/a"
            out.append(
                f"* [{lang}] best single model {best} {per[best]:.2f}; UEC {rows[uec][f'ndcg@10[{lang}]'][0]:.2f}; "
                f"UEC mean coefficients: {wtxt}."
            )
    e1, e0 = rows[uec]["ece"][0], rows["UEC default - Unc Sim"]["ece"][0]
    out.append(
        f"* ECE of the probit score {e1:.3f} vs the same ranking's cosine {e0:.3f} "
        f"({'better' if e1 < e0 else 'not better'} calibrated)."
    )
    out.append("")
    return out


def render_markdown(results: Sequence[Dict[str, Any]], *, command: str = "", perf_note: str = "") -> str:
    """``docs/uec.md`` from :func:`evaluate_task` outputs."""
    lines: List[str] = [_INTRO.replace("{T_GRID}", ", ".join(f"{t:g}" for t in TEMPERATURES))]
    for res in results:
        lines += [
            f"### {res['task']}",
            "",
            f"{res['n_queries_eval']} evaluated queries ({', '.join(res['languages'])}), {res['n_documents']} documents, "
            f"{res['n_fit_pairs']} Laplace fit pairs (disjoint from the evaluated queries), {res['n_draws']} random "
            "dev/test halves; test mean ± std over the draws. Metrics ×100 except ECE.",
            "",
            "| row | " + " | ".join(label for _, label in _MAIN_METRICS) + " | T (per draw) |",
            "|---|" + "---|" * (len(_MAIN_METRICS) + 1),
        ]
        for name, row in res["rows"].items():
            cells = [_fmt(row[key], 3 if key == "ece" else 2) for key, _ in _MAIN_METRICS]
            T = ", ".join(f"{x:.3g}" for x in row["T"]) if "T" in row else ""
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {T} |")
        lines.append("")
        lines += _verdicts(res)
        if len(res["languages"]) > 1:
            lines += [
                "nDCG@10 per query language (test, mean ± std):",
                "",
                "| row | " + " | ".join(res["languages"]) + " |",
                "|---|" + "---|" * len(res["languages"]),
            ]
            for name, row in res["rows"].items():
                lines.append(f"| {name} | " + " | ".join(_fmt(row[f"ndcg@10[{l}]"]) for l in res["languages"]) + " |")
            lines.append("")
        lines += [
            "Mean coefficients per query language (draw 0, chosen T):",
            "",
            "| row | language | " + " | ".join(res["models"]) + " |",
            "|---|---|" + "---|" * len(res["models"]),
        ]
        for name, per_lang in res["coefficients"].items():
            for lang, w in per_lang.items():
                lines.append(f"| {name} | {lang} | " + " | ".join(f"{x:.3f}" for x in w) + " |")
        lines += [
            "",
            "Posteriors (prior precision by marginal likelihood; fit time on this machine):",
            "",
            "| model/form | prior precision | fit s | pairs | trace mean | trace std |",
            "|---|---|---|---|---|---|",
        ]
        for key, p in res["posteriors"].items():
            lines.append(
                f"| {key} | {p['prior_precision']:.3g} | {p['fit_seconds']:.1f} | {p['n_pairs']} | "
                f"{p['trace_mean']:.4g} | {p['trace_std']:.3g} |"
            )
        lines.append("")
    if perf_note:
        lines += [perf_note, ""]
    runs = [res["command"] for res in results if res.get("command")]
    if runs:
        lines += ["Evaluated by:", ""] + [f"* `{c}`" for c in runs] + [""]
    if command:
        lines += [f"Produced by `{command}`.", ""]
    return "\n".join(lines)


def plot_coefficients(
    results: Sequence[Dict[str, Any]],
    path,
    *,
    rows: Sequence[str] = ("UEC kron (score mixing)", "UEC paper rules (diag, embedding mixing, raw traces)"),
) -> None:
    """Heat maps of the mean coefficient per query language (rows) and model (columns)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from crossembed._io import atomic_write

    panels = [(res, name) for res in results for name in rows if name in res["coefficients"]]
    if not panels:
        raise ValueError("no coefficient tables to plot")
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(4.2 * len(panels), 0.6 * max(len(r["languages"]) for r, _ in panels) + 2.0),
        squeeze=False,
    )
    for ax, (res, name) in zip(axes[0], panels):
        langs = list(res["coefficients"][name])
        mat = np.array([res["coefficients"][name][l] for l in langs])
        im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(res["models"])), res["models"])
        ax.set_yticks(range(len(langs)), langs)
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", color="w" if mat[i, j] < 0.6 else "k")
        ax.set_title(f"{res['task']}\n{name}", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="mean coefficient pi_k")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write(path, buf.getvalue())
