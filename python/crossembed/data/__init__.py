"""Real text data read from installed files (no downloads).

* :mod:`crossembed.data.wordnet` - WordNet 3.x ``data.*`` files (Debian ``wordnet-base``).
* :mod:`crossembed.data.freedict` - FreeDict dictd dictionaries (Debian ``dict-freedict-*``).
* :mod:`crossembed.data.bundled` - a small WordNet noun sample shipped with the package.
"""
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
    "RetrievalTask",
    "Synset",
    "SynsetSplit",
    "example_gloss_pairs",
    "example_gloss_task",
    "find_wordnet_dir",
    "gloss_lemma_pairs",
    "read_synsets",
    "split_synsets",
    "synsets_with_examples",
]
