"""Cache embeddings of the real-data tasks for the offline encoders and report a sanity recall@10.

Tasks:

* ``wordnet``: every WordNet noun synset with an example sentence; query =
  its first example (role "query"), documents = the glosses of all those
  synsets (role "passage").
* ``translation``: :func:`crossembed.data.translation_task` (seed 0, 300
  words per language): English / German / French / Spanish nouns -> English
  WordNet definitions; recall is also reported per query language.

recall@10 = share of queries with a relevant document among the 10 most
cosine-similar (ties count against the hit). Embeddings land in the
crossembed cache (``encode_cached``), so later runs on the same texts reuse them.

    python -m experiments.studies.encoder_sanity --task wordnet --models minilm minilm-l3 e5 --out docs/encoder_sanity.md
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from crossembed.data import synsets_with_examples
from crossembed.encoders import encode_cached, load_encoder
from experiments.freedict import translation_task
from experiments.tasks import RetrievalTask, example_gloss_task


def hits_at_k(q: np.ndarray, d: np.ndarray, relevant, k: int = 10, block: int = 1024) -> np.ndarray:
    """Boolean per query: does a relevant document rank in the top ``k``?"""
    out = np.zeros(len(q), dtype=bool)
    for s in range(0, len(q), block):
        sims = q[s : s + block] @ d.T
        for r in range(sims.shape[0]):
            best = sims[r, list(relevant[s + r])].max()
            out[s + r] = (sims[r] >= best).sum() - 1 < k  # documents scoring at least as high
    return out


def build(task_name: str) -> RetrievalTask:
    if task_name == "wordnet":
        return example_gloss_task(synsets_with_examples("noun"))
    return translation_task(("en", "de", "fr", "es"), n_per_language=300, random_state=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["wordnet", "translation"], default="wordnet")
    ap.add_argument("--models", nargs="+", default=["minilm", "minilm-l3", "e5"])
    ap.add_argument("--num-threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=None, help="append a markdown table to this file")
    args = ap.parse_args()
    task = build(args.task)
    langs = sorted(set(task.languages))
    rows = []
    for name in args.models:
        t0 = time.perf_counter()
        enc = load_encoder(name, num_threads=args.num_threads)
        q = encode_cached(enc, task.queries, role="query", batch_size=args.batch_size, show_progress_bar=True)
        d = encode_cached(enc, task.documents, role="passage", batch_size=args.batch_size, show_progress_bar=True)
        hits = hits_at_k(q, d, task.relevant, 10)
        lang = np.asarray(task.languages)
        row = {"model": name, "dim": enc.dim, "n": len(task), "recall@10": round(float(hits.mean()), 4)}
        if len(langs) > 1:
            row.update({f"recall@10[{g}]": round(float(hits[lang == g].mean()), 4) for g in langs})
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        cols = ["recall@10"] + ([f"recall@10[{g}]" for g in langs] if len(langs) > 1 else [])
        lines = [
            f"## {task.name}: {len(task)} queries, {len(task.documents)} documents",
            "",
            f"`python -m experiments.studies.encoder_sanity --task {args.task} --models {' '.join(args.models)} --out {args.out}`"
            " (seconds include encoding unless the embeddings were cached; shared 2-core machine)",
            "",
            "| model | dim | " + " | ".join(cols) + " | seconds |",
            "|---|---|" + "---|" * len(cols) + "---|",
        ] + [
            f"| {r['model']} | {r['dim']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + f" | {r['seconds']} |"
            for r in rows
        ]
        with open(args.out, "a") as fh:
            fh.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
