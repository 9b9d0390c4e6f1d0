"""STS-style evaluation of the UEC ensemble: Spearman against human ratings of word and document pairs.

The ensemble is fitted as in a retrieval task (kron posteriors, query heads,
probe heads, from the task's fit pairs) and scores the rated pairs of
:mod:`experiments.rated_pairs` (WordSim353, SimLex-999, the Lee documents):

* each model alone (its cosine) and the uniform mix of calibrated scores,
  without query heads or hubness (what a user gets without UEC);
* the uniform mix with query heads and hubness, the rank head alone, the
  default routing without query heads and hubness, and the default, all in
  ``UECEnsemble.similarity(a, b)``'s symmetric form (the mean of the two
  retrieval directions);
* the default in the one-way retrieval form (``roles=("query", "passage")``).

Spearman's rho x 100 with a bootstrap standard deviation over the pairs
(1,000 resamples); for the retrieval form also the Spearman between the two
directions' scores of the same pairs (1 for a symmetric similarity).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from scipy.stats import rankdata

from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.laplace import LaplaceEmbedder
from experiments._records import check_loaded, read_json
from experiments.tasks import UECTask
from experiments.uec_configs import build_ensemble
from experiments.uec_eval import (
    RESULT_SHAPE,
    ROUTING_CHECK_SHAPE,
    TaskEmbeddings,
    check_comparable,
    render_markdown,
    routing_check_lines,
)

__all__ = [
    "STS_SETS",
    "STS_SHAPE",
    "evaluate_sts",
    "load_all_results",
    "render_all_markdown",
    "render_sts_markdown",
    "spearman",
]

STS_SETS = ("wordsim353", "simlex999", "lee")
_BOOTSTRAP = 1000


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def _bootstrap_std(x: np.ndarray, y: np.ndarray, seed: int) -> float:
    rng = np.random.default_rng(seed)
    vals = [spearman(x[i], y[i]) for i in (rng.integers(0, len(x), len(x)) for _ in range(_BOOTSTRAP))]
    return float(np.nanstd(vals))


class _PairScorer:
    """Scores the rated pairs of one set under an ensemble, from each model's cached embeddings of its texts."""

    def __init__(self, pairs, embedders: List[LaplaceEmbedder], raw: Dict[str, Dict[str, np.ndarray]]):
        texts = pairs.texts
        pos = {t: i for i, t in enumerate(texts)}
        self.texts = texts
        self.left = np.array([pos[t] for t in pairs.left])
        self.right = np.array([pos[t] for t in pairs.right])
        self.comps = {role: [e.transform(raw[role][e.encoder_name]) for e in embedders] for role in raw}

    def one_way(self, ens: UECEnsemble, models: Optional[List[int]] = None, *, swap: bool = False) -> np.ndarray:
        """(n_pairs,) retrieval-form scores: ``left`` as the query and ``right`` as the passage (``swap``: the
        other way round), what ``ens.similarity(..., roles=("query", "passage"))`` gives."""
        sides = []
        for role in ("query", "passage"):
            comps = self.comps[role] if models is None else [self.comps[role][k] for k in models]
            sides.append(ens.combine(comps, role=role, texts=self.texts if role == "query" else None))
        (a, b), (i, j) = sides, ((self.right, self.left) if swap else (self.left, self.right))
        S = np.asarray(ens.scoring.similarity(a.mean, a.var, b.mean, b.var), dtype=np.float64)
        return S[i, j]

    def symmetric(self, ens: UECEnsemble, models: Optional[List[int]] = None) -> np.ndarray:
        """(n_pairs,) scores of ``ens.similarity(a, b)``'s default form: both directions averaged."""
        return 0.5 * (self.one_way(ens, models) + self.one_way(ens, models, swap=True))


def _row_scores(scorer: _PairScorer, embedders, names: Sequence[str], identifier, default) -> Dict[str, Any]:
    """Scores of every row on one set (``"asymmetry"``: the retrieval form's Spearman between directions);
    ``default`` is the ensemble as shipped (after ``fit_confidence``: its routing checked on held-out fit pairs)."""
    language = {"identifier": identifier} if identifier is not None else {}
    plain = {"use_variance": False, "hubness": 0.0, "query_head": False}
    out: Dict[str, Any] = {}
    for k, m in enumerate(names):  # no head, no hubness: both directions are the model's cosine
        out[m] = scorer.symmetric(build_ensemble([embedders[k]], weights="uniform", **plain), models=[k])
    out["uniform ensemble (calibrated scores)"] = scorer.symmetric(
        build_ensemble(embedders, weights="uniform", **plain)
    )
    uniform = build_ensemble(embedders, weights="uniform", use_variance=False)
    out["uniform ensemble (calibrated scores) + query head + hubness"] = scorer.symmetric(uniform)
    out["UEC without query heads and hubness"] = scorer.symmetric(build_ensemble(embedders, language=language, **plain))
    out[RANK_STS_ROW] = scorer.symmetric(build_ensemble(embedders, uncertainty="rank"))
    out[UNCHECKED_STS_ROW] = scorer.symmetric(build_ensemble(embedders, language=language))
    forward, backward = scorer.one_way(default), scorer.one_way(default, swap=True)
    out[DEFAULT_STS_ROW] = 0.5 * (forward + backward)
    out["UEC default, retrieval form (query -> passage, one way)"] = forward
    out["asymmetry"] = spearman(forward, backward)
    return out


DEFAULT_STS_ROW = "UEC default: similarity(a, b) (both directions averaged)"
RANK_STS_ROW = "UEC rank head alone (RankRouting), both directions averaged"
UNCHECKED_STS_ROW = "UEC default, routing not checked, both directions averaged"


def evaluate_sts(
    fit_task: UECTask,
    emb: TaskEmbeddings,
    sets: Sequence[Any],
    text_embeddings: Dict[str, Dict[str, Dict[str, np.ndarray]]],
    *,
    models: Sequence[str],
    seed: int = 0,
    prior_precision="marglik",
) -> Dict[str, Any]:
    """Spearman x 100 (bootstrap std) of every row on every rated set; returns a JSON-ready dict.

    ``sets``: :class:`~experiments.rated_pairs.RatedPairs`; ``text_embeddings[set name][role][model]``:
    each model's raw embeddings of the set's ``texts`` as ``"query"`` and as ``"passage"``.
    """
    from crossembed.uec.languages import LangidIdentifier, model_languages

    models = list(models)
    embedders = [
        LaplaceEmbedder(m, prior_precision=prior_precision, random_state=seed).fit_embeddings(
            emb.fit_anchors[m], emb.fit_positives[m], scrambled=emb.fit_scrambled.get(m)
        )
        for m in models
    ]
    identifier = LangidIdentifier() if any(model_languages(m) is not None for m in models) else None
    language = {"identifier": identifier} if identifier is not None else {}
    default = build_ensemble(embedders, language=language).fit_confidence_components(
        [e.transform(emb.fit_anchors[m]) for e, m in zip(embedders, models)],
        [e.transform(emb.fit_positives[m]) for e, m in zip(embedders, models)],
        documents=[e.transform(emb.docs[m]) for e, m in zip(embedders, models)],
        texts=[a for a, _ in fit_task.fit_pairs],
    )
    rows: Dict[str, Dict[str, List[float]]] = {}
    asymmetry: Dict[str, float] = {}
    for i, pairs in enumerate(sets):
        scorer = _PairScorer(pairs, embedders, text_embeddings[pairs.name])
        scores = _row_scores(scorer, embedders, models, identifier, default)
        asymmetry[pairs.name] = scores.pop("asymmetry")
        for name, s in scores.items():
            rho = 100.0 * spearman(s, pairs.ratings)
            rows.setdefault(name, {})[pairs.name] = [rho, 100.0 * _bootstrap_std(s, pairs.ratings, seed + i)]
    return {
        "task": "sts",
        "fit_task": fit_task.name,
        "n_fit_pairs": len(fit_task.fit_pairs),
        "models": models,
        "sets": {p.name: len(p) for p in sets},
        "rows": rows,
        "asymmetry": asymmetry,
        "routing_check": {**default.routing_check_.get_config(), "kept": default.routing_check_.kept},
    }


def render_sts_markdown(res: Dict[str, Any]) -> List[str]:
    """The STS table of ``docs/uec.md`` (lines) from :func:`evaluate_sts`."""
    sets = list(res["sets"])
    lines = [
        "### STS: Spearman against human ratings",
        "",
        f"Ensemble fitted on the {res['n_fit_pairs']} fit pairs of {res['fit_task']}; Spearman's rho x 100 "
        f"(± bootstrap std over the pairs). Pairs: "
        + ", ".join(f"{name} {n}" for name, n in res["sets"].items())
        + ".",
        "",
        "| row | " + " | ".join(sets) + " |",
        "|---|" + "---|" * len(sets),
    ]
    for name, per_set in res["rows"].items():
        cells = [f"{per_set[s][0]:.1f} ± {per_set[s][1]:.1f}" if s in per_set else "" for s in sets]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Spearman between the two directions' scores of the same pairs in the one-way retrieval form "
        '(`roles=("query", "passage")`; 1 for the symmetric default): '
        + ", ".join(f"{s} {res['asymmetry'][s]:.3f}" for s in sets)
        + ".",
        "",
    ] + routing_check_lines(res)
    return lines


_PAIR = ("number", "number")
#: What :func:`render_sts_markdown` reads of one :func:`evaluate_sts` result
STS_SHAPE = {
    "task": "str",
    "fit_task": "str",
    "n_fit_pairs": "int",
    "models": ["str"],
    "sets": {"*": "int"},
    "rows": {"*": {"*": _PAIR}},
    "asymmetry": {"*": "number"},
    "routing_check?": ROUTING_CHECK_SHAPE,
    "command?": "str",
}


def load_all_results(path, source: str = "--from-json") -> List[Dict[str, Any]]:
    """Saved ``uec-eval`` results (one or a list; retrieval tasks and ``sts``), each checked for what its report reads."""
    loaded = read_json(path, source)

    def shape(item):
        return STS_SHAPE if isinstance(item, dict) and item.get("task") == "sts" else RESULT_SHAPE

    checked = check_loaded(
        loaded, tuple(map(shape, loaded)) if isinstance(loaded, list) else shape(loaded), path, source
    )
    out = checked if isinstance(checked, list) else [checked]
    for i, res in enumerate(out):
        if res.get("task") != "sts":
            check_comparable(res, path, source, i)
    return out


def render_all_markdown(results: Sequence[Dict[str, Any]], *, command: str = "", perf_note: str = "") -> str:
    """``docs/uec.md``'s generated sections: the retrieval tasks (:func:`render_markdown`), then the STS tables."""
    retrieval = [r for r in results if r.get("task") != "sts"]
    lines = [render_markdown(retrieval, command=command, perf_note=perf_note)] if retrieval else []
    for res in results:
        if res.get("task") == "sts":
            lines += render_sts_markdown(res)
            if res.get("command"):
                lines += [f"Evaluated by `{res['command']}`.", ""]
    return "\n".join(lines)
