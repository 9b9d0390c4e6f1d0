"""Robustness to a weak member: the default and the uniform ensemble with one weak model added.

For each weak member (:data:`experiments.uec_weak.WEAK_MEMBERS`) the task's real models keep
their posteriors and heads; the weak one is fitted on the same pairs like any model. Test nDCG@10
(x100, mean +- std over the test halves) of: the weak model alone (cosine), the default ensemble
and the uniform ensemble with the same query heads and hubness, each without and with the weak
member, and the weak member's mean routing weight in the default. The default is the ensemble as
shipped, after ``fit_confidence`` (its routing checked on held-out fit pairs, the task's documents
as distractors); whether it kept its rank heads is reported per row.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from crossembed.uec import LaplaceEmbedder
from experiments.uec_configs import build_ensemble
from experiments.uec_eval import rank
from experiments.uec_weak import WEAK_MEMBERS

__all__ = ["ENSEMBLES", "evaluate_weak_members", "render_weak_members"]

#: the ensembles compared, as build_ensemble options (the identifier is added per run)
ENSEMBLES = {
    "default": {},
    "uniform": {"weights": "uniform", "use_variance": False},
}


def _test_means(values: np.ndarray, draws) -> List[float]:
    per = [float(values[ts].mean()) for _, ts in draws]
    return [float(np.mean(per)), float(np.std(per))]


def evaluate_weak_members(
    uec_task, emb, embedders: Sequence[LaplaceEmbedder], weak: Sequence[str], draws, *, seed: int, runner
) -> Dict[str, Any]:
    """JSON-ready rows (module docstring) for each weak member name in ``weak``.

    ``emb`` holds the weak members' embeddings too (:func:`experiments.uec_eval.embed_task` with their
    names); ``embedders`` are the real models' fitted kron embedders; ``runner`` the task's row runner
    (evaluated queries, their texts and relevant documents, the language identifier).
    """
    ev = uec_task.eval_queries
    models = list(runner.models)
    language = {"identifier": runner.identifier} if runner.identifier is not None else {}

    def comps(lst, names):
        return (
            [e.transform(emb.queries[m][ev]) for e, m in zip(lst, names)],
            [e.transform(emb.docs[m]) for e, m in zip(lst, names)],
        )

    def score(lst, names, options):
        qc, dc = comps(lst, names)
        if not options and names == models:  # the task's default, calibrated once
            ens = runner.calibrated("kron")
            return rank(ens, qc, dc, runner.relevant, texts=runner.texts), ens.routing_check_
        if options:
            return rank(build_ensemble(lst, **options), qc, dc, runner.relevant, texts=runner.texts), None
        ens = build_ensemble(lst, language=language).fit_confidence_components(
            [e.transform(emb.fit_anchors[m]) for e, m in zip(lst, names)],
            [e.transform(emb.fit_positives[m]) for e, m in zip(lst, names)],
            documents=dc,
            texts=runner.fit_texts,
        )
        return rank(ens, qc, dc, runner.relevant, texts=runner.texts), ens.routing_check_

    out: Dict[str, Any] = {"base": {}}
    for name, options in ENSEMBLES.items():
        r, check = score(embedders, models, options)
        out["base"][name] = _test_means(100.0 * r.metrics["ndcg@10"], draws)
        if check is not None:
            out["base"]["kept"] = check.kept
    for w in weak:
        e = LaplaceEmbedder(w, random_state=seed).fit_embeddings(
            emb.fit_anchors[w], emb.fit_positives[w], scrambled=emb.fit_scrambled.get(w)
        )
        alone, _ = score([e], [w], {"use_variance": False, "hubness": 0.0, "query_head": False})
        row: Dict[str, Any] = {
            "description": WEAK_MEMBERS[w],
            "alone": _test_means(100 * alone.metrics["ndcg@10"], draws),
        }
        for name, options in ENSEMBLES.items():
            r, check = score(list(embedders) + [e], models + [w], options)
            row[name] = _test_means(100.0 * r.metrics["ndcg@10"], draws)
            if name == "default":
                row["weight"] = _test_means(r.weights[:, -1].astype(np.float64), draws)
                row["kept"] = check is None or check.kept
        out[w] = row
    return out


def _yes(kept) -> str:
    return "" if kept is None else ("yes" if kept else "no: uniform")


def render_weak_members(res: Dict[str, Any]) -> List[str]:
    """Markdown table of one task's :func:`evaluate_weak_members` (``res["weak_members"]``)."""
    wm = res["weak_members"]
    base = wm["base"]

    def f(pair, digits=2):
        return f"{pair[0]:.{digits}f} ± {pair[1]:.{digits}f}"

    lines = [
        "A weak member added (test nDCG@10; the change against the same ensemble without it):",
        "",
        "| member | alone | default + it | change | its weight in the default | rank heads kept "
        "| uniform + heads + hubness + it | change |",
        "|---|---|---|---|---|---|---|---|",
        f"| none | | {f(base['default'])} | | | {_yes(base.get('kept'))} | {f(base['uniform'])} | |",
    ]
    for name, row in wm.items():
        if name == "base":
            continue
        lines.append(
            f"| {name}: {row['description']} | {f(row['alone'])} | {f(row['default'])} | "
            f"{row['default'][0] - base['default'][0]:+.2f} | {f(row['weight'], 3)} | {_yes(row.get('kept'))} | "
            f"{f(row['uniform'])} | "
            f"{row['uniform'][0] - base['uniform'][0]:+.2f} |"
        )
    return lines + [""]
