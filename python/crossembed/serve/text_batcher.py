"""Cross-request batching of texts: texts that queue while the encoders run are encoded in one call.

Requests (search queries, documents to add or upsert, texts to embed) wait in
one queue; the encoder thread takes the oldest and the queued ones of the same
role (query or passage), up to ``max_batch`` texts and ``max_batch_tokens``
estimated tokens, and encodes them in one ensemble call (the encoders sort a
call's texts by length, so short and long texts of different requests do not
pad each other). Each request gets its own rows: an ensemble encodes every
text on its own, up to the float rounding of the padded batch it shares.
The searches of one encoded batch run next on the same thread, in index
calls shared by the requests with the same search settings
(:meth:`~crossembed.serve.batcher.SearchBatcher.search_now`), before the
next batch is taken: a batch is answered as one unit, so clients that send
their next text on an answer come back together and form the next batch
together. Handing the searches to the search thread instead let the encoder
take the next batch while they waited, which split closed-loop clients into
two alternating half-sized batches (and an encoder call is slower per text
the fewer texts it has).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from crossembed.serve.batcher import QueuedSearch, QueueThread, Result, SearchBatcher, SearchKey
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = ["TextBatcher", "estimate_tokens"]

#: The longest a call waits for texts to queue, as a share of the previous call's time (see TextBatcher).
GATHER_SHARE = 0.1


def estimate_tokens(text: str) -> int:
    """Tokens an encoder reads for ``text``, estimated: 2 special tokens and one per 4 characters.

    The ensemble's encoders have tokenizers of their own (or none visible: a
    black box), so the budget counts this estimate; English WordPiece runs at
    about 4 characters a token.
    """
    return 2 + (len(text) + 3) // 4


@dataclass
class _QueuedTexts:
    texts: List[str]
    role: str
    tokens: int
    search: Optional[Tuple[int, SearchKey]]  # (k, key) of a text search, None to get the embedding
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class TextBatcher(QueueThread):
    """Coalesces text requests into calls of ``encode(texts, role) -> GaussianEmbedding``.

    ``encode`` runs on the batcher's own thread (``thread_init()`` first), one
    call at a time. A call takes the oldest request and the queued requests of
    its role, oldest first, while the total stays within ``max_batch`` texts
    and ``max_batch_tokens`` (:func:`estimate_tokens`); a larger request is a
    call of its own. Text searches are run on ``searches`` with the encoded
    queries, on this thread, before the next call. ``on_batch(n_texts)`` is
    told the size of every call.

    Before a call, while fewer texts are queued than the previous call had,
    the thread waits for more, at most :data:`GATHER_SHARE` of the previous
    call's time (encoding and searching): the clients a call answered send
    their next texts within a few milliseconds of each other, and a call
    started on the first of them would leave the others to the call after.
    A lone client (previous call: one text) never waits; a wait that is not
    rewarded costs at most that share of throughput.
    """

    _name = "crossembed-encode"

    def __init__(
        self,
        encode: Callable[[List[str], str], GaussianEmbedding],
        searches: SearchBatcher,
        *,
        max_batch: int,
        max_batch_tokens: int,
        on_batch: Optional[Callable[[int], None]] = None,
        thread_init: Optional[Callable[[], None]] = None,
    ):
        super().__init__(thread_init=thread_init)
        self._encode = encode
        self._searches = searches
        self._max_batch = max_batch
        self._max_tokens = max_batch_tokens
        self._on_batch = on_batch
        self._previous = (0, 0.0)  # texts and seconds of the previous call

    async def _submit(self, texts: List[str], role: str, search: Optional[Tuple[int, SearchKey]]):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        tokens = sum(estimate_tokens(t) for t in texts)
        self.enqueue([_QueuedTexts(list(texts), role, tokens, search, future, loop)])
        return await future

    async def encode(self, texts: List[str], role: str) -> GaussianEmbedding:
        """The ensemble's Gaussians of ``texts`` (with per-model ``weights``), encoded as ``role``."""
        return await self._submit(texts, role, None)

    async def search(self, texts: List[str], k: int, key: SearchKey) -> Result:
        """Top-``k`` under ``key`` of ``texts`` encoded as queries: ``(scores, ids)``."""
        return await self._submit(texts, "query", (k, key))

    def _gather(self) -> None:
        """Wait (holding the condition) while fewer texts are queued than the previous call had, at most
        GATHER_SHARE of its time."""
        texts, seconds = self._previous
        deadline = time.monotonic() + GATHER_SHARE * seconds
        while not self._closing and sum(len(p.texts) for p in self._pending) < min(texts, self._max_batch):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _take(self) -> List[_QueuedTexts]:
        self._gather()
        first = self._pending.popleft()
        group, n, tokens, rest = [first], len(first.texts), first.tokens, []
        while self._pending:
            p = self._pending.popleft()
            if p.role == first.role and n + len(p.texts) <= self._max_batch and tokens + p.tokens <= self._max_tokens:
                group.append(p)
                n, tokens = n + len(p.texts), tokens + p.tokens
            else:
                rest.append(p)
        self._pending.extendleft(reversed(rest))
        return group

    def _call(self, group: List[_QueuedTexts]) -> None:
        start = time.monotonic()
        self._encode_and_search(group)
        self._previous = (sum(len(p.texts) for p in group), time.monotonic() - start)

    def _encode_and_search(self, group: List[_QueuedTexts]) -> None:
        texts = [t for p in group for t in p.texts]
        if self._on_batch is not None:
            self._on_batch(len(texts))
        try:
            encoded = self._encode(texts, group[0].role)
        except Exception as exc:
            if len(group) == 1:
                self._settle(group[0], exc=exc)
            else:
                for p in group:  # one request's fault must not fail the others: encode each alone
                    self._encode_and_search([p])
            return
        done, searches, start = [], [], 0
        for p in group:
            rows = encoded[start : start + len(p.texts)]
            start += len(p.texts)
            if p.search is None:
                done.append((p, rows, None))
            else:
                k, key = p.search
                searches.append(QueuedSearch(rows.mean, rows.var, k, key, p.future, p.loop))
        self._settle_all(done)
        if searches:  # here, before the next call: the batch is answered as one unit
            self._searches.search_now(searches)
