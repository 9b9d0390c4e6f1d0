"""Human similarity ratings of word and document pairs, read from installed files (no downloads).

The gensim wheel ships three rated sets in its test data
(``gensim/test/test_data/``); only the files are read, gensim is never
imported (``pip install --no-deps gensim`` is enough):

* ``wordsim353.tsv`` - WordSim353 (Finkelstein et al., 2002): 353 English
  word pairs, relatedness 0-10;
* ``simlex999.txt`` - SimLex-999 (Hill et al., 2015): 999 pairs, similarity
  (not relatedness) 0-10;
* ``lee.cor`` + ``similarities0-1.txt`` - the Lee et al. (2005) document
  similarity set: 50 short news documents (latin-1, one per line) and a
  50 x 50 upper-triangular matrix of mean human ratings, i.e. 1,225 rated
  document pairs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

import numpy as np

__all__ = ["RatedPairs", "find_sts_dir", "lee_documents", "load_rated_pairs", "simlex999", "wordsim353"]

PathLike = Union[str, "os.PathLike[str]"]
_GENSIM_DATA = "gensim/test/test_data"
_FILES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}


@dataclass(frozen=True)
class RatedPairs:
    """Text pairs with human similarity ratings.

    Attributes
    ----------
    name : str
    left, right : list of str
        ``left[i]`` and ``right[i]`` are pair ``i``.
    ratings : ndarray, shape (n,), float64
        The mean human rating of each pair.
    """

    name: str
    left: List[str]
    right: List[str]
    ratings: np.ndarray

    def __post_init__(self):
        if not (len(self.left) == len(self.right) == len(self.ratings)):
            raise ValueError(
                f"left ({len(self.left)}), right ({len(self.right)}) and ratings ({len(self.ratings)}) differ in length"
            )

    def __len__(self) -> int:
        return len(self.left)

    @property
    def texts(self) -> List[str]:
        """Every distinct text of the pairs, first-seen order."""
        return list(dict.fromkeys(self.left + self.right))


def find_sts_dir(sts_dir: Optional[PathLike] = None) -> Path:
    """Folder holding the rated sets: ``sts_dir``, ``$CROSSEMBED_STS_DIR``, or the installed gensim's test data.

    Raises
    ------
    FileNotFoundError
        Saying how to get the files (``pip install --no-deps gensim``).
    """
    if sts_dir is None and os.environ.get("CROSSEMBED_STS_DIR"):
        sts_dir = os.environ["CROSSEMBED_STS_DIR"]
    if sts_dir is not None:
        folder = Path(sts_dir)
        if (folder / _FILES["wordsim353"]).is_file():
            return folder.resolve()
        raise FileNotFoundError(f"no {_FILES['wordsim353']} in {folder}")
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        folder = Path(str(distribution("gensim").locate_file(_GENSIM_DATA)))
    except PackageNotFoundError:
        folder = None
    if folder is None or not (folder / _FILES["wordsim353"]).is_file():
        raise FileNotFoundError(
            "the rated word and document pairs come with gensim's test data: `pip install --no-deps gensim` "
            "(only its files are read), or point CROSSEMBED_STS_DIR at a folder holding wordsim353.tsv, "
            "simlex999.txt, lee.cor and similarities0-1.txt"
        )
    return folder.resolve()


def _word_pairs(path: Path, name: str) -> RatedPairs:
    left, right, ratings = [], [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise ValueError(f"{path}:{lineno}: expected 'word<TAB>word<TAB>rating'")
        try:
            rating = float(parts[2])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: rating {parts[2]!r} is not a number") from None
        left.append(parts[0].strip())
        right.append(parts[1].strip())
        ratings.append(rating)
    return RatedPairs(name, left, right, np.asarray(ratings, dtype=np.float64))


def wordsim353(sts_dir: Optional[PathLike] = None) -> RatedPairs:
    """The 353 WordSim353 pairs (relatedness, 0-10)."""
    return _word_pairs(find_sts_dir(sts_dir) / _FILES["wordsim353"], "wordsim353")


def simlex999(sts_dir: Optional[PathLike] = None) -> RatedPairs:
    """The 999 SimLex-999 pairs (similarity, 0-10)."""
    return _word_pairs(find_sts_dir(sts_dir) / _FILES["simlex999"], "simlex999")


def lee_documents(sts_dir: Optional[PathLike] = None) -> RatedPairs:
    """The 1,225 Lee et al. (2005) document pairs (mean rating 0-1, the upper triangle of the matrix)."""
    folder = find_sts_dir(sts_dir)
    docs = [" ".join(line.split()) for line in (folder / "lee.cor").read_bytes().decode("latin-1").splitlines()]
    docs = [d for d in docs if d]
    ratings = np.loadtxt(folder / "similarities0-1.txt", dtype=np.float64, ndmin=2)
    if ratings.shape != (len(docs), len(docs)):
        raise ValueError(f"similarities0-1.txt is {ratings.shape}, expected {len(docs)} x {len(docs)} (lee.cor)")
    i, j = np.triu_indices(len(docs), 1)
    return RatedPairs("lee", [docs[a] for a in i], [docs[b] for b in j], ratings[i, j])


def load_rated_pairs(name: str, sts_dir: Optional[PathLike] = None) -> RatedPairs:
    """One set by name: ``"wordsim353"``, ``"simlex999"`` or ``"lee"``."""
    loaders = {"wordsim353": wordsim353, "simlex999": simlex999, "lee": lee_documents}
    if name not in loaders:
        raise ValueError(f"name must be one of {sorted(loaders)}, got {name!r}")
    return loaders[name](sts_dir)
