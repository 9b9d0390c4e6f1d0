"""Real text data read from installed files (no downloads).

* :mod:`crossembed.data.wordnet` - WordNet 3.x ``data.*`` files (Debian ``wordnet-base``).
* :mod:`crossembed.data.freedict` - FreeDict dictd dictionaries (Debian ``dict-freedict-*-eng``).
* :mod:`crossembed.data.bundled` - 1,500 WordNet noun synsets shipped with the package.
* :class:`RetrievalTask` - queries, documents, relevance labels, query languages.
"""

from crossembed.data.bundled import load_bundled_wordnet
from crossembed.data.freedict import DictEntry, read_freedict, translation_pairs, translation_task
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
    "RetrievalTask",
    "Synset",
    "SynsetSplit",
    "example_gloss_pairs",
    "example_gloss_task",
    "find_wordnet_dir",
    "gloss_lemma_pairs",
    "load_bundled_wordnet",
    "read_freedict",
    "read_synsets",
    "split_synsets",
    "synsets_with_examples",
    "translation_pairs",
    "translation_task",
]
