"""Fixed inputs and float64 reference values for cpp/tests/kernel_check.cpp.

    python cpp/tests/kernel_cases.py CASES_FILE

writes every kernel family's inputs (seeded, so the file is the same on every run) with the
values ``crossembed.reference`` computes for them in float64 (the Lorentz distances in long
double). The driver, built for another processor (``.ci/arm64``: aarch64 under qemu), runs the
C++ kernels on the inputs and compares. Two expectations do not come from the reference: the
content hash (no reference exists; the value of this host's kernel, which must be the same
everywhere) and the float16-storage probit scores, computed here in float64 from the stored
(float16-rounded) values, as ``ProbitDocs(storage="float16")`` documents them.

Before writing, the host's compiled kernels are checked against the same expectations for the
outcomes the driver compares exactly (CSLS pairs, greedy pairs, votes, Otsu): a case whose
outcome hinges on a float32 near-tie would not be a fair test of another processor.

File format (little-endian): ``CEK1``, then per array: u32 name length, name, u8 dtype
(``f`` float32, ``d`` float64, ``q`` int64, ``B`` uint8), u32 ndim, ndim x i64 shape, data.
"""

from __future__ import annotations

import struct
import sys

import numpy as np

import crossembed as ce
from crossembed import _core
from crossembed import reference as ref

DTYPES = {np.dtype(np.float32): b"f", np.dtype(np.float64): b"d", np.dtype(np.int64): b"q", np.dtype(np.uint8): b"B"}


def write_cases(path: str, arrays: dict) -> None:
    with open(path, "wb") as f:
        f.write(b"CEK1")
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            f.write(struct.pack("<I", len(name)) + name.encode())
            f.write(DTYPES[a.dtype] + struct.pack("<I", a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def gaussians(rng, n, d):
    return rng.normal(size=(n, d)).astype(np.float32), (0.2 * rng.random((n, d))).astype(np.float32)


def probit_cases(rng) -> dict:
    # N = 300 spans two doc tiles and ragged panels; D = 37 leaves vector tails
    mu_q, v_q = gaussians(rng, 9, 37)
    mu_c, v_c = gaussians(rng, 300, 37)
    k = 5
    cand = np.stack([rng.permutation(300)[:40] for _ in range(9)]).astype(np.int64)
    cand[1, 10:] = -1
    cand[2, 3:] = -1  # fewer valid candidates than k: padded with (-inf, -1)
    scores, mu_s, sig2 = ref.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True)
    out = {"probit.mu_q": mu_q, "probit.v_q": v_q, "probit.mu_c": mu_c, "probit.v_c": v_c}
    out |= {"probit.k": np.array([k]), "probit.cand": cand, "probit.scores": scores, "probit.mu_s": mu_s}
    out |= {"probit.sig2": sig2, "probit.top_s": ref.probit_topk(mu_q, v_q, mu_c, v_c, k)[0]}
    out["probit.rerank_s"] = ref.probit_topk(mu_q, v_q, mu_c, v_c, k, candidates=cand)[0]
    # float16 storage: mu_h, v_h and s_h = fp16(mu_h**2 + v_h) as stored; subnormal halves included
    v16 = v_c.copy()
    v16[:, :3] = rng.random((300, 3)).astype(np.float32) * 3e-5
    mu_h, v_h = mu_c.astype(np.float16).astype(np.float64), v16.astype(np.float16).astype(np.float64)
    s_h = (mu_h**2 + v_h).astype(np.float16).astype(np.float64)
    q, vq = mu_q.astype(np.float64), v_q.astype(np.float64)
    mu16, sig16 = q @ mu_h.T, (q**2) @ v_h.T + vq @ s_h.T
    out |= {"probit16.v_c": v16, "probit16.mu_s": mu16, "probit16.sig2": sig16}
    out["probit16.scores"] = mu16 / np.sqrt(1.0 + np.pi / 8.0 * sig16)
    return out


def signature_cases(rng) -> dict:
    X, anchors = rng.normal(size=(50, 37)).astype(np.float32), rng.normal(size=(21, 37)).astype(np.float32)
    X[7] = 0.0  # a zero row: cosine 0 to every anchor
    median = ref.median_anchor_distance(anchors)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    C = (unit(X[:30].astype(np.float64) + 1e-3) @ unit(anchors.astype(np.float64)).T).astype(np.float32)
    cols = np.array([0, 3, 3, 20, 11, 5, 19, 2, 7, 13, 17, 1, 8], dtype=np.int64)
    return {
        "sig.X": X,
        "sig.anchors": anchors,
        "sig.median": np.array([median]),
        "sig.out": ref.anchor_signatures(X, anchors, sigma=median),
        "sfc.C": C,
        "sfc.cols": cols,
        "sfc.sigma": np.array([0.3]),
        "sfc.out": ref.signatures_from_cosines(C, cols, sigma=0.3),
    }


def csls_cases(rng) -> dict:
    SA, SB = rng.normal(size=(60, 19)).astype(np.float32), rng.normal(size=(55, 19)).astype(np.float32)
    ma, mb = np.zeros(60, np.uint8), np.zeros(55, np.uint8)
    ma[[4, 31]], mb[[0, 50]] = 1, 1
    ex_a, ex_b = np.nonzero(ma)[0], np.nonzero(mb)[0]
    ca = np.stack([rng.permutation(55)[:12] for _ in range(60)]).astype(np.int64)
    cb = np.stack([rng.permutation(60)[:10] for _ in range(55)]).astype(np.int64)
    ca[3, 6:], cb[9, 2:] = -1, -1
    pairs, scores = ref.csls_mutual_topk(SA, SB, k=3, csls_k=7, exclude_a=ex_a, exclude_b=ex_b)
    cpairs, cscores = ref.csls_mutual_topk_candidates(SA, SB, ca, cb, k=3, csls_k=7, exclude_a=ex_a, exclude_b=ex_b)
    rs, _, cs, _ = ref.topk_rows_and_columns(SA, SB, 4, 6)
    sim = SA.astype(np.float64) @ SB.astype(np.float64).T
    dots = np.where(ca >= 0, np.take_along_axis(sim, np.maximum(ca, 0), axis=1), np.nan)
    host = ce.csls_mutual_topk(SA, SB, k=3, csls_k=7, exclude_a=ex_a, exclude_b=ex_b)[0]
    host_c = ce.kernels.csls_mutual_topk_candidates(SA, SB, ca, cb, k=3, csls_k=7, exclude_a=ex_a, exclude_b=ex_b)[0]
    assert np.array_equal(host, pairs) and np.array_equal(host_c, cpairs), "a CSLS case hinges on a near-tie"
    return {
        "csls.SA": SA,
        "csls.SB": SB,
        "csls.ma": ma,
        "csls.mb": mb,
        "csls.ca": ca,
        "csls.cb": cb,
        "csls.sim": sim,
        "csls.pairs": pairs,
        "csls.scores": scores,
        "csls.cand_pairs": cpairs,
        "csls.cand_scores": cscores,
        "csls.row_s": rs,
        "csls.col_s": cs,
        "csls.dots": dots,
    }


def discrete_cases(rng) -> dict:
    values = np.concatenate([rng.normal(0.2, 0.05, 700), rng.normal(0.7, 0.1, 300)])
    t100, t37 = ref.otsu_threshold(values, bins=100), ref.otsu_threshold(values, bins=37)
    assert ce.kernels.otsu_threshold(values, bins=100) == t100 and ce.kernels.otsu_threshold(values, bins=37) == t37
    pairs = rng.integers(0, 25, size=(200, 2)).astype(np.int64)
    scores = np.round(rng.random(200), 2)  # ties in score: broken by (i, j)
    ex_a, ex_b = np.array([3, 8], np.int64), np.array([0], np.int64)
    greedy = ref.greedy_one_to_one(pairs, scores, 0.25, ex_a, ex_b, limit=12)
    views = [rng.integers(0, 6, size=(15, 2)).astype(np.int64) for _ in range(3)]
    views[1][:, 0] += 2**32 - 8  # large ids (up to 2^32 - 1)
    table = ref.VoteTable()
    for view in views:
        table.add(view)
    query = np.concatenate([np.concatenate(views), [[5, 5], [2**32 - 1, 0]]]).astype(np.int64)
    items, counts = table.items()
    blob = rng.integers(0, 256, size=(1 << 20) + 1013, dtype=np.uint8)  # two hash blocks and a ragged tail
    return {
        "otsu.v": values,
        "otsu.t": np.array([t100, t37]),
        "greedy.pairs": pairs,
        "greedy.scores": scores,
        "greedy.ex_a": ex_a,
        "greedy.ex_b": ex_b,
        "greedy.out": greedy,
        "votes.view0": views[0],
        "votes.view1": views[1],
        "votes.view2": views[2],
        "votes.query": query,
        "votes.counts": table.votes(query),
        "votes.items": items,
        "votes.item_counts": counts,
        "hash.bytes": blob,
        "hash.value": np.array([_core.content_hash(blob, 1)], dtype=np.uint64).view(np.int64),
    }


def lorentz_cases(rng) -> dict:
    X = rng.normal(size=(20, 6))
    Y = np.concatenate([rng.normal(size=(30, 6)), X[:5] + 1e-6 * rng.normal(size=(5, 6)), 3.0 * X[5:8]])
    X[0] = 0.0  # the origin
    out = {"lor.X": X, "lor.Y": Y, "lor.c": np.array([0.7])}
    out["lor.dist"] = ref.lorentz_pairwise(X, Y, curvature=0.7)
    out["lor.top_d"] = ref.lorentz_topk(X, Y, 4, curvature=0.7)[0]
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    out |= {"lor32.X": X32, "lor32.Y": Y32, "lor32.dist": ref.lorentz_pairwise(X32, Y32, curvature=0.7)}
    out["lor32.top_d"] = ref.lorentz_topk(X32, Y32, 4, curvature=0.7)[0]
    return out


def main(path: str) -> None:
    rng = np.random.default_rng(12345)
    arrays = {}
    for make in (probit_cases, signature_cases, csls_cases, discrete_cases, lorentz_cases):
        arrays |= make(rng)
    write_cases(path, arrays)
    print(f"{path}: {len(arrays)} arrays")


if __name__ == "__main__":
    main(sys.argv[1])
