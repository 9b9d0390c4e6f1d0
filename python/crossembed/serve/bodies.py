"""Request bodies decoded where they cannot stall the event loop (:class:`BodyDecoder`).

Parsing JSON and validating it are single C calls that hold the GIL: a worker
thread does not help, because the event loop thread waits for the GIL until
the call returns (a 60 MB body: seconds). So a body larger than
``inline_bytes`` is decoded by :func:`crossembed.serve.schema.decode` in a
child process, which has its own GIL, and comes back as the model with its
numbers in arrays (a memory copy to unpickle). Such a body is written to a
:class:`BodyFile` chunk by chunk as it arrives and the child reads it there:
joining the chunks and pickling them to the child would be two copies of the
whole body under the GIL (about 100 ms each for 60 MB on a loaded machine).
Smaller bodies are decoded on the event loop: with every list stopping at
its first bad item that takes milliseconds. The child is spawned (not forked: the parent runs threads) by
:meth:`start`, and :meth:`close` terminates it, so a shutdown never waits for
a decode in flight.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Optional, Type, TypeVar, Union

from crossembed.serve.errors import RequestError
from crossembed.serve.schema import SaveBody, decode

__all__ = ["BodyDecoder", "BodyFile"]

_Model = TypeVar("_Model")

#: Bodies up to this size are decoded on the event loop (a 384-d query is ~16 KB; 256 KB decode in ~1 ms).
INLINE_BODY_BYTES = 256 << 10


class BodyFile:
    """A large request body in a temporary file, written chunk by chunk (:meth:`write`); :meth:`close` deletes it."""

    def __init__(self, head: bytes):
        fd, self.path = tempfile.mkstemp(prefix="crossembed-body-")
        self._file = os.fdopen(fd, "wb")
        self.size = 0
        self.write(head)

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.size += len(chunk)

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self._file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _decode_file(model, path: str):
    """:func:`decode` of the body in ``path`` (in the child)."""
    with open(path, "rb") as f:
        return decode(model, f.read())


def _exit_with_parent(parent: int) -> None:
    """The child's initializer: end when the server process is gone (killed, not stopped: no close())."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="crossembed-parent-watch", daemon=True).start()


class BodyDecoder:
    """Decodes bodies inline up to ``inline_bytes`` (bytes, default 256 KiB), larger ones in one child process."""

    def __init__(self, inline_bytes: int = INLINE_BODY_BYTES):
        self.inline_bytes = inline_bytes
        self._pool: Optional[ProcessPoolExecutor] = None

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with_parent,
            initargs=(os.getpid(),),
        )

    async def start(self) -> None:
        """Spawn the child and let it import the schema (about a second), before the first large body."""
        if self._pool is None:
            self._pool = self._new_pool()
        await asyncio.get_running_loop().run_in_executor(self._pool, decode, SaveBody, b"{}")  # {} is a valid SaveBody

    async def decode(self, model: Type[_Model], body: Union[bytes, BodyFile]) -> _Model:
        """:func:`~crossembed.serve.schema.decode` of ``body``; RequestError (400) for a bad body.
        A :class:`BodyFile` is closed (deleted) once read."""
        if isinstance(body, bytes) and len(body) <= self.inline_bytes:
            return decode(model, body)
        if self._pool is None:
            self._pool = self._new_pool()
        loop = asyncio.get_running_loop()
        try:
            if isinstance(body, BodyFile):
                body._file.close()  # every chunk written: the child reads it all
                return await loop.run_in_executor(self._pool, _decode_file, model, body.path)
            return await loop.run_in_executor(self._pool, decode, model, body)
        except BrokenProcessPool:  # the child died (killed, out of memory): a new one for the next body
            self._pool = None
            raise RequestError(503, "body: the decoding process stopped; send the request again") from None
        finally:
            if isinstance(body, BodyFile):
                body.close()

    def close(self) -> None:
        """Stop the child now, a decode in flight included (its request gets no answer)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((pool._processes or {}).values())  # no public handle on the workers before Python 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(5)
