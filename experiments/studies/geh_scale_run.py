"""One large GEH fit on real WordNet glosses, with per-round diagnostics.

Samples ``--n-objects`` glosses of the cached corpus (all 116,697 by default),
applies the partial-overlap protocol, runs the default ``GEHLinker`` and
prints, per round, the seconds, pool size, links, turnover and the pool's
true precision/recall (read off the hidden truth after the fact: the linker
never sees it). Ends with P/R/F1 of the final links, wall time and peak RSS.

    python -m experiments.studies.geh_scale_run --pair minilm:use --alpha 0.714 --draw 0 --out .geh_work/100k.json

WordNet has 117k glosses; ``--mix-objects N`` makes N synthetic objects
instead, for runs past that size: object o mixes two random glosses,
``unit(x_i + w x_j)`` with ``w ~ U(0.5, 1)``, and each side mixes its own
encoder's real embeddings of the two, so the cross-encoder geometry is the
real one (each gloss takes part in ~2 N / 117k objects: many near-duplicates;
``--mix-glosses G`` mixes only the first G glosses, ~2 N / G objects each).
``--storage float16`` builds both sides in float16 (half the memory; the
linker keeps float16 sides float16), and ``--option center='Center(copy=False)'``
centres them where they lie instead of copying them (the 5M-a-side run).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import time

import numpy as np

from crossembed import linking
from crossembed.data.wordnet import read_synsets
from crossembed.linking import GEHLinker, ValidatedPromotion, evaluate_links, make_partial_overlap
from experiments.corpora import embed_corpus


class _Traced:
    """Delegates to a growth rule and scores the pool after every round (diagnostics only: it keeps a
    clock, so it is one object per run, not a frozen rule)."""

    def __init__(self, rule, truth: np.ndarray, n_a: int, n_b: int, log):
        self.rule, self.truth, self.n_a, self.n_b, self.log = rule, truth, n_a, n_b, log
        self.name = rule.name
        self.tic = time.perf_counter()

    def grow(self, fit, propose):
        t0 = time.perf_counter()
        info = self.rule.grow(fit, propose)
        quality = ""
        if fit.n_a == self.n_a and fit.n_b == self.n_b:  # a sampled fit's rows are not the truth's
            m = evaluate_links(np.asarray(fit.links), self.truth)
            info.update(pool_precision=round(m["precision"], 4), pool_recall=round(m["recall"], 4))
            quality = f"P {m['precision']:.3f} R {m['recall']:.3f} "
        self.log(
            f"round: {fit.n_a} x {fit.n_b} rows, pool {info['pool']:>6} links {len(fit.links):>6} "
            f"promoted {info.get('promoted', 0):>6} {quality}holdout {info.get('holdout_precision')} "
            f"{time.perf_counter() - t0:.1f}s (total {time.perf_counter() - self.tic:.0f}s)"
        )
        return info

    @property
    def has_final_pass(self):
        return self.rule.has_final_pass

    @property
    def links_every_row(self):
        return self.rule.links_every_row

    def finish(self, fit, propose):
        return self.rule.finish(fit, propose)


def _mixed(X, rows, glosses, w, dtype=np.float32, chunk: int = 100_000) -> np.ndarray:
    """Unit rows ``x_i + w x_j`` of the objects ``rows`` (each object's two glosses and weight), in ``dtype``."""
    out = np.empty((len(rows), X.shape[1]), dtype)
    for s in range(0, len(rows), chunk):
        o = rows[s : s + chunk]
        part = X[glosses[o, 0]] + w[o, None] * X[glosses[o, 1]]
        out[s : s + chunk] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return out


def n_glosses() -> int:
    """How many unique WordNet glosses the corpus has (every part of speech), the largest ``n_texts``."""
    return len({s.gloss for pos in ("noun", "verb", "adj", "adv") for s in read_synsets(pos) if s.gloss})


def add_draw_arguments(p: argparse.ArgumentParser) -> None:
    """The options of :func:`draw_sides` (the pair, the objects, the split and the storage)."""
    p.add_argument("--pair", default="minilm:use")
    p.add_argument("--n-objects", type=int, default=0, help="glosses per draw (0: the whole corpus)")
    p.add_argument("--alpha", type=float, default=0.714)
    p.add_argument("--seeds", type=int, default=15)
    p.add_argument("--draw", type=int, default=0)
    p.add_argument("--mix-objects", type=int, default=0, help="synthetic objects mixing two glosses each (0: real)")
    p.add_argument("--mix-glosses", type=int, default=0, help="mix only the corpus's first N glosses (0: every one)")
    p.add_argument("--storage", choices=("float32", "float16"), default="float32", help="dtype of the mixed rows")


def draw_sides(args: argparse.Namespace):
    """``(A, B, split)`` of the draw :func:`add_draw_arguments`'s options describe (module docstring)."""
    enc_a, enc_b = args.pair.split(":")
    rng = np.random.default_rng(args.draw)
    if args.mix_objects:
        n = args.mix_glosses or n_glosses()
        XA, XB = embed_corpus(enc_a, n), embed_corpus(enc_b, n)
        split = make_partial_overlap(args.mix_objects, alpha=args.alpha, n_seeds=args.seeds, random_state=args.draw)
        mix = rng.integers(0, len(XA), (args.mix_objects, 2)), rng.uniform(0.5, 1.0, args.mix_objects)
        dtype = np.dtype(args.storage)
        return _mixed(XA, split.rows_a, *mix, dtype), _mixed(XB, split.rows_b, *mix, dtype), split
    n = args.n_objects or n_glosses()
    XA, XB = embed_corpus(enc_a, n), embed_corpus(enc_b, n)
    objects = np.sort(rng.choice(len(XA), size=min(n, len(XA)), replace=False))
    split = make_partial_overlap(len(objects), alpha=args.alpha, n_seeds=args.seeds, random_state=args.draw)
    return XA[objects[split.rows_a]], XB[objects[split.rows_b]], split


def _build(expression: str):
    """A GEHLinker argument from ``--option``: a literal, or a call of crossembed.linking's classes."""
    names = {k: getattr(linking, k) for k in linking.__all__}
    return eval(compile(ast.parse(expression, mode="eval"), "<option>", "eval"), {"__builtins__": {}}, names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_draw_arguments(p)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument(
        "--option",
        action="append",
        default=[],
        help="extra GEHLinker argument name=expression over crossembed.linking's names, e.g. sample='RowSample(near_seeds=False)'",
    )
    p.add_argument("--out", default=None, help="write the record (history included) as JSON here")
    args = p.parse_args()

    A, B, split = draw_sides(args)
    options = {k: _build(v) for k, v in (o.split("=", 1) for o in args.option)}
    rule = _Traced(options.pop("promotion", ValidatedPromotion()), split.truth, len(A), len(B), print)
    linker = GEHLinker(
        promotion=rule,
        random_state=args.draw,
        max_iter=args.max_iter,
        num_threads=args.num_threads,
        show_progress_bar=False,
        **options,
    )
    print(f"{args.pair}: {len(A)} x {len(B)} rows, overlap {len(split.truth) + len(split.seeds)}", flush=True)
    load_before = os.getloadavg()
    tic = time.perf_counter()
    res = linker.link(A, B, split.seeds)
    secs = time.perf_counter() - tic
    m = evaluate_links(res.links, split.truth)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"final: P {m['precision']:.4f} R {m['recall']:.4f} F1 {m['f1']:.4f} links {len(res.links)} "
        f"rounds {len(res.history)} {secs:.0f}s peak RSS {rss_gb:.2f} GB; load {load_before} -> {os.getloadavg()}",
        flush=True,
    )
    if args.out:
        record = dict(
            pair=args.pair,
            rows_a=len(A),
            rows_b=len(B),
            alpha=args.alpha,
            mix_objects=args.mix_objects,
            storage=args.storage,
            load_before=load_before,
            load_after=os.getloadavg(),
            draw=args.draw,
            options={k: repr(v) for k, v in options.items()},
            seconds=round(secs, 1),
            peak_rss_gb=round(rss_gb, 2),
            history=res.history,
            **m,
        )
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1, default=float)


if __name__ == "__main__":
    main()
