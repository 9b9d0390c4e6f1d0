"""experiments.link_table: no-seed settings and the translation protocol's figures in the records."""

import numpy as np

from experiments.link_table import render_markdown, run_table


def _embed(name, n):
    """Two views of one cloud: B is A rotated (the 'b' encoder), so every method can find the partners."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 8)) + 4 * rng.normal(size=(6, 8))[rng.integers(0, 6, n)]
    if name == "b":
        X = X @ np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]
    return X.astype(np.float32)


def test_no_seed_and_full_overlap_records(tmp_path):
    records = run_table(
        pairs=[("a", "b", 300)],
        settings=[(1.0, 0), (0.5, 15)],
        methods=["mini-vec2vec", "vecmap"],
        n_draws=1,
        n_objects=300,
        results_path=tmp_path / "r.json",
        embed=_embed,
        log=lambda s: None,
    )
    by = {(r["alpha"], r["n_seeds"], r["method"]): r for r in records}
    full = by[(1.0, 0, "mini-vec2vec")]
    # no seeds: every overlap pair is truth, and the full-overlap figures are there
    assert full["n_seeds"] == 0 and 0.0 <= full["top1"] <= 1.0 and full["mean_rank"] >= 1.0
    assert 0.0 <= full["foscttm"] <= 1.0
    assert "top1" not in by[(0.5, 15, "vecmap")]
    md = render_markdown(records)
    assert "top-1 %" in md and "| mini-vec2vec |" in md


def test_by_overlap_keeps_one_row_a_pair_across_object_counts():
    """A setting run on another object count (alpha 1.0 at 8,192) is a column of the pair, not a new pair."""
    base = dict(corpus=20000, seconds=1.0, precision=0.9, recall=0.9, draw=0, key="k")
    records = [
        dict(base, a=a, b="x", n_objects=n, alpha=alpha, n_seeds=s, method="geh-validated", f1=f1)
        for a in ("p", "q")
        for n, alpha, s, f1 in ((10_000, 0.3, 15, 0.9), (10_000, 0.5, 15, 0.95))
    ] + [dict(base, a="p", b="x", n_objects=8192, alpha=1.0, n_seeds=0, method="geh-validated", f1=0.0)]
    md = render_markdown(records)
    block = md[md.index("geh-validated by overlap") :]
    assert block.count("| p ↔ x |") == 1 and "alpha 1.0, 0 seeds" in block
    assert "90.0 ± 0.0 (90.0 / 90.0) [2 pairs]" in block  # the 10,000-object pairs' mean is still there
