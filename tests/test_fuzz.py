"""Adversarial inputs over the public API (issue 12, item 8).

Every example asserts one of two outcomes: the result equals the float64 /
exact reference (within a derived rounding bound), or the call raises a clear
``ValueError``/``TypeError``/``CorruptFileError`` - never another exception,
never a crash, never a hang (pytest-timeout). Hypothesis runs derandomized so
CI is reproducible; ``CROSSEMBED_FUZZ_SCALE=10`` runs ten times as many
examples. The last test checks that the module ran at least 1,000 inputs.
"""

from __future__ import annotations

import io
import math
import os
import string
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import crossembed as ce
from crossembed import kernels
from crossembed import reference as ref
from crossembed._io import CorruptFileError, load_arrays, save_arrays

pytestmark = pytest.mark.timeout(300)

SCALE = float(os.environ.get("CROSSEMBED_FUZZ_SCALE", "1"))
COUNT = {"inputs": 0}
CLEAR = (ValueError, TypeError)  # CorruptFileError is a ValueError
EPS32 = 2.0**-24


def not_a_signature_error(exc: BaseException) -> None:
    """A ``TypeError`` from calling with a keyword or argument count that does not exist is the test's bug, not a
    clear rejection of the input: re-raise it so that a case cannot pass by calling the wrong signature."""
    text = str(exc)
    if isinstance(exc, TypeError) and ("unexpected keyword argument" in text or "positional argument" in text):
        raise AssertionError(f"the test called a signature that does not exist: {text}") from exc


def fuzz(n):
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def counted(fn):
    """Count each example the test body sees (for the volume check at the end)."""

    def wrapper(*args, **kwargs):
        COUNT["inputs"] += 1
        return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__wrapped__ = fn
    return wrapper


# --------------------------------------------------------------------------- strategies
# float32 subnormals (1e-45, -1e-42), its smallest normal, near-overflow magnitudes (3e38, 3.4e38)
_SPECIAL = [0.0, -0.0, 1e-45, -1e-42, 1.2e-38, 1e-30, 1e-20, 1e-8, 1.0, -1.0, 1e8, 1e16, 1e18, 1e30, 3e38, -3.4e38]
_BAD = [math.nan, math.inf, -math.inf]
# integers at and beyond the C types' limits, negative ones, and far beyond any of them
_EDGE_INTS = [-1, 0, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63) - 1, -(2**64), 10**30]
# float64 subnormals and magnitudes near overflow
_EDGE_FLOATS = [5e-324, -1e-310, 2.2e-308, 1e-300, 1e300, 1.7e308, -1.7e308, 3.4e38, 1e-45]


def big_ints():
    """Any integer an int argument could be handed: small, at the C limits, negative, or huge."""
    return st.one_of(st.integers(-3, 8), st.sampled_from(_EDGE_INTS), st.integers(-(2**80), 2**80))


def edge_floats():
    """Floats for float arguments: ordinary, subnormal, near overflow, NaN and inf."""
    return st.one_of(st.floats(-10, 10), st.sampled_from(_EDGE_FLOATS + _BAD), st.floats(allow_nan=True))


def ragged():
    """Array-likes numpy cannot make rectangular: rows of unequal length, rows nesting further, mixed sequences."""
    row = st.lists(st.integers(0, 3), min_size=1, max_size=3)
    return st.one_of(
        st.lists(row, min_size=2, max_size=4).filter(lambda rows: len({len(r) for r in rows}) > 1),
        st.just([[0, [1]], [2, 3]]),
        st.just([[0, 1], [2, [3, 4]]]),
        st.just([np.zeros(2), np.zeros(3)]),
        st.just([[0.5, 1.0], [1.0]]),
        st.just([[[0, 1], [2, 3]], [[4, 5]]]),
    )


def values(bad: bool = True):
    parts = [st.floats(-10, 10, width=32), st.sampled_from(_SPECIAL)]
    if bad:
        parts.append(st.sampled_from(_BAD))
    return st.one_of(*parts)


def matrix(rows=(0, 6), cols=(1, 5), bad=True, dtype=np.float32):
    return st.tuples(st.integers(*rows), st.integers(*cols)).flatmap(
        lambda s: hnp.arrays(dtype, s, elements=values(bad).map(lambda v: float(np.clip(v, -3e38, 3e38))))
    )


def nice_matrix(rows=(1, 6), cols=(1, 5), lo=-4.0, hi=4.0):
    """Float32 matrices on a 1/8 grid: dot products are exact, so kernels and references agree exactly."""
    return st.tuples(st.integers(*rows), st.integers(*cols)).flatmap(
        lambda s: hnp.arrays(np.float32, s, elements=st.integers(int(lo * 8), int(hi * 8)).map(lambda v: v / 8))
    )


def junk():
    """Arguments of the wrong kind."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.text(max_size=3),
        edge_floats(),
        big_ints(),
        ragged(),
        st.lists(st.lists(st.integers(-3, 3), max_size=3), max_size=3),  # often ragged
        st.just(np.array([[1, 2]], dtype=object)),
        st.just(np.array(["a", "b"])),
        st.just(np.ones((2, 2), dtype=bool)),
        st.just(np.ones((2, 2, 2), dtype=np.float32)),
        st.just(np.ones((0, 3), dtype=np.float32)),
        st.just(np.ones((3, 0), dtype=np.float32)),
    )


def close(got, expect, bound):
    got, expect = np.asarray(got, np.float64), np.asarray(expect, np.float64)
    assert got.shape == expect.shape
    COUNT["compared"] = COUNT.get("compared", 0) + 1
    both_inf = np.isinf(got) & (got == expect)
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(got - expect))
    assert (err <= bound).all(), f"max excess {np.max(err - bound)}"


# --------------------------------------------------------------------------- probit
def _probit_bound(mq, vq, mc, vc, expect):
    """|error| of float32 probit scores: D-term accumulation on every moment, relative."""
    D = mq.shape[1]
    g = 4 * (D + 8) * EPS32
    amq, amc = np.abs(mq.astype(np.float64)), np.abs(mc.astype(np.float64))
    sig2 = (amq**2) @ vc.astype(np.float64).T + vq.astype(np.float64) @ (amc**2).T + vq @ vc.T
    denom = np.sqrt(1 + math.pi / 8 * sig2)
    return g * (amq @ amc.T) / denom + g * np.abs(expect) + 1e-30


@fuzz(200)
@given(mq=matrix((0, 5)), vq=matrix((0, 5)), mc=matrix((1, 7)), vc=matrix((1, 7)), k=st.integers(-1, 8))
@counted
def test_probit_against_reference(mq, vq, mc, vc, k):
    vq, vc = np.abs(vq), np.abs(vc)
    if vq.shape != mq.shape:
        vq = np.abs(np.resize(vq, mq.shape)) if vq.size and mq.size else np.zeros_like(mq)
    if vc.shape != mc.shape:
        vc = np.abs(np.resize(vc, mc.shape)) if vc.size else np.zeros_like(mc)
    try:
        got = ce.probit_scores(mq, vq, mc, vc)
    except CLEAR as exc:
        not_a_signature_error(exc)
        return
    with np.errstate(all="ignore"):
        expect = ref.probit_scores(mq, vq, mc, vc)
    assert np.isfinite(got).all()
    close(got, expect, _probit_bound(mq, vq, mc, vc, expect))
    try:
        s, i = ce.probit_topk(mq, vq, mc, vc, k)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert not 1 <= k <= len(mc)
        return
    assert 1 <= k <= len(mc) and s.shape == i.shape == (len(mq), k)
    bound = _probit_bound(mq, vq, mc, vc, expect)
    close(s, np.take_along_axis(expect, i, 1), np.take_along_axis(bound, i, 1))  # the scores of those indices
    close(s, -np.sort(-expect, axis=1)[:, :k], np.max(bound, axis=1, keepdims=True) * 2)  # and the best ones


@fuzz(100)
@given(mq=nice_matrix((1, 4), (3, 3)), mc=nice_matrix((2, 9), (3, 3)), data=st.data())
@counted
def test_probit_candidates_against_reference(mq, mc, data):
    n = len(mc)
    m = data.draw(st.integers(1, 6))
    cand = data.draw(hnp.arrays(np.int64, (len(mq), m), elements=st.integers(-2, n)))
    k = data.draw(st.integers(0, m + 1))
    vq, vc = np.zeros_like(mq), np.zeros_like(mc)
    try:
        s, i = ce.probit_topk(mq, vq, mc, vc, k, candidates=cand)
    except CLEAR as exc:
        not_a_signature_error(exc)
        rows_ok = all(len(set(r[r >= 0])) == (r >= 0).sum() for r in cand)
        assert not (1 <= k <= m and cand.min() >= -1 and cand.max() < n and rows_ok)
        return
    rs, ri = ref.probit_topk(mq, vq, mc, vc, k, candidates=cand)
    np.testing.assert_array_equal(i, ri)  # variances 0, grid values: exact scores, exact ties
    close(s, rs, 1e-6 * (1 + np.abs(np.where(np.isfinite(rs), rs, 0))))


# --------------------------------------------------------------------------- signatures
@fuzz(120)
@given(X=matrix((0, 5), (3, 3)), A=matrix((1, 20), (3, 3)), sigma=st.one_of(st.none(), values()))
@counted
def test_anchor_signatures_against_reference(X, A, sigma):
    try:
        got = ce.anchor_signatures(X, A, sigma=sigma)
    except CLEAR as exc:
        not_a_signature_error(exc)
        return
    assert np.isfinite(got).all()
    s = ce.kernels.median_anchor_distance(A) if sigma is None else sigma
    with np.errstate(all="ignore"):
        expect = ref.anchor_signatures(X, A, sigma=s)
    # float32 cosines (error ~ D eps) pass through exp(-d / sigma): amplified by 1 / sigma
    bound = 64 * EPS32 * (1 + 1 / s) * np.maximum(np.abs(expect), 1e-7) + 1e-6
    close(got, expect, np.maximum(bound, 1e-6) if s >= 1e-3 else 1.0)  # tiny sigma: only finite and normalised
    if len(X):
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


# --------------------------------------------------------------------------- CSLS, greedy, otsu
@fuzz(100)
@given(SA=nice_matrix((0, 7), (3, 3), 0, 1), SB=nice_matrix((0, 7), (3, 3), 0, 1), data=st.data())
@counted
def test_csls_against_reference(SA, SB, data):
    k = data.draw(st.integers(0, 4))
    csls_k = data.draw(st.integers(0, 4))
    ex_a = data.draw(st.one_of(st.none(), st.lists(st.integers(-1, len(SA)), max_size=3)))
    try:
        got = ce.csls_mutual_topk(SA, SB, k=k, csls_k=csls_k, exclude_a=ex_a)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert k < 1 or csls_k < 1 or (ex_a and (min(ex_a) < 0 or max(ex_a) >= len(SA)))
        return
    expect = ref.csls_mutual_topk(SA, SB, k=k, csls_k=csls_k, exclude_a=ex_a)
    np.testing.assert_array_equal(got[0], expect[0])
    close(got[1], expect[1], 1e-5)
    ca = np.tile(np.arange(len(SB)), (len(SA), 1)) if len(SB) else np.zeros((len(SA), 1), np.int64) - 1
    cb = np.tile(np.arange(len(SA)), (len(SB), 1)) if len(SA) else np.zeros((len(SB), 1), np.int64) - 1
    got_c = ce.kernels.csls_mutual_topk_candidates(SA, SB, ca, cb, k=k, csls_k=csls_k, exclude_a=ex_a)
    exp_c = ref.csls_mutual_topk_candidates(SA, SB, ca, cb, k=k, csls_k=csls_k, exclude_a=ex_a)
    np.testing.assert_array_equal(got_c[0], exp_c[0])


@fuzz(100)
@given(
    pairs=hnp.arrays(np.int64, st.tuples(st.integers(0, 8), st.just(2)), elements=st.integers(-1, 6)),
    data=st.data(),
)
@counted
def test_greedy_against_reference(pairs, data):
    scores = data.draw(hnp.arrays(np.float64, len(pairs), elements=st.sampled_from([0.1, 0.5, 0.5, 0.9, -1.0])))
    thr = data.draw(st.one_of(st.sampled_from([-np.inf, 0.0, 0.5, np.inf, np.nan]), junk()))
    limit = data.draw(st.one_of(st.none(), st.integers(-1, 4)))
    ex = data.draw(
        st.one_of(st.none(), st.lists(st.integers(-1, 6), max_size=2), st.lists(st.floats(0, 5), max_size=2))
    )
    try:
        got = ce.kernels.greedy_one_to_one(pairs, scores, threshold=thr, exclude_a=ex, limit=limit)
    except CLEAR as exc:
        not_a_signature_error(exc)
        return
    assert (pairs >= 0).all() and not (isinstance(thr, float) and math.isnan(thr))
    expect = ref.greedy_one_to_one(pairs, scores, threshold=thr, exclude_a=ex, limit=limit)
    np.testing.assert_array_equal(got, np.asarray(expect).reshape(-1, 2))


@fuzz(100)
@given(
    v=hnp.arrays(
        np.float64,
        st.integers(0, 40),
        elements=st.one_of(
            st.floats(-1e308, 1e308),
            st.floats(-1, 1),
            st.sampled_from([0.0, 5e-324, 1e-310, -1e-300, 1e300, 1.7e308, -1.7e308, math.nan, math.inf]),
        ),
    ),
    bins=st.one_of(st.integers(-1, 300), junk()),
)
@counted
def test_otsu_against_reference(v, bins):
    try:
        got = ce.kernels.otsu_threshold(v, bins=bins)
    except CLEAR as exc:
        not_a_signature_error(exc)
        return
    assert len(v) and np.isfinite(v).all()
    assert math.isfinite(got) and v.min() <= got <= v.max()
    assert got == ref.otsu_threshold(v, bins=bins)


# --------------------------------------------------------------------------- Lorentz
@fuzz(120)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), c=st.sampled_from([0.25, 1.0, 3.0]))
@counted
def test_lorentz_against_reference(data, dtype, c):
    d = data.draw(st.integers(1, 4))
    radii = st.floats(-6, 4).map(lambda e: 10.0**e)

    def point():
        return data.draw(hnp.arrays(np.float64, d, elements=st.floats(-1, 1))), data.draw(radii)

    rows = []
    for _ in range(data.draw(st.integers(1, 5))):
        u, r = point()
        kind = data.draw(st.integers(0, 3))
        if kind == 1 and rows:  # along a previous row's direction, other radius
            u = rows[-1]
        elif kind == 2 and rows:  # a small step from a previous row
            u = rows[-1] + data.draw(st.floats(-6, -1).map(lambda e: 10.0**e)) * u
            r = 1.0
        elif kind == 3 and rows:
            u, r = rows[-1], 1.0  # the same point again
        n = np.linalg.norm(u)
        rows.append(u / n * r if n > 0 and kind not in (2, 3) else u * r)
    P = np.array(rows).astype(dtype)
    got = ce.lorentz_pairwise(P, P, curvature=c)
    expect = ref.lorentz_pairwise(P, P, curvature=c)
    rtol = 1e-9 if dtype == np.float64 else 1e-5
    close(got, expect, rtol * expect + 1e-300)
    assert (np.diagonal(got) == 0).all()
    dist, idx = ce.lorentz_topk(P, P, 1, curvature=c)
    close(dist[:, 0], expect.min(axis=1), rtol * expect.min(axis=1) + 1e-300)


# --------------------------------------------------------------------------- wrong arguments
_FUNCS = {
    "probit_scores": lambda a, b: ce.probit_scores(a, np.abs(a) if isinstance(a, np.ndarray) else a, b, b),
    "probit_topk": lambda a, b: ce.probit_topk(a, a, b, b, 1),
    "anchor_signatures": lambda a, b: ce.anchor_signatures(a, b),
    "median_anchor_distance": lambda a, b: ce.kernels.median_anchor_distance(a),
    "csls_mutual_topk": lambda a, b: ce.csls_mutual_topk(a, b, k=1, csls_k=1),
    "csls_candidates": lambda a, b: ce.kernels.csls_mutual_topk_candidates(a, a, b, b),
    "otsu_threshold": lambda a, b: ce.kernels.otsu_threshold(a, bins=b),
    "greedy_one_to_one": lambda a, b: ce.kernels.greedy_one_to_one(a, b),
    "lorentz_pairwise": lambda a, b: ce.lorentz_pairwise(a, b),
    "lorentz_topk": lambda a, b: ce.lorentz_topk(a, b, 1),
    "votes": lambda a, b: ce.kernels.VoteTable().votes(a),
    "add": lambda a, b: ce.kernels.VoteTable().add(a),
    "ProbitDocs": lambda a, b: ce.ProbitDocs(a, b),
    "QuantizedDocs": lambda a, b: ce.kernels.QuantizedDocs(a).top_k(a, b),
}


@fuzz(200)
@given(
    name=st.sampled_from(sorted(_FUNCS)),
    a=st.one_of(junk(), matrix((0, 3), (0, 3))),
    b=st.one_of(junk(), matrix((0, 3), (0, 3)), st.integers(-3, 3)),
    nt=st.one_of(st.none(), st.integers(-2, 2**40), junk()),
)
@counted
def test_wrong_arguments_raise_clear_errors(name, a, b, nt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _FUNCS[name](a, b)
        except CLEAR as exc:
            not_a_signature_error(exc)
            assert str(exc)  # says something
        try:
            ce.lorentz_pairwise(np.ones((2, 2)), np.ones((2, 2)), num_threads=nt)
        except CLEAR as exc:
            not_a_signature_error(exc)
            assert "num_threads" in str(exc)


# --------------------------------------------------------------------------- VoteTable
@fuzz(100)
@given(
    views=st.lists(
        hnp.arrays(
            np.int64,
            st.tuples(st.integers(0, 5), st.just(2)),
            elements=st.one_of(st.integers(0, 4), st.sampled_from([-1, 2**32 - 1, 2**32, 2**32 + 1, 2**62])),
        ),
        max_size=5,
    ),
    probe=hnp.arrays(np.int64, st.tuples(st.integers(0, 4), st.just(2)), elements=st.integers(-1, 2**33)),
)
@counted
def test_vote_table_against_reference(views, probe):
    table, twin = ce.kernels.VoteTable(), ref.VoteTable()
    for view in views:
        ok = bool(((view >= 0) & (view < 2**32)).all())
        try:
            table.add(view)
        except CLEAR as exc:
            not_a_signature_error(exc)
            assert not ok
            continue
        assert ok
        twin.add(view)
    np.testing.assert_array_equal(table.items()[0], twin.items()[0])
    np.testing.assert_array_equal(table.items()[1], twin.items()[1])
    try:
        got = table.votes(probe)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert not ((probe >= 0) & (probe < 2**32)).all()
        return
    np.testing.assert_array_equal(got, twin.votes(probe))


# --------------------------------------------------------------------------- files
_GOOD = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.linspace(0, 1, 4)}


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    p = tmp_path_factory.mktemp("fuzzio") / "good.bin"
    save_arrays(p, "fuzz.kind", _GOOD, {"M": 16, "rerank": 100, "temperature": 0.5, "step": 7})
    return p.read_bytes()


@fuzz(200)
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "set", "insert", "delete", "truncate"]), st.integers(0, 10**6), st.integers(0, 255)
        ),
        min_size=1,
        max_size=3,
    )
)
@counted
def test_mutated_files_are_detected(tmp_path_factory, blob, edits):
    data = bytearray(blob)
    for op, pos, byte in edits:
        pos = pos % (len(data) + 1)
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << (byte % 8)
        elif op == "set" and pos < len(data):
            data[pos] = byte
        elif op == "insert":
            data[pos:pos] = bytes([byte])
        elif op == "delete" and pos < len(data):
            del data[pos]
        elif op == "truncate":
            del data[pos:]
    p = tmp_path_factory.mktemp("m", numbered=True) / "f.bin"
    p.write_bytes(bytes(data))
    try:
        arrays, meta = load_arrays(p, "fuzz.kind")
    except CorruptFileError:
        assert bytes(data) != blob
        return
    assert bytes(data) == blob  # only an unchanged file loads
    assert meta["M"] == 16 and all(np.array_equal(arrays[k], v) for k, v in _GOOD.items())


@fuzz(40)
@given(pos=st.integers(0, 10**6), byte=st.integers(1, 255))
@counted
def test_mutated_index_files_are_detected(tmp_path_factory, pos, byte):
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    d = tmp_path_factory.mktemp("idx", numbered=True)
    if not hasattr(test_mutated_index_files_are_detected, "_blob"):
        rng = np.random.default_rng(0)
        docs = GaussianEmbedding(rng.normal(size=(30, 4)).astype(np.float32), rng.random((30, 4)).astype(np.float32))
        test_mutated_index_files_are_detected._blob = (
            UECIndex(docs, config=IndexConfig(M=4, ef_construction=10, rerank=5)).save(d / "good.uec").read_bytes()
        )
    data = bytearray(test_mutated_index_files_are_detected._blob)
    data[pos % len(data)] ^= byte
    (d / "bad.uec").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        UECIndex.load(d / "bad.uec")


@fuzz(60)
@given(
    header=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=4),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(["kind", "version", "meta", "payload_bytes", "sha256", "x"]), c, max_size=5
            )
        ),
        max_leaves=8,
    )
)
@counted
def test_crafted_headers_with_valid_checksums(tmp_path_factory, header):
    import hashlib
    import json

    from crossembed import _io

    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3))
    payload = buf.getvalue()
    h = json.dumps(header).encode()
    body = _io._MAGIC + len(h).to_bytes(8, "little") + h + payload
    p = tmp_path_factory.mktemp("h", numbered=True) / "h.bin"
    p.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(CorruptFileError):
        load_arrays(p, "fuzz.kind")


# --------------------------------------------------------------------------- linking
pair_lists = hnp.arrays(
    np.int64, st.tuples(st.integers(0, 6), st.just(2)), elements=st.integers(-1, 4) | st.just(2**40)
)


@fuzz(100)
@given(links=pair_lists, truth=pair_lists)
@counted
def test_evaluate_links_against_sets(links, truth):
    from crossembed.linking import evaluate_links

    try:
        res = evaluate_links(links, truth)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert len(truth) == 0 or (links < 0).any() or (truth < 0).any()
        return
    L, T = set(map(tuple, links.tolist())), set(map(tuple, truth.tolist()))
    assert res["correct"] == len(L & T)
    assert res["recall"] == pytest.approx(len(L & T) / len(T))
    assert res["precision"] == pytest.approx(len(L & T) / len(L) if L else 0.0)


@fuzz(50)
@given(A=matrix((0, 12), (2, 3)), seeds=st.one_of(junk(), pair_lists))
@counted
def test_linkers_reject_bad_inputs_clearly(A, seeds):
    from crossembed.linking import GEHLinker
    from crossembed.linking.baselines import procrustes_link

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for run in (
            lambda: procrustes_link(A, A, seeds),
            lambda: GEHLinker(max_iter=1, show_progress_bar=False).fit(A, A, seeds),
        ):
            try:
                run()
            except CLEAR as exc:
                not_a_signature_error(exc)
                pass


# --------------------------------------------------------------------------- CLI
_WORDS = [
    "link",
    "encode",
    "index",
    "eval-uncha",
    "train-uncha",
    "uec-table",
    "bench",
    "--out",
    "--seeds",
    "-o",
    "--steps",
    "--num-threads",
    "--json",
    "--help",
    "x.npy",
    "a.npy",
    "missing.txt",
    "afile",
    "adir",
    "-1",
    "0",
    "nan",
    "1e400",
    "--bogus",
    "search",
    "build",
    "--k",
    "\u00e9",
    "",
]


@fuzz(60)
@given(argv=st.lists(st.sampled_from(_WORDS) | st.text(string.printable, max_size=4), max_size=6))
@counted
def test_cli_never_crashes(tmp_path_factory, argv, capsys):
    from crossembed.cli import main

    d = tmp_path_factory.mktemp("cli", numbered=True)
    np.save(d / "a.npy", np.ones((4, 2), np.float32))
    (d / "afile").write_text("x")
    (d / "adir").mkdir()
    # never let a random command run for real: --steps 1 and tiny sizes are not enough, so stop at the parser
    # for the expensive ones and run only the cheap error paths
    expensive = {"train-uncha", "bench", "uec-table", "encode", "build"}
    if argv and argv[0] in expensive and "--help" not in argv:
        argv = argv + ["--definitely-not-an-option"]
    cwd = os.getcwd()
    os.chdir(d)
    try:
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert code in (0, 2, None), (argv, code, err[-500:])
    assert "Traceback" not in err


# --------------------------------------------------------------------------- torch ops
@fuzz(100)
@given(x=matrix((1, 4), (2, 2), bad=False), y=matrix((1, 4), (2, 2), bad=False), c=st.sampled_from([0.5, 1.0, 2.0]))
@counted
def test_torch_lorentz_ops_finite_and_right(x, y, c):
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    n = min(len(x), len(y))
    xt, yt = torch.from_numpy(x[:n]), torch.from_numpy(y[:n])
    for out in (L.expmap0(xt, c), L.logmap0(xt, c), L.exterior_angle(xt, yt, c), L.half_aperture(xt, c)):
        assert torch.isfinite(out).all()
    e = L.expmap0(xt, c)
    assert float(e.norm(dim=-1).max()) <= 2.0**15 / math.sqrt(c) * (1 + 1e-5)
    if np.abs(x).max() <= 1e17 and np.abs(y).max() <= 1e17:
        d = L.distance(xt.double(), yt.double(), c).numpy()
        expect = np.diagonal(ref.lorentz_pairwise(x[:n].astype(np.float64), y[:n].astype(np.float64), curvature=c))
        close(d, expect, 1e-9 * expect + 1e-300)


# --------------------------------------------------------------------------- ints, floats and array-likes at the edges
_RNG = np.random.default_rng(7)
_S = (_RNG.integers(0, 9, size=(6, 3)) / 8).astype(np.float32)
_CAND = np.tile(np.arange(6), (6, 1))
_PAIRS, _SCORES = np.array([[0, 1], [2, 3], [0, 3]]), np.array([0.9, 0.5, 0.7])
_LINK_A = _RNG.normal(size=(24, 4))
_SEEDS = np.stack([np.arange(6), np.arange(6)], axis=1)


def _int_calls():
    """(name of the int argument, call with it); each kernel with an int argument, and the linkers'."""
    from crossembed.linking import make_partial_overlap
    from crossembed.linking.baselines import bootstrap_procrustes_link
    from crossembed.linking.proposers import pool_candidate_lists

    z = np.zeros_like(_S)
    return {
        "k": lambda v: ce.csls_mutual_topk(_S, _S, k=v, csls_k=2),
        "csls_k": lambda v: ce.csls_mutual_topk(_S, _S, k=2, csls_k=v),
        "k ": lambda v: ce.kernels.csls_mutual_topk_candidates(_S, _S, _CAND, _CAND, k=v),
        "csls_k ": lambda v: kernels.csls_mutual_topk_lists(_S, _S, kernels.CandidateLists(_CAND, _CAND), csls_k=v),
        "k_row": lambda v: ce.kernels.topk_rows_and_columns(_S, _S, v),
        "k_col": lambda v: ce.kernels.topk_rows_and_columns(_S, _S, 2, v),
        "bins": lambda v: ce.kernels.otsu_threshold(_SCORES, bins=v),
        "limit": lambda v: ce.kernels.VoteTable().promote(_PAIRS, _SCORES, threshold=0.0, limit=v),
        "limit ": lambda v: ce.kernels.greedy_one_to_one(_PAIRS, _SCORES, limit=v),
        "k  ": lambda v: ce.probit_topk(_S, z, _S, z, v),
        "k   ": lambda v: ce.ProbitDocs(_S, z).top_k(_S, z, v, candidates=_CAND),
        "k    ": lambda v: ce.lorentz_topk(_S, _S, v),
        "num_threads": lambda v: ce.anchor_signatures(_S, _S, num_threads=v),
        "max_pairs": lambda v: bootstrap_procrustes_link(_LINK_A, _LINK_A, _SEEDS, n_iter=1, max_pairs=v),
        "n_seeds": lambda v: make_partial_overlap(40, n_seeds=v, random_state=0),
        "random_state": lambda v: make_partial_overlap(100, random_state=v),
        "m": lambda v: pool_candidate_lists(_S, _S, v),
    }


@fuzz(300)
@given(name=st.sampled_from(sorted(_int_calls())), value=big_ints())
@counted
def test_int_arguments_are_named_with_their_range(name, value):
    """An int of any size is used (a count larger than the rows means all of them) or refused naming the argument."""
    call = _int_calls()[name]
    try:
        got = call(value)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert name.strip() in str(exc) and "incompatible function arguments" not in str(exc), str(exc)
        return
    assert value >= 0
    if value > 6 and name.strip() in ("k", "csls_k", "k_row", "k_col", "limit", "max_pairs", "m"):
        same = call(6 if name.strip() != "limit" else len(_PAIRS))  # beyond the rows is the same as all rows
        for a, b in zip(got if isinstance(got, tuple) else (got,), same if isinstance(same, tuple) else (same,)):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)


def _array_calls():
    """(name of the array argument, call with it in that place)."""
    from crossembed.linking import evaluate_links
    from crossembed.linking.baselines import procrustes_link

    z = np.zeros_like(_S)
    return [
        ("mu_q", lambda a: ce.probit_scores(a, z, _S, z)),
        ("v_c", lambda a: ce.probit_topk(_S, z, _S, a, 1)),
        ("candidates", lambda a: ce.probit_topk(_S, z, _S, z, 1, candidates=a)),
        ("X", lambda a: ce.anchor_signatures(a, _S)),
        ("anchors", lambda a: ce.kernels.median_anchor_distance(a)),
        ("C", lambda a: ce.kernels.signatures_from_cosines(a, [0], sigma=1.0)),
        ("cols", lambda a: ce.kernels.signatures_from_cosines(_S, a, sigma=1.0)),
        ("SB", lambda a: ce.csls_mutual_topk(_S, a)),
        ("exclude_a", lambda a: ce.csls_mutual_topk(_S, _S, exclude_a=a)),
        ("cand_b", lambda a: ce.kernels.csls_mutual_topk_candidates(_S, _S, _CAND, a)),
        ("cand_a", lambda a: kernels.CandidateLists(a, _CAND)),
        ("cand", lambda a: kernels.candidate_dots(_S, _S, a)),
        ("values", lambda a: ce.kernels.otsu_threshold(a)),
        ("pairs", lambda a: ce.kernels.VoteTable().add(a)),
        ("pairs", lambda a: ce.kernels.VoteTable().votes(a)),
        ("pairs", lambda a: ce.kernels.greedy_one_to_one(a, [0.5, 0.5])),
        ("scores", lambda a: ce.kernels.greedy_one_to_one(_PAIRS, a)),
        ("exclude_b", lambda a: ce.kernels.VoteTable().promote(_PAIRS, _SCORES, threshold=0.0, exclude_b=a)),
        ("Y", lambda a: ce.lorentz_pairwise(_S, a)),
        ("links", lambda a: evaluate_links(a, _PAIRS)),
        ("truth", lambda a: evaluate_links(_PAIRS, a)),
        ("seeds", lambda a: procrustes_link(_LINK_A, _LINK_A, a)),
        ("B", lambda a: procrustes_link(_LINK_A, a, _SEEDS)),
    ]


@fuzz(200)
@given(which=st.integers(0, len(_array_calls()) - 1), arr=ragged())
@counted
def test_ragged_and_nested_arrays_are_named(which, arr):
    name, call = _array_calls()[which]
    with pytest.raises(CLEAR) as info:
        call(arr)
    msg = str(info.value)
    assert msg.startswith(name) and "inhomogeneous" not in msg, msg


@fuzz(150)
@given(
    v=hnp.arrays(
        np.float64,
        st.integers(2, 12),
        elements=st.one_of(
            st.sampled_from([0.0, 5e-324, 1e-323, 1e-320, 1e-315, 1e-310, 2e-310, 5e-310, 2.2e-308]),
            st.integers(-(2**52), 2**52).map(lambda m: m * 5e-324),  # any subnormal (exact multiples of 2**-1074)
            st.integers(-(2**20), 2**20).map(lambda m: m * 5e-324),  # subnormals with few significant bits
            st.floats(-1.0, 1.0),
        ),
    ),
    e=st.integers(1, 900),
    bins=st.sampled_from([2, 3, 10, 100, 1000]),
)
@counted
def test_otsu_scales_by_powers_of_two_subnormals_included(v, e, bins):
    """otsu(v * 2**e) = otsu(v) * 2**e: a threshold among subnormals is as exact as one among normal numbers."""
    if np.abs(v).max() * 2.0**e > 1e300:
        return
    got, scaled = ce.kernels.otsu_threshold(v, bins=bins), ce.kernels.otsu_threshold(v * 2.0**e, bins=bins)
    if scaled == 0 or abs(scaled) >= np.finfo(np.float64).tiny:  # a subnormal divided by 2**e would round twice
        assert got == scaled / 2.0**e
    assert got == ref.otsu_threshold(v, bins=bins)
    assert v.min() <= got <= v.max()


@fuzz(150)
@given(
    dtype=st.sampled_from(["float32", "float64"]),
    log_scale=st.floats(-40, 310),
    d=st.integers(1, 6),
    c=st.sampled_from([0.1, 1.0, 4.0]),
    data=st.data(),
)
@counted
def test_time_component_near_overflow(dtype, log_scale, d, c, data):
    """x_t = sqrt(1/c + |x|^2) is finite and right whenever it is representable, else a clear ValueError."""
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    top = 38.5 if dtype == "float32" else 308.2
    u = data.draw(hnp.arrays(np.float64, d, elements=st.floats(-1, 1)))
    x = np.clip(u * 10.0 ** min(log_scale, top), -np.finfo(dtype).max, np.finfo(dtype).max).astype(dtype)
    expect = math.hypot(1 / math.sqrt(c), *map(float, x))
    try:
        got = float(L.time_component(torch.from_numpy(x[None]), c)[0])
    except ValueError as exc:
        assert expect > float(np.finfo(dtype).max) * (1 - 1e-6) and "time component" in str(exc)
        return
    assert math.isfinite(got) and got == pytest.approx(expect, rel=4 * float(np.finfo(dtype).eps))


def _float_calls():
    """(name of the float argument, call with it)."""
    from crossembed.linking import make_partial_overlap

    return {
        "sigma": lambda v: ce.anchor_signatures(_S, _S, sigma=v),
        "curvature": lambda v: ce.lorentz_pairwise(_S.astype(np.float64), _S.astype(np.float64), curvature=v),
        "threshold": lambda v: ce.kernels.greedy_one_to_one(_PAIRS, _SCORES, threshold=v),
        "alpha": lambda v: make_partial_overlap(200, alpha=v, n_seeds=1, random_state=0),
    }


@fuzz(150)
@given(name=st.sampled_from(sorted(_float_calls())), value=edge_floats())
@counted
def test_float_arguments_at_the_edges(name, value):
    """Subnormal, huge, NaN or inf: a finite answer or a clear error naming the argument."""
    try:
        got = _float_calls()[name](value)
    except CLEAR as exc:
        not_a_signature_error(exc)
        assert name in str(exc), str(exc)
        return
    for part in got if isinstance(got, tuple) else (got,):
        if isinstance(part, np.ndarray) and part.dtype.kind == "f":
            assert np.isfinite(part).all()


def test_zz_fuzz_volume(request):
    """The whole module ran at least 1,000 adversarial inputs (skipped when only some tests were selected)."""
    here = [i for i in request.session.items if i.module is request.module and i.name != "test_zz_fuzz_volume"]
    if len(here) < 15:
        pytest.skip("only part of the fuzz module was selected")
    print(f"\nfuzz inputs run: {COUNT['inputs']}, result comparisons with a reference: {COUNT.get('compared', 0)}")
    assert COUNT["inputs"] >= 1000
