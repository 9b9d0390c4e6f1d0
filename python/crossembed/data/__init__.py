"""Real text data read from installed files (no downloads).

* :mod:`crossembed.data.wordnet` - WordNet 3.x ``data.*`` files (Debian ``wordnet-base``): synsets,
  (example, gloss) fit pairs and a deterministic fit / dev / test split.
* :mod:`crossembed.data.bundled` - 1,500 WordNet noun synsets (and words of four languages naming
  them) shipped with the package.
"""

from crossembed.data.bundled import load_bundled_wordnet
from crossembed.data.wordnet import (
    Synset,
    SynsetSplit,
    example_gloss_pairs,
    find_wordnet_dir,
    read_synsets,
    split_synsets,
    synsets_with_examples,
)

__all__ = [
    "Synset",
    "SynsetSplit",
    "example_gloss_pairs",
    "find_wordnet_dir",
    "load_bundled_wordnet",
    "read_synsets",
    "split_synsets",
    "synsets_with_examples",
]
