"""Real text data read from installed files (no downloads).

* :mod:`crossembed.data.wordnet` - WordNet 3.x ``data.*`` files (Debian ``wordnet-base``).
* :mod:`crossembed.data.freedict` - FreeDict dictd dictionaries (Debian ``dict-freedict-*-eng``, 14 languages).
* :mod:`crossembed.data.sts` - human similarity ratings of word and document pairs (gensim's test data).
* :mod:`crossembed.data.bundled` - 1,500 WordNet noun synsets shipped with the package.
* :class:`RetrievalTask` - queries, documents, relevance labels, query languages.
"""

from crossembed.data.bundled import load_bundled_wordnet
from crossembed.data.freedict import DictEntry, read_freedict, translation_pairs, translation_task
from crossembed.data.sts import RatedPairs, load_rated_pairs
from crossembed.data.tasks import RetrievalTask
from crossembed.data.wordnet import (
    Synset,
    SynsetSplit,
    example_gloss_pairs,
    example_gloss_task,
    find_wordnet_dir,
    gloss_lemma_pairs,
    read_synsets,
    split_synsets,
    synsets_with_examples,
)

__all__ = [
    "DictEntry",
    "RatedPairs",
    "RetrievalTask",
    "Synset",
    "SynsetSplit",
    "example_gloss_pairs",
    "example_gloss_task",
    "find_wordnet_dir",
    "gloss_lemma_pairs",
    "load_bundled_wordnet",
    "load_rated_pairs",
    "read_freedict",
    "read_synsets",
    "split_synsets",
    "synsets_with_examples",
    "translation_pairs",
    "translation_task",
]
