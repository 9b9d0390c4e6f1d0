"""crossembed.ann.MeanGraph with int8 and bf16 storage: codes in the graph, distances on the codes.

Distances against float64 references built from the same codes (numpy rounds them the way the C++ side
does), on every instruction set (int8 distances are exact integer dots: bit-identical across them),
adversarial rows (tails of every length, extreme scales, zero and constant rows, a query equal to a
document), recall against exact search, updates, save/load and refusals.
"""

import textwrap

import numpy as np
import pytest

from _isa import X86_LEVELS, run_at_level
from crossembed.ann import MeanGraph

CODED = ("int8", "bf16")


def int8_codes(x):
    """Per-row symmetric codes and scales as the graph makes them: s = max|x| / 127 (float32), c = round(x / s)."""
    x = np.asarray(x, np.float32)
    s = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(s > 0, s, np.float32(1))[:, None]
    c = np.where(s[:, None] > 0, np.clip(np.rint(x / safe), -127, 127), 0)
    return c.astype(np.int64), s


def bf16(x):
    """float32 rounded to bfloat16 (nearest, ties to even) and widened back."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


def reference_distances(x, q, storage):
    """1 - <q, x> as the graph defines it on its codes, in float64, with a bound on float32's rounding of it."""
    if storage == "int8":
        cx, sx = int8_codes(x)
        cq, sq = int8_codes(q)
        scale = sq.astype(np.float64)[:, None] * sx.astype(np.float64)[None, :]
        ip = (cq @ cx.T).astype(np.float64) * scale  # the integer dot is exact
        return 1.0 - ip, 4 * 2.0**-24 * (np.abs(ip) + 1)
    xs, qs = bf16(x).astype(np.float64), bf16(q).astype(np.float64)
    d = x.shape[1]
    return 1.0 - qs @ xs.T, 4 * d * 2.0**-24 * (np.abs(qs) @ np.abs(xs).T + 1)


def unit(n, d, seed, clusters=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if clusters:
        x = rng.standard_normal((clusters, d))[rng.integers(0, clusters, n)] + 0.3 * x
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def built(x, storage, *, M=8, ef_construction=60):
    g = MeanGraph(x.shape[1], storage=storage, max_elements=len(x), M=M, ef_construction=ef_construction)
    g.add(x, np.arange(len(x)), num_threads=1)
    return g


def check_distances(g, x, q):
    """Every distance knn reports for q (all of x asked for) against the float64 reference."""
    expect, bound = reference_distances(x, q, g.storage)
    labels, dist = g.knn(q, len(x), ef=len(x), num_threads=1)
    for i in range(len(q)):
        f = labels[i] >= 0
        err = np.abs(dist[i][f] - expect[i, labels[i][f]])
        assert (err <= bound[i, labels[i][f]]).all(), (g.storage, x.shape[1], err.max())
    return labels, dist


# --------------------------------------------------------------------------- distances
@pytest.mark.parametrize("storage", CODED)
@pytest.mark.parametrize("d", [1, 3, 4, 5, 31, 63, 64, 65, 127, 128, 129, 200, 384])
def test_distances_match_a_float64_reference_of_the_codes(storage, d):
    x = np.random.default_rng(d).standard_normal((50, d)).astype(np.float32)
    q = np.random.default_rng(d + 1).standard_normal((4, d)).astype(np.float32)
    check_distances(built(x, storage), x, q)


@pytest.mark.parametrize("storage", CODED)
def test_adversarial_rows(storage):
    """Rows at extreme scales, a zero row, constant rows, a row equal to the query: each distance still the
    reference's, and the zero row's exactly 1."""
    d = 70
    rng = np.random.default_rng(7)
    x = rng.standard_normal((12, d)).astype(np.float32)
    x[0] *= 1e-30
    x[1] *= 1e30
    x[2] = 0
    x[3] = 0.5
    x[4] = -3.0
    x[5, :] = 0
    x[5, 17] = 2.0  # one nonzero value: code 127 there, 0 elsewhere
    q = np.vstack([x[6], x[3], rng.standard_normal((2, d))]).astype(np.float32)
    g = built(x, storage, ef_construction=12)
    labels, dist = check_distances(g, x, q)
    assert (dist[labels == 2] == 1.0).all()
    expect, _ = reference_distances(x, q, storage)
    np.testing.assert_array_equal(labels[:, 0], np.argmin(expect, axis=1))  # every row reached: the true best
    if storage == "int8":
        np.testing.assert_array_equal(g.rows(np.array([3, 4])), np.vstack([x[3], x[4]]))  # constant rows: exact


def test_distances_on_every_instruction_set(tmp_path):
    """int8 distances are integer dots times the scales: the same bits on every instruction set; bf16
    distances within float32 rounding of the reference on each."""
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        from crossembed import kernels
        from crossembed.ann import MeanGraph
        level = sys.argv[1]
        if kernels.simd_level() != level:
            print("unavailable"); sys.exit(0)
        out = {}
        for storage in ("int8", "bf16"):
            for d in (1, 5, 16, 63, 64, 67, 130, 384):
                rng = np.random.default_rng(d)
                x = rng.standard_normal((40, d)).astype(np.float32)
                q = rng.standard_normal((3, d)).astype(np.float32)
                g = MeanGraph(d, storage=storage, max_elements=40, M=8, ef_construction=40)
                g.add(x, np.arange(40), num_threads=1)
                out[f"{storage}{d}"] = g.knn(q, 40, ef=40, num_threads=1)[1]
        np.savez(sys.argv[2], **out)
        print("ok")
        """
    )
    path = tmp_path / "isa.py"
    path.write_text(script)
    results = {}
    for level in X86_LEVELS:
        saved = tmp_path / f"{level}.npz"
        run = run_at_level(level, str(path), level, str(saved), text=True)
        assert run.returncode == 0, run.stderr
        if run.stdout.strip() == "ok":
            results[level] = dict(np.load(saved))
    assert "generic" in results
    for level, dists in results.items():
        for key, dist in dists.items():
            d = int(key[4:])
            rng = np.random.default_rng(d)
            x = rng.standard_normal((40, d)).astype(np.float32)
            q = rng.standard_normal((3, d)).astype(np.float32)
            expect, bound = reference_distances(x, q, key[:4])
            got = np.sort(dist, axis=1)
            want = np.sort(expect, axis=1)  # every label was found (ef = n): compare the sorted rows
            assert (np.abs(got - want) <= np.sort(bound, axis=1).max(axis=1, keepdims=True)).all(), (level, key)
            if key.startswith("int8"):
                np.testing.assert_array_equal(dist, results["generic"][key])


# --------------------------------------------------------------------------- recall and updates
@pytest.mark.parametrize("storage", CODED)
def test_recall_against_exact_search(storage):
    """The float32 top 10 among 30 candidates of the codes' graph, reranked on the float32 vectors, as often
    as among the float32 graph's (same M, ef_construction and ef), and most of the time."""
    x, q = unit(3000, 48, 0, clusters=30), unit(200, 48, 1, clusters=30)
    truth = np.argsort(-(q.astype(np.float64) @ x.astype(np.float64).T), axis=1, kind="stable")[:, :10]

    def reranked_recall(graph):
        cand = graph.knn(q, 30, ef=100, num_threads=1)[0]
        exact = np.einsum("qkd,qd->qk", x[cand].astype(np.float64), q.astype(np.float64))
        top = np.take_along_axis(cand, np.argsort(-exact, axis=1, kind="stable"), axis=1)[:, :10]
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, truth)])

    plain = reranked_recall(built(x, "float32", M=12, ef_construction=100))
    coded = reranked_recall(built(x, storage, M=12, ef_construction=100))
    assert coded >= plain - 0.01 and coded > 0.9, (coded, plain)


@pytest.mark.parametrize("storage", CODED)
def test_updates_delete_and_rewrite_codes(storage):
    x = unit(300, 24, 2)
    g = built(x, storage)
    g.mark_deleted(np.arange(0, 300, 3))
    labels, _ = g.knn(x[:30], 5, ef=50, num_threads=1)
    assert not np.isin(labels, np.arange(0, 300, 3)).any()
    g.add(-x[:3], np.arange(3), num_threads=1)  # rewritten in place and undeleted
    assert g.deleted_count == 99
    np.testing.assert_allclose(g.rows(np.arange(3)), -x[:3], atol=0.01)
    assert (g.knn(-x[:3], 1, ef=50, num_threads=1)[0][:, 0] == np.arange(3)).all()


@pytest.mark.parametrize("storage", CODED)
def test_save_load_round_trip(storage, tmp_path):
    x, q = unit(400, 37, 3), unit(20, 37, 4)
    g = built(x, storage)
    g.save(tmp_path / "g.bin")
    back = MeanGraph.load(tmp_path / "g.bin", dim=37, storage=storage, max_elements=500)
    assert back.storage == storage and back.count == 400 and back.max_elements == 500
    np.testing.assert_array_equal(back.rows(np.arange(400)), g.rows(np.arange(400)))
    for a, b in zip(back.knn(q, 7, ef=40, num_threads=1), g.knn(q, 7, ef=40, num_threads=1)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="storage"):  # 37 int8 codes + 8 bytes is no float32 row of 37
        MeanGraph.load(tmp_path / "g.bin", dim=37, storage="float32")
    raw = bytearray((tmp_path / "g.bin").read_bytes())
    (tmp_path / "t.bin").write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(RuntimeError, match="corrupt"):
        MeanGraph.load(tmp_path / "t.bin", dim=37, storage=storage)


def test_refusals():
    with pytest.raises(ValueError, match="storage"):
        MeanGraph(4, storage="int4")
    with pytest.raises(ValueError, match="dim"):
        MeanGraph(2**17 + 1, storage="int8")
    MeanGraph(2**17, storage="int8", max_elements=1)  # the largest int8 dim
    g = MeanGraph(4, storage="bf16", max_elements=4)
    with pytest.raises(ValueError, match="bfloat16"):
        g.add(np.full((1, 4), 3.4e38, np.float32), [0])
    with pytest.raises(ValueError, match="bfloat16"):
        g.knn(np.full((1, 4), -3.4e38, np.float32), 1)
    assert g.count == 0
