"""ProbitDocs(storage="float16"): documents held as IEEE halves, scored in float32.

The contract (kernels.ProbitDocs): each stored value is rounded once, to
nearest even, at packing - mu_h = fp16(mu_c), v_h = fp16(v_c),
s_h = fp16(mu_h**2 + v_h) - and the kernel scores them exactly as the float32
kernel scores float32 copies of them. So the float64 reference here is the
probit score of the rounded documents, with sig2 = <mu_q**2, v_h> + <v_q, s_h>,
and the tolerance is the float32 kernel's (tests/test_kernels_probit.py's
derivation, without the doc-side rounding of mu_c**2 + v_c, which is part of
the stored document here): |d mu_s| <= gamma_{D+2} sum |mu_q mu_h|,
|d sig2| <= gamma_{2D+4} sig2 + subnormal noise.
"""

import math
import textwrap

import numpy as np
import pytest

import crossembed as ce
from _isa import run_at_level
from _probit_paths import assert_paths_agree
from crossembed import reference as ref

U32 = 2.0**-24
TINY32 = 2.0**-149
F16 = np.float16


def gamma(n, u=U32):
    return n * u / (1 - n * u)


def rounded(mu_c, v_c):
    """The stored document, float64: (mu_h, v_h, s_h)."""
    mh = np.asarray(mu_c, np.float32).astype(F16).astype(np.float64)
    vh = np.asarray(v_c, np.float32).astype(F16).astype(np.float64)
    return mh, vh, (mh**2 + vh).astype(F16).astype(np.float64)


def reference(mu_q, v_q, mu_c, v_c):
    """float64 (scores, mu_s, sig2, score tolerance) of the float16-rounded documents."""
    mh, vh, sh = rounded(mu_c, v_c)
    mq, vq = mu_q.astype(np.float64), v_q.astype(np.float64)
    mu_s = mq @ mh.T
    sig2 = mq**2 @ vh.T + vq @ sh.T
    den = np.sqrt(1 + math.pi / 8 * sig2)
    scores = mu_s / den
    D = mu_q.shape[1]
    mu_tol = gamma(D + 2) * (np.abs(mq) @ np.abs(mh).T) + 2 * D * TINY32
    sig2_tol = gamma(2 * D + 4) * sig2 + 4 * D * TINY32
    tol = mu_tol / den + np.abs(scores) * (gamma(2 * D + 4) / 2 + 4 * U32) + 4 * D * TINY32
    return scores, mu_s, sig2, mu_tol, sig2_tol, tol


def gaussians(rng, n, d, *, scale=1.0, var_scale=0.1):
    mu = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    return mu, (rng.random((n, d)) * var_scale).astype(np.float32)


@pytest.mark.parametrize("D", [1, 7, 16, 33, 385])
@pytest.mark.parametrize("var_scale", [0.5, 0.016, 0.0], ids=["wide", "kron", "zero"])
def test_float16_matches_reference_of_rounded_docs(rng, check_topk, D, var_scale):
    mu_q, v_q = gaussians(rng, 37, D, var_scale=var_scale)
    mu_c, v_c = gaussians(rng, 701, D, var_scale=var_scale)
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")
    scores, mu_s, sig2 = docs.scores(mu_q, v_q, return_moments=True)
    r_scores, r_mu, r_sig2, mu_tol, sig2_tol, tol = reference(mu_q, v_q, mu_c, v_c)
    assert (np.abs(mu_s - r_mu) <= mu_tol).all()
    assert (np.abs(sig2 - r_sig2) <= sig2_tol).all()
    assert (np.abs(scores - r_scores) <= tol).all()
    k = 10
    t_scores, t_idx, _ = assert_paths_agree(docs, mu_q, v_q, k)
    check_topk(r_scores, tol, t_scores, t_idx)
    # Against the plain reference on the rounded (mu_h, v_h): only s_h's own rounding (2**-11 relative) differs.
    mh, vh, _ = rounded(mu_c, v_c)
    _, _, plain_sig2 = ref.probit_scores(mu_q, v_q, mh, vh, return_moments=True)
    assert (np.abs(sig2 - plain_sig2) <= (2.0**-11 + gamma(2 * D + 4)) * plain_sig2 + 4 * D * TINY32).all()


def test_float16_equals_float32_on_half_representable_docs(rng):
    """mu = i/16, v = j/256: mu, v and mu^2 + v are exact halves, so both storages hold the same values."""
    D = 45
    mu_c = (rng.integers(-32, 33, (900, D)) / 16).astype(np.float32)
    v_c = (rng.integers(0, 257, (900, D)) / 256).astype(np.float32)
    mu_q, v_q = gaussians(rng, 70, D, var_scale=0.3)
    f16 = ce.ProbitDocs(mu_c, v_c, storage="float16")
    f32 = ce.ProbitDocs(mu_c, v_c)
    for a, b in zip(f16.scores(mu_q, v_q, return_moments=True), f32.scores(mu_q, v_q, return_moments=True)):
        np.testing.assert_array_equal(a, b)
    for k in (1, 10, 900):
        for a, b in zip(f16.top_k(mu_q, v_q, k), f32.top_k(mu_q, v_q, k)):
            np.testing.assert_array_equal(a, b)
    cand = rng.permuted(np.tile(np.arange(900), (70, 1)), axis=1)[:, :200]
    for a, b in zip(f16.top_k(mu_q, v_q, 7, candidates=cand), f32.top_k(mu_q, v_q, 7, candidates=cand)):
        np.testing.assert_array_equal(a, b)


def test_stored_values_are_numpys_float16_rounding():
    """A one-hot query reads back single stored values: mu_s = mu_h, sig2 = v_h (or s_h), bit for bit."""
    ties = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.0**-25, 3 * 2.0**-25, 2.0**-24, 2.0**-14 - 2.0**-25, 1e-30]
    edges = [0.0, -0.0, 2.0**-14, 6.1e-5, 3.14159, 255.9, -255.9, 1024.5, 2047.5, 65504.0, 65503.0]
    values = np.array(ties + edges + [-t for t in ties], np.float32)
    D = len(values)
    rng = np.random.default_rng(0)
    # row 0: the means (s_h = fp16(mu_h^2)); row 1: the variances (s_h = v_h); row 2: sums mu_h^2 + v_h to round
    small = np.where(np.abs(values) <= 255.5, values, 1.0)
    mu_c = np.stack([small, np.zeros(D), rng.uniform(-10, 10, D)]).astype(np.float32)
    v_c = np.stack([np.zeros(D), np.abs(values), rng.uniform(0, 1, D)]).astype(np.float32)
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")
    mh, vh, sh = rounded(mu_c, v_c)
    zero = np.zeros((D, D), np.float32)
    eye = np.eye(D, dtype=np.float32)
    _, mu_s, sig2 = docs.scores(eye, zero, return_moments=True)
    np.testing.assert_array_equal(mu_s.T, mh.astype(np.float32))
    np.testing.assert_array_equal(sig2.T, vh.astype(np.float32))
    _, _, second = docs.scores(zero, eye, return_moments=True)
    np.testing.assert_array_equal(second.T, sh.astype(np.float32))
    assert vh[0, values.tolist().index(np.float32(2.0**-25))] == 0.0  # a tie below the smallest subnormal: to 0
    assert vh[0, values.tolist().index(np.float32(1e-30))] == 0.0


def test_adversarial_ties_zeros_and_sizes(rng):
    # duplicated and all-zero documents: exact ties, listed by index
    mu_c, v_c = gaussians(rng, 40, 7, var_scale=0.2)
    mu_c[20:] = mu_c[:20]
    v_c[20:] = v_c[:20]
    mu_c[[3, 23, 30, 31]] = 0.0
    v_c[[30, 31]] = 0.0
    mu_q, v_q = gaussians(rng, 9, 7, var_scale=0.2)
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")
    scores, idx, _ = assert_paths_agree(docs, mu_q, v_q, 40)  # k = N: a full sort
    for r in range(len(mu_q)):
        tied = np.diff(scores[r]) == 0
        assert (np.diff(idx[r])[tied] > 0).all()
        pos = {int(i): p for p, i in enumerate(idx[r])}
        copies = [i for i in range(20) if (mu_c[i] == mu_c[i + 20]).all() and (v_c[i] == v_c[i + 20]).all()]
        assert len(copies) == 18 and all(pos[i] + 1 == pos[i + 20] for i in copies)  # tied: original first
    r_scores, *_, tol = reference(mu_q, v_q, mu_c, v_c)
    assert (np.abs(scores - np.take_along_axis(r_scores, idx, axis=1)) <= np.take_along_axis(tol, idx, axis=1)).all()
    # N = 1, and zero queries (every score 0, index order)
    one = ce.ProbitDocs(mu_c[:1], v_c[:1], storage="float16")
    s1, i1 = one.top_k(mu_q, v_q, 1)
    assert (i1 == 0).all()
    np.testing.assert_array_equal(s1, one.scores(mu_q, v_q))
    zs, zi = docs.top_k(np.zeros_like(mu_q), v_q, 5)
    assert (zs == 0).all() and (zi == np.arange(5)).all()


def test_huge_in_range_and_tiny_values(rng):
    D = 33
    mu_c, v_c = gaussians(rng, 500, D, var_scale=0.5)
    mu_c[::7] *= 150.0  # |mu| up to a few hundred... clipped to keep mu^2 + v <= 65504
    np.clip(mu_c, -250.0, 250.0, out=mu_c)
    v_c[1::7] = rng.uniform(1e4, 6e4, (len(v_c[1::7]), D)).astype(np.float32)
    mu_c[1::7] = np.clip(mu_c[1::7], -1.0, 1.0)  # these docs' mu^2 + v stays below 65504 too
    v_c[2::5] *= 1e-5  # subnormal halves
    v_c[3::5] *= 1e-9  # flushed to zero
    mu_c[4::9] *= 1e-6
    mu_q, v_q = gaussians(rng, 12, D, var_scale=0.5)
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")
    scores, idx, _ = assert_paths_agree(docs, mu_q, v_q, 40)
    r_scores, r_mu, r_sig2, mu_tol, sig2_tol, tol = reference(mu_q, v_q, mu_c, v_c)
    _, mu_s, sig2 = docs.scores(mu_q, v_q, return_moments=True)
    assert (np.abs(mu_s - r_mu) <= mu_tol).all()
    assert (np.abs(sig2 - r_sig2) <= sig2_tol).all()
    assert (np.abs(scores - np.take_along_axis(r_scores, idx, axis=1)) <= np.take_along_axis(tol, idx, axis=1)).all()


def test_storage_validation():
    mu, v = np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)
    for bad in ("float64", "half", "bfloat16", None, 16, np.float16):
        with pytest.raises(ValueError, match="storage"):
            ce.ProbitDocs(mu, v, storage=bad)
    with pytest.raises(TypeError):
        ce.ProbitDocs(mu, v, "float16")  # keyword-only
    for name, m, var in [("mu_c", mu * 7e4, v), ("mu_c", -mu * 65505, v), ("v_c", mu, v * 65600)]:
        with pytest.raises(ValueError, match=name):
            ce.ProbitDocs(m, var, storage="float16")
        ce.ProbitDocs(m, var)  # float32 storage takes them
    with pytest.raises(ValueError, match=r"mu_c\*\*2 \+ v_c"):
        ce.ProbitDocs(mu * 256, v, storage="float16")  # 256^2 + 1 > 65504
    with pytest.raises(ValueError, match=r"mu_c\*\*2 \+ v_c"):
        ce.ProbitDocs(mu, v * 65504, storage="float16")
    ok = ce.ProbitDocs(mu * 255.9, v * 0.1, storage="float16")  # 255.875^2 + 0.1 <= 65504
    assert ok.storage == "float16" and "float16" in repr(ok)
    ce.ProbitDocs(mu * 0.0, v * 65504, storage="float16")


@pytest.mark.parametrize("D", [1, 7, 384])
def test_nbytes_halves(rng, D):
    mu_c, v_c = gaussians(rng, 1000, D)
    f32, f16 = ce.ProbitDocs(mu_c, v_c), ce.ProbitDocs(mu_c, v_c, storage="float16")
    bounds = 3 * 8 * 1000  # mass, vmin, vmax per doc (float64) in both
    assert f16.nbytes - bounds == (f32.nbytes - bounds) // 2
    assert f32.nbytes - bounds >= 12 * D * 1000
    if D == 384:
        assert f16.nbytes < 0.51 * f32.nbytes
    assert f32.storage == "float32"


def test_probit_topk_takes_float16_docs(rng):
    mu_c, v_c = gaussians(rng, 300, 20)
    mu_q, v_q = gaussians(rng, 8, 20)
    docs = ce.ProbitDocs(mu_c, v_c, storage="float16")
    for a, b in zip(ce.probit_topk(mu_q, v_q, docs, None, 5), docs.top_k(mu_q, v_q, 5)):
        np.testing.assert_array_equal(a, b)


_ISA_CHECK = textwrap.dedent(
    """
    import numpy as np, crossembed as ce, sys
    assert ce.simd_level() == sys.argv[1], ce.simd_level()
    rng = np.random.default_rng(5)
    for D in (1, 7, 33):
        mu_c = (rng.integers(-32, 33, (300, D)) / 16).astype(np.float32)
        v_c = (rng.integers(0, 257, (300, D)) / 256).astype(np.float32)
        mu_q = rng.standard_normal((20, D)).astype(np.float32)
        v_q = rng.uniform(0, 0.3, (20, D)).astype(np.float32)
        f16, f32 = ce.ProbitDocs(mu_c, v_c, storage="float16"), ce.ProbitDocs(mu_c, v_c)
        for a, b in zip(f16.scores(mu_q, v_q, return_moments=True), f32.scores(mu_q, v_q, return_moments=True)):
            assert (a == b).all()
        s, i = f16.top_k(mu_q, v_q, 10)
        assert (np.take_along_axis(f16.scores(mu_q, v_q), i, axis=1) == s).all()
        sub = np.float32(3 * 2.0**-24) * np.ones((300, D), np.float32)  # subnormal halves through load_half
        _, _, sig2 = ce.ProbitDocs(mu_c * 0, sub, storage="float16").scores(np.eye(D, dtype=np.float32)[:1], 0 * v_q[:1], return_moments=True)
        assert sig2[0, 0] == np.float32(3 * 2.0**-24), sig2[0, 0]
    """
)


@pytest.mark.parametrize("level", ["generic", "avx2", "avx512", "neon"])
def test_every_isa_widens_halves_exactly(level):
    """Each ISA's load_half (F16C, AVX-512, NEON, the integer fallback) against float32 storage of the same values."""
    # the tables this CPU can run: the generic one, then its family's in order of width
    family = ["generic", "neon"] if ce.simd_level() == "neon" else ["generic", "avx2", "avx512"]
    if level not in family or family.index(level) > family.index(ce.simd_level()):
        pytest.skip(f"this CPU runs {ce.simd_level()}")
    run = run_at_level(level, "-c", _ISA_CHECK, level, text=True)
    assert run.returncode == 0, run.stderr
