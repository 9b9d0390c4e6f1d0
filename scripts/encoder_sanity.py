"""Cache WordNet-noun embeddings for the offline encoders and report a sanity recall@10.

Task: every WordNet noun synset with an example sentence; query = its first
example (role "query"), documents = the glosses of all those synsets (role
"passage"); recall@10 = share of queries whose own gloss ranks in the top 10
by cosine. The embeddings land in the crossembed cache (``encode_cached``), so
later runs on the same task reuse them.

    python scripts/encoder_sanity.py --models minilm minilm-l3 e5 --out docs/encoder_sanity.md
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from crossembed.data import example_gloss_task, synsets_with_examples
from crossembed.encoders import encode_cached, load_encoder


def recall_at_k(q: np.ndarray, d: np.ndarray, k: int = 10, block: int = 1024) -> float:
    """Query i's relevant document is document i; ties count against the hit."""
    hits = 0
    for s in range(0, len(q), block):
        sims = q[s : s + block] @ d.T
        own = sims[np.arange(sims.shape[0]), np.arange(s, s + sims.shape[0])]
        rank = (sims >= own[:, None]).sum(axis=1) - 1  # others scoring at least as high
        hits += int((rank < k).sum())
    return hits / len(q)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["minilm", "minilm-l3", "e5"])
    ap.add_argument("--num-threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=None, help="write a markdown table here")
    args = ap.parse_args()
    task = example_gloss_task(synsets_with_examples("noun"))
    rows = []
    for name in args.models:
        t0 = time.perf_counter()
        enc = load_encoder(name, num_threads=args.num_threads)
        q = encode_cached(enc, task.queries, role="query", batch_size=args.batch_size, show_progress_bar=True)
        d = encode_cached(enc, task.documents, role="passage", batch_size=args.batch_size, show_progress_bar=True)
        r = recall_at_k(q, d, 10)
        rows.append({"model": name, "dim": enc.dim, "n": len(task), "recall@10": round(r, 4), "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        lines = [
            "# Encoder sanity: WordNet noun example -> gloss retrieval",
            "",
            f"{len(task)} synsets with examples; query = first example, documents = all glosses.",
            "Produced by `python scripts/encoder_sanity.py --models " + " ".join(args.models) + f" --out {args.out}`",
            "(seconds include encoding unless the embeddings were already cached).",
            "",
            "| model | dim | recall@10 | seconds |",
            "|---|---|---|---|",
        ] + [f"| {r['model']} | {r['dim']} | {r['recall@10']:.3f} | {r['seconds']} |" for r in rows]
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
