"""The retrieval-task container shared by the WordNet and FreeDict loaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import numpy as np

from crossembed._validation import check_random_state, check_split_fractions

__all__ = ["RetrievalTask"]


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
        ISO 639-1 code of each query (``"en"``, ``"de"``, ``"fr"``, ``"es"``).
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
        if not self.languages:
            self.languages = ["en"] * len(self.queries)
        self.languages = list(self.languages)
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

    def relevance_matrix(self) -> np.ndarray:
        """Boolean (n_queries, n_documents) matrix of the relevance labels."""
        out = np.zeros((len(self.queries), len(self.documents)), dtype=bool)
        for i, r in enumerate(self.relevant):
            out[i, list(r)] = True
        return out

    def subset(self, indices: Sequence[int]) -> RetrievalTask:
        """The same documents with only the given queries (e.g. one language)."""
        idx = [int(i) for i in indices]
        return RetrievalTask(
            name=self.name,
            queries=[self.queries[i] for i in idx],
            documents=self.documents,
            relevant=[self.relevant[i] for i in idx],
            languages=[self.languages[i] for i in idx],
        )

    def by_language(self, language: str) -> RetrievalTask:
        """The queries tagged ``language``."""
        return self.subset([i for i, lang in enumerate(self.languages) if lang == language])

    def pairs(self) -> List[Tuple[str, str]]:
        """``(query, document)`` for every relevant pair: positive pairs for fitting."""
        return [(q, self.documents[j]) for q, rel in zip(self.queries, self.relevant) for j in rel]

    def split(
        self, *, fit_fraction: float = 0.4, dev_fraction: float = 0.1, random_state=0
    ) -> Tuple[RetrievalTask, RetrievalTask, RetrievalTask]:
        """Disjoint (by query) fit / dev / test tasks sharing the document pool.

        Stratified by language, so every part keeps the language mix.
        """
        check_split_fractions(fit_fraction, dev_fraction)
        rng = check_random_state(random_state)
        parts: Tuple[List[int], List[int], List[int]] = ([], [], [])
        for lang in sorted(set(self.languages)):
            idx = [i for i, g in enumerate(self.languages) if g == lang]
            perm = [idx[i] for i in rng.permutation(len(idx))]
            n_fit = int(round(fit_fraction * len(perm)))
            n_dev = min(int(round(dev_fraction * len(perm))), len(perm) - n_fit)
            parts[0].extend(perm[:n_fit])
            parts[1].extend(perm[n_fit : n_fit + n_dev])
            parts[2].extend(perm[n_fit + n_dev :])
        return tuple(self.subset(sorted(p)) for p in parts)  # type: ignore[return-value]
