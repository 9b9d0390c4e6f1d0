"""A small WordNet sample shipped inside the package (no Debian packages needed).

``wordnet_nouns.json.gz`` holds 1,500 noun synsets that have example
sentences, drawn at random (seed 0) from WordNet 3.0 by
``scripts/make_bundled_wordnet.py``; ``LICENSE-WordNet.txt`` is the WordNet
licence under which they are redistributed. Hypernym offsets may point to
synsets outside the sample.

``freedict_words.json.gz`` holds words in English, German, French and
Spanish with the bundled synsets they name (foreign words via their FreeDict
English translations), made by ``scripts/make_bundled_freedict.py``: the
multilingual "language expert" queries of ``crossembed demo``. The FreeDict
dictionaries are GPL; ``LICENSE-FreeDict.txt`` says which and where the
source is.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from typing import List, Tuple

from crossembed.data.wordnet import Synset

__all__ = [
    "load_bundled_wordnet",
    "load_bundled_words",
    "BUNDLED_FILE",
    "BUNDLED_VERSION",
    "FREEDICT_FILE",
    "FREEDICT_VERSION",
]

BUNDLED_FILE = "wordnet_nouns.json.gz"
BUNDLED_VERSION = 1
FREEDICT_FILE = "freedict_words.json.gz"
FREEDICT_VERSION = 1


def _load() -> Tuple[Synset, ...]:
    ref = resources.files(__name__).joinpath(BUNDLED_FILE)
    try:
        blob = json.loads(gzip.decompress(ref.read_bytes()))
    except (OSError, EOFError, ValueError) as exc:  # gzip CRC or JSON damage
        raise ValueError(f"bundled WordNet sample {BUNDLED_FILE} is damaged ({exc}); reinstall crossembed") from None
    if blob.get("version") != BUNDLED_VERSION:
        raise ValueError(f"bundled WordNet sample has version {blob.get('version')}, expected {BUNDLED_VERSION}")
    return tuple(
        Synset(int(o), "noun", tuple(lem), gloss, tuple(ex), tuple(int(h) for h in hyp))
        for o, lem, gloss, ex, hyp in blob["synsets"]
    )


def load_bundled_wordnet() -> List[Synset]:
    """The bundled noun synsets (each with a gloss and at least one example), sorted by offset.

    Returns the same :class:`~crossembed.data.wordnet.Synset` objects as
    :func:`~crossembed.data.wordnet.read_synsets`, so every helper of
    :mod:`crossembed.data.wordnet` (pairs, splits, tasks) works on them.
    The file is small; each call reads it again.
    """
    return list(_load())


def _load_words() -> Tuple[Tuple[str, str, Tuple[int, ...]], ...]:
    ref = resources.files(__name__).joinpath(FREEDICT_FILE)
    try:
        blob = json.loads(gzip.decompress(ref.read_bytes()))
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"bundled word list {FREEDICT_FILE} is damaged ({exc}); reinstall crossembed") from None
    if blob.get("version") != FREEDICT_VERSION:
        raise ValueError(f"bundled word list has version {blob.get('version')}, expected {FREEDICT_VERSION}")
    return tuple((str(w), str(lang), tuple(int(o) for o in offs)) for w, lang, offs in blob["words"])


def load_bundled_words() -> List[Tuple[str, str, Tuple[int, ...]]]:
    """``(word, language, synset offsets)`` for words naming bundled synsets, in en, de, fr and es.

    ``language`` is ``"en"``, ``"de"``, ``"fr"`` or ``"es"``; the offsets are
    those of :func:`load_bundled_wordnet` synsets the word (or its English
    translation) is a lemma of.
    """
    return list(_load_words())
