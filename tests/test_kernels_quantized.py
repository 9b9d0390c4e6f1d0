"""QuantizedDocs (int8 / bf16 first pass, exact float32 rescoring) against the float32 kernel and float64.

The returned scores are the float32 kernel's bits (the same micro-kernel rescoring), so
wherever the candidate list holds the true top-k, ids and scores equal ProbitDocs'
means-only top_k exactly; with candidates = N always. Against the float64 reference
(crossembed.reference.probit_topk with zero variances: the inner product), the scores
are within the float32 dot bound gamma_{D+2} sum |q c| (test_kernels_probit.py).
"""

import numpy as np
import pytest

import crossembed as ce
from _isa import X86_LEVELS, run_at_level
from crossembed import reference as ref
from crossembed.kernels import QuantizedDocs

CODES = ["int8", "bf16"]
U32 = 2.0**-24


def _float32_topk(queries, docs, k):
    return ce.ProbitDocs(docs, np.zeros_like(docs)).top_k(queries, np.zeros_like(queries), k)


def _clustered(rng, q, n, d):
    centres = rng.standard_normal((20, d)).astype(np.float32)
    docs = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, d)).astype(np.float32)
    queries = docs[rng.integers(0, n, q)] + 0.1 * rng.standard_normal((q, d)).astype(np.float32)
    return queries.astype(np.float32), docs.astype(np.float32)


@pytest.mark.parametrize("codes", CODES)
@pytest.mark.parametrize("n,d", [(1, 3), (37, 5), (531, 67), (3000, 128)])
def test_all_candidates_is_the_float32_topk(codes, n, d):
    """candidates = N: every doc is rescored, so ids and score bits are the float32 kernel's."""
    rng = np.random.default_rng(n + d)
    queries, docs = _clustered(rng, 19, n, d)
    k = min(n, 7)
    got = QuantizedDocs(docs, codes=codes).top_k(queries, k, candidates=n)
    want = _float32_topk(queries, docs, k)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("codes", CODES)
def test_against_float64_reference(codes):
    rng = np.random.default_rng(5)
    queries, docs = _clustered(rng, 50, 4000, 96)
    k = 10
    scores, ids = QuantizedDocs(docs, codes=codes).top_k(queries, k, candidates=80)
    want_scores, want_ids = ref.probit_topk(queries, np.zeros_like(queries), docs, np.zeros_like(docs), k)
    exact = queries.astype(np.float64) @ docs.astype(np.float64).T
    bound = (96 + 2) * U32 / (1 - (96 + 2) * U32) * (np.abs(queries) @ np.abs(docs).T)
    rows = np.arange(len(queries))[:, None]
    # each returned score is that doc's inner product, to float32 accuracy
    assert (np.abs(scores - exact[rows, ids]) <= bound[rows, ids]).all()
    # and the k-th best is the float64 k-th best, to the same accuracy
    np.testing.assert_allclose(scores[:, -1], want_scores[:, -1], rtol=0, atol=float(bound.max()))
    assert np.mean([len(set(a) & set(b)) for a, b in zip(ids, want_ids)]) / k > 0.999


@pytest.mark.parametrize("codes", CODES)
def test_adversarial_rows(codes):
    """Scales at the extremes, a constant column, zero rows, a doc equal to the query."""
    rng = np.random.default_rng(7)
    d = 40
    docs = rng.standard_normal((600, d)).astype(np.float32)
    docs[:, 3] = 0.25  # a constant column
    docs[10] *= 1e-30  # tiny scale (max/127 is subnormal)
    docs[11] = 0.0  # a zero row: scale 0
    docs[12] *= 1e12  # huge scale
    docs[13, :] = docs[13, 0]  # a constant row
    docs[14] = np.float32(1e-44)  # subnormal entries only: max / 127 underflows to a scale of 0
    queries = docs[[5, 12, 13, 100, 14]].copy()  # documents equal to the query
    queries[0] *= 3.0
    qd = QuantizedDocs(docs, codes=codes)
    want = _float32_topk(queries, docs, 5)
    got = qd.top_k(queries, 5, candidates=600)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    short = qd.top_k(queries, 5, candidates=30)
    np.testing.assert_array_equal(short[1][:4, 0], want[1][:4, 0])  # the best doc survives a short list
    assert want[1][1, 0] == 12


@pytest.mark.parametrize("codes", CODES)
def test_ties_across_the_candidate_cut(codes):
    """Twelve copies of the best doc and a candidate list of 5: code scores and exact scores both tie,
    and both passes break ties to the lower index, so the lowest five copies come back, as in float32."""
    rng = np.random.default_rng(11)
    docs = rng.standard_normal((300, 24)).astype(np.float32)
    copies = [3, 50, 51, 77, 120, 121, 150, 200, 201, 250, 280, 299]
    docs[copies] = docs[3]
    queries = docs[[3]] + 0.01 * rng.standard_normal((1, 24)).astype(np.float32)
    got = QuantizedDocs(docs, codes=codes).top_k(queries, 5, candidates=5)
    want = _float32_topk(queries, docs, 5)
    assert list(got[1][0]) == copies[:5]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("codes", CODES)
def test_candidates_and_threads(codes):
    rng = np.random.default_rng(13)
    queries, docs = _clustered(rng, 130, 9000, 33)
    qd = QuantizedDocs(docs, codes=codes)
    one = qd.top_k(queries, 10, num_threads=1)
    two = qd.top_k(queries, 10, num_threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    approx, cand = qd.candidates(queries, 40)
    assert cand.shape == (130, 40) and (np.diff(approx, axis=1) <= 0).all()
    # the top_k's ids are among the first pass's candidates of the same size
    sub = qd.top_k(queries, 10, candidates=40)[1]
    assert all(set(s) <= set(c) for s, c in zip(sub, cand))
    if codes == "int8":  # integer dots: the codes' scores are (float(dot) s_q) s_c within a float32 rounding or two
        dots = queries @ docs.T
        rows = np.arange(130)[:, None]
        assert np.corrcoef(approx.ravel(), dots[rows, cand].ravel())[0, 1] > 0.999


def test_memory_mapped_means(tmp_path):
    rng = np.random.default_rng(17)
    queries, docs = _clustered(rng, 20, 2000, 16)
    path = tmp_path / "means.f32"
    docs.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=docs.shape)
    qd = QuantizedDocs(mapped)
    got = qd.top_k(queries, 5, candidates=2000)
    np.testing.assert_array_equal(got[1], _float32_topk(queries, docs, 5)[1])
    assert qd.nbytes < docs.nbytes / 3  # int8 codes and a scale per row, not the means


@pytest.mark.parametrize(
    "kwargs,call,match",
    [
        ({}, lambda qd, q: qd.top_k(q, 0), "k"),
        ({}, lambda qd, q: qd.top_k(q, 11), "k"),  # k > N
        ({}, lambda qd, q: qd.top_k(q, 5, candidates=4), "candidates"),
        ({}, lambda qd, q: qd.top_k(q, 5, candidates=12), "candidates"),
        ({}, lambda qd, q: qd.top_k(q[:, :3], 5), "queries"),
        ({}, lambda qd, q: qd.top_k(np.where(q > 0, np.nan, q), 5), "queries"),
        ({}, lambda qd, q: qd.top_k(np.where(q > 0, np.inf, q), 5), "queries"),
        ({}, lambda qd, q: qd.candidates(q, 0), "candidates"),
    ],
)
def test_refusals(kwargs, call, match):
    rng = np.random.default_rng(19)
    docs = rng.standard_normal((10, 4)).astype(np.float32)
    qd = QuantizedDocs(docs, **kwargs)
    with pytest.raises(ValueError, match=match):
        call(qd, docs[:3])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e18])
def test_refuses_bad_means(bad):
    docs = np.ones((10, 4), np.float32)
    docs[7, 2] = bad
    with pytest.raises(ValueError, match="^means"):
        QuantizedDocs(docs)
    with pytest.raises(ValueError, match="codes"):
        QuantizedDocs(np.ones((10, 4), np.float32), codes="int4")


def test_instruction_sets_agree():
    """The portable and AVX2 kernels (CROSSEMBED_SIMD caps the level): int8 code scores are integer dots
    times the same two scales, so the candidate lists are identical; the bf16 lists (float32 sums in
    another order) hold the same top-10 here. (The exact scores are each table's float32 kernel's.)"""
    script = (
        "import numpy as np; from crossembed.kernels import QuantizedDocs\n"
        "rng = np.random.default_rng(23); d = rng.standard_normal((5000, 45)).astype(np.float32)\n"
        "q = d[:64] + 0.2 * rng.standard_normal((64, 45)).astype(np.float32)\n"
        "a, i = QuantizedDocs(d).candidates(q, 30); s, t = QuantizedDocs(d, codes='bf16').top_k(q, 10)\n"
        "import sys; np.save(sys.stdout.buffer, np.concatenate([a.ravel(), i.ravel(), t.ravel()]))\n"
    )
    outs = {}
    for level in X86_LEVELS:
        run = run_at_level(level, "-c", script)
        assert run.returncode == 0, run.stderr
        outs[level] = run.stdout
    assert outs["generic"] == outs["avx2"] == outs["avx512"]
