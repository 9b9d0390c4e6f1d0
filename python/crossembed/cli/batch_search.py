"""``crossembed index search --queries FILE -o OUT``: batched search streamed to .npy or .jsonl.

Queries are a UTF-8 text file (one per line; encoded by the index's ensemble
batch by batch) or Gaussians: a ``.npy`` of shape ``(2, Q, D)`` (means, then
variances) or a ``.npz`` with ``mean`` and ``var``. Results go out as each
batch finishes, into a temporary file renamed over ``OUT`` at the end (a
failed run leaves any previous ``OUT`` as it was):

* ``.npy``: a ``(Q, k)`` structured array with fields ``id`` (int64, ``-1``
  pads) and ``score`` (float32), best first;
* ``.jsonl``: one ``{"query": i, "ids": [...], "scores": [...]}`` per line.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import BinaryIO, Iterator, Tuple

import numpy as np

from crossembed._io import atomic_open
from crossembed.cli.options import check_real_dtype, load_npy, read_lines

__all__ = ["RESULT_DTYPE", "query_batches", "stream_search"]

RESULT_DTYPE = np.dtype([("id", "<i8"), ("score", "<f4")])


def _gaussian_queries(path: Path):
    from crossembed.uec import GaussianEmbedding

    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                mean, var = z["mean"], z["var"]
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"--queries: {path} must be an .npz with 'mean' and 'var' ({msg})") from None
        check_real_dtype(mean.dtype, "--queries", path)
        check_real_dtype(var.dtype, "--queries", path)
    else:
        stacked = load_npy(str(path), "--queries")
        if stacked.ndim != 3 or stacked.shape[0] != 2:
            raise ValueError(f"--queries: {path} must hold shape (2, Q, D) (means, variances), got {stacked.shape}")
        mean, var = stacked
    return GaussianEmbedding(mean, var)


def query_batches(path: str, batch_size: int) -> Tuple[int, Iterator]:
    """The number of queries in ``path`` and an iterator over batches (lists of texts or GaussianEmbeddings)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--queries file {path!r} does not exist")
    if p.suffix in (".npy", ".npz"):
        g = _gaussian_queries(p)
        return len(g), (g[s : s + batch_size] for s in range(0, len(g), batch_size))
    texts = read_lines(path, "queries")
    return len(texts), (texts[s : s + batch_size] for s in range(0, len(texts), batch_size))


def _npy_header(fh: BinaryIO, n: int, k: int) -> None:
    np.lib.format.write_array_header_1_0(
        fh, {"descr": np.lib.format.dtype_to_descr(RESULT_DTYPE), "fortran_order": False, "shape": (n, k)}
    )


def stream_search(index, queries: str, output: str, k: int, *, batch_size: int, progress: bool, **search) -> dict:
    """Search every query of ``queries`` and stream the results to ``output`` (see module docstring)."""
    from tqdm.auto import tqdm

    out = Path(output)
    if out.suffix not in (".npy", ".jsonl"):
        raise ValueError(f"--output must end in .npy or .jsonl, got {output!r}")
    n, batches = query_batches(queries, batch_size)
    done = 0
    with atomic_open(out) as fh, tqdm(total=n, desc="search", unit="q", disable=not progress) as bar:
        if out.suffix == ".npy":
            _npy_header(fh, n, k)
        for batch in batches:
            scores, ids = index.search(batch, k, **search)
            if out.suffix == ".npy":
                rows = np.empty(ids.shape, RESULT_DTYPE)
                rows["id"], rows["score"] = ids, scores
                fh.write(rows.tobytes())
            else:
                lines = (
                    json.dumps({"query": done + r, "ids": i.tolist(), "scores": [float(x) for x in s]})
                    for r, (s, i) in enumerate(zip(scores, ids))
                )
                fh.write(("\n".join(lines) + "\n").encode())
            done += len(ids)
            bar.update(len(ids))
    return {"output": str(out), "n_queries": n, "k": k}
