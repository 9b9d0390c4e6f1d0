"""Regenerate python/crossembed/data/bundled/freedict_words.json.gz from the installed FreeDict dictionaries.

python scripts/make_bundled_freedict.py [--per-language 300] [--seed 0]

For every language (de, fr, es) it keeps one-word noun headwords whose
English translations are lemmas of the bundled WordNet sample (and that are
not spelled like the translation), with the bundled synsets of those lemmas
as the word's senses; English words are the sample's one-word lemmas
themselves. Words with more than ``--max-senses`` senses in the sample are
dropped so labels stay specific. Needs dict-freedict-{deu,fra,spa}-eng.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from crossembed._io import atomic_write
from crossembed.data.bundled import FREEDICT_FILE, FREEDICT_VERSION, load_bundled_wordnet
from crossembed.data.freedict import _single_word, read_freedict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-language", type=int, default=300)
    ap.add_argument("--max-senses", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    by_lemma = {}
    for s in load_bundled_wordnet():
        for lemma in s.lemmas:
            by_lemma.setdefault(lemma.lower(), set()).add(s.offset)
    rng = np.random.default_rng(args.seed)
    rows = []
    for lang in ("en", "de", "fr", "es"):
        words = {}
        if lang == "en":
            for lemma, offs in by_lemma.items():
                if _single_word(lemma):
                    words[lemma] = set(offs)
        else:
            for e in read_freedict(lang, single_word=True, nouns_only=True):
                for t in e.translations:
                    tl = t.lower()
                    if tl in by_lemma and tl != e.headword.lower():
                        words.setdefault(e.headword, set()).update(by_lemma[tl])
        cands = sorted((w, sorted(o)) for w, o in words.items() if len(o) <= args.max_senses)
        for i in sorted(rng.permutation(len(cands))[: args.per_language]):
            rows.append([cands[i][0], lang, cands[i][1]])
        print(lang, len(cands), "candidates")
    blob = {
        "version": FREEDICT_VERSION,
        "source": "FreeDict deu-eng, fra-eng, spa-eng (Debian dict-freedict-*) x the bundled WordNet sample",
        "seed": args.seed,
        "words": rows,
    }
    out = Path(__file__).resolve().parents[1] / "python" / "crossembed" / "data" / "bundled" / FREEDICT_FILE
    atomic_write(out, gzip.compress(json.dumps(blob, ensure_ascii=False, separators=(",", ":")).encode(), 9, mtime=0))
    print(f"wrote {len(rows)} words to {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
