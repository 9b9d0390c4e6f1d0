"""The unseen-language task of the UEC evaluation: English-only fit pairs, queries in other languages.

A user without foreign data fits the ensemble on English pairs and then
serves queries in whatever language comes. :func:`unseen_language_task`
builds that setting from FreeDict and WordNet: queries are single words
(English noun lemmas and foreign headwords, as
:func:`experiments.freedict.translation_task`), documents English noun
glosses, and the fit pairs are English only (a one-sense lemma -> its gloss,
sharing no word and no relevant gloss with the queries).

The foreign languages are split in two: *dev* languages may steer choices
(the routing's temperature on the dev halves), *test* languages are only
ever scored. :func:`language_draws` makes the random halves: each draw puts
half of the English queries and half of each dev language's queries on the
dev side, the other English half and half of each test language's queries
on the test side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from experiments.tasks import UECTask

__all__ = ["DEV_LANGUAGES", "TEST_LANGUAGES", "LanguageTransferTask", "language_draws", "unseen_language_task"]

#: foreign languages the routing's settings may be chosen on
DEV_LANGUAGES = ("de", "fr", "es")
#: foreign languages only ever scored (no setting is chosen on them)
TEST_LANGUAGES = ("it", "pt", "nl", "sv", "pl", "fi")


@dataclass
class LanguageTransferTask(UECTask):
    """A :class:`UECTask` whose foreign query languages are split into dev and test languages."""

    dev_languages: List[str] = field(default_factory=list)
    test_languages: List[str] = field(default_factory=list)


def _english_fit_pairs(task, n_fit: int, seed: int, wordnet_dir) -> List[Tuple[str, str]]:
    """``n_fit`` (English one-sense noun lemma, its gloss) pairs sharing no word or relevant gloss with ``task``."""
    from experiments.freedict import english_noun_senses, single_word

    senses = english_noun_senses(wordnet_dir)
    used_words = {q.lower() for q in task.queries}
    used_glosses = {task.documents[j] for r in task.relevant for j in r}
    cands = sorted(
        (w, s[0][1])
        for w, s in senses.items()
        if len(s) == 1 and single_word(w) and w not in used_words and s[0][1] not in used_glosses
    )
    rng = np.random.default_rng(seed + 1)
    return [cands[i] for i in sorted(rng.permutation(len(cands))[:n_fit])]


def unseen_language_task(
    *,
    dev_languages: Sequence[str] = DEV_LANGUAGES,
    test_languages: Sequence[str] = TEST_LANGUAGES,
    n_per_language: int = 400,
    n_distractors: int = 3000,
    n_fit: int = 3000,
    seed: int = 0,
    dictd_dir=None,
    wordnet_dir=None,
) -> LanguageTransferTask:
    """English + foreign word -> English gloss, with ``n_fit`` English-only fit pairs (module docstring).

    Parameters
    ----------
    dev_languages, test_languages : sequence of str
        Disjoint FreeDict languages (:data:`experiments.freedict.LANGUAGES`), none of them ``"en"``.
    n_per_language : int
        Queries per language, English included (fewer where the dictionary has fewer).
    n_distractors : int
        Extra noun glosses in the document pool.
    n_fit : int
        English fit pairs.
    seed : int
        Sampling seed of the queries, distractors and fit pairs.
    """
    from experiments.freedict import translation_task

    dev, test = list(dict.fromkeys(dev_languages)), list(dict.fromkeys(test_languages))
    if "en" in dev + test or set(dev) & set(test):
        raise ValueError(f"dev_languages {dev} and test_languages {test} must be disjoint and exclude 'en'")
    if not test:
        raise ValueError("test_languages must name at least one language")
    if n_fit < 2:
        raise ValueError(f"n_fit must be >= 2, got {n_fit}")
    task = translation_task(
        ["en", *dev, *test],
        n_per_language=n_per_language,
        n_distractors=n_distractors,
        random_state=seed,
        dictd_dir=dictd_dir,
        wordnet_dir=wordnet_dir,
    )
    pairs = _english_fit_pairs(task, n_fit, seed, wordnet_dir)
    return LanguageTransferTask(
        "freedict-unseen-languages",
        task,
        np.arange(len(task.queries), dtype=np.int64),
        pairs,
        ["en"] * len(pairs),
        dev_languages=dev,
        test_languages=test,
    )


def language_draws(
    uec_task: LanguageTransferTask, n_draws: int = 3, *, seed: int = 0, rows: Optional[np.ndarray] = None
) -> List[Tuple[np.ndarray, np.ndarray]]:
    """``n_draws`` random (dev, test) halves: English and dev languages on dev, English and test languages on test.

    ``rows``: the query rows drawn from (default ``uec_task.eval_queries``); positions are rows of the task.
    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    rng = np.random.default_rng(seed)
    rows = uec_task.eval_queries if rows is None else np.asarray(rows, dtype=np.int64)
    langs = np.array(uec_task.task.languages)[rows]
    out = []
    for _ in range(n_draws):
        dev, test = [], []
        for lang in dict.fromkeys(langs):
            picked = rows[langs == lang]
            perm = rng.permutation(len(picked))
            half = len(picked) // 2
            first, second = picked[perm[:half]], picked[perm[half:]]
            if lang in uec_task.dev_languages or lang == "en":
                dev.append(first)
            if lang in uec_task.test_languages or lang == "en":
                test.append(second)
        out.append((np.sort(np.concatenate(dev)), np.sort(np.concatenate(test))))
    return out
