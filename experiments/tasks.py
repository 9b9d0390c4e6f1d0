"""The two real retrieval tasks of the UEC evaluation, with disjoint fit pairs.

* :func:`wordnet_task` - a WordNet noun example sentence -> its synset's
  gloss, among the glosses of all noun synsets with examples. A fixed
  ``fit_fraction`` of the synsets (by :func:`crossembed.data.wordnet.split_synsets`)
  gives the Laplace fit pairs (example, gloss); only the other synsets'
  examples are ever evaluated.
* :func:`freedict_task` - the multilingual "language expert" task of
  :func:`experiments.freedict.translation_task`: an English, German,
  French or Spanish word -> the English WordNet glosses of its senses. Fit
  pairs come from the same sources but share no query word and no relevant
  gloss with the task: (foreign headword, gloss of its English translation)
  per language and (English lemma, gloss).

:func:`dev_test_draws` makes the random dev/test halves (stratified by query
language) used to tune the temperature and report mean +- std.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["RetrievalTask", "UECTask", "dev_test_draws", "example_gloss_task", "freedict_task", "wordnet_task"]


@dataclass
class RetrievalTask:
    """Queries, documents and which documents are relevant to each query.

    Attributes
    ----------
    name : str
        Short identifier, e.g. ``"wordnet-noun-example-gloss"``.
    queries, documents : list of str
    relevant : list of tuple of int
        ``relevant[i]`` holds the indices into ``documents`` relevant to query ``i``.
    languages : list of str
        ISO 639-1 code of each query (default ``"en"`` for every query).
    """

    name: str
    queries: List[str]
    documents: List[str]
    relevant: List[Tuple[int, ...]]
    languages: List[str] = field(default_factory=list)

    def __post_init__(self):
        self.queries = list(self.queries)
        self.documents = list(self.documents)
        self.relevant = [tuple(int(j) for j in r) for r in self.relevant]
        self.languages = list(self.languages) or ["en"] * len(self.queries)
        if len(self.relevant) != len(self.queries) or len(self.languages) != len(self.queries):
            raise ValueError(
                f"relevant ({len(self.relevant)}) and languages ({len(self.languages)}) must have "
                f"one entry per query ({len(self.queries)})"
            )
        n_docs = len(self.documents)
        for i, r in enumerate(self.relevant):
            if any(j < 0 or j >= n_docs for j in r):
                raise ValueError(f"relevant[{i}] = {r} points outside the {n_docs} documents")

    def __len__(self) -> int:
        return len(self.queries)


def example_gloss_task(synsets=None, *, pos: str = "noun", wordnet_dir=None) -> RetrievalTask:
    """Retrieval task: query = first example of a synset, its one relevant document = its gloss.

    Documents are the glosses of all given synsets (one per synset, in order; default every
    synset of ``pos`` with examples), so query ``i`` is relevant to document ``i``.
    """
    from crossembed.data import synsets_with_examples

    chosen = synsets_with_examples(pos, wordnet_dir=wordnet_dir) if synsets is None else list(synsets)
    chosen = [s for s in chosen if s.examples and s.gloss]
    return RetrievalTask(
        name=f"wordnet-{pos}-example-gloss",
        queries=[s.examples[0] for s in chosen],
        documents=[s.gloss for s in chosen],
        relevant=[(i,) for i in range(len(chosen))],
        languages=["en"] * len(chosen),
    )


@dataclass
class UECTask:
    """A retrieval task plus the positive pairs the Laplace posteriors are fitted on.

    Attributes
    ----------
    name : str
    task : RetrievalTask
    eval_queries : ndarray of int
        Query rows that may be evaluated (disjoint from the fit pairs).
    fit_pairs : list of (anchor, positive)
    fit_languages : list of str
        Language of each fit anchor.
    """

    name: str
    task: RetrievalTask
    eval_queries: np.ndarray
    fit_pairs: List[Tuple[str, str]]
    fit_languages: List[str] = field(default_factory=list)

    @property
    def languages(self) -> List[str]:
        """Query languages in first-seen order."""
        return list(dict.fromkeys(self.task.languages))


def wordnet_task(*, fit_fraction: float = 0.4, seed: int = 0, pos: str = "noun", wordnet_dir=None) -> UECTask:
    """WordNet example -> gloss; ``fit_fraction`` of synsets fit the posteriors.

    ``pos="noun"`` (8.7k glosses) is the task every UEC default was chosen on;
    ``pos="verb"`` (9.7k) is a held-out check that no choice has seen.
    """
    from crossembed.data import split_synsets, synsets_with_examples

    if pos not in ("noun", "verb"):
        raise ValueError(f"pos must be 'noun' or 'verb', got {pos!r}")
    synsets = [s for s in synsets_with_examples(pos, wordnet_dir=wordnet_dir) if s.examples and s.gloss]
    task = example_gloss_task(synsets)
    split = split_synsets(synsets, fit_fraction=fit_fraction, dev_fraction=0.0, random_state=seed)
    row = {(s.pos, s.offset): i for i, s in enumerate(synsets)}
    fit_rows = sorted(row[(s.pos, s.offset)] for s in split.fit)
    fit = set(fit_rows)
    eval_rows = np.array([i for i in range(len(synsets)) if i not in fit], dtype=np.int64)
    pairs = [(task.queries[i], task.documents[i]) for i in fit_rows]
    name = "wordnet-example-gloss" if pos == "noun" else f"wordnet-{pos}-example-gloss"
    return UECTask(name, task, eval_rows, pairs, ["en"] * len(pairs))


def freedict_task(
    *,
    languages: Sequence[str] = ("en", "de", "fr", "es"),
    n_per_language: int = 400,
    n_distractors: int = 3000,
    fit_per_language: int = 800,
    seed: int = 0,
    dictd_dir=None,
    wordnet_dir=None,
) -> UECTask:
    """Multilingual word -> English gloss, with ``fit_per_language`` disjoint fit pairs per language."""
    from experiments.freedict import english_noun_senses, read_freedict, single_word, translation_task

    task = translation_task(
        languages,
        n_per_language=n_per_language,
        n_distractors=n_distractors,
        random_state=seed,
        dictd_dir=dictd_dir,
        wordnet_dir=wordnet_dir,
    )
    senses = english_noun_senses(wordnet_dir)
    used_words = {q.lower() for q in task.queries}
    used_glosses = set(task.documents[j] for r in task.relevant for j in r)
    rng = np.random.default_rng(seed + 1)
    pairs: List[Tuple[str, str]] = []
    langs: List[str] = []

    def gloss_of(english: str):
        s = senses.get(english.lower(), [])
        # one-sense words only, whose gloss is not a relevant document of the task
        if len(s) == 1 and s[0][1] not in used_glosses:
            return s[0][1]
        return None

    for lang in dict.fromkeys(task.languages):
        cands: Dict[str, str] = {}
        if lang == "en":
            for w in sorted(senses):
                g = gloss_of(w)
                if g and single_word(w) and w not in used_words:
                    cands[w] = g
        else:
            for e in read_freedict(lang, dictd_dir=dictd_dir):
                if not single_word(e.headword) or e.headword.lower() in used_words or e.headword in cands:
                    continue
                for t in e.translations:
                    g = gloss_of(t) if t.lower() != e.headword.lower() else None
                    if g:
                        cands[e.headword] = g
                        break
        items = sorted(cands.items())
        for i in sorted(rng.permutation(len(items))[:fit_per_language]):
            pairs.append(items[i])
            langs.append(lang)
    return UECTask("freedict-multilingual", task, np.arange(len(task.queries), dtype=np.int64), pairs, langs)


def dev_test_draws(uec_task: UECTask, n_draws: int = 3, *, seed: int = 0) -> List[Tuple[np.ndarray, np.ndarray]]:
    """``n_draws`` random (dev, test) halves of the evaluable queries, stratified by language."""
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    rng = np.random.default_rng(seed)
    langs = np.array(uec_task.task.languages)[uec_task.eval_queries]
    out = []
    for _ in range(n_draws):
        dev, test = [], []
        for lang in dict.fromkeys(langs):
            rows = uec_task.eval_queries[langs == lang]
            perm = rng.permutation(len(rows))
            half = len(rows) // 2
            dev.append(rows[perm[:half]])
            test.append(rows[perm[half:]])
        out.append((np.sort(np.concatenate(dev)), np.sort(np.concatenate(test))))
    return out
