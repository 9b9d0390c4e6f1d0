"""Each C++ kernel against its plain numpy (and torch) baseline on this machine.

Generates data like the real workloads (unit-length float32 rows like text
embeddings, non-negative signature rows, points on the Lorentz model),
times each kernel and the baselines of :mod:`crossembed.cli.kernel_peers` on the
same inputs (best of ``--repeat`` calls; one untimed warm-up call at the
small scale, where page faults of a first call are not noise), checks once
per case that kernel and baseline agree, and prints a markdown table of
times, speed ratios (baseline time / kernel time: above 1 means the kernel
is faster) and the kernel's GFLOP/s. For the probit kernel, numpy's sgemm on
the same FLOP count is timed too, as the machine's practical peak. Where
faiss-cpu is installed, it is timed as a peer: ``IndexFlatIP`` top-k on the
probit means (cosine top-k: the D-MAC-per-pair part of the probit work) and
two flat searches plus the merge for CSLS; its rows say how much of the
kernel's answer it shares, not whether it computes the same thing.

Scales: ``full`` is the sizes of docs/kernel_benchmarks.md (probit Q=1000, N=100k, D=384, k=10;
signatures N=100k, A=256, D=384; CSLS 20k per side, A=256; Lorentz
4096 x 4096, D=128), ``medium`` about a tenth of that work, ``small`` (the
default) a quick check of a few seconds.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from crossembed._validation import check_choice, check_int, check_num_threads

KERNELS = ("probit", "signatures", "csls", "lorentz")
_OPS = {  # one case (one kernel call timed against its baselines) per op
    "probit": ("probit_topk",),
    "signatures": ("anchor_signatures",),
    "csls": ("csls_mutual_topk",),
    "lorentz": ("lorentz_pairwise", "lorentz_topk"),
}
_SIZES = {
    "full": {
        "probit": {"Q": 1000, "N": 100_000, "D": 384, "k": 10},
        "signatures": {"N": 100_000, "A": 256, "D": 384},
        "csls": {"N": 20_000, "A": 256, "k": 5, "csls_k": 50},
        "lorentz": {"NX": 4096, "NY": 4096, "D": 128, "k": 10},
    },
    "medium": {  # ~1/10 of the full work per kernel (CSLS work grows as N^2)
        "probit": {"Q": 1000, "N": 10_000, "D": 384, "k": 10},
        "signatures": {"N": 10_000, "A": 256, "D": 384},
        "csls": {"N": 6400, "A": 256, "k": 5, "csls_k": 50},
        "lorentz": {"NX": 1280, "NY": 1280, "D": 128, "k": 10},
    },
    "small": {
        "probit": {"Q": 64, "N": 5000, "D": 384, "k": 10},
        "signatures": {"N": 5000, "A": 256, "D": 384},
        "csls": {"N": 2000, "A": 256, "k": 5, "csls_k": 50},
        "lorentz": {"NX": 512, "NY": 512, "D": 128, "k": 10},
    },
}
# Share of top-k entries (or CSLS pairs) kernel and baseline must have in
# common: float32 rounding may swap near-ties at the k-th place, nothing more.
_MIN_OVERLAP = 0.99
SCALES = tuple(_SIZES)


def parse_kernels(spec: str) -> List[str]:
    """The kernels named in ``spec`` (comma-separated), in the given order, without repeats."""
    names = [name.strip().lower() for name in spec.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--kernels names no kernel (choose from {', '.join(KERNELS)})")
    for name in names:
        if name not in KERNELS:
            raise ValueError(f"--kernels: unknown kernel {name!r} (choose from {', '.join(KERNELS)})")
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------- timing and checks
class _Timer:
    """Best-of-``repeat`` wall time after ``warmup`` untimed calls."""

    def __init__(self, repeat: int, warmup: int):
        self.repeat, self.warmup = repeat, warmup

    def __call__(self, fn: Callable[[], Any]) -> Tuple[float, Any]:
        for _ in range(self.warmup):
            fn()
        best, out = math.inf, None
        for _ in range(self.repeat):
            t0 = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - t0)
        return best, out


def _topk_agree(k_vals, k_idx, b_vals, b_idx, atol: float) -> Tuple[bool, str]:
    """Same sorted top-k values (within ``atol``) and nearly the same index sets."""
    k_vals, b_vals = np.asarray(k_vals, np.float64), np.asarray(b_vals, np.float64)
    k_idx, b_idx = np.asarray(k_idx), np.asarray(b_idx)
    overlap = np.mean([len(set(a) & set(b)) / k_idx.shape[1] for a, b in zip(k_idx.tolist(), b_idx.tolist())])
    err = float(np.abs(k_vals - b_vals).max())
    return bool(overlap >= _MIN_OVERLAP and err <= atol), f"top-k overlap {overlap:.3f}, max |diff| {err:.1e}"


def _dense_agree(kernel, baseline, *, atol: float = 0.0, rtol: float = 0.0, where=None) -> Tuple[bool, str]:
    kernel, baseline = np.asarray(kernel, np.float64), np.asarray(baseline, np.float64)
    if where is not None:
        kernel, baseline = kernel[where], baseline[where]
    ok = bool(np.allclose(kernel, baseline, rtol=rtol, atol=atol))
    err = float(np.abs(kernel - baseline).max()) if kernel.size else 0.0
    return ok, f"max |diff| {err:.1e}"


# --------------------------------------------------------------------------- data
def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Random unit-length float32 rows (what text encoders return)."""
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _signature_rows(rng: np.random.Generator, n: int, a: int) -> Tuple[np.ndarray, np.ndarray]:
    """Two signature-like sides (non-negative unit rows) sharing half their objects as noisy copies."""
    sa = rng.random((n, a), dtype=np.float32) ** 4
    sb = np.vstack(
        [
            sa[rng.permutation(n)[: n // 2]] + 0.05 * rng.random((n // 2, a), dtype=np.float32),
            rng.random((n - n // 2, a), dtype=np.float32) ** 4,
        ]
    )
    return tuple(s / np.linalg.norm(s, axis=1, keepdims=True) for s in (sa, sb))


def _lorentz_points(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Space components with norms spread over ~0.1 .. 3 (near the origin to deep in the hyperboloid)."""
    scale = 10.0 ** rng.uniform(-1, 0.5, (n, 1))
    return (rng.standard_normal((n, d)) / np.sqrt(d) * scale).astype(np.float32)


# --------------------------------------------------------------------------- the cases
def _row(
    kernel: str,
    op: str,
    size: Dict[str, int],
    baseline: str,
    flops: float,
    t_kernel: float,
    t_base: float,
    check: Tuple[bool, str],
) -> Dict[str, Any]:
    return {
        "kernel": kernel,
        "op": op,
        "size": size,
        "baseline": baseline,
        "flops": flops,
        "kernel_ms": 1e3 * t_kernel,
        "baseline_ms": 1e3 * t_base,
        "ratio": t_base / t_kernel,
        "kernel_gflops": flops / t_kernel / 1e9,
        "baseline_gflops": flops / t_base / 1e9,
        "agree": check[0],
        "check": check[1],
    }


def _probit(size, rng, timer, threads, torch) -> Iterator[List[Dict[str, Any]]]:
    from crossembed.cli.kernel_peers import numpy_probit_docs, numpy_probit_topk
    from crossembed.kernels import ProbitDocs

    q, n, d, k = size["Q"], size["N"], size["D"], size["k"]
    mu_q, mu_c = _unit_rows(rng, q, d), _unit_rows(rng, n, d)
    # variances like real Kronecker-factored posteriors: 0.016 U(0.5, 1.5)
    v_q = (0.016 * rng.uniform(0.5, 1.5, (q, d))).astype(np.float32)
    v_c = (0.016 * rng.uniform(0.5, 1.5, (n, d))).astype(np.float32)
    # both sides prepare the documents once, untimed (index time)
    docs, np_docs = ProbitDocs(mu_c, v_c), numpy_probit_docs(mu_c, v_c)
    flops = 2.0 * q * n * 3 * d
    t_k, (k_vals, k_idx) = timer(lambda: docs.top_k(mu_q, v_q, k, num_threads=threads))
    t_b, (b_vals, b_idx) = timer(lambda: numpy_probit_topk(mu_q, v_q, np_docs, k))
    row = _row(
        "probit",
        "probit_topk",
        size,
        "numpy float32",
        flops,
        t_k,
        t_b,
        _topk_agree(k_vals, k_idx, b_vals, b_idx, atol=1e-4),
    )
    # the machine's practical peak: one (Q, 3D) x (3D, N) sgemm, the same FLOPs without probit or top-k
    a = rng.standard_normal((q, 3 * d), dtype=np.float32)
    b = rng.standard_normal((3 * d, n), dtype=np.float32)
    t_s, _ = timer(lambda: np.dot(a, b))
    row["sgemm_gflops"] = flops / t_s / 1e9
    rows = [row]
    faiss = _import_faiss()
    if faiss is not None:
        index = faiss.IndexFlatIP(d)
        index.add(mu_c)
        t_f, (_, f_idx) = timer(lambda: index.search(mu_q, k))
        overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(k_idx.tolist(), f_idx.tolist())])
        peer = (True, f"peer: cosine top-k on the means shares {overlap:.3f} of the probit top-k")
        rows.append(_row("probit", "probit_topk", size, "faiss IndexFlatIP (means)", flops, t_k, t_f, peer))
    yield rows


def _signatures(size, rng, timer, threads, torch) -> Iterator[List[Dict[str, Any]]]:
    from crossembed.cli.kernel_peers import numpy_signatures
    from crossembed.kernels import anchor_signatures, median_anchor_distance

    n, a, d = size["N"], size["A"], size["D"]
    X = _unit_rows(rng, n, d)
    anchors = np.ascontiguousarray(X[rng.choice(n, a, replace=False)])  # anchors are embedded objects too
    sigma = median_anchor_distance(anchors)  # the kernel's default width, computed once for both
    t_k, got = timer(lambda: anchor_signatures(X, anchors, sigma=sigma, num_threads=threads))
    t_b, ref = timer(lambda: numpy_signatures(X, anchors, sigma))
    yield [
        _row(
            "signatures",
            "anchor_signatures",
            size,
            "numpy float32",
            2.0 * n * a * d,
            t_k,
            t_b,
            _dense_agree(got, ref, atol=1e-4),
        )
    ]


def _csls(size, rng, timer, threads, torch) -> Iterator[List[Dict[str, Any]]]:
    from crossembed.cli.kernel_peers import numpy_csls_mutual_topk
    from crossembed.kernels import csls_mutual_topk

    n, a, k, csls_k = size["N"], size["A"], size["k"], size["csls_k"]
    SA, SB = _signature_rows(rng, n, a)
    t_k, (k_pairs, _) = timer(lambda: csls_mutual_topk(SA, SB, k=k, csls_k=csls_k, num_threads=threads))
    t_b, (b_pairs, _) = timer(lambda: numpy_csls_mutual_topk(SA, SB, k, csls_k))
    ours, theirs = set(map(tuple, k_pairs.tolist())), set(map(tuple, b_pairs.tolist()))
    same = len(ours & theirs)
    check = (
        same >= _MIN_OVERLAP * max(len(ours), len(theirs)),
        f"{same} common of {len(ours)} kernel / {len(theirs)} baseline pairs",
    )
    rows = [_row("csls", "csls_mutual_topk", size, "numpy float32", 2.0 * n * n * a, t_k, t_b, check)]
    if _import_faiss() is not None:
        from crossembed.cli.kernel_peers import faiss_csls_mutual_topk

        t_f, (f_pairs, _) = timer(lambda: faiss_csls_mutual_topk(SA, SB, k, csls_k))
        same = len(ours & set(map(tuple, f_pairs.tolist())))
        peer = (True, f"peer: {same} of {len(ours)} kernel pairs (CSLS within the csls_k neighbours)")
        rows.append(
            _row("csls", "csls_mutual_topk", size, "faiss 2 flat searches + merge", 2.0 * n * n * a, t_k, t_f, peer)
        )
    yield rows


def _lorentz(size, rng, timer, threads, torch) -> Iterator[List[Dict[str, Any]]]:
    nx, ny, d = size["NX"], size["NY"], size["D"]
    X, Y = _lorentz_points(rng, nx, d), _lorentz_points(rng, ny, d)
    yield _lorentz_pairwise_rows(X, Y, {key: size[key] for key in ("NX", "NY", "D")}, timer, threads, torch)
    yield _lorentz_topk_rows(X, Y, size, timer, threads, torch)


def _lorentz_pairwise_rows(X, Y, size, timer, threads, torch) -> List[Dict[str, Any]]:
    """lorentz_pairwise against numpy and torch (``size`` has no k: every distance is returned)."""
    from crossembed.cli import kernel_peers as bl
    from crossembed.kernels import lorentz_pairwise

    flops = 2.0 * X.shape[0] * Y.shape[0] * X.shape[1]
    t_k, dist = timer(lambda: lorentz_pairwise(X, Y, num_threads=threads))
    far = dist > 0.5  # where the baselines' acosh form is accurate enough to compare
    t_b, ref = timer(lambda: bl.numpy_lorentz(X, Y))
    check = _dense_agree(dist, ref, rtol=1e-3, where=far)
    rows = [_row("lorentz", "lorentz_pairwise", size, "numpy float32", flops, t_k, t_b, check)]
    if torch is not None:
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

        def torch_pairwise():
            with torch.no_grad():
                return bl.torch_lorentz(tx, ty)

        t_t, ref = timer(torch_pairwise)
        check = _dense_agree(dist, ref.numpy(), rtol=1e-3, where=far)
        rows.append(_row("lorentz", "lorentz_pairwise", size, "torch float32", flops, t_k, t_t, check))
    return rows


def _lorentz_topk_rows(X, Y, size, timer, threads, torch) -> List[Dict[str, Any]]:
    """lorentz_topk against numpy and torch."""
    from crossembed.cli import kernel_peers as bl
    from crossembed.kernels import lorentz_topk

    k, flops = size["k"], 2.0 * X.shape[0] * Y.shape[0] * X.shape[1]
    # nearest neighbours sit far from each other here, where the acosh form keeps ~1e-4 absolute accuracy
    t_k, (k_vals, k_idx) = timer(lambda: lorentz_topk(X, Y, k, num_threads=threads))
    t_b, (b_vals, b_idx) = timer(lambda: bl.numpy_lorentz_topk(X, Y, k))
    check = _topk_agree(k_vals, k_idx, b_vals, b_idx, atol=1e-3)
    rows = [_row("lorentz", "lorentz_topk", size, "numpy float32", flops, t_k, t_b, check)]
    if torch is not None:
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)
        t_t, (t_vals, t_idx) = timer(lambda: bl.torch_lorentz_topk(tx, ty, k))
        check = _topk_agree(k_vals, k_idx, t_vals.numpy(), t_idx.numpy(), atol=1e-3)
        rows.append(_row("lorentz", "lorentz_topk", size, "torch float32", flops, t_k, t_t, check))
    return rows


_RUNNERS = {"probit": _probit, "signatures": _signatures, "csls": _csls, "lorentz": _lorentz}


# --------------------------------------------------------------------------- thread limits
@contextlib.contextmanager
def _baseline_threads(threads: Optional[int], torch, notes: List[str]):
    """Hold numpy's BLAS (threadpoolctl) and torch to ``threads`` so the comparison is like for like."""
    if threads is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_limits

            stack.enter_context(threadpool_limits(limits=threads, user_api="blas"))
        except ImportError:
            notes.append("threadpoolctl is not installed: numpy's BLAS used all its threads")
        if torch is not None:
            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            stack.callback(torch.set_num_threads, before)
        yield


def _import_faiss():
    """faiss when installed (the peer rows), else None."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _import_torch(kernels: List[str], notes: List[str]):
    if "lorentz" not in kernels:
        return None
    try:
        import torch
    except ImportError:
        notes.append("torch is not installed: the torch baselines were skipped")
        return None
    return torch


# --------------------------------------------------------------------------- the command
def measure(
    kernels: List[str],
    *,
    scale: str = "small",
    repeat: int = 3,
    num_threads: Optional[int] = None,
    seed: int = 0,
    show_progress_bar: bool = True,
) -> Dict[str, Any]:
    """Time ``kernels`` against their baselines; the result ``crossembed bench --json`` prints.

    Parameters
    ----------
    kernels : list of str
        Names from :data:`KERNELS`.
    scale : {"small", "medium", "full"}
    repeat : int
        Timed calls per function (the best counts).
    num_threads : int, optional
        Threads for the kernels, numpy's BLAS and torch (default: all cores).
    seed : int
        Seed of the generated data (each kernel draws from its own stream, so
        a kernel's data does not depend on which others run).
    show_progress_bar : bool
        Show a tqdm bar over the cases on stderr.

    Returns
    -------
    dict
        ``cases`` (one row per kernel/baseline pair: times in ms, ratio, GFLOP/s,
        the agreement check), the settings, ``notes`` and ``ok`` (all agree).
    """
    from crossembed.kernels import simd_level

    check_choice(scale, "scale", SCALES)
    check_int(repeat, "repeat", low=1)
    threads = None if num_threads is None else check_num_threads(num_threads)
    check_int(seed, "seed", low=0)
    notes: List[str] = []
    torch = _import_torch(kernels, notes)
    timer = _Timer(repeat, warmup=1 if scale == "small" else 0)
    t_start = time.perf_counter()
    with _baseline_threads(threads, torch, notes):
        rows = _run_cases(kernels, scale, seed, timer, threads, torch, show_progress_bar)
    return {
        "scale": scale,
        "simd": simd_level(),
        "threads": threads,
        "repeat": repeat,
        "warmup": timer.warmup,
        "seed": seed,
        "cases": rows,
        "notes": notes,
        "ok": all(r["agree"] for r in rows),
        "seconds": time.perf_counter() - t_start,
    }


def _run_cases(kernels, scale: str, seed: int, timer, threads, torch, show_progress_bar: bool) -> List[Dict[str, Any]]:
    """Every case of ``kernels``, in order, with a tqdm bar on stderr."""
    from tqdm.auto import tqdm

    rows: List[Dict[str, Any]] = []
    with tqdm(
        total=sum(len(_OPS[name]) for name in kernels),
        desc="crossembed bench",
        unit="case",
        file=sys.stderr,
        disable=not show_progress_bar,
        leave=False,
    ) as bar:
        for name in kernels:
            rng = np.random.default_rng([seed, KERNELS.index(name)])
            bar.set_postfix_str(name)
            for case_rows in _RUNNERS[name](_SIZES[scale][name], rng, timer, threads, torch):
                rows.extend(case_rows)
                bar.update(1)
    return rows


def _size_text(size: Dict[str, int]) -> str:
    return " ".join(f"{key}={value:,}" for key, value in size.items())


def render(result: Dict[str, Any]) -> str:
    """The markdown report of a :func:`measure` result."""
    threads = "all cores" if result["threads"] is None else f"{result['threads']} threads"
    lines = [
        f"crossembed bench: scale {result['scale']}, kernels {result['simd']}, {threads}, best of {result['repeat']}",
        "",
        "| kernel | size | baseline | kernel ms | baseline ms | ratio | kernel GFLOP/s | agreement |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["cases"]:
        agree = r["check"] if r["agree"] else f"MISMATCH: {r['check']}"
        lines.append(
            f"| {r['op']} | {_size_text(r['size'])} | {r['baseline']} | {r['kernel_ms']:.1f} | "
            f"{r['baseline_ms']:.1f} | {r['ratio']:.2f}x | {r['kernel_gflops']:.1f} | {agree} |"
        )
    lines += ["", "ratio = baseline time / kernel time (above 1: the kernel is faster)."]
    for r in result["cases"]:
        if "sgemm_gflops" in r:
            lines.append(
                f"probit_topk: {r['kernel_gflops']:.1f} GFLOP/s = {100 * r['kernel_gflops'] / r['sgemm_gflops']:.0f}% "
                f"of numpy sgemm ({r['sgemm_gflops']:.1f} GFLOP/s) on the same FLOP count "
                "(the kernel skips the variance term of candidates that cannot enter the top k)."
            )
    lines += result["notes"]
    lines.append(f"total {result['seconds']:.1f} s")
    return "\n".join(lines)
