"""Read Princeton WordNet 3.x ``data.*`` files directly (no nltk needed).

The Debian package ``wordnet-base`` installs them under ``/usr/share/wordnet``.
Each non-licence line of ``data.noun`` is one synset::

    offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt (ptr off pos src/tgt)* [frames] | gloss

``w_cnt`` is two hex digits, ``p_cnt`` three decimal digits; the gloss holds
the definition followed by ``"quoted"`` example sentences separated by ``;``.

The positive pairs built here (example -> definition, :func:`example_gloss_pairs`)
are real fit pairs for :meth:`crossembed.uec.LaplaceEmbedder.fit`; the
deterministic :func:`split_synsets` keeps fit / dev / test disjoint by synset
so that no sentence of a test synset is ever seen while fitting.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from crossembed._validation import check_random_state, check_split_fractions

__all__ = [
    "POS_NAMES",
    "Synset",
    "SynsetSplit",
    "find_wordnet_dir",
    "read_synsets",
    "synsets_with_examples",
    "example_gloss_pairs",
    "split_synsets",
]

#: accepted ``pos`` spellings -> the file suffix (and the ``Synset.pos`` value)
POS_NAMES = {
    "noun": "noun",
    "n": "noun",
    "verb": "verb",
    "v": "verb",
    "adj": "adj",
    "a": "adj",
    "s": "adj",
    "adjective": "adj",
    "adv": "adv",
    "r": "adv",
    "adverb": "adv",
}
_POS_LETTER = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}
_SEARCH_DIRS = (
    "/usr/share/wordnet",
    "/usr/share/wordnet/dict",
    "/usr/local/share/wordnet",
    "/usr/local/share/wordnet/dict",
    "/opt/homebrew/share/wordnet/dict",
    "/usr/local/WordNet-3.0/dict",
)
_MISSING = (
    "WordNet data files not found (looked for data.noun in {where}); install them with "
    "`apt-get install wordnet-base` or point CROSSEMBED_WORDNET_DIR at a directory holding data.noun"
)
# adjective words may carry a syntactic marker: "(a)", "(p)" or "(ip)"
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
_QUOTED = re.compile(r'"([^"]*)"')

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Synset:
    """One WordNet synset.

    Attributes
    ----------
    offset : int
        Byte offset in ``data.<pos>``, WordNet's id for the synset within a pos.
    pos : str
        ``"noun"``, ``"verb"``, ``"adj"`` or ``"adv"``.
    lemmas : tuple of str
        Words of the synset, underscores turned into spaces.
    gloss : str
        The definition, without the quoted example sentences.
    examples : tuple of str
        The quoted example sentences (may be empty).
    hypernyms : tuple of int
        Offsets (same pos) of the ``@`` hypernym and ``@i`` instance-hypernym pointers.
    """

    offset: int
    pos: str
    lemmas: Tuple[str, ...]
    gloss: str
    examples: Tuple[str, ...]
    hypernyms: Tuple[int, ...]


class SynsetSplit(NamedTuple):
    """Disjoint (by synset) parts: ``fit`` (Laplace training), ``dev`` and ``test``."""

    fit: List[Synset]
    dev: List[Synset]
    test: List[Synset]


def _normalise_pos(pos) -> str:
    if not isinstance(pos, str):
        raise TypeError(f"pos must be a string, got {type(pos).__name__}")
    try:
        return POS_NAMES[pos.lower()]
    except KeyError:
        raise ValueError(f"pos must be one of 'noun', 'verb', 'adj', 'adv', got {pos!r}") from None


def find_wordnet_dir(wordnet_dir: Optional[PathLike] = None) -> Path:
    """Return the directory holding WordNet's ``data.noun``.

    Order: the ``wordnet_dir`` argument, ``$CROSSEMBED_WORDNET_DIR``,
    ``$WNSEARCHDIR``, ``$WNHOME/dict``, then the usual install locations.

    Raises
    ------
    FileNotFoundError
        When no candidate holds ``data.noun`` (names ``apt-get install wordnet-base``).
    """
    if wordnet_dir is not None:
        candidates = [Path(wordnet_dir)]
    else:
        candidates = []
        for var in ("CROSSEMBED_WORDNET_DIR", "WNSEARCHDIR"):
            if os.environ.get(var):
                candidates.append(Path(os.environ[var]))
        if os.environ.get("WNHOME"):
            candidates.append(Path(os.environ["WNHOME"]) / "dict")
        # an explicit override that is wrong must fail, not silently fall back
        if not os.environ.get("CROSSEMBED_WORDNET_DIR"):
            candidates.extend(Path(d) for d in _SEARCH_DIRS)
    for cand in candidates:
        if (cand / "data.noun").is_file():
            return cand.resolve()
    raise FileNotFoundError(_MISSING.format(where=", ".join(str(c) for c in candidates)))


def _split_gloss(text: str) -> Tuple[str, Tuple[str, ...]]:
    """Separate the definition from the quoted examples.

    A quoted span is an example when it opens the gloss or follows ``;`` or
    ``:``; quotes inside the definition (``in the phrase "make strides"``)
    stay in the definition.
    """
    examples = []
    cut = None
    for m in _QUOTED.finditer(text):
        before = text[: m.start()].rstrip()
        if before == "" or before.endswith((";", ":")):
            if cut is None:
                cut = m.start()
            if m.group(1).strip():
                examples.append(m.group(1).strip())
    definition = text if cut is None else text[:cut]
    return definition.strip().rstrip(";:").strip(), tuple(examples)


def _parse_line(line: str, pos: str) -> Synset:
    data, _, gloss_text = line.partition(" | ")
    if not _:  # a synset without gloss ends with "|" and no space after it
        data, _, gloss_text = line.partition("|")
    fields = data.split()
    offset = int(fields[0])
    w_cnt = int(fields[3], 16)
    words = fields[4 : 4 + 2 * w_cnt : 2]
    lemmas = tuple(_ADJ_MARKER.sub("", w).replace("_", " ") for w in words)
    i = 4 + 2 * w_cnt
    p_cnt = int(fields[i])
    i += 1
    letter = _POS_LETTER[pos]
    hypernyms = []
    for _p in range(p_cnt):
        symbol, target, target_pos = fields[i], fields[i + 1], fields[i + 2]
        if symbol in ("@", "@i") and target_pos == letter:
            hypernyms.append(int(target))
        i += 4
    gloss, examples = _split_gloss(gloss_text)
    return Synset(offset, pos, lemmas, gloss, examples, tuple(hypernyms))


def _read_file(path: Path, pos: str) -> List[Synset]:
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.startswith("  ") or not line.strip():  # licence header
                continue
            try:
                out.append(_parse_line(line.rstrip("\n"), pos))
            except (IndexError, ValueError, KeyError) as exc:
                raise ValueError(f"{path}:{lineno}: malformed WordNet data line ({exc})") from None
    return out


def read_synsets(pos: str = "noun", *, wordnet_dir: Optional[PathLike] = None) -> List[Synset]:
    """All synsets of one part of speech, in file order.

    Parameters
    ----------
    pos : {"noun", "verb", "adj", "adv"}
        Also accepts WordNet's letters ``n``, ``v``, ``a``/``s``, ``r``.
    wordnet_dir : path, optional
        Directory with ``data.<pos>``; default: see :func:`find_wordnet_dir`.

    Returns
    -------
    list of Synset
        Parsed from the file on every call; callers that need the synsets
        repeatedly keep the list.
    """
    pos = _normalise_pos(pos)
    path = find_wordnet_dir(wordnet_dir) / f"data.{pos}"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; install it with `apt-get install wordnet-base`")
    return _read_file(path, pos)


def synsets_with_examples(pos: str = "noun", *, wordnet_dir: Optional[PathLike] = None) -> List[Synset]:
    """Synsets that have a non-empty gloss and at least one example sentence."""
    return [s for s in read_synsets(pos, wordnet_dir=wordnet_dir) if s.examples and s.gloss]


def _resolve(synsets: Optional[Iterable[Synset]], pos: str, wordnet_dir) -> List[Synset]:
    if synsets is None:
        return synsets_with_examples(pos, wordnet_dir=wordnet_dir)
    synsets = list(synsets)
    for s in synsets:
        if not isinstance(s, Synset):
            raise TypeError(f"synsets must hold Synset objects, got {type(s).__name__}")
    return synsets


def example_gloss_pairs(
    pos: str = "noun",
    *,
    synsets: Optional[Iterable[Synset]] = None,
    all_examples: bool = False,
    wordnet_dir: Optional[PathLike] = None,
) -> List[Tuple[str, str]]:
    """Positive pairs ``(example sentence, definition)``.

    Parameters
    ----------
    synsets : iterable of Synset, optional
        Use these (e.g. one part of :func:`split_synsets`); default: every
        synset of ``pos`` with examples.
    all_examples : bool
        One pair per example instead of only the first example of each synset.
    """
    out = []
    for s in _resolve(synsets, pos, wordnet_dir):
        if not s.examples or not s.gloss:
            continue
        for ex in s.examples if all_examples else s.examples[:1]:
            out.append((ex, s.gloss))
    return out


def split_synsets(
    synsets: Sequence[Synset],
    *,
    fit_fraction: float = 0.4,
    dev_fraction: float = 0.1,
    random_state=0,
) -> SynsetSplit:
    """Deterministic split into disjoint fit / dev / test parts.

    The order is a permutation (from ``random_state``) of the synsets sorted by
    ``(pos, offset)``, so the result does not depend on the input order.
    The test part gets the remainder ``1 - fit_fraction - dev_fraction``.
    """
    synsets = list(synsets)
    for s in synsets:
        if not isinstance(s, Synset):
            raise TypeError(f"synsets must hold Synset objects, got {type(s).__name__}")
    check_split_fractions(fit_fraction, dev_fraction)
    keys = {(s.pos, s.offset) for s in synsets}
    if len(keys) != len(synsets):
        raise ValueError("synsets holds duplicates (same pos and offset)")
    ordered = sorted(synsets, key=lambda s: (s.pos, s.offset))
    perm = check_random_state(random_state).permutation(len(ordered))
    n_fit = int(round(fit_fraction * len(ordered)))
    n_dev = min(int(round(dev_fraction * len(ordered))), len(ordered) - n_fit)
    pick = [ordered[i] for i in perm]
    return SynsetSplit(pick[:n_fit], pick[n_fit : n_fit + n_dev], pick[n_fit + n_dev :])
