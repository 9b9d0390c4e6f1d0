"""The UNCHA table on real images: projection heads on frozen towers, Openclipart and TuxPaint.

``run_openclipart`` trains CLIP, MERU, HyCoCLIP, UNCHA and the ablations as
heads on the cached frozen features of the Openclipart training drawings
(:func:`experiments.openclipart.collections.held_out` keeps 20% out), one run per
(model, seed) with :func:`crossembed.hyperbolic.train.train`, and evaluates
each on the held-out Openclipart drawings and on every TuxPaint stamp (a
collection never seen in training, with its own category tree). The
``untrained`` row is each seed's Lorentz heads before any step (what
training has to improve on). ``claims`` checks UNCHA's three claims against
the measured spread; ``render_openclipart`` writes the markdown.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from crossembed.cli.options import write_file
from crossembed.hyperbolic.losses import MODEL_NAMES
from crossembed.hyperbolic.train import TrainConfig, build_model, train
from experiments.openclipart.collections import held_out
from experiments.openclipart.evaluate import evaluate_features, majority_by_level
from experiments.openclipart.features import FeatureSet, describe, feature_batches, towers

__all__ = ["run_openclipart", "claims", "render_openclipart", "UNTRAINED", "BLOCK", "TITLE"]

UNTRAINED = "untrained"
BLOCK = "uncha-openclipart"
TITLE = "UNCHA on real images: Openclipart and TuxPaint"
_MAIN = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5", "spearman_radius_depth", "spearman_u_1mrep")
_LABELS = {
    "i2t_r1": "I->T R@1",
    "i2t_r5": "I->T R@5",
    "t2i_r1": "T->I R@1",
    "t2i_r5": "T->I R@5",
    "spearman_radius_depth": "Spearman(radius, depth)",
    "spearman_u_1mrep": "Spearman(u, 1-rep)",
    "spearman_r_1mrep": "Spearman(r(I_p,I), 1-rep)",
}


def _split(features: FeatureSet):
    test = np.array(held_out(features.names), bool)
    return np.flatnonzero(~test), np.flatnonzero(test)


def _evaluate(model, sets, num_threads) -> Dict:
    row = {}
    for prefix, (fs, rows) in sets.items():
        for k, v in evaluate_features(model, fs, rows, num_threads=num_threads).items():
            row[f"{prefix}{k}"] = v
    return row


def run_openclipart(
    features: FeatureSet,
    tuxpaint: Optional[FeatureSet],
    *,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    models: Sequence[str] = MODEL_NAMES,
    base: Optional[TrainConfig] = None,
    work: Optional[Path] = None,
    show_progress_bar: bool = True,
    num_threads: Optional[int] = None,
) -> Dict:
    """Train and evaluate every (model, seed) plus each seed's untrained heads; see the module docstring.

    ``features``/``tuxpaint`` come from :func:`experiments.openclipart.features.clipart_features`
    (``tuxpaint`` may be None: no held-out collection). With a ``work``
    directory each finished run's row is saved there (with its config and the
    features' settings) and reused by a later call with the same ones, so
    an interrupted table resumes and several processes can share the runs.
    ``num_threads`` is for the C++ retrieval kernel.
    """
    base = base or TrainConfig()
    if work is not None:
        Path(work).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train_rows, test_rows = _split(features)
    sets = {"": (features, test_rows)}
    if tuxpaint is not None:
        sets["tux_"] = (tuxpaint, np.arange(len(tuxpaint)))
    source = feature_batches(features, train_rows)
    heads = towers(features, train_rows)
    runs: List[Dict] = []
    bar = tqdm(total=len(seeds) * (len(models) + 1), desc="uncha openclipart", disable=not show_progress_bar)
    for seed in seeds:
        for name in (UNTRAINED, *models):
            cfg = replace(base, model="uncha" if name == UNTRAINED else name, seed=int(seed))
            key = {"run": name, "config": cfg.get_config(), "data": [fs.meta for fs, _ in sets.values()]}
            path = Path(work) / f"{name}-s{seed}.json" if work is not None else None
            row = _saved(path, key)
            if row is None:
                row = {
                    "model": name,
                    "seed": int(seed),
                    **_run(cfg, name == UNTRAINED, heads, source, sets, num_threads),
                }
                if path is not None:
                    write_file(path, json.dumps({"key": key, "row": row}))
            runs.append(row)
            bar.update(1)
    bar.close()
    names = (UNTRAINED, *models)
    majority = {p: {f"{p}zs_L{k}": v for k, v in majority_by_level(fs, rows).items()} for p, (fs, rows) in sets.items()}
    return {
        "majority": {k: v for m in majority.values() for k, v in m.items()},
        "runs": runs,
        "summary": {n: _summary([r for r in runs if r["model"] == n]) for n in names},
        "config": base.get_config(),
        "seeds": [int(s) for s in seeds],
        "data": {"openclipart": describe(features), **({"tuxpaint": describe(tuxpaint)} if tuxpaint else {})},
        "n_train": int(len(train_rows)),
        "n_test": int(len(test_rows)),
        "wall_seconds": time.perf_counter() - t0,
        "machine": f"{platform.machine()}, torch threads {torch.get_num_threads()}",
    }


def _saved(path: Optional[Path], key: Dict) -> Optional[Dict]:
    """The row stored at ``path`` for exactly ``key``, else None."""
    if path is None or not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stored.get("row") if stored.get("key") == json.loads(json.dumps(key)) else None


def _run(cfg: TrainConfig, untrained: bool, heads, source, sets, num_threads) -> Dict:
    model = build_model(cfg, heads)
    extra = {}
    if not untrained:
        res = train(cfg, data=source, model=model, show_progress_bar=False)
        model = res.model
        extra = {"train_seconds": res.seconds, "final_loss": float(res.history["loss"][-1])}
    return {**_evaluate(model, sets, num_threads), **extra}


def _summary(rows: List[Dict]) -> Dict[str, tuple]:
    """``(mean, sample std)`` per numeric key over one model's runs."""
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and k != "seed"]
    out = {}
    for k in keys:
        vals = np.array([r.get(k, np.nan) for r in rows], float)
        out[k] = (float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0)
    return out


def _paired(result: Dict, a: str, b: str, key: str):
    """Mean and sample std over seeds of ``a - b`` on ``key`` (same seed: same init and batches)."""
    by = {(r["model"], r["seed"]): r.get(key, np.nan) for r in result["runs"]}
    d = np.array([by[(a, s)] - by[(b, s)] for s in result["seeds"] if (a, s) in by and (b, s) in by], float)
    if d.size == 0:
        return float("nan"), float("nan")
    return float(d.mean()), float(d.std(ddof=1)) if d.size > 1 else 0.0


def _versus(result: Dict, a: str, b: str, key: str) -> Dict:
    """``a`` against ``b`` on ``key``: beyond one std when the gap of the means exceeds both stds."""
    s = result["summary"]
    (ma, sa), (mb, sb) = s[a].get(key, (np.nan, np.nan)), s[b].get(key, (np.nan, np.nan))
    gap = ma - mb
    pm, ps = _paired(result, a, b, key)
    beyond = bool(np.isfinite(gap) and abs(gap) > max(sa, sb))
    if not np.isfinite(gap):
        verdict = "n/a"
    elif gap == 0:
        verdict = "equal"
    else:
        verdict = ("higher" if gap > 0 else "lower") + (" beyond one std" if beyond else ", within one std")
    return {"a": a, "b": b, "key": key, "a_mean": ma, "a_std": sa, "b_mean": mb, "b_std": sb,
            "paired_mean": pm, "paired_std": ps, "verdict": verdict, "beyond": beyond, "gap": gap}  # fmt: skip


def claims(result: Dict, prefix: str = "") -> List[Dict]:
    """UNCHA's claims as comparisons: vs HyCoCLIP on every main metric, u and radius vs the untrained heads."""
    s = result["summary"]
    out = []
    if "uncha" in s and "hycoclip" in s:
        zs = sorted(k for k in s["uncha"] if k.startswith(f"{prefix}zs_L") and k[len(prefix) + 4 :].isdigit())
        for key in [*zs, *(prefix + k for k in _MAIN)]:
            out.append({"claim": "UNCHA better than HyCoCLIP", **_versus(result, "uncha", "hycoclip", key)})
    if "uncha" in s:
        for key in ("spearman_u_1mrep", "spearman_radius_depth"):
            claim = "u tracks representativeness" if "u_1mrep" in key else "hierarchy by radius"
            out.append({"claim": f"{claim} (vs untrained)", **_versus(result, "uncha", UNTRAINED, prefix + key)})
    return out


def _fmt(ms, key: str) -> str:
    m, s = ms
    if not np.isfinite(m):
        return "n/a"
    return f"{m:.3f} ± {s:.3f}" if "spearman" in key else f"{100 * m:.1f} ± {100 * s:.1f}"


def _table(result: Dict, prefix: str) -> List[str]:
    s = result["summary"]
    first = next(iter(s.values()))
    zs = sorted(k[len(prefix) :] for k in first if k.startswith(f"{prefix}zs_L") and k[len(prefix) + 4 :].isdigit())
    keys = [*zs, *_MAIN]
    head = [f"zero-shot L{k[4:]} ({int(first[prefix + k + '_classes'][0])} classes)" for k in zs]
    lines = ["| model | " + " | ".join(head + [_LABELS[k] for k in _MAIN]) + " |", "|---|" + "---|" * len(keys)]
    for name, summ in s.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(summ.get(prefix + k, (np.nan, 0)), k) for k in keys) + " |")
    floor = [_fmt((result["majority"].get(prefix + k, np.nan), 0.0), k) if k in zs else "" for k in keys]
    lines.append("| most frequent class | " + " | ".join(c.replace(" ± 0.0", "") for c in floor) + " |")
    return lines


def _claims_table(rows: List[Dict]) -> List[str]:
    lines = ["| claim | metric | UNCHA | other | paired diff (same seed) | verdict |", "|---|---|---|---|---|---|"]
    for c in rows:
        key = c["key"]
        pct = "spearman" not in key
        f = (lambda v: f"{100 * v:.1f}") if pct else (lambda v: f"{v:.3f}")
        lines.append(
            f"| {c['claim']} | {key} | {f(c['a_mean'])} ± {f(c['a_std'])} | {c['b']} {f(c['b_mean'])} ± {f(c['b_std'])} "
            f"| {f(c['paired_mean'])} ± {f(c['paired_std'])} | {c['verdict']} |"
        )
    return lines


def render_openclipart(result: Dict, *, command: str = "") -> str:
    """Tables (Openclipart held-out, TuxPaint, claims), settings and per-run JSON as markdown."""
    cfg, opt, d = result["config"], result["config"]["optimiser"], result["data"]
    oc = d["openclipart"]
    lines = [
        f"Generated by `{command or 'python -m experiments uncha-table --dataset openclipart'}` in "
        f"{result['wall_seconds'] / 60:.1f} min ({result['machine']}). Seeds {result['seeds']}; mean ± sample std "
        "over seeds; percentages except Spearman.",
        f"Heads: linear, dim {cfg['encoder']['dim']}, {cfg['steps']} steps, batch {cfg['batch_size']} drawings, "
        f"AdamW lr {opt['lr']}, wd {opt['weight_decay']}, {opt['schedule']} schedule. Openclipart: "
        f"{oc['drawings']} drawings ({result['n_train']} train / {result['n_test']} held out), {oc['parts']} parts "
        f"in {oc['drawings_with_parts']} drawings, {oc['category_nodes']} category nodes, depth <= {oc['max_depth']}.",
        "",
        "**Openclipart, held-out drawings**",
        "",
        *_table(result, ""),
    ]
    if "tuxpaint" in d:
        tx = d["tuxpaint"]
        lines += [
            "",
            f"**TuxPaint stamps (never trained on; {tx['drawings']} stamps, {tx['parts']} parts in "
            f"{tx['drawings_with_parts']} stamps, {tx['category_nodes']} category nodes, depth <= {tx['max_depth']})**",
            "",
            *_table(result, "tux_"),
        ]
    lines += ["", "**UNCHA's claims, checked (Openclipart held-out)**", "", *_claims_table(claims(result))]
    if "tuxpaint" in d:
        lines += ["", "**The same on TuxPaint**", "", *_claims_table(claims(result, "tux_"))]
    lines += ["", "Per-run numbers (JSON):", "", "```json"]
    lines.append(
        json.dumps([{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in result["runs"]])
    )
    lines.append("```")
    return "\n".join(lines)
