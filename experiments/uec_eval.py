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
* random dev/test halves (:func:`experiments.tasks.dev_test_draws`): the
  temperature ``T`` and the weighted ensemble's weights are chosen on dev,
  metrics are reported on test as mean +- std over the draws.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed.uec.ablations import normalize_variance_official, precision_sum
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.languages import LangidIdentifier, model_languages
from crossembed.uec.laplace import LaplaceEmbedder, encode_pairs
from crossembed.uec.metrics import expected_calibration_error, ranking_metrics, roc_auc
from experiments._records import check_loaded, read_json
from experiments.tasks import UECTask, dev_test_draws
from experiments.uec_configs import build_ensemble
from experiments.uec_languages import LanguageTransferTask, language_draws
from experiments.uec_metrics import fit_confidence_temperature, top1_confidence
from experiments.uec_rules import CalibratedConfidenceRouting, NoRankHeadRouting, TrueLanguageRouting, routing_named

__all__ = [
    "DEFAULT_MODELS",
    "RESULT_SHAPE",
    "TEMPERATURES",
    "TaskEmbeddings",
    "embed_task",
    "evaluate_task",
    "load_results",
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
    #: scrambled fit anchors (the probe heads' negatives, :func:`crossembed.uec.probe.scramble_sample`)
    fit_scrambled: Dict[str, np.ndarray] = field(default_factory=dict)
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
    seed: int = 0,
    show_progress_bar: bool = True,
) -> TaskEmbeddings:
    """Encode queries, documents, fit pairs and scrambled fit anchors with every model (disk-cached by text hash).

    The fit pairs go through :func:`crossembed.uec.laplace.encode_pairs` with ``probe_seed=seed``, the
    scrambled anchors :meth:`LaplaceEmbedder.fit` draws with ``random_state=seed``; fit texts that are
    queries or documents of the task keep those rows.
    """
    from crossembed.encoders import encode_cached
    from experiments.uec_weak import harness_encoder

    out = TaskEmbeddings()
    t = uec_task.task
    anchors, positives = [a for a, _ in uec_task.fit_pairs], [p for _, p in uec_task.fit_pairs]
    for name in tqdm(list(models), desc=f"encode {uec_task.name}", disable=not show_progress_bar, unit="model"):
        t0 = time.perf_counter()
        enc = harness_encoder(name, num_threads)

        def run(texts, role, enc=enc):
            return encode_cached(enc, texts, role=role, cache_dir=cache_dir, batch_size=64, show_progress_bar=False)

        out.queries[name] = run(t.queries, "query")
        out.docs[name] = run(t.documents, "passage")
        known = {"query": (t.queries, out.queries[name]), "passage": (t.documents, out.docs[name])}

        def fit_encode(texts, role, run=run, known=known):
            if texts == anchors or texts == positives:
                return _lookup_or_encode(lambda x: run(x, role), texts, *known[role])
            return run(texts, role)  # the scrambled anchors, encoded as one list

        out.fit_anchors[name], out.fit_positives[name], out.fit_scrambled[name] = encode_pairs(
            uec_task.fit_pairs, fit_encode, probe_seed=seed
        )
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
    calibration: Optional[List[GaussianEmbedding]] = None,
    texts: Optional[Sequence[str]] = None,
) -> Ranking:
    """Score every query against every document with the ensemble's own similarity (exact top-k).

    Confidence routing is measured over the searched documents; ``calibration``
    (per-model query Gaussians, e.g. the fit anchors) centres it when the routing asks;
    ``texts`` are the queries' texts (a routing that reads the query language needs them).
    """
    if ens.needs_reference and not ens.has_reference:
        ens = ens.with_reference(d_comps)
        if isinstance(ens.routing, CalibratedConfidenceRouting):  # fitted on the calibration queries, per ensemble
            routing = ens.routing.calibrated(ens.reference_, calibration, ens.heads)
            ens = UECEnsemble(
                ens.embedders, routing=routing, mixing=ens.mixing, scoring=ens.scoring, reference=ens.reference_
            )
    q = ens.combine(q_comps, role="query", texts=texts if ens.needs_texts else None)
    d = ens.combine(d_comps, role="passage")
    top = min(TOP, len(d))
    scores, idx = ens.topk(q, d, top)
    m1, v1 = d.mean[idx[:, 0]].astype(np.float64), d.var[idx[:, 0]].astype(np.float64)
    qm, qv = q.mean.astype(np.float64), q.var.astype(np.float64)
    sig2 = (qm**2 * v1).sum(1) + (m1**2 * qv).sum(1) + (qv * v1).sum(1)
    return Ranking(scores, idx, sig2, q.weights, ranking_metrics(idx, relevant))


# --------------------------------------------------------------------------- the whole table
#: grids searched on dev: T per uncertainty kind, beta for the official similarity
CONFIDENCE_TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0)
BETAS = (0.0, 1.0)


@dataclass
class RowSpec:
    name: str
    hessian: str  # "kron", "diag" or "last_dense" (the posterior of the components)
    kwargs: Dict[str, Any]
    grid: str = ""  # "" (fixed), "std", "raw", "official", "confidence": what is tuned on dev
    models: Optional[List[str]] = None  # single-model rows
    dev_weights: bool = False  # weighted ensemble: weights = dev nDCG@10 of the single models
    variant: bool = False  # a UEC variant the default is chosen among
    # a harness-only routing built per run from (embedders, runner): ablations and bounds the library has no object for
    routing: Optional[Callable[..., Any]] = None


_SCORE = {"mixing": "score"}
_LAPLACE = {"uncertainty": "laplace"}


def _baseline_rows(models: Sequence[str]) -> List[RowSpec]:
    """Single models and the uniform / weighted ensembles (all ranking by the cosine of the means)."""
    rows = [RowSpec(m, "kron", {"use_variance": False}, models=[m]) for m in models]
    return rows + [
        RowSpec(
            "uniform ensemble (mean of scores)",
            "kron",
            {"weights": "uniform", "use_variance": False, "calibrate_scores": False},
        ),
        RowSpec("uniform ensemble (calibrated scores)", "kron", {"weights": "uniform", "use_variance": False}),
        RowSpec(
            "weighted ensemble (dev nDCG weights)",
            "kron",
            {"use_variance": False, "calibrate_scores": False},
            dev_weights=True,
        ),
    ]


def _rule_rows() -> List[RowSpec]:
    """The paper's and the official code's Laplace rules, per posterior form and mixing."""
    lap, score, official = _LAPLACE, _SCORE, {**_LAPLACE, "rules": "official"}
    return [
        RowSpec(
            "paper: diag, embedding mixing, raw traces",
            "diag",
            {**lap, "mixing": "embedding", "standardize": False},
            grid="raw",
            variant=True,
        ),
        RowSpec("paper: diag, score mixing", "diag", {**lap, **score}, grid="std", variant=True),
        RowSpec("paper: kron, score mixing", "kron", {**lap, **score}, grid="std", variant=True),
        RowSpec(
            "official: diag, embedding mixing",
            "diag",
            {**official, "mixing": "embedding"},
            grid="official",
            variant=True,
        ),
        RowSpec("official: diag, score mixing", "diag", {**official, **score}, grid="official", variant=True),
        RowSpec("official: kron, score mixing", "kron", {**official, **score}, grid="official", variant=True),
        RowSpec("last_dense: paper, score mixing", "last_dense", {**lap, **score}, grid="std", variant=True),
        RowSpec(
            "last_dense: official, score mixing", "last_dense", {**official, **score}, grid="official", variant=True
        ),
    ]


def _confidence_rows() -> List[RowSpec]:
    """Retrieval-confidence routing and its variants (T tuned on the confidence grid)."""
    conf = {**_SCORE, "uncertainty": "confidence"}
    lap_var = {"confidence_scoring": "laplace"}
    rows = [
        ("confidence (sigma^2 in the probit, score mixing)", "kron", conf),
        ("confidence, kron Laplace variances in the probit", "kron", {**conf, **lap_var}),
        ("confidence, diag Laplace variances in the probit", "diag", {**conf, **lap_var}),
        ("confidence, official rules (beta cosine)", "diag", {**conf, "rules": "official", **lap_var}),
        ("confidence, centred per model (fit anchors)", "kron", {**conf, "center_confidence": True}),
        ("confidence, z-scored per model (fit anchors)", "kron", {**conf, "standardize_confidence": True}),
    ]
    out = [RowSpec(name, form, kw, grid="confidence", variant=True) for name, form, kw in rows]
    out.append(RowSpec("confidence, hard routing (T = 0.01, bound)", "kron", {**conf, "temperature": 0.01}))
    conf_lap = {**_SCORE, "uncertainty": "confidence*laplace"}
    out += [
        RowSpec(f"confidence x {form} Laplace (score mixing)", form, conf_lap, grid="confidence", variant=True)
        for form in ("kron", "diag")
    ]
    return out


def _rank_rows() -> List[RowSpec]:
    """Rank-head routing with the Laplace variances scored, per posterior form and rule set."""
    rank = {**_SCORE, "confidence_scoring": "laplace", "uncertainty": "rank"}
    rows = [
        ("rank head (kron Laplace variances in the probit)", "kron", rank),
        ("rank head (diag Laplace variances in the probit)", "diag", rank),
        ("rank head, official rules (beta cosine)", "diag", {**rank, "rules": "official"}),
        ("rank head, last_dense posterior", "last_dense", rank),
    ]
    out = [RowSpec(name, form, kw, grid="confidence", variant=True) for name, form, kw in rows]
    hard = {**_SCORE, "uncertainty": "rank", "temperature": 0.01}
    return out + [RowSpec("rank head, hard routing (T = 0.01, bound)", "kron", hard)]


def _correction_rows(models: Sequence[str]) -> List[RowSpec]:
    """Hubness and query heads without routing, the default as shipped and its ablations."""
    no_head = {"query_head": False}
    rows = [RowSpec(f"{m} + hubness (CSLS)", "kron", {"use_variance": False, **no_head}, models=[m]) for m in models]
    rows += [RowSpec(HUBNESS_UNIFORM_ROW, "kron", {"weights": "uniform", "use_variance": False, **no_head})]
    # the same fitted query heads without the routing: what the routing adds on top of them
    rows += [RowSpec(f"{m} + query head + hubness", "kron", {"use_variance": False}, models=[m]) for m in models]
    return rows + [
        RowSpec(HEAD_UNIFORM_ROW, "kron", {"weights": "uniform", "use_variance": False}),
        # the library's defaults as shipped (UECEnsemble() / LaplaceEmbedder()), T not tuned
        RowSpec(DEFAULT_ROW, "kron", {}),
        RowSpec(UNCHECKED_ROW, "kron", {}),
        RowSpec(DEFAULT_DEV_T_ROW, "kron", {}, grid="confidence"),
        # the rank head alone (RankRouting: the default where every model reads every language)
        RowSpec(RANK_ROW, "kron", {"uncertainty": "rank"}),
        # the default's language signals one at a time (identical to the default where no model is monolingual)
        RowSpec(NO_LANGID_ROW, "kron", {"language": {"identifier": None}}),
        RowSpec(NO_PROBE_ROW, "kron", {"language": {"probe": False}}),
        RowSpec("UEC default - Unc Sim", "kron", {"use_variance": False}),
        RowSpec("UEC default - Unc Conv", "kron", {"weights": "uniform", "uncertainty": "laplace"}),
        RowSpec("UEC default - hubness", "kron", {"hubness": 0.0}),
        RowSpec(NO_HEAD_ROW, "kron", no_head),
    ]


def row_specs(models: Sequence[str]) -> List[RowSpec]:
    """The rows of the UEC table: single models, baselines, every rule x posterior form, routing, default."""
    rows = _baseline_rows(models) + _rule_rows() + _confidence_rows() + _rank_rows()
    # every row so far scores without document hubness or query heads: the baselines are what a user
    # gets without UEC, the variants compare routing rules alone
    rows = [dataclasses.replace(r, kwargs={"hubness": 0.0, "query_head": False, **r.kwargs}) for r in rows]
    return rows + _correction_rows(models)


DEFAULT_ROW = "UEC default (as shipped)"
#: the default before ``fit_confidence``'s held-out routing check (rank heads always on)
UNCHECKED_ROW = "UEC default, routing not checked"
HUBNESS_UNIFORM_ROW = "uniform ensemble (calibrated scores) + hubness (CSLS)"
HEAD_UNIFORM_ROW = "uniform ensemble (calibrated scores) + query head + hubness"
NO_HEAD_ROW = "UEC default - query head"
DEFAULT_DEV_T_ROW = "UEC default, T chosen on dev"
RANK_ROW = "UEC rank head alone (RankRouting, query heads, hubness)"
NO_LANGID_ROW = "UEC default - langid"
NO_PROBE_ROW = "UEC default - probe"
#: ``row_set="routing"``: the single models, the uniform mixes and the routings (the language signals' re-measure)
ROUTING_ROWS = (
    "uniform ensemble (mean of scores)",
    "uniform ensemble (calibrated scores)",
    HEAD_UNIFORM_ROW,
    RANK_ROW,
    DEFAULT_ROW,
    DEFAULT_DEV_T_ROW,
    NO_LANGID_ROW,
    NO_PROBE_ROW,
)
#: ``row_set="minimal"``: the single models, the default and the uniform mix with the same heads and hubness
MINIMAL_ROWS = (
    "uniform ensemble (mean of scores)",
    "uniform ensemble (calibrated scores)",
    HEAD_UNIFORM_ROW,
    RANK_ROW,
    DEFAULT_ROW,
    UNCHECKED_ROW,
)
#: ``row_set="core"``: the rows the issue asks for (what a slow machine can afford on WordNet)
CORE_ROWS = (
    "uniform ensemble (mean of scores)",
    "uniform ensemble (calibrated scores)",
    "paper: diag, embedding mixing, raw traces",
    "paper: kron, score mixing",
    "official: diag, embedding mixing",
    "official: diag, score mixing",
    "last_dense: paper, score mixing",
    "last_dense: official, score mixing",
    "confidence (sigma^2 in the probit, score mixing)",
    "confidence, official rules (beta cosine)",
    "rank head (kron Laplace variances in the probit)",
    "rank head, official rules (beta cosine)",
    HUBNESS_UNIFORM_ROW,
    HEAD_UNIFORM_ROW,
    DEFAULT_ROW,
    DEFAULT_DEV_T_ROW,
    RANK_ROW,
    NO_LANGID_ROW,
    NO_PROBE_ROW,
    "UEC default - Unc Conv",
    "UEC default - hubness",
    NO_HEAD_ROW,
)


def _summary(values: List[float]) -> Tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    a = a[~np.isnan(a)]
    return (float(a.mean()), float(a.std())) if a.size else (float("nan"), float("nan"))


def last_dense_components(
    uec_task: UECTask,
    models: Sequence[str],
    *,
    hessian: str = "diag",
    prior_precision="marglik",
    seed: int = 0,
    show_progress_bar: bool = False,
):
    """``(embedders, query comps, doc comps, note)`` with ``layer="last_dense"`` posteriors, or ``None`` and why.

    Models the variant does not support (not a torch model) keep the head
    posterior of the same form (said in the note); when the variant is not
    implemented at all the row is skipped.
    """
    t = uec_task.task
    ev = uec_task.eval_queries
    queries = [t.queries[i] for i in ev]
    embedders, qc, dc, head_for = [], [], [], []
    any_last = False
    for m in models:
        try:
            e = LaplaceEmbedder(
                m,
                layer="last_dense",
                hessian=hessian,
                prior_precision=prior_precision,
                random_state=seed,
                query_head=False,  # the last_dense rows compare posteriors, without heads
            )
            any_last = True
        except NotImplementedError as exc:
            return None, f"layer='last_dense' not available ({exc})"
        except (TypeError, ValueError) as exc:
            if "not implemented" in str(exc):
                return None, f"layer='last_dense' not available ({exc})"
            e = LaplaceEmbedder(
                m, hessian=hessian, prior_precision=prior_precision, random_state=seed, query_head=False
            )
            head_for.append(m)
        try:
            e.fit(uec_task.fit_pairs, show_progress_bar=show_progress_bar)
        except (NotImplementedError, TypeError, ValueError):
            if e.layer == "head":
                raise
            # this model cannot take the last_dense posterior (not a torch model): head posterior instead
            e = LaplaceEmbedder(
                m, hessian=hessian, prior_precision=prior_precision, random_state=seed, query_head=False
            )
            e.fit(uec_task.fit_pairs, show_progress_bar=show_progress_bar)
            head_for.append(m)
        embedders.append(e)
        qc.append(e.encode(queries, role="query"))
        dc.append(e.encode(list(t.documents), role="passage"))
    if not any_last or len(head_for) == len(models):
        return None, "no model supports layer='last_dense'"
    note = f"head {hessian} posterior for {', '.join(head_for)} (not torch models)" if head_for else ""
    return (embedders, qc, dc), note


@dataclass
class _Forms:
    """Fitted embedders and their (query, document) components per posterior form."""

    embedders: Dict[str, List[LaplaceEmbedder]] = field(default_factory=dict)
    comps: Dict[str, Tuple[List[GaussianEmbedding], List[GaussianEmbedding]]] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    notes: Dict[str, str] = field(default_factory=dict)


def _fit_forms(
    uec_task: UECTask,
    emb: TaskEmbeddings,
    models: List[str],
    *,
    seed,
    prior_precision,
    curvature,
    last_dense: bool,
    hessians: Sequence[str] = ("kron", "diag"),
) -> _Forms:
    """The kron and diag (``hessians``) head posteriors of every model (and the last_dense ones when asked)."""
    ev = uec_task.eval_queries
    forms = _Forms()
    for hessian in hessians:
        # only the default's (kron) posterior carries query heads: every diag row scores without them
        lst = [
            LaplaceEmbedder(
                m,
                hessian=hessian,
                curvature=curvature,
                prior_precision=prior_precision,
                random_state=seed,
                query_head=hessian == "kron",
            ).fit_embeddings(emb.fit_anchors[m], emb.fit_positives[m], scrambled=emb.fit_scrambled.get(m))
            for m in models
        ]
        forms.embedders[hessian] = lst
        forms.comps[hessian] = (
            [e.transform(emb.queries[m][ev]) for e, m in zip(lst, models)],
            [e.transform(emb.docs[m]) for e, m in zip(lst, models)],
        )
    if not last_dense:
        forms.skipped["last_dense"] = "not requested"
        return forms
    try:
        got, note = last_dense_components(uec_task, models, prior_precision=prior_precision, seed=seed)
    except Exception as exc:  # the variant comes from another branch: never lose the rest of the table
        got, note = None, f"layer='last_dense' failed ({type(exc).__name__}: {exc})"
    if got is None:
        forms.skipped["last_dense"] = note
    else:
        forms.embedders["last_dense"], qc, dc = got
        forms.comps["last_dense"] = (qc, dc)
        if note:
            forms.notes["last_dense"] = note
    return forms


def _posterior_summary(forms: _Forms, models: Sequence[str]) -> Dict[str, Any]:
    out = {}
    for hessian, lst in forms.embedders.items():
        for m, e in zip(models, lst):
            heads = e.heads_
            out[f"{m}/{hessian}"] = {
                "prior_precision": e.prior_precision_,
                "fit_seconds": e.fit_seconds_,
                "n_pairs": e.n_pairs_,
                "trace_mean": heads.trace_mean,
                "trace_std": heads.trace_std,
                "query_head_penalty": None if heads.query_head is None else heads.query_head.penalty,
            }
    return out


@dataclass
class _RowRunner:
    """Ranks one row's ensemble over the task's evaluated queries."""

    forms: _Forms
    emb: TaskEmbeddings
    models: List[str]
    relevant: List[Sequence[int]]
    texts: List[str] = field(default_factory=list)  # the evaluated queries' texts
    languages: List[str] = field(default_factory=list)  # their labelled languages (the bound row only)
    identifier: Any = None  # one language identifier shared by every row (loaded once)
    fit_texts: List[str] = field(default_factory=list)  # the fit pairs' query texts
    _calibrated: Dict[str, UECEnsemble] = field(default_factory=dict)

    def calibrated(self, hessian: str = "kron") -> UECEnsemble:
        """The default as shipped: ``fit_confidence`` on the fit pairs (the task's documents as
        distractors), which also checks its routing on held-out fit pairs (fitted once per form)."""
        if hessian not in self._calibrated:
            lst = self.forms.embedders[hessian]
            language = {"identifier": self.identifier} if self.identifier is not None else {}
            self._calibrated[hessian] = build_ensemble(lst, language=language).fit_confidence_components(
                [e.transform(self.emb.fit_anchors[m]) for e, m in zip(lst, self.models)],
                [e.transform(self.emb.fit_positives[m]) for e, m in zip(lst, self.models)],
                documents=self.forms.comps[hessian][1],
                texts=self.fit_texts,
            )
        return self._calibrated[hessian]

    def run(self, spec: RowSpec, **over) -> Ranking:
        lst = self.forms.embedders[spec.hessian]
        qc, dc = self.forms.comps[spec.hessian]
        if spec.models:
            k = self.models.index(spec.models[0])
            lst, qc, dc = [lst[k]], [qc[k]], [dc[k]]
        cal = None
        if spec.kwargs.get("center_confidence") or spec.kwargs.get("standardize_confidence"):
            cal = [e.transform(self.emb.fit_anchors[m]) for e, m in zip(lst, spec.models or self.models)]
        options = {**spec.kwargs, **over}
        if "prior" in options:  # the prior grid (a flat setting, so the chosen values stay numbers)
            options["language"] = {**options.get("language", {}), "prior": options.pop("prior")}
        if spec.routing is not None:  # a harness-only routing (an ablation or a bound)
            mixing = build_ensemble(lst, **{**options, "weights": "uniform"}).mixing
            ens = UECEnsemble(lst, routing=spec.routing(lst, self), mixing=mixing)
        else:
            language = options.get("language", {})
            if self.identifier is not None and "identifier" not in language:
                options["language"] = {**language, "identifier": self.identifier}
            ens = self.calibrated(spec.hessian) if spec.name == DEFAULT_ROW else build_ensemble(lst, **options)
        return rank(ens, qc, dc, self.relevant, cal, texts=self.texts)

    def grid(self, spec: RowSpec) -> List[Dict[str, float]]:
        """The settings tuned on dev for this row (``[{}]`` when none)."""
        if spec.grid == "std":
            return [{"temperature": T} for T in TEMPERATURES]
        if spec.grid == "raw":
            scale = float(np.mean([e.heads_.trace_std for e in self.forms.embedders[spec.hessian]]))
            return [{"temperature": T * scale} for T in TEMPERATURES]
        if spec.grid == "official":
            # T in units of the precision sum's spread over the queries (its raw scale is ~D^2 / trace)
            qc = self.forms.comps[spec.hessian][0]
            scale = float(np.mean([precision_sum(normalize_variance_official(c.var)).std() for c in qc]))
            scale = max(scale, 1e-12)
            return [{"temperature": T * scale, "beta": b} for T in TEMPERATURES for b in BETAS]
        if spec.grid == "confidence":
            return [{"temperature": T} for T in CONFIDENCE_TEMPERATURES]
        if spec.grid == "prior":
            return [{"prior": p} for p in PRIORS]
        return [{}]


def _rank_specs(specs: Sequence[RowSpec], runner: _RowRunner, draws, show_progress_bar: bool, label: str):
    """Per row: its ranking on each draw (the dev-chosen setting where tuned), and the settings chosen."""
    chosen: Dict[str, List[Dict[str, float]]] = {}
    rankings: Dict[str, List[Ranking]] = {}
    single_ndcg: Dict[str, np.ndarray] = {}
    models = runner.models
    for spec in tqdm(specs, desc=f"rows {label}", disable=not show_progress_bar, unit="row"):
        if spec.grid:
            settings = runner.grid(spec)
            runs = [runner.run(spec, **g) for g in settings]
            picks = [int(np.argmax([r.metrics["ndcg@10"][dv].mean() for r in runs])) for dv, _ in draws]
            chosen[spec.name] = [settings[i] for i in picks]
            rankings[spec.name] = [runs[i] for i in picks]
        elif spec.dev_weights:
            rankings[spec.name] = [
                runner.run(spec, weights=np.array([single_ndcg[m][dv].mean() for m in models])) for dv, _ in draws
            ]
        else:
            r = runner.run(spec)
            rankings[spec.name] = [r] * len(draws)
            if spec.models:
                single_ndcg.setdefault(spec.models[0], r.metrics["ndcg@10"])  # the plain model, not its hubness row
    return rankings, chosen


def _row_summary(rs: List[Ranking], draws, langs: np.ndarray, n_models: int, k_multi: int) -> Dict[str, Any]:
    """Test-half metrics (x100), dev nDCG, AUC, ECE, per-language nDCG and the multilingual weight, over draws."""
    per_metric: Dict[str, List[float]] = {}

    def add(key: str, value: float) -> None:
        per_metric.setdefault(key, []).append(value)

    for r, (dv, ts) in zip(rs, draws):
        for key, vals in r.metrics.items():
            add(key, 100.0 * vals[ts].mean())
        add("dev_ndcg@10", 100.0 * r.metrics["ndcg@10"][dv].mean())
        add("auc@10", 100.0 * roc_auc(-r.sig2_top1[ts], r.metrics["hit@10"][ts]))
        tau = fit_confidence_temperature(r.scores[dv], r.metrics["hit@1"][dv])
        add("ece", expected_calibration_error(top1_confidence(r.scores[ts], tau), r.metrics["hit@1"][ts]))
        for lang in dict.fromkeys(langs):
            sel, dev_sel = ts[langs[ts] == lang], dv[langs[dv] == lang]
            if sel.size:
                add(f"ndcg@10[{lang}]", 100.0 * r.metrics["ndcg@10"][sel].mean())
            elif dev_sel.size:  # a language only ever on the dev side (a dev language of a transfer task)
                add(f"dev_ndcg@10[{lang}]", 100.0 * r.metrics["ndcg@10"][dev_sel].mean())
        if r.weights.shape[1] == n_models:
            w = r.weights[:, k_multi].astype(np.float64)
            en, fo = ts[langs[ts] == "en"], ts[langs[ts] != "en"]
            if en.size:
                add("w_multi[en]", float(w[en].mean()))
            if fo.size:
                add("w_multi[foreign]", float(w[fo].mean()))
    return {k: _summary(v) for k, v in per_metric.items()}


#: rows whose mean coefficients per language are reported (draw 0)
_COEFFICIENT_ROWS = (
    "paper: kron, score mixing",
    "official: diag, embedding mixing",
    "confidence (sigma^2 in the probit, score mixing)",
    "confidence x kron Laplace (score mixing)",
    "rank head (kron Laplace variances in the probit)",
    RANK_ROW,
    DEFAULT_ROW,
)


def _eval_draws(uec_task: UECTask, n_draws: int, seed: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """The dev/test halves as positions among the evaluated queries (by language for a language-transfer task)."""
    pos_in_eval = {int(r): i for i, r in enumerate(uec_task.eval_queries)}
    if isinstance(uec_task, LanguageTransferTask):
        halves = language_draws(uec_task, n_draws, seed=seed)
    else:
        halves = dev_test_draws(uec_task, n_draws, seed=seed)
    return [
        (np.array([pos_in_eval[int(r)] for r in dv]), np.array([pos_in_eval[int(r)] for r in ts])) for dv, ts in halves
    ]


#: prior probabilities of the fit's languages searched on dev (``LanguageRouting(prior=...)``)
PRIORS = (0.3, 0.5, 0.7, 0.9)
NO_RANK_HEAD_ROW = "UEC default - rank head"
TRUE_LANGUAGE_ROW = "UEC default, true query languages (bound)"
DEV_PRIOR_ROW = "UEC default, prior chosen on dev"


def _true_languages(embedders, runner) -> TrueLanguageRouting:
    return TrueLanguageRouting(
        [model_languages(e.encoder_name) for e in embedders], query_languages=tuple(runner.languages)
    )


def _no_rank_head(embedders, runner) -> NoRankHeadRouting:
    languages = [model_languages(e.encoder_name) for e in embedders]
    probe = all(e.heads_.probe_head is not None for e, langs in zip(embedders, languages) if langs is not None)
    return NoRankHeadRouting(languages, identifier=runner.identifier, probe=probe)


def language_rows() -> List[RowSpec]:
    """What each signal of the language routing adds: the rank head dropped, the prior tuned, the true languages."""
    return [
        RowSpec(NO_RANK_HEAD_ROW, "kron", {}, routing=_no_rank_head),
        RowSpec(DEV_PRIOR_ROW, "kron", {"uncertainty": "language"}, grid="prior"),
        RowSpec(TRUE_LANGUAGE_ROW, "kron", {}, routing=_true_languages),
    ]


#: the row sets of :func:`evaluate_task` (``"full"`` is every row of :func:`row_specs`)
ROW_SETS = ("full", "core", "routing", "languages", "minimal")


def routing_rows(routings: Sequence[Any]) -> List[RowSpec]:
    """A row per routing given as an object or an importable name (``"package.module:Class"``),
    ``routing: <name>``, with T chosen on dev from the confidence grid when the routing has one."""
    rows = []
    for r in routings:
        routing = routing_named(r) if isinstance(r, str) else r
        grid = "confidence" if hasattr(routing, "temperature") else ""
        rows.append(RowSpec(f"routing: {r if isinstance(r, str) else repr(r)}", "kron", {"routing": routing}, grid))
    return rows


def _select_specs(
    models: Sequence[str], row_set: str, forms: _Forms, routings: Sequence[Any] = ()
) -> Tuple[List[RowSpec], Dict[str, str]]:
    """The rows of ``row_set`` (and one per routing in ``routings``) whose posterior form was fitted,
    and the skipped ones with why."""
    keep = {"core": CORE_ROWS, "routing": ROUTING_ROWS, "languages": ROUTING_ROWS, "minimal": MINIMAL_ROWS}.get(
        row_set, ()
    )
    all_specs = [s for s in row_specs(models) if row_set == "full" or s.models or s.name in keep]
    if row_set == "languages":
        all_specs += language_rows()
    all_specs += routing_rows(routings)
    skipped = dict(forms.skipped)
    for s in all_specs:
        if s.hessian not in forms.comps:
            skipped[s.name] = skipped.get(s.hessian, "")
    return [s for s in all_specs if s.hessian in forms.comps], skipped


def _summaries(rankings, chosen, draws, langs: np.ndarray, n_models: int, k_multi: int) -> Dict[str, Any]:
    """:func:`_row_summary` of every row, with the settings chosen on dev where tuned."""
    results: Dict[str, Any] = {}
    for name, rs in rankings.items():
        results[name] = _row_summary(rs, draws, langs, n_models, k_multi)
        if name in chosen:
            results[name]["chosen"] = chosen[name]
    return results


def _runner(uec_task: UECTask, emb: TaskEmbeddings, forms: _Forms, models: List[str]) -> _RowRunner:
    """The row runner over the task's evaluated queries (one language identifier for every row)."""
    t, ev = uec_task.task, uec_task.eval_queries
    monolingual = any(model_languages(m) is not None for m in models)
    return _RowRunner(
        forms,
        emb,
        models,
        [t.relevant[i] for i in ev],
        texts=[t.queries[i] for i in ev],
        languages=[t.languages[i] for i in ev],
        identifier=LangidIdentifier() if monolingual else None,
        fit_texts=[a for a, _ in uec_task.fit_pairs],
    )


def evaluate_task(
    uec_task: UECTask,
    emb: TaskEmbeddings,
    *,
    models: Sequence[str] = DEFAULT_MODELS,
    n_draws: int = 3,
    seed: int = 0,
    prior_precision="marglik",
    curvature: str = "ggn",
    last_dense: bool = True,
    multilingual: Optional[str] = None,
    row_set: str = "full",
    routings: Sequence[Any] = (),
    confidence: bool = False,
    weak_members: Sequence[str] = (),
    show_progress_bar: bool = True,
) -> Dict[str, Any]:
    """Every row of the table on one task; returns a JSON-ready dict.

    Keys: ``rows`` (name -> metric -> [mean, std], per-language nDCG, the
    multilingual model's mean weight on foreign / English test queries,
    ``dev_ndcg@10`` at the chosen settings), ``chosen`` (T / beta per tuned
    row and draw), ``coefficients`` (mean weights per language and model,
    draw 0), ``skipped`` (rows not run and why), ``posteriors``, sizes.
    ``multilingual`` names the model whose weights are reported (default
    ``"e5"`` when present, else the last model). ``row_set``: :data:`ROW_SETS`
    (``"core"``: the single models and :data:`CORE_ROWS`; ``"routing"``: and
    :data:`ROUTING_ROWS`; ``"languages"``: those and :func:`language_rows`). On a
    :class:`~experiments.uec_languages.LanguageTransferTask` the dev
    halves hold the dev languages (their nDCG@10 is ``dev_ndcg@10[lang]``) and
    ``languages`` lists those of the test halves. ``routings``: more rows, one per routing object
    or importable name (:func:`routing_rows`), evaluated like the rest. ``confidence``: add the
    default's top-hit confidence report (``confidence``, :mod:`experiments.uec_confidence`);
    ``weak_members``: names of weak models (their embeddings in ``emb``) each added to the default
    and the uniform ensemble (``weak_members``, :mod:`experiments.uec_robust`).
    """
    if row_set not in ROW_SETS:
        raise ValueError(f"row_set must be one of {ROW_SETS}, got {row_set!r}")
    models = list(models)
    multi = multilingual or ("e5" if "e5" in models else models[-1])
    t = uec_task.task
    ev = uec_task.eval_queries
    langs = np.array(t.languages)[ev]
    draws = _eval_draws(uec_task, n_draws, seed)
    forms = _fit_forms(
        uec_task,
        emb,
        models,
        seed=seed,
        prior_precision=prior_precision,
        curvature=curvature,
        last_dense=last_dense,
        hessians=("kron",) if row_set == "minimal" else ("kron", "diag"),  # every minimal row is kron
    )
    runner = _runner(uec_task, emb, forms, models)
    specs, skipped = _select_specs(models, row_set, forms, routings)
    rankings, chosen = _rank_specs(specs, runner, draws, show_progress_bar, uec_task.name)
    results = _summaries(rankings, chosen, draws, langs, len(models), models.index(multi))
    coefficients = {
        name: {lang: rankings[name][0].weights[langs == lang].mean(axis=0).tolist() for lang in dict.fromkeys(langs)}
        for name in _COEFFICIENT_ROWS
        if name in rankings
    }
    variants = {s.name for s in specs if s.variant} or {DEFAULT_ROW}
    best_dev = max((n for n in results if n in variants), key=lambda n: results[n]["dev_ndcg@10"][0])
    tested = {lang for _, ts in draws for lang in langs[ts]}
    extra: Dict[str, Any] = {}
    if confidence:
        from experiments.uec_confidence import evaluate_confidence

        qc, dc = forms.comps["kron"]
        extra["confidence"] = evaluate_confidence(
            runner.calibrated("kron"), qc, dc, runner.relevant, draws, texts=runner.texts
        )
    if DEFAULT_ROW in rankings or confidence:
        check = runner.calibrated("kron").routing_check_
        if check is not None:
            extra["routing_check"] = {**check.get_config(), "kept": check.kept}
    if weak_members:
        from experiments.uec_robust import evaluate_weak_members

        extra["weak_members"] = evaluate_weak_members(
            uec_task, emb, forms.embedders["kron"], weak_members, draws, seed=seed, runner=runner
        )
    return {
        "task": uec_task.name,
        "models": models,
        "multilingual_model": multi,
        "n_queries_eval": int(len(ev)),
        "n_documents": len(t.documents),
        "n_fit_pairs": len(uec_task.fit_pairs),
        "n_draws": n_draws,
        "languages": [lang for lang in dict.fromkeys(langs) if lang in tested],
        "dev_languages": [lang for lang in dict.fromkeys(langs) if lang not in tested],
        "rows": results,
        "best_dev_variant": best_dev,
        "coefficients": coefficients,
        "skipped": skipped,
        "notes": forms.notes,
        "posteriors": _posterior_summary(forms, models),
        "encode_seconds": {m: s for m, s in emb.seconds.items() if m in models},  # not the weak members'
        **extra,
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


def _fmt_chosen(ch: List[Dict[str, float]]) -> str:
    return "; ".join(", ".join(f"{k[0] if k == 'temperature' else k}={v:.3g}" for k, v in c.items()) for c in ch)


_INTRO = """# UEC: uncertainty-driven embedding convolution - retrieval results

Generated by `python -m experiments uec-eval` (the command lines are at the end); every
number below is measured by `experiments.uec_eval`. Models: K
off-the-shelf encoders, each given a post-hoc Laplace posterior
(`LaplaceEmbedder`: identity head on the normalised embedding, GGN of an
in-batch InfoNCE loss with tau = 0.05 on the task's fit pairs, prior
precision by marginal likelihood; `last_dense` rows: the posterior on the
last transformer FFN output dense where the model is a torch model, run
only when that variant is available).

## The rules and the routing being compared

Per query q (or document) and model k, with unit mean mu_k and diagonal
variance v_k (`crossembed/uec/ablations.py`, `crossembed/uec/routing.py`, `experiments/uec_rules.py`):

| choice | paper (`rules="paper"`) | official code (`rules="official"`) |
|---|---|---|
| variance normalisation | v / \\|mu\\|^2 (the Gaussian of x / \\|mu\\|) | v / \\|v\\|_2^2 |
| Laplace coefficients | softmax_k(-tr(Sigma_k) / T) | softmax_k(sum_d (1 / v_kd) / T) (precision sum) |
| similarity | mu_s / sqrt(1 + (pi/8) sig2_s) (probit) | cos(mu_q, mu_c) / (1 + beta sig2_s / pi) |

with sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>. Retrieval
confidence (`ConfidenceRouting`, `uncertainty="confidence"`): over the searched
collection, model k's cosines s_(1) >= s_(2) >= ... give the calibrated gap
g_k(q) = (s_(1) - mean(s_(2..20))) / c_k, c_k the model's cosine spread
between unrelated fit texts; the per-query score variance is
sigma_k^2(q) = (c_k / g_k(q))^2 and the coefficients are
softmax_k(-log sigma_k^2(q) / T), i.e. pi_k ∝ sigma_k^(-2/T). It is computed
at encode time over a reference collection held by the ensemble
(`UECEnsemble.with_reference`; `UECIndex.build` uses the indexed
documents), so an index search and the probit score stay one pipeline. By
default (`laplace_variances=False`) the probit scores sigma_k^2(q) as
the query's isotropic variance with deterministic documents, so
sig2_s = sum_k w_k^2 sigma_k^2(q) for unit documents: the ranking is the
confidence-weighted score and the score is shrunk by the query's
uncertainty; `laplace_variances=True` scores the Laplace variances instead.

Rows:

* single models and the baselines rank by the cosine of the means;
  *uniform ensemble (mean of scores)*: average of the K cosines;
  *(calibrated scores)*: each cosine first divided by c_k
  (`ScoreMixing(calibrate=True)`, the default of every score-mixing row below);
  *weighted ensemble*: fixed weights proportional to each model's dev nDCG@10;
* *paper*: the paper's rules (raw traces for its own form with embedding
  mixing, otherwise traces standardised per model);
* *official*: the official code's rules; *embedding mixing* is the code's
  own Gaussian convolution of the vectors, *score mixing* keeps the K spaces
  side by side (the coefficients mix per-model scores);
* *confidence (sigma^2 in the probit)*: the routing above as shipped, T
  tuned; *kron / diag Laplace variances in the probit*: the same weights,
  the Laplace variances scored (`laplace_variances=True`); *official
  rules*: the same weights under the official normalisation and beta cosine
  (diagonal posterior); *centred per model*: log sigma_k^2 minus its mean
  over the Laplace fit anchors (`CalibratedConfidenceRouting`); *z-scored per
  model*: that centred log sigma_k^2 divided by its standard deviation over
  the anchors (`standardize=True`); *hard routing*: T = 0.01,
  i.e. each query goes to its most confident model (a bound on how far
  sharper weights go); *x Laplace*:
  sigma_k^2 times the Laplace trace relative to its fit-set mean (weights
  only);
* *+ hubness (CSLS)*: each model's score minus half its document hubness
  (the mean of the document's 10 best cosines to that model's fit anchors,
  a fit document's own anchors left out; `ScoreMixing(hubness=0.5)`). Every row above
  these scores without it;
* *+ query head + hubness*: each model's queries mapped by its query head
  (the MAP of a linear map under the fit pairs' InfoNCE, prior at the
  identity, penalty chosen on held-out fit pairs; `ScoreMixing(query_head=True)`), with
  the hubness measured against the mapped fit anchors. Every row above these
  scores without it;
* *UEC default (as shipped)*: `UECEnsemble(embedders)` with every default
  (rank-head routing, T = 1, deterministic scoring, query heads, hubness
  1/2; not tuned here; *T chosen on dev*: the same with T from the confidence grid), and its ablations (*- Unc Sim*: rank by the mean
  score without the variance; *- Unc Conv*: uniform coefficients; *- hubness*:
  `hubness=0`; *- query head*: `query_head=False`).

Settings tuned per draw on the dev half (column *chosen*): T from {T_GRID}
(standardised traces; times the mean raw trace std for the paper's raw
form; times the mean std of the precision sum over the queries for the
official rules, with beta in {BETAS}); T from {C_GRID} for the confidence
rows. *w(e5)* = the multilingual model's mean coefficient on foreign /
English test queries. AUC@10 = ROC AUC of -sig2_s of the top-1 pair for "a
relevant document is in the top 10". ECE: 15 bins, top-1 confidence =
softmax of the top-100 scores / tau with tau fitted on dev.
"""


_PAIR = ("number", "number")
#: What :func:`render_markdown` reads of one :func:`evaluate_task` result (see ``_records``);
#: :func:`load_results` also checks the rows the report compares are there.
#: what :func:`routing_check_lines` reads
ROUTING_CHECK_SHAPE = {
    "routed": "number",
    "fixed": "number",
    "std_error": "number",
    "n_queries": "int",
    "kept": "any",
}
RESULT_SHAPE = {
    "routing_check?": ROUTING_CHECK_SHAPE,
    "task": "str",
    "models": ["str"],
    "languages": ["str"],
    "n_queries_eval": "int",
    "n_documents": "int",
    "n_fit_pairs": "int",
    "n_draws": "int",
    "best_dev_variant": "str",
    "multilingual_model?": "str",
    "command?": "str",
    "skipped?": {},
    "notes?": {},
    "rows": {
        "*": {
            **{key: _PAIR for key, _ in _MAIN_METRICS},
            "w_multi[foreign]?": _PAIR,
            "w_multi[en]?": _PAIR,
            "chosen?": [{"*": "number"}],
        }
    },
    "coefficients": {"*": {"*": ["number"]}},
    "posteriors": {
        "*": {
            "prior_precision": "number",
            "fit_seconds": "number",
            "n_pairs": "int",
            "trace_mean": "number",
            "trace_std": "number",
            "query_head_penalty?": "number?",
        }
    },
}


def load_results(path, source: str = "--from-json") -> List[Dict[str, Any]]:
    """The results saved next to an earlier report (one result or a list), checked for what the report reads."""
    loaded = read_json(path, source)
    results = check_loaded(loaded, [RESULT_SHAPE] if isinstance(loaded, list) else RESULT_SHAPE, path, source)
    results = results if isinstance(results, list) else [results]
    for i, res in enumerate(results):
        check_comparable(res, path, source, i)
    return results


def check_comparable(res: Dict[str, Any], path, source: str, i: int) -> None:
    """A ``ValueError`` when result ``i`` (of :data:`RESULT_SHAPE`) lacks rows or fields the report compares."""
    missing = _uncompared(res)
    if missing:
        raise ValueError(
            f"{source} file {str(path)!r}: result {i} lacks what the report compares: {', '.join(missing[:3])}"
        )


def _uncompared(res: Dict[str, Any]) -> List[str]:
    """The rows and fields of a result (of :data:`RESULT_SHAPE`) that the report reads and it lacks."""
    rows, langs = res["rows"], res["languages"]
    need = [DEFAULT_ROW, res["best_dev_variant"]] + (res["models"] if len(langs) > 1 else [])
    if res["task"] == "freedict-multilingual":
        need.append(res.get("multilingual_model", "e5"))
    missing = [f"row {name!r}" for name in dict.fromkeys(need) if name not in rows]
    if not any(m in rows for m in res["models"]):
        missing.append("a row of a single model")
    for name, per_lang in res["coefficients"].items():
        if any(len(w) != len(res["models"]) for w in per_lang.values()):
            missing.append(f"coefficients {name!r}: one weight per model")
    default = rows.get(DEFAULT_ROW, {})
    if res["task"] == "freedict-multilingual" and "w_multi[foreign]" in default and "w_multi[en]" not in default:
        missing.append(f"row {DEFAULT_ROW!r}: w_multi[en] beside w_multi[foreign]")
    for name, row in rows.items():
        for lang in langs if len(langs) > 1 else ():
            value = row.get(f"ndcg@10[{lang}]")
            if not (isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)):
                missing.append(f"row {name!r}: ndcg@10[{lang}] as [mean, std]")
    return missing


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _verdicts(res: Dict[str, Any]) -> List[str]:
    rows = res["rows"]
    nd = {name: row["ndcg@10"][0] for name, row in rows.items()}
    singles = {m: nd[m] for m in res["models"] if m in nd}
    best_single = max(singles, key=singles.get)
    uec = DEFAULT_ROW
    multi = res.get("multilingual_model", "e5")
    out = ["Findings (computed from the table above):", ""]
    out.append(
        f"* best variant on the dev halves: {res['best_dev_variant']} (test nDCG@10 {nd[res['best_dev_variant']]:.2f})."
    )
    bases = ("uniform ensemble (mean of scores)", "uniform ensemble (calibrated scores)", best_single)
    # the same document hubness without the routing: what the routing itself adds
    bases += tuple(b for b in (HUBNESS_UNIFORM_ROW, f"{best_single} + hubness (CSLS)") if b in nd)
    # and with the same query heads: what the routing adds on top of everything else
    bases += tuple(b for b in (HEAD_UNIFORM_ROW, f"{best_single} + query head + hubness") if b in nd)
    for base in bases:
        d = nd[uec] - nd[base]
        out.append(f"* {uec} vs {base}: {d:+.2f} nDCG@10 ({'better' if d > 0 else 'not better'}).")
    row = rows[uec]
    if "w_multi[foreign]" in row and "w_multi[en]" in row:
        d = row["w_multi[foreign]"][0] - row["w_multi[en]"][0]
        out.append(
            f"* {multi}'s mean weight in {uec}: foreign {row['w_multi[foreign]'][0]:.3f} vs English "
            f"{row['w_multi[en]'][0]:.3f} ({d:+.3f})."
        )
    if len(res["languages"]) > 1:
        for lang in res["languages"]:
            per = {m: rows[m][f"ndcg@10[{lang}]"][0] for m in res["models"]}
            best = max(per, key=per.get)
            out.append(
                f"* [{lang}] best single model {best} {per[best]:.2f}; {uec} {rows[uec][f'ndcg@10[{lang}]'][0]:.2f}."
            )
    for name, why in res.get("skipped", {}).items():
        if why:
            out.append(f"* skipped {name}: {why}.")
    for name, why in res.get("notes", {}).items():
        out.append(f"* {name}: {why}.")
    out.append("")
    return out


def _targets(results: Sequence[Dict[str, Any]]) -> List[str]:
    """Issue 11's three targets, checked against the default row (only for the tasks present)."""
    by = {r["task"]: r for r in results}
    out = []
    fd, wn = by.get("freedict-multilingual"), by.get("wordnet-example-gloss")
    if fd and DEFAULT_ROW in fd["rows"]:
        rows, multi = fd["rows"], fd.get("multilingual_model", "e5")
        d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[multi]["ndcg@10"][0]
        out.append(f"* FreeDict: UEC default >= {multi} alone: {d:+.2f} nDCG@10 ({'met' if d >= 0 else 'missed'}).")
        hub = f"{multi} + hubness (CSLS)"
        if hub in rows:  # not a target: the same document correction on the single model
            d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[hub]["ndcg@10"][0]
            out.append(f"  (against {hub}: {d:+.2f} nDCG@10.)")
        head = f"{multi} + query head + hubness"
        if head in rows:  # nor this: the single model with the same head and correction
            d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[head]["ndcg@10"][0]
            out.append(f"  (against {head}: {d:+.2f} nDCG@10.)")
        r = rows[DEFAULT_ROW]
        if "w_multi[foreign]" in r:
            dw = r["w_multi[foreign]"][0] - r["w_multi[en]"][0]
            out.append(
                f"* FreeDict: {multi}'s mean weight foreign - English >= 0.1: {r['w_multi[foreign]'][0]:.3f} - "
                f"{r['w_multi[en]'][0]:.3f} = {dw:+.3f} ({'met' if dw >= 0.1 else 'missed'})."
            )
    if wn and DEFAULT_ROW in wn["rows"]:
        rows = wn["rows"]
        for base in ("uniform ensemble (mean of scores)", "uniform ensemble (calibrated scores)"):
            if base in rows:
                d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[base]["ndcg@10"][0]
                out.append(f"* WordNet: UEC default >= {base} + 2: {d:+.2f} nDCG@10 ({'met' if d >= 2 else 'missed'}).")
        if HUBNESS_UNIFORM_ROW in rows:  # not a target: how much of it the document correction alone gives
            d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[HUBNESS_UNIFORM_ROW]["ndcg@10"][0]
            out.append(f"  (against {HUBNESS_UNIFORM_ROW}: {d:+.2f} nDCG@10.)")
        if HEAD_UNIFORM_ROW in rows:  # nor this: what the routing adds to the same heads and correction
            d = rows[DEFAULT_ROW]["ndcg@10"][0] - rows[HEAD_UNIFORM_ROW]["ndcg@10"][0]
            out.append(f"  (against {HEAD_UNIFORM_ROW}: {d:+.2f} nDCG@10.)")
    for res in results:
        if res.get("dev_languages") and DEFAULT_ROW in res["rows"]:
            out += _language_targets(res)
        elif res["task"].startswith("wordnet") and RANK_ROW in res["rows"]:  # English: the language signals' cost
            d = res["rows"][DEFAULT_ROW]["ndcg@10"][0] - res["rows"][RANK_ROW]["ndcg@10"][0]
            out.append(f"* {res['task']}: UEC default - {RANK_ROW} >= -0.3: {d:+.2f} nDCG@10 ({_met(d >= -0.3)}).")
    return ["## Targets (UEC default as shipped, test halves)", ""] + out + [""] if out else []


def _language_tables(res: Dict[str, Any]) -> List[str]:
    """nDCG@10 per query language: the test halves' languages, then the dev languages (dev halves) when any."""
    lines: List[str] = []
    for key, langs, title in (
        ("ndcg@10", res["languages"] if len(res["languages"]) > 1 else [], "test"),
        ("dev_ndcg@10", res.get("dev_languages", []), "dev halves: the dev languages, never scored on test"),
    ):
        if not langs:
            continue
        lines += [
            f"nDCG@10 per query language ({title}, mean ± std):",
            "",
            "| row | " + " | ".join(langs) + " |",
            "|---|" + "---|" * len(langs),
        ]
        for name, row in res["rows"].items():
            lines.append(
                f"| {name} | " + " | ".join(_fmt(row.get(f"{key}[{l}]", (math.nan, 0.0))) for l in langs) + " |"
            )
        lines.append("")
    return lines


def _language_targets(res: Dict[str, Any]) -> List[str]:
    """The unseen-language targets, checked against the default row: >= the best single model, >= uniform + 2,
    the multilingual model's weight gap >= 0.1."""
    rows, multi = res["rows"], res.get("multilingual_model", "e5")
    nd = {name: row["ndcg@10"][0] for name, row in rows.items()}
    singles = {n: v for n, v in nd.items() if n in res["models"] or n.endswith(" + query head + hubness")}
    best = max(singles, key=singles.get)
    d = nd[DEFAULT_ROW] - nd[best]
    out = [f"* {res['task']}: UEC default >= best single model ({best}): {d:+.2f} nDCG@10 ({_met(d >= 0)})."]
    for base in ("uniform ensemble (calibrated scores)", HEAD_UNIFORM_ROW, RANK_ROW):
        if base in nd:
            d = nd[DEFAULT_ROW] - nd[base]
            out.append(f"* {res['task']}: UEC default >= {base} + 2: {d:+.2f} nDCG@10 ({_met(d >= 2)}).")
    r = rows[DEFAULT_ROW]
    if "w_multi[foreign]" in r and "w_multi[en]" in r:
        dw = r["w_multi[foreign]"][0] - r["w_multi[en]"][0]
        out.append(
            f"* {res['task']}: {multi}'s mean weight on unseen-language - English queries >= 0.1: "
            f"{r['w_multi[foreign]'][0]:.3f} - {r['w_multi[en]'][0]:.3f} = {dw:+.3f} ({_met(dw >= 0.1)})."
        )
    return out


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def routing_check_lines(res: Dict[str, Any]) -> List[str]:
    """What ``fit_confidence``'s held-out routing check found for the default (none when not run)."""
    c = res.get("routing_check")
    if not c:
        return []
    verdict = "kept" if c["kept"] else "replaced by the fixed log-rank (uniform where every model reads the query)"
    return [
        f"Routing check of the default (held-out fit pairs, {c['n_queries']} queries, nDCG@10 x 100): rank heads "
        f"{100 * c['routed']:.2f}, fixed log-rank {100 * c['fixed']:.2f} (difference "
        f"{100 * (c['routed'] - c['fixed']):+.2f} ± {100 * c['std_error']:.2f} s.e.): rank heads {verdict}.",
        "",
    ]


def _task_section(res: Dict[str, Any]) -> List[str]:
    """One task's tables: the rows, findings, per-language nDCG, coefficients and posteriors."""
    lines: List[str] = []
    multi = res.get("multilingual_model", "e5")
    lines += [
        f"### {res['task']}",
        "",
        f"{res['n_queries_eval']} evaluated queries ({', '.join(res['languages'])}), {res['n_documents']} documents, "
        f"{res['n_fit_pairs']} Laplace fit pairs (disjoint from the evaluated queries), {res['n_draws']} random "
        "dev/test halves; test mean ± std over the draws. Metrics ×100 except ECE and weights.",
        "",
        "| row | "
        + " | ".join(label for _, label in _MAIN_METRICS)
        + f" | w({multi}) foreign | w({multi}) en | chosen on dev |",
        "|---|" + "---|" * (len(_MAIN_METRICS) + 3),
    ]
    for name, row in res["rows"].items():
        cells = [_fmt(row[key], 3 if key == "ece" else 2) for key, _ in _MAIN_METRICS]
        single = name in res["models"]
        for key in ("w_multi[foreign]", "w_multi[en]"):
            cells.append("" if single or key not in row else _fmt(row[key], 3))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_fmt_chosen(row.get('chosen', []))} |")
    lines.append("")
    lines += _verdicts(res)
    lines += routing_check_lines(res)
    if "confidence" in res:
        from experiments.uec_confidence import render_confidence

        lines += render_confidence(res)
    if "weak_members" in res:
        from experiments.uec_robust import render_weak_members

        lines += render_weak_members(res)
    lines += _language_tables(res)
    lines += [
        "Mean coefficients per query language (draw 0, chosen settings):",
        "",
        "| row | language | " + " | ".join(res["models"]) + " |",
        "|---|---|" + "---|" * len(res["models"]),
    ]
    for name, per_lang in res["coefficients"].items():
        for lang, w in per_lang.items():
            lines.append(f"| {name} | {lang} | " + " | ".join(f"{x:.3f}" for x in w) + " |")
    lines += [
        "",
        "Posteriors (prior precision by marginal likelihood; fit time on this machine, query head"
        " included; query head: the penalty per pair chosen on held-out pairs, inf = the identity kept):",
        "",
        "| model/form | prior precision | fit s | pairs | trace mean | trace std | query head |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, p in res["posteriors"].items():
        c = p.get("query_head_penalty")
        lines.append(
            f"| {key} | {p['prior_precision']:.3g} | {p['fit_seconds']:.1f} | {p['n_pairs']} | "
            f"{p['trace_mean']:.4g} | {p['trace_std']:.3g} | {'' if c is None else f'{c:g}'} |"
        )
    lines.append("")
    return lines


def render_markdown(results: Sequence[Dict[str, Any]], *, command: str = "", perf_note: str = "") -> str:
    """``docs/uec.md`` from :func:`evaluate_task` outputs."""
    intro = (
        _INTRO.replace("{T_GRID}", ", ".join(f"{t:g}" for t in TEMPERATURES))
        .replace("{C_GRID}", ", ".join(f"{t:g}" for t in CONFIDENCE_TEMPERATURES))
        .replace("{BETAS}", ", ".join(f"{b:g}" for b in BETAS))
    )
    lines: List[str] = [intro] + _targets(results)
    for res in results:
        lines += _task_section(res)
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
    rows: Sequence[str] = ("paper: kron, score mixing", DEFAULT_ROW),
) -> None:
    """Heat maps of the mean coefficient per query language (rows) and model (columns)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from crossembed.cli.options import write_file

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
    write_file(path, buf.getvalue())
