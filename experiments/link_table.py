"""Real linking experiments: encoder pairs x protocol settings x methods -> a markdown table.

Each draw picks ``n_objects`` glosses at random from the embedded corpus
(:mod:`experiments.corpora`), applies :func:`make_partial_overlap` to
them, runs every method on the same A, B and seeds, and scores the links.
Results are appended to a JSON file after every run (atomically), so an
interrupted table keeps what it measured and a rerun skips finished runs.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

from crossembed.baselines import MiniVec2Vec, VecMap
from crossembed.cli.options import write_file
from crossembed.linking import (
    CCAMap,
    CrossFitCheck,
    CrossFitRelink,
    DecoyPass,
    ExactCandidates,
    GEHLinker,
    LinkResult,
    MapPass,
    PoolCandidates,
    RidgeMap,
    ValidatedPromotion,
    evaluate_links,
    make_partial_overlap,
)
from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.geh import DEFAULT_MAX_ITER
from experiments._records import read_checked
from experiments.linking_metrics import translation_metrics
from experiments.linking_rules import (
    CappedPromotion,
    CheckedMapPass,
    CosineSignatures,
    FoldPass,
    PaperPromotion,
    RandomViews,
    TwoWayRidgeMap,
    Whiten,
)

__all__ = [
    "DEFAULT_PAIRS",
    "METHODS",
    "RECORD_SHAPE",
    "SUMMARY",
    "find_method",
    "geh_method",
    "load_records",
    "render_markdown",
    "run_method",
    "run_table",
]

# (encoder A, encoder B, corpus size): each draw samples n_objects of the corpus's mixed-POS glosses
DEFAULT_PAIRS = (
    ("minilm", "use", 20000),
    ("minilm", "e5", 20000),
    ("minilm", "minilm-l3", 20000),
    ("minilm", "mpnet", 20000),
    ("mpnet", "use", 20000),
)


_CHECK2 = CrossFitCheck(max_rounds=2)  # the decoy pass's pool check before CrossFitRelink


def geh_method(*, most_rounds: Optional[int] = None, **parts) -> Callable[..., LinkResult]:
    """A method running :class:`GEHLinker` with the default objects except ``parts`` (its keyword
    arguments: ``candidates=``, ``promotion=``, ...), for the table's ``max_iter`` rounds at most,
    and ``most_rounds`` at most when given."""

    def run(A, B, seeds, *, random_state, max_iter):
        rounds = max_iter if most_rounds is None else min(max_iter, most_rounds)
        linker = GEHLinker(random_state=random_state, max_iter=rounds, show_progress_bar=False, **parts)
        return linker.link(A, B, seeds)

    return run


METHODS: Dict[str, Callable[..., LinkResult]] = {
    "procrustes": lambda A, B, s, **_: procrustes_link(A, B, s),
    "relative": lambda A, B, s, **_: relative_link(A, B, s),
    "bootstrap-procrustes": lambda A, B, s, **_: bootstrap_procrustes_link(A, B, s, n_iter=5),
    # the published rules as written: no centring
    "geh-paper": geh_method(promotion=PaperPromotion(), center=None),
    "geh-capped": geh_method(promotion=CappedPromotion(), center=None),
    "geh-validated": geh_method(most_rounds=DEFAULT_MAX_ITER),
    # the default rules with 30 rounds at most
    "geh-30-rounds": geh_method(),
    "geh-validated-uncentered": geh_method(center=None),
    "geh-validated-whiten": geh_method(center=Whiten()),
    "geh-validated-fold-pass": geh_method(promotion=ValidatedPromotion(final_pass=FoldPass())),
    "geh-validated-no-final-pass": geh_method(promotion=ValidatedPromotion(final_pass=None)),
    # the map pass fitted on the links the no-partner check keeps (the low-overlap option)
    "geh-checked": geh_method(promotion=ValidatedPromotion(final_pass=CheckedMapPass())),
    # one ridge map fitted on the whole pool relinks every row
    "geh-map-pass": geh_method(promotion=ValidatedPromotion(final_pass=MapPass())),
    # the decoy pass on the checked pool, without relinking it first, scoring through CCA, a ridge map or
    # one each way
    "geh-pool-check": geh_method(promotion=ValidatedPromotion(final_pass=DecoyPass(check=_CHECK2, scorer=CCAMap()))),
    "geh-ridge-map": geh_method(promotion=ValidatedPromotion(final_pass=DecoyPass(check=_CHECK2, scorer=RidgeMap()))),
    "geh-two-maps": geh_method(
        promotion=ValidatedPromotion(final_pass=DecoyPass(check=_CHECK2, scorer=TwoWayRidgeMap()))
    ),
    # the relinked pool checked through 128 canonical directions instead of a ridge map
    "geh-relink-cca-check": geh_method(
        promotion=ValidatedPromotion(
            final_pass=DecoyPass(
                check=CrossFitRelink(check=CrossFitCheck(max_rounds=2, scorer=CCAMap(n_components=128)))
            )
        )
    ),
    # ... and with the pool check scoring through CCA too
    "geh-cca-check": geh_method(
        promotion=ValidatedPromotion(
            final_pass=DecoyPass(check=CrossFitCheck(max_rounds=2, scorer=CCAMap()), scorer=CCAMap())
        )
    ),
    "geh-validated-exact": geh_method(candidates=ExactCandidates()),
    "geh-validated-pool": geh_method(candidates=PoolCandidates()),
    "geh-validated-cells": geh_method(candidates=CellCandidates()),
    "geh-validated-no-kernel": geh_method(signatures=CosineSignatures()),
    "geh-validated-random-anchors": geh_method(views=RandomViews()),
    "geh-validated-fixed-votes": geh_method(promotion=ValidatedPromotion(posterior=False)),
    # the embedding-translation baselines (crossembed.baselines), given the same seeds (or none)
    "mini-vec2vec": lambda A, B, s, *, random_state, **_: MiniVec2Vec(random_state=random_state).link(A, B, s),
    "vecmap": lambda A, B, s, *, random_state, **_: VecMap(random_state=random_state).link(A, B, s),
}

#: the scorer of the translation protocol's figures (top-1, mean rank, FOSCTTM) of a method's links
_TRANSLATION_MAP = CCAMap(n_components=128)


#: the rows of the summary table: the baselines, the published rules and the default
SUMMARY = ("procrustes", "relative", "bootstrap-procrustes", "geh-paper", "geh-capped", "geh-validated")


def find_method(name: str) -> Callable[..., LinkResult]:
    """The method ``name``: a key of :data:`METHODS`, or ``module:attribute``, a method of one's own
    imported from an importable module (a callable taking ``(A, B, seeds, *, random_state, max_iter)``
    and returning a :class:`LinkResult`, e.g. ``geh_method(candidates=MySource())``)."""
    if name in METHODS:
        return METHODS[name]
    module, _, attribute = name.partition(":")
    if not (module and attribute):
        raise ValueError(f"unknown method {name!r}; choose from {sorted(METHODS)} or name module:attribute")
    try:
        method = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"method {name!r}: {exc}") from None
    if not callable(method):
        raise ValueError(f"method {name!r} is a {type(method).__name__}, not a callable")
    return method


def run_method(name: str, A, B, seeds, *, random_state: int = 0, max_iter: int = 10) -> LinkResult:
    """Run one method (:func:`find_method`) on A, B and seeds."""
    return find_method(name)(A, B, seeds, random_state=random_state, max_iter=max_iter)


#: What :func:`render_markdown` and a resumed :func:`run_table` read of each record (see ``_records``).
RECORD_SHAPE = [
    {
        "key": "str",
        "a": "str",
        "b": "str",
        "corpus": "int",
        "n_objects": "int",
        "alpha": "number",
        "n_seeds": "int",
        "method": "str",
        "seconds": "number",
        "precision": "number",
        "recall": "number",
        "f1": "number",
    }
]


def load_records(path, source: str = "results_path") -> List[dict]:
    """The records of an earlier :func:`run_table`, shape-checked (``source`` names the file in errors)."""
    return read_checked(path, source, RECORD_SHAPE)


def _key(pair, alpha, n_seeds, method, draw) -> str:
    return f"{pair[0]}|{pair[1]}|{alpha}|{n_seeds}|{method}|{draw}"


def run_table(
    *,
    pairs: Sequence = DEFAULT_PAIRS,
    settings: Iterable = ((0.1, 15), (0.3, 15), (0.5, 15)),
    methods: Sequence[str] = SUMMARY,
    n_draws: int = 5,
    n_objects: int = 10_000,
    max_iter: int = 30,
    results_path,
    seed: int = 0,
    embed: Optional[Callable[[str, int], np.ndarray]] = None,
    log: Callable[[str], None] = print,
) -> List[dict]:
    """Run (or resume) the grid and return every run's record.

    Parameters
    ----------
    pairs : sequence of (encoder_a, encoder_b, corpus_size)
    settings : iterable of (alpha, n_seeds); ``n_seeds = 0``: the methods get no seeds (``seeds=None``),
        on the same rows as the 15-seed draw, and every overlap pair is truth
    methods : names in :data:`METHODS` or ``module:attribute`` (:func:`find_method`; default
        :data:`SUMMARY`: baselines, paper, capped, default)
    n_draws : protocol draws per cell (draw ``d`` uses random state ``seed + d``)
    n_objects : glosses sampled from the corpus per draw
    results_path : JSON file the records are appended to (resumable)
    embed : ``embed(encoder_name, corpus_size) -> (n, dim)``; default
        :func:`experiments.corpora.embed_corpus`
    """
    if embed is None:
        from experiments.corpora import embed_corpus as embed
    for m in methods:
        find_method(m)  # an unknown name fails before any corpus is embedded
    path = Path(results_path)
    records: List[dict] = load_records(path) if path.is_file() else []
    done = {r["key"] for r in records}
    settings = list(settings)
    for pair in pairs:
        XA, XB = embed(pair[0], pair[2]), embed(pair[1], pair[2])
        for alpha, n_seeds in settings:
            for draw in range(n_draws):
                todo = [m for m in methods if _key(pair, alpha, n_seeds, m, draw) not in done]
                for rec in _run_draw(XA, XB, pair, alpha, n_seeds, draw, todo, n_objects, max_iter, seed, log):
                    records.append(rec)
                    done.add(rec["key"])
                    write_file(path, json.dumps(records, indent=1))
    return records


def _run_draw(XA, XB, pair, alpha, n_seeds, draw, methods, n_objects, max_iter, seed, log):
    """Draw ``draw`` of one cell: sample the objects and the protocol, then yield one record per method."""
    enc_a, enc_b, corpus = pair
    rng = np.random.default_rng(seed + draw)
    objects = np.sort(rng.choice(len(XA), size=min(n_objects, len(XA)), replace=False))
    # the rows of a draw do not depend on its seeds: a no-seed draw holds the 15-seed draw's rows
    split = make_partial_overlap(len(objects), alpha=alpha, n_seeds=n_seeds or 15, random_state=seed + draw)
    A, B = XA[objects[split.rows_a]], XB[objects[split.rows_b]]
    seeds, truth = (split.seeds, split.truth) if n_seeds else (None, np.concatenate([split.seeds, split.truth]))
    for method in methods:
        tic = time.perf_counter()
        res = run_method(method, A, B, seeds, random_state=seed + draw, max_iter=max_iter)
        secs = time.perf_counter() - tic
        links = res.links if res.seeds_found is None else np.concatenate([res.seeds_found, res.links])
        m = evaluate_links(links, truth)
        extra = {}
        if res.seeds_found is not None:
            extra.update(
                seed_confidence=res.seed_confidence,
                seeds_right=evaluate_links(res.seeds_found, truth)["precision"] if len(res.seeds_found) else 0.0,
            )
        if alpha == 1.0 and len(links) >= 2:  # every row has a partner: the translation protocol too
            fit_on = links if seeds is None else np.concatenate([seeds, links])
            RA, RB = _TRANSLATION_MAP.rows(A, B, fit_on)
            every = np.concatenate([split.seeds, split.truth])
            extra.update(translation_metrics(RA[every[:, 0]], RB[every[:, 1]]))
        log(
            f"{enc_a}-{enc_b} a={alpha} s={n_seeds} {method} draw {draw}: "
            f"P={m['precision']:.3f} R={m['recall']:.3f} F1={m['f1']:.3f} ({secs:.1f}s) {extra}"
        )
        yield dict(
            key=_key(pair, alpha, n_seeds, method, draw),
            a=enc_a,
            b=enc_b,
            corpus=corpus,
            n_objects=len(objects),
            alpha=alpha,
            n_seeds=n_seeds,
            method=method,
            draw=draw,
            seconds=round(secs, 2),
            rounds=len(res.history),
            **m,
            **extra,
        )


def _fmt(values) -> str:
    v = 100 * np.asarray(values, dtype=np.float64)
    return f"{v.mean():.1f} ± {v.std():.1f}"


def render_markdown(records: List[dict]) -> str:
    """A summary of F1 per cell, then one table per (pair, alpha, seeds): P / R / F1 mean ± std over draws."""
    cells: Dict[tuple, Dict[str, List[dict]]] = {}
    for r in records:
        cells.setdefault((r["a"], r["b"], r["corpus"], r["n_objects"], r["alpha"], r["n_seeds"]), {}).setdefault(
            r["method"], []
        ).append(r)
    out = [
        "\n#### F1 % (mean ± std over draws)\n",
        "| pair | alpha | seeds | " + " | ".join(SUMMARY) + " | GEH-validated / Procrustes |",
        "|---" * (len(SUMMARY) + 4) + "|",
    ]
    for (a, b, _corpus, _n_obj, alpha, s), by_method in cells.items():
        vals = [_fmt([r["f1"] for r in by_method[m]]) if m in by_method else "–" for m in SUMMARY]
        ratio = "–"
        if "procrustes" in by_method and "geh-validated" in by_method:
            f_p = np.mean([r["f1"] for r in by_method["procrustes"]])
            f_g = np.mean([r["f1"] for r in by_method["geh-validated"]])
            ratio = f"{f_g / f_p:.1f}x" if f_p > 0 else "inf"
        out.append(f"| {a} ↔ {b} | {alpha} | {s} | " + " | ".join(vals) + f" | {ratio} |")
    for method in (
        "geh-validated",
        "mini-vec2vec",
        "vecmap",
        "geh-30-rounds",
        "geh-relink-cca-check",
        "geh-pool-check",
        "geh-cca-check",
        "geh-ridge-map",
        "geh-two-maps",
        "geh-map-pass",
        "geh-checked",
    ):
        out.extend(_by_overlap(cells, method))
    for (a, b, corpus, n_obj, alpha, s), by_method in cells.items():
        out.append(f"\n#### {a} ↔ {b} — alpha {alpha}, {s} seeds ({n_obj} of {corpus} glosses per draw)\n")
        out.append("| method | precision % | recall % | F1 % | top-1 % | mean rank | FOSCTTM | seconds | draws |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        proc = by_method.get("procrustes")
        for method in [*METHODS, *(m for m in by_method if m not in METHODS)]:
            rs = by_method.get(method)
            if not rs:
                continue
            out.append(
                f"| {method} | {_fmt([r['precision'] for r in rs])} | {_fmt([r['recall'] for r in rs])} | "
                f"{_fmt([r['f1'] for r in rs])} | {_translation(rs)} | {np.mean([r['seconds'] for r in rs]):.1f} | "
                f"{len(rs)} |"
            )
        if proc and "geh-validated" in by_method:
            f_p = np.mean([r["f1"] for r in proc])
            f_g = np.mean([r["f1"] for r in by_method["geh-validated"]])
            ratio = f"{f_g / f_p:.1f}x" if f_p > 0 else "inf (Procrustes F1 = 0)"
            out.append(f"\nGEH (validated) F1 / Procrustes F1 = {ratio}")
    return "\n".join(out) + "\n"


def _translation(rs: List[dict]) -> str:
    """Top-1 %, mean rank and FOSCTTM (mean ± std over draws) of full-overlap records, else dashes."""
    if any("top1" not in r for r in rs):
        return "– | – | –"
    rank = np.array([r["mean_rank"] for r in rs])
    fos = np.array([r["foscttm"] for r in rs])
    return (
        f"{_fmt([r['top1'] for r in rs])} | {rank.mean():.1f} ± {rank.std():.1f} | {fos.mean():.4f} ± {fos.std():.4f}"
    )


def _by_overlap(cells: Dict[tuple, Dict[str, List[dict]]], method: str) -> List[str]:
    """``method``'s F1, precision and recall per pair (rows) and overlap (columns); nothing for one overlap."""
    settings = sorted({(key[4], key[5]) for key, by in cells.items() if method in by})
    if len(settings) < 2:
        return []
    same_seeds = len({s for _, s in settings}) == 1
    heads = [f"alpha {a}" if same_seeds else f"alpha {a}, {s} seeds" for a, s in settings]
    out = [
        f"\n#### {method} by overlap: F1 % (precision % / recall %), mean ± std over draws [draws]\n",
        "| pair | " + " | ".join(heads) + " |",
        "|---" * (len(heads) + 1) + "|",
    ]
    # a pair is (a, b, corpus): a setting run on another object count (alpha 1.0 at 8,192) is its column
    runs: Dict[tuple, List[dict]] = {}
    for key, by in cells.items():
        runs.setdefault((*key[:3], key[4], key[5]), []).extend(by.get(method, []))
    pairs = list(dict.fromkeys(key[:3] for key in cells))
    means: Dict[tuple, List[List[float]]] = {}
    for pair in pairs:
        row = []
        for alpha, s in settings:
            rs = runs.get((*pair, alpha, s))
            if not rs:
                row.append("–")
                continue
            f1, p, r = (100 * np.mean([x[k] for x in rs]) for k in ("f1", "precision", "recall"))
            row.append(f"{_fmt([x['f1'] for x in rs])} ({p:.1f} / {r:.1f}) [{len(rs)}]")
            means.setdefault((alpha, s), []).append([f1, p, r])
        out.append(f"| {pair[0]} ↔ {pair[1]} | " + " | ".join(row) + " |")
    # the mean over pairs, where every pair has the setting: each pair's mean counts once
    row = []
    for setting in settings:
        per_pair = np.array(means.get(setting, []))
        if len(per_pair) != len(pairs) or len(pairs) < 2:
            row.append("–")
            continue
        f1, p, r = per_pair.mean(axis=0)
        row.append(f"{f1:.1f} ± {per_pair[:, 0].std():.1f} ({p:.1f} / {r:.1f}) [{len(pairs)} pairs]")
    out.append("| mean of the pairs (± std across pairs) | " + " | ".join(row) + " |")
    return out
