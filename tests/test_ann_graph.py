"""crossembed.ann.MeanGraph: hnswlib's HNSW (vendored) over float32/float16 vectors, read back without a copy.

Recall against brute force and against pip hnswlib with the same settings, the
update/delete semantics an index relies on, filters, ef per call from several
threads, exact stored rows, distances on every instruction set, save/load, and
files that must be refused (never a crash).
"""

import os
import textwrap
import threading

import numpy as np
import pytest

from _isa import X86_LEVELS, run_at_level
from crossembed.ann import MeanGraph

STORAGES = ("float32", "float16")


def as_stored(x, storage):
    """What a graph of ``storage`` holds for float32 ``x``: the values, or their float16 rounding (nearest even)."""
    x = np.asarray(x, np.float32)
    return x if storage == "float32" else x.astype(np.float16).astype(np.float32)


def unit_data(kind, seed, n=2000, d=32, q=200):
    rng = np.random.default_rng(seed)
    if kind == "random":
        x, qs = rng.standard_normal((n, d)), rng.standard_normal((q, d))
    else:
        centers = rng.standard_normal((20, d))
        x = centers[rng.integers(0, 20, n)] + 0.2 * rng.standard_normal((n, d))
        qs = centers[rng.integers(0, 20, q)] + 0.2 * rng.standard_normal((q, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    return x.astype(np.float32), qs.astype(np.float32)


def recall(labels, truth):
    k = truth.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(labels, truth)]))


def exact_top(x, qs, k, allowed=None):
    s = qs.astype(np.float64) @ x.astype(np.float64).T
    if allowed is not None:
        s[:, ~allowed] = -np.inf
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def built(x, storage="float32", *, M=8, ef_construction=40, max_elements=None, labels=None, num_threads=1):
    g = MeanGraph(
        x.shape[1], storage=storage, max_elements=max_elements or len(x), M=M, ef_construction=ef_construction
    )
    g.add(x, np.arange(len(x)) if labels is None else labels, num_threads=num_threads)
    return g


# --------------------------------------------------------------------------- recall
# .ci/asan preloads the sanitizer: pip hnswlib's own bindings abort there (an alloc-dealloc mismatch of theirs).
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")


def _pip_hnswlib_recall(x, qs, truth):
    hnswlib = pytest.importorskip("hnswlib")
    pip = hnswlib.Index(space="ip", dim=x.shape[1])
    pip.init_index(max_elements=len(x), M=8, ef_construction=40, random_seed=100)
    pip.add_items(x, np.arange(len(x)), num_threads=1)
    pip.set_ef(10)
    return recall(pip.knn_query(qs, k=truth.shape[1], num_threads=1)[0], truth)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("kind", ["random", "clustered"])
def test_recall_matches_pip_hnswlib(kind, storage):
    """Weak settings (M=8, ef=10), so recall is far from 1 and a worse graph or search shows."""
    x, qs = unit_data(kind, 0)
    k = 10
    # The graph's own vectors against the truth on them (a float16 graph holds and searches the rounded values).
    xs, qss = as_stored(x, storage), as_stored(qs, storage)
    truth = exact_top(xs, qss, k)
    pip_recall = _pip_hnswlib_recall(xs, qss, truth) if not UNDER_ASAN else (0.9 if kind == "clustered" else 0.5)
    g = built(x, storage)
    labels, dist = g.knn(qs, k, ef=10, num_threads=1)
    ours = recall(labels, truth)
    assert ours >= pip_recall - 0.005, (ours, pip_recall)
    assert ours > (0.9 if kind == "clustered" else 0.45)
    # A float16 graph against the float32 truth: close to the float32 graph's.
    if storage == "float16":
        assert recall(labels, exact_top(x, qs, k)) >= pip_recall - 0.03
    # At a larger ef both find nearly everything.
    assert recall(g.knn(qs, k, ef=200, num_threads=1)[0], truth) > 0.97


def test_parallel_build_recall(rng):
    x, qs = unit_data("clustered", 1)
    g = built(x, M=16, ef_construction=100, num_threads=2)
    assert g.count == len(x) and g.deleted_count == 0
    assert recall(g.knn(qs, 10, ef=50, num_threads=2)[0], exact_top(x, qs, 10)) > 0.97


# --------------------------------------------------------------------------- distances
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("d", [1, 3, 8, 17, 37, 64, 100])
def test_distances_are_one_minus_inner_product(storage, d, rng):
    x = rng.standard_normal((60, d)).astype(np.float32)
    q = rng.standard_normal((5, d)).astype(np.float32)
    g = built(x, storage, ef_construction=60)
    labels, dist = g.knn(q, 60, ef=60, num_threads=1)
    xs, qs = as_stored(x, storage).astype(np.float64), as_stored(q, storage).astype(np.float64)
    for i in range(len(q)):
        found = labels[i][labels[i] >= 0]
        expect = 1.0 - xs[found] @ qs[i]
        scale = np.abs(xs[found]) @ np.abs(qs[i]) + 1.0
        np.testing.assert_array_less(np.abs(dist[i][: found.size] - expect), 4 * d * 2.0**-24 * scale)
        assert (np.diff(dist[i][: found.size]) >= 0).all()
    assert (labels >= 0).mean() > 0.8  # most labels reached with ef = n (1-d inner product graphs are sparse)


def test_distances_on_every_instruction_set(tmp_path):
    """The distance primitive has one implementation per ISA: each gives 1 - <x, y> within float32 rounding."""
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        from crossembed import kernels
        from crossembed.ann import MeanGraph
        level = sys.argv[1]
        if kernels.simd_level() != level:
            print("unavailable"); sys.exit(0)
        rng = np.random.default_rng(3)
        for storage in ("float32", "float16"):
            for d in (1, 5, 16, 31, 64, 67, 130):
                x = rng.standard_normal((40, d)).astype(np.float32)
                q = rng.standard_normal((3, d)).astype(np.float32)
                g = MeanGraph(d, storage=storage, max_elements=40, M=8, ef_construction=40)
                g.add(x, np.arange(40), num_threads=1)
                lab, dist = g.knn(q, 40, ef=40, num_threads=1)
                if storage == "float16":
                    x, q = x.astype(np.float16).astype(np.float32), q.astype(np.float16).astype(np.float32)
                for i in range(3):
                    f = lab[i] >= 0
                    xs = x[lab[i][f]].astype(np.float64)
                    err = np.abs(dist[i][f] - (1 - xs @ q[i].astype(np.float64)))
                    bound = 4 * d * 2.0**-24 * (np.abs(xs) @ np.abs(q[i].astype(np.float64)) + 1)
                    assert (err <= bound).all(), (storage, d, err.max())
        print("ok")
        """
    )
    path = tmp_path / "isa.py"
    path.write_text(script)
    outcomes = {}
    for level in X86_LEVELS:
        run = run_at_level(level, str(path), level, text=True)
        assert run.returncode == 0, run.stderr
        outcomes[level] = run.stdout.strip()
    assert outcomes["generic"] == "ok"
    assert set(outcomes.values()) <= {"ok", "unavailable"}


# --------------------------------------------------------------------------- updates and deletes
@pytest.mark.parametrize("storage", STORAGES)
def test_update_in_place(storage, rng):
    x, _ = unit_data("random", 2, n=300, d=16)
    g = built(x, storage, max_elements=300)
    assert g.count == 300
    new = -x[:10]  # a label re-added with a new vector: rewritten in place, no room needed (the graph is full)
    g.add(new, np.arange(10), num_threads=1)
    assert g.count == 300 and g.deleted_count == 0
    np.testing.assert_array_equal(g.rows(np.arange(10)), as_stored(new, storage))
    labels, _ = g.knn(new, 1, ef=50, num_threads=1)
    np.testing.assert_array_equal(labels[:, 0], np.arange(10))
    with pytest.raises(ValueError, match="max_elements"):
        g.add(x[:1], [300], num_threads=1)
    g.resize(301)
    g.add(x[:1], [300], num_threads=1)
    assert g.count == 301 and g.max_elements == 301


@pytest.mark.parametrize("storage", STORAGES)
def test_mark_deleted_and_revive(storage):
    x, _ = unit_data("clustered", 3, n=400, d=16)
    g = built(x, storage)
    dead = np.arange(0, 400, 3)
    g.mark_deleted(dead)
    assert g.deleted_count == dead.size and g.count == 400
    labels, dist = g.knn(x, 400, ef=400, num_threads=2)
    assert not np.isin(labels, dead).any()
    live = 400 - dead.size
    assert (labels[:, live:] == -1).all() and np.isinf(dist[:, live:]).all()
    assert (labels[:, :live] >= 0).mean() > 0.99
    with pytest.raises(ValueError, match="deleted"):
        g.rows([0])
    # Missing or already deleted labels: ValueError and nothing changes (label 1 stays live).
    for bad in ([1, 0], [1, 400], [1, 1]):
        with pytest.raises(ValueError, match="labels"):
            g.mark_deleted(bad)
        assert g.deleted_count == dead.size
        assert g.knn(x[1:2], 1, ef=50, num_threads=1)[0][0, 0] == 1
    # Re-adding a deleted label revives it with the new vector.
    new = -x[:3]
    g.add(new, [0, 3, 6], num_threads=1)
    assert g.deleted_count == dead.size - 3
    np.testing.assert_array_equal(g.rows([0, 3, 6]), as_stored(new, storage))
    np.testing.assert_array_equal(g.knn(new, 1, ef=50, num_threads=1)[0][:, 0], [0, 3, 6])


def test_padding_and_empty_graph():
    g = MeanGraph(4, max_elements=10)
    labels, dist = g.knn(np.ones((2, 4)), 3, num_threads=1)
    assert (labels == -1).all() and np.isinf(dist).all() and labels.dtype == np.int64 and dist.dtype == np.float32
    g.add(np.eye(4)[:2], [7, 5], num_threads=1)
    labels, dist = g.knn(np.eye(4)[:1], 4, num_threads=1)
    np.testing.assert_array_equal(labels, [[7, 5, -1, -1]])
    np.testing.assert_allclose(dist[0, :2], [0.0, 1.0])
    assert np.isinf(dist[0, 2:]).all()
    assert g.knn(np.zeros((0, 4)), 2)[0].shape == (0, 2)
    g.add(np.zeros((0, 4)), [], num_threads=1)
    assert g.count == 2


def test_ties_go_to_the_lower_label():
    x = np.tile(np.float32([1, 0, 0]), (6, 1))
    g = built(x, labels=np.array([9, 4, 7, 1, 8, 2]))
    labels, dist = g.knn(x[:1], 6, ef=6, num_threads=1)
    np.testing.assert_array_equal(labels[0], [1, 2, 4, 7, 8, 9])
    assert (dist == 0).all()


# --------------------------------------------------------------------------- filters
@pytest.mark.parametrize("storage", STORAGES)
def test_filter_mask(storage, rng):
    x, qs = unit_data("clustered", 4, n=500, d=16, q=50)
    g = built(x, storage, M=16, ef_construction=100)
    allowed = rng.random(500) < 0.3
    labels, _ = g.knn(qs, 10, ef=100, allowed=allowed, num_threads=2)
    assert allowed[labels].all()
    truth = exact_top(as_stored(x, storage), as_stored(qs, storage), 10, allowed)
    assert recall(labels, truth) > 0.95
    # Labels beyond a short mask are not allowed.
    short = allowed[:100]
    labels, _ = g.knn(qs, 10, ef=100, allowed=short, num_threads=1)
    assert ((labels >= 0) & (labels < 100)).sum() > 0 and (labels < 100).all()
    assert short[labels[labels >= 0]].all()
    # Nothing allowed: all padding, no error.
    labels, dist = g.knn(qs, 5, allowed=np.zeros(500, bool), num_threads=1)
    assert (labels == -1).all() and np.isinf(dist).all()


# --------------------------------------------------------------------------- ef per call, threads
def test_ef_per_call_from_threads():
    x, qs = unit_data("random", 5, n=1500, d=24, q=100)
    g = built(x, M=8, ef_construction=40)
    efs = [10, 200, 10, 60, 200, 30]
    alone = {ef: g.knn(qs, 10, ef=ef, num_threads=1) for ef in set(efs)}
    assert (alone[10][0] != alone[200][0]).any()  # ef matters here, so a shared ef would show
    barrier = threading.Barrier(len(efs))
    got = [None] * len(efs)

    def search(i):
        barrier.wait()
        for _ in range(5):
            labels, dist = g.knn(qs, 10, ef=efs[i], num_threads=1)
            if got[i] is None:
                got[i] = (labels, dist)
            else:
                assert (got[i][0] == labels).all()

    threads = [threading.Thread(target=search, args=(i,)) for i in range(len(efs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ef in enumerate(efs):
        np.testing.assert_array_equal(got[i][0], alone[ef][0])
        np.testing.assert_array_equal(got[i][1], alone[ef][1])


def test_writes_wait_for_searches():
    """add/mark_deleted/resize while other threads search: no crash, and the searches see a consistent graph."""
    x, qs = unit_data("clustered", 6, n=800, d=16, q=20)
    g = built(x[:400], max_elements=400)
    stop = threading.Event()
    errors = []

    def search():
        while not stop.is_set():
            try:
                labels, _ = g.knn(qs, 5, ef=20, num_threads=1)
                assert (labels < 800).all()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    for start in range(400, 800, 100):
        g.resize(start + 100)
        g.add(x[start : start + 100], np.arange(start, start + 100), num_threads=2)
        g.mark_deleted([start - 1])
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert g.count == 800 and g.deleted_count == 4


# --------------------------------------------------------------------------- rows
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("d", [1, 5, 16, 33])
def test_rows_exact(storage, d, rng):
    x = rng.standard_normal((50, d)).astype(np.float32) * np.float32(3.0)
    x[0, :] = np.float32(1e-6)  # float16 subnormals
    x[1, :] = np.float32(-(2.0**-25))  # rounds to -0 in float16
    x[2, :] = np.float32(65504.0) if storage == "float16" else np.float32(1e30)
    g = built(x, storage)
    picks = np.array([3, 0, 49, 1, 2, 3])
    got = g.rows(picks)
    assert got.dtype == np.float32 and got.shape == (6, d)
    np.testing.assert_array_equal(got.view(np.uint32), as_stored(x[picks], storage).view(np.uint32))
    out = np.full((6, d), np.nan, np.float32)
    assert g.rows(picks, out=out) is out
    np.testing.assert_array_equal(out, got)
    for bad_out, err in (
        (np.zeros((6, d), np.float64), TypeError),
        (np.zeros((6, 2 * d), np.float32)[:, ::2], TypeError),
        (np.zeros((5, d), np.float32), ValueError),
    ):
        with pytest.raises(err, match="out"):
            g.rows(picks, out=bad_out)
    with pytest.raises(ValueError, match="labels"):
        g.rows([0, 50])
    assert g.rows([]).shape == (0, d)


def test_rows_large_parallel(rng):
    x = rng.standard_normal((3000, 96)).astype(np.float32)
    g = MeanGraph(96, storage="float16", max_elements=3000, M=4, ef_construction=4)
    g.add(x, np.arange(3000)[::-1], num_threads=2)
    np.testing.assert_array_equal(g.rows(np.arange(2999, -1, -1), num_threads=2), as_stored(x, "float16"))


# --------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("d", [20, 7])
def test_save_load_round_trip(storage, d, tmp_path):
    x, qs = unit_data("clustered", 7, n=600, d=d, q=40)
    g = built(x, storage, M=12, ef_construction=60)
    g.mark_deleted([5, 6, 7])
    path = tmp_path / "g.hnsw"
    g.save(path)
    h = MeanGraph.load(path, dim=d, storage=storage)
    assert (h.count, h.deleted_count, h.max_elements, h.dim, h.storage) == (600, 3, 600, d, storage)
    for ef in (10, 80):
        a, b = g.knn(qs, 10, ef=ef, num_threads=1), h.knn(qs, 10, ef=ef, num_threads=1)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(h.rows(np.arange(8, 600)), g.rows(np.arange(8, 600)))
    # A larger capacity on load; the loaded graph takes adds and revives.
    h = MeanGraph.load(path, dim=d, storage=storage, max_elements=700)
    assert h.max_elements == 700
    h.add(-x[:100], np.arange(600, 700), num_threads=2)
    h.add(x[5:6], [5], num_threads=1)
    assert h.count == 700 and h.deleted_count == 2
    assert h.knn(x[5:6], 1, ef=50, num_threads=1)[0][0, 0] == 5


def test_load_refuses_bad_files(tmp_path):
    x, _ = unit_data("random", 8, n=60, d=8)
    g = built(x)
    g.mark_deleted([3])
    path = tmp_path / "g.hnsw"
    g.save(path)
    good = path.read_bytes()
    MeanGraph.load(path, dim=8)
    # Wrong dim or storage: ValueError naming them. (The file holds bytes per vector, not dim and storage:
    # dim=16 in float16 reads a dim=8 float32 file; the caller records which it saved.)
    for kwargs in ({"dim": 9}, {"dim": 4}, {"dim": 8, "storage": "float16"}):
        with pytest.raises(ValueError, match="dim"):
            MeanGraph.load(path, **kwargs)
    bad = tmp_path / "bad.hnsw"
    cases = [good[:n] for n in (0, 1, 50, 95, 96, 97, 200, len(good) // 2, len(good) - 4, len(good) - 1)]
    cases += [good + b"\0", np.random.default_rng(0).bytes(len(good)), bytes(len(good))]
    header = bytearray(good)
    header[16:24] = (2**40).to_bytes(8, "little")  # an element count far beyond the file
    cases.append(bytes(header))
    links = bytearray(good)
    # the first neighbour id of element 0's level-0 list: far out of range
    links[96 + 4 : 96 + 8] = (10**6).to_bytes(4, "little")
    cases.append(bytes(links))
    for data in cases:
        bad.write_bytes(data)
        with pytest.raises((RuntimeError, ValueError), match="graph"):
            MeanGraph.load(bad, dim=8)
    with pytest.raises(FileNotFoundError):
        MeanGraph.load(tmp_path / "missing.hnsw", dim=8)


def test_load_survives_byte_flips(tmp_path):
    """Random corruption anywhere: the load raises, or it succeeds and the graph searches and reads safely."""
    x, qs = unit_data("random", 9, n=80, d=8, q=5)
    g = built(x)
    path = tmp_path / "g.hnsw"
    g.save(path)
    good = path.read_bytes()
    rng = np.random.default_rng(1)
    loaded = 0
    for _ in range(400):
        data = bytearray(good)
        for pos in rng.integers(0, len(data), rng.integers(1, 4)):
            data[pos] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
        try:
            h = MeanGraph.load(path, dim=8)
        except (RuntimeError, ValueError):
            continue
        loaded += 1
        h.knn(qs, 10, ef=30, num_threads=1)
        h.resize(h.count + 2)  # a flipped label may make 0 or 1 new
        h.add(x[:2], [0, 1], num_threads=1)
    assert loaded > 0


def test_save_to_a_bad_path_raises(tmp_path):
    g = built(np.eye(3, dtype=np.float32))
    with pytest.raises(RuntimeError, match="could not write"):
        g.save(tmp_path / "no" / "such" / "dir" / "g.hnsw")


# --------------------------------------------------------------------------- arguments
def test_bad_arguments_are_named():
    g = MeanGraph(4, max_elements=4)
    g.add(np.eye(4), np.arange(4), num_threads=1)
    bad_init = [
        ({"dim": 0}, ValueError, "dim"),
        ({"dim": 4.0}, TypeError, "dim"),
        ({"dim": 4, "storage": "int4"}, ValueError, "storage"),
        ({"dim": 2**17 + 1, "storage": "int8"}, ValueError, "dim"),
        ({"dim": 4, "M": 1}, ValueError, "M"),
        ({"dim": 4, "max_elements": 0}, ValueError, "max_elements"),
        ({"dim": 4, "max_elements": 2**31}, ValueError, "max_elements"),
        ({"dim": 4, "ef_construction": 0}, ValueError, "ef_construction"),
        ({"dim": 4, "random_seed": -1}, ValueError, "random_seed"),
    ]
    for kwargs, err, name in bad_init:
        with pytest.raises(err, match=name):
            MeanGraph(**kwargs)
    calls = [
        (lambda: g.add(np.ones((2, 3)), [0, 1]), ValueError, "data"),
        (lambda: g.add(np.ones((2, 4)), [0]), ValueError, "labels"),
        (lambda: g.add(np.ones((2, 4)), [-1, 0]), ValueError, "labels"),
        (lambda: g.add(np.ones((2, 4)), [2, 2]), ValueError, "labels"),
        (lambda: g.add(np.ones((2, 4)), [0.5, 1]), TypeError, "labels"),
        (lambda: g.add(np.full((1, 4), np.nan), [0]), ValueError, "data"),
        (lambda: g.add(np.ones((1, 4)), [9]), ValueError, "max_elements"),
        (lambda: g.knn(np.ones((1, 5)), 1), ValueError, "queries"),
        (lambda: g.knn(np.ones((1, 4)), 0), ValueError, "k"),
        (lambda: g.knn(np.ones((1, 4)), 1, ef=0), ValueError, "ef"),
        (lambda: g.knn(np.ones((1, 4)), 1, allowed=np.ones(4)), TypeError, "allowed"),
        (lambda: g.knn(np.ones((1, 4)), 1, allowed=np.ones((2, 2), bool)), ValueError, "allowed"),
        (lambda: g.knn(np.ones((1, 4)), 1, num_threads=0), ValueError, "num_threads"),
        (lambda: g.rows([[0]]), ValueError, "labels"),
        (lambda: g.rows([7]), ValueError, "labels"),
        (lambda: g.mark_deleted([7]), ValueError, "labels"),
        (lambda: g.resize(3), ValueError, "max_elements"),
    ]
    for call, err, name in calls:
        with pytest.raises(err, match=name):
            call()
    assert g.count == 4 and g.deleted_count == 0
    h = MeanGraph(4, storage="float16")
    for call in (lambda: h.add(np.full((1, 4), 7e4), [0]), lambda: h.knn(np.full((1, 4), -7e4), 1)):
        with pytest.raises(ValueError, match="float16"):
            call()


def test_nbytes_counts_vectors_and_links():
    d, n, M = 64, 500, 16
    small = MeanGraph(d, storage="float16", max_elements=n, M=M)
    large = MeanGraph(d, storage="float32", max_elements=n, M=M)
    per_element_f16 = 2 * d + (2 * M + 1) * 4 + 8
    assert small.nbytes >= n * per_element_f16
    assert large.nbytes - small.nbytes == n * 2 * d
    before = large.nbytes
    large.add(np.random.default_rng(0).standard_normal((n, d)), np.arange(n), num_threads=1)
    assert large.nbytes > before  # upper-layer links and the label map
    assert large.nbytes < before + n * (M * 4 * 2 + 64)
    assert "count=500" in repr(large)
