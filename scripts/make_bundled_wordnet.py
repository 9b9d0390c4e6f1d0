"""Regenerate python/crossembed/data/bundled/wordnet_nouns.json.gz from the installed WordNet.

python scripts/make_bundled_wordnet.py [--n 1500] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from crossembed._io import atomic_write
from crossembed.data.bundled import BUNDLED_FILE, BUNDLED_VERSION
from crossembed.data.wordnet import synsets_with_examples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pool = sorted(synsets_with_examples("noun"), key=lambda s: s.offset)
    pick = sorted(np.random.default_rng(args.seed).choice(len(pool), size=args.n, replace=False))
    rows = [[s.offset, list(s.lemmas), s.gloss, list(s.examples), list(s.hypernyms)] for s in (pool[i] for i in pick)]
    blob = {"version": BUNDLED_VERSION, "source": "WordNet 3.0 data.noun", "seed": args.seed, "synsets": rows}
    out = Path(__file__).resolve().parents[1] / "python" / "crossembed" / "data" / "bundled" / BUNDLED_FILE
    # mtime=0: the same input gives byte-identical output
    atomic_write(out, gzip.compress(json.dumps(blob, ensure_ascii=False, separators=(",", ":")).encode(), 9, mtime=0))
    print(f"wrote {len(rows)} synsets to {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
