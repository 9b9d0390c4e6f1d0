"""Which true pairs the large map pass's cells miss, and what the pass costs and finds per setting.

Runs the default linker's rounds on one draw of :mod:`geh_scale_run` (its
options), keeps the pool they end with (cached in ``--pool``: a second run
on the same draw skips the rounds; ``--true-pool N``: the seeds and N random
true pairs instead, no rounds, a quick stand-in for a pool whose links are
~99 % right), and on the centred sides

* fits the pass's first ridge map on the pool, builds the pass's cells of B
  (``CellIndex``, one cell per 512 rows), and reports for every true pair
  whether B's row lies in a cell its mapped A row probes: with ``r`` probes
  and each B row in its ``s`` nearest cells, and with the pass's margin
  rule (a B row also in its next cells whose cosine to the row is within
  ``margin`` of the nearest's); with the pairs those cells score, relative
  to 8 probes and one cell a B row;
* runs the map pass (``map_links``) once per ``--variant`` (``probes:copies:margin``)
  and reports P/R/F1, wall and CPU seconds and the load average around it.

    python -m experiments.studies.geh_cell_coverage --pool .geh_work/pool-100k.npy --variant 8:1:0 --variant 8:2:0.02
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from crossembed.linking import Center, GEHLinker, ValidatedPromotion, evaluate_links
from crossembed.linking.mapcells import CellIndex, mapped_rows
from crossembed.linking.refine import map_links, ridge_map_rows
from experiments.studies.geh_scale_run import add_draw_arguments, draw_sides

# the map pass's cell size (rows of the larger side per centre)
ROWS_PER_CENTRE = 512
PROBES = (1, 2, 4, 6, 8, 11, 16)
COPIES = (1, 2, 3)
MARGINS = (0.01, 0.02, 0.04)


class _PoolOnly:
    """The default growth rule, whose final pass is replaced by keeping the pool (every row's numbering)."""

    has_final_pass = True
    links_every_row = True

    def __init__(self):
        self.rule, self.pool = ValidatedPromotion(), None
        self.name = self.rule.name

    def grow(self, fit, propose):
        return self.rule.grow(fit, propose)

    def finish(self, fit, propose):
        self.pool = fit.pool()


def _pool(args, A, B, split) -> np.ndarray:
    if args.true_pool:  # a quick stand-in for the rounds' pool (which is ~99 % right): no rounds run
        rows = np.random.default_rng(args.draw).choice(len(split.truth), args.true_pool, replace=False)
        return np.concatenate([split.seeds, split.truth[np.sort(rows)]])
    if args.pool and os.path.exists(args.pool):
        return np.load(args.pool)
    rule = _PoolOnly()
    load, tic, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    GEHLinker(promotion=rule, random_state=args.draw, max_iter=args.max_iter, show_progress_bar=False).link(
        A, B, split.seeds
    )
    secs, cpu = time.perf_counter() - tic, time.process_time() - cpu
    print(f"rounds: {secs:.0f} s, CPU {cpu:.0f} s, load {load} -> {os.getloadavg()}, pool {len(rule.pool)}", flush=True)
    if args.pool:
        np.save(args.pool, rule.pool)
    return rule.pool


def _projected(index: CellIndex, X: np.ndarray) -> np.ndarray:
    Y = np.asarray(X, np.float32)
    Y = Y if index.projection is None else Y @ index.projection
    return Y / np.maximum(np.linalg.norm(Y, axis=1, keepdims=True), 1e-30)


def _near(index: CellIndex, X: np.ndarray, r: int, chunk: int = 65_536):
    """Each row's ``r`` nearest cells and their cosines on the quantiser's axes."""
    cells = index.nearest(X, r)
    sims = np.empty(cells.shape, np.float32)
    for s in range(0, len(X), chunk):
        P = _projected(index, X[s : s + chunk])
        sims[s : s + chunk] = np.einsum("nd,nrd->nr", P, index.projected[cells[s : s + chunk]])
    return cells, sims


def coverage(args, Ac, Bc, pool, split) -> dict:
    """Shares of the true pairs whose B row is in a cell their A row probes, and the pairs scored."""
    index = CellIndex(Bc, split.seeds[:, 1], rows_per_centre=ROWS_PER_CENTRE, n_rows=max(len(Ac), len(Bc)))
    FA = mapped_rows(Ac, ridge_map_rows(Ac, Bc, pool), Bc.dtype)
    near_a, _ = _near(index, FA, max(PROBES))
    near_b, sims_b = _near(index, Bc, max(COPIES))
    a, b = split.truth[:, 0], split.truth[:, 1]
    # rank of each of b's cells among a's probes (max(PROBES): not probed)
    hit = near_a[a][:, :, None] == near_b[b][:, None, :]
    rank = np.where(hit.any(1), hit.argmax(1), max(PROBES))
    n_cells, base = index.n_cells, None
    out = {"cells": n_cells, "pairs": len(a)}

    def scored(r, in_b):
        size_a = np.bincount(near_a[:, :r].reshape(-1), minlength=n_cells).astype(np.float64)
        size_b = np.bincount(near_b[in_b].reshape(-1), minlength=n_cells).astype(np.float64)
        return float(size_a @ size_b)

    base = scored(8, np.s_[:, :1])
    for r in PROBES:
        for s in COPIES:
            cov = float((rank[:, :s] < r).any(1).mean())
            out[f"probes {r} copies {s}"] = dict(coverage=round(cov, 4), cost=round(scored(r, np.s_[:, :s]) / base, 3))
        for margin in MARGINS:
            within = sims_b >= sims_b[:, :1] - margin
            cov = float(((rank < r) & within[b]).any(1).mean())
            out[f"probes {r} margin {margin}"] = dict(
                coverage=round(cov, 4),
                cost=round(scored(r, within) / base, 3),
                copies=round(float(within.sum(1).mean()), 3),
            )
    return out


def run_variant(Ac, Bc, pool, split, variant: str) -> dict:
    """The map pass with ``probes:copies:margin``; its P/R/F1, wall and CPU seconds, load average."""
    probes, copies, margin = variant.split(":")
    load, tic, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    links, _, _ = map_links(
        Ac,
        Bc,
        pool,
        exclude_a=split.seeds[:, 0],
        exclude_b=split.seeds[:, 1],
        cells=True,
        probes=int(probes),
        copies=int(copies),
        margin=float(margin),
    )
    secs, cpu = time.perf_counter() - tic, time.process_time() - cpu
    m = evaluate_links(links, split.truth)
    return dict(variant=variant, seconds=round(secs, 1), cpu_seconds=round(cpu, 1), load=[load, os.getloadavg()], **m)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_draw_arguments(p)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--pool", default=None, help="the pool's .npy cache (made on the first run)")
    p.add_argument("--true-pool", type=int, default=0, help="pool of the seeds and this many true pairs (no rounds)")
    p.add_argument("--variant", action="append", default=[], help="probes:copies:margin of a map pass to run")
    p.add_argument("--no-coverage", action="store_true")
    p.add_argument("--out", default=None, help="write the record as JSON here")
    args = p.parse_args()
    A, B, split = draw_sides(args)
    pool = _pool(args, A, B, split)
    Ac, Bc = Center().apply(A), Center().apply(B)
    del A, B
    record = {"rows": [len(Ac), len(Bc)], "pool": len(pool), "pool_precision": evaluate_links(pool, split.truth)}
    if not args.no_coverage:
        record["coverage"] = coverage(args, Ac, Bc, pool, split)
        print(json.dumps(record["coverage"]), flush=True)
    record["variants"] = []
    for v in args.variant:
        record["variants"].append(run_variant(Ac, Bc, pool, split, v))
        print(json.dumps(record["variants"][-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
