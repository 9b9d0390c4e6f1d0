"""Markdown tables from a pytest-benchmark JSON file.

    pytest benchmarks --benchmark-only --benchmark-json=/tmp/bench.json
    python benchmarks/report.py /tmp/bench.json [more.json ...]

Per group: mean and min time, the speed ratio of the group's primary kernel
over each entry (``t_entry / t_kernel``: above 1 means the kernel is faster)
and GFLOP/s from the FLOP count each benchmark recorded (probit:
2 Q N 3D; sgemm: 2 M N K; signatures: 2 N A D; CSLS: 2 N_A N_B A;
Lorentz: 2 N_X N_Y D), all computed from the best (min) round, and the
roofline column: that GFLOP/s over numpy's sgemm GFLOP/s measured in the same
run (the ``sgemm`` group), so 1.00 is the machine's practical float32 peak.
For the probit kernel, which skips the variance term of candidates that
cannot enter the top k, and for the faiss cosine peer (D of the 3D MACs),
this is the effective rate on the group's full FLOP count.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Dict, List, Optional


def load(*paths: str) -> Dict[str, List[dict]]:
    """Every benchmark of the files by group (a run split over several pytest processes is one run)."""
    groups: Dict[str, List[dict]] = defaultdict(list)
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        for bench in data["benchmarks"]:
            groups[bench.get("group") or bench["name"]].append(bench)
    return groups


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def _sgemm_gflops(groups: Dict[str, List[dict]]) -> Optional[float]:
    best = [
        b["extra_info"]["flops"] / b["stats"]["min"] / 1e9
        for b in groups.get("sgemm", [])
        if b["extra_info"].get("flops")
    ]
    return max(best) if best else None


def render(groups: Dict[str, List[dict]]) -> str:
    lines = []
    sgemm = _sgemm_gflops(groups)
    for group in sorted(groups):
        rows = sorted(groups[group], key=lambda b: b["stats"]["min"])
        primary = next((b for b in rows if b.get("extra_info", {}).get("primary")), None)
        lines += [
            f"### {group}",
            "",
            "| benchmark | role | mean | min | kernel speed-up | GFLOP/s | roofline |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in rows:
            info = b.get("extra_info", {})
            t_min = b["stats"]["min"]
            ratio = f"{t_min / primary['stats']['min']:.2f}x" if primary else "-"
            gflops = info.get("flops", 0.0) / t_min / 1e9 if info.get("flops") else None
            rate = f"{gflops:.1f}" if gflops is not None else "-"
            roof = f"{gflops / sgemm:.2f}" if gflops is not None and sgemm else "-"
            lines.append(
                f"| {b['name']} | {info.get('role', '')} | {_fmt_time(b['stats']['mean'])} | "
                f"{_fmt_time(t_min)} | {ratio} | {rate} | {roof} |"
            )
        lines.append("")
    if sgemm:
        lines.append(f"roofline = GFLOP/s / numpy sgemm GFLOP/s of this run ({sgemm:.1f} GFLOP/s).")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "json_paths", nargs="+", help="outputs of pytest --benchmark-json from one run (the roofline: its sgemm)"
    )
    args = parser.parse_args(argv)
    print(render(load(*args.json_paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
