// Inner-product top-k over quantized document codes, rescored exactly.
//
// A first pass scores every (query, doc) pair on codes - int8 or bfloat16 - and
// keeps the m best per query (the candidate list); a second pass rescores
// those m with the float32 means and keeps the k best. The returned scores are
// the float32 inner products the float32 kernel computes (the same GEMM
// micro-kernel, one FMA chain over the dimensions in order: the same bits as
// ProbitDocs' means-only top_k), so the ids are the float32 top-k's except
// where the true top-k missed the candidate list.
//
// int8: per-row symmetric scales, x ~ s * c with s = max|x| / 127 and
// c = round(x / s) in [-127, 127], for the documents and the query alike. The
// product of a query and a doc is then one integer dot times two scales,
// s_q s_c <c_q, c_c>, with no per-dimension decode; a per-dimension scale
// (faiss' SQ8) would need the query rescaled per dimension and an offset term
// per doc. Row scales suit embeddings, whose rows differ in norm more than
// their dimensions differ in range. AVX-512 VNNI's vpdpbusd multiplies
// unsigned by signed bytes, so the docs are stored as c + 128 (u8) and the
// query as c (s8): <c_c + 128, c_q> = <c_c, c_q> + 128 sum(c_q), one correction
// per query. The integer dot is exact on every path (|dot| < 2^31 for
// D <= 65536), and the approximate score is (float(dot) * s_q) * s_c on every
// path: the candidate lists do not depend on the instruction set.
//
// bf16: each value rounded to nearest (ties to even) bfloat16, the query too;
// AVX-512 BF16's vdpbf16ps multiplies pairs and accumulates in float32. The
// approximate scores depend on the instruction set's accumulation (only the
// candidate lists, never the returned scores).
//
// Layout: panels of kLanes = 16 docs; int8 panels hold, per group of 4
// dimensions, the 16 docs' 4 codes (64 bytes), bf16 panels per group of 2
// dimensions the 16 docs' 2 values (64 bytes): a group is one 512-bit load and
// one vpdpbusd / vdpbf16ps against a broadcast query group. Dimensions are
// zero-padded to a whole group (code 0: the padding adds 0).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "buffer.hpp"
#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"
#include "topk.hpp"

namespace crossembed {
namespace quant {

constexpr std::size_t kLanes = 16;
using bf16_t = std::uint16_t;

// Padded dimensions: a multiple of 4 (int8 groups) and of 2 (bf16 groups).
inline std::size_t padded_dim(std::size_t d) { return (d + 3) / 4 * 4; }

// The row's scale and codes (see the top): s = max|x| / 127; a row whose scale is 0 (all zeros, or
// so small that max / 127 underflows) gets s = 0 and codes 0.
inline float int8_codes(const float* x, std::size_t d, std::int8_t* out) {
  float top = 0;
  for (std::size_t j = 0; j < d; ++j) top = std::max(top, std::fabs(x[j]));
  const float s = top / 127.0f;
  for (std::size_t j = 0; j < d; ++j) {
    const float c = s > 0 ? std::nearbyint(x[j] / s) : 0.0f;
    out[j] = std::int8_t(std::max(-127.0f, std::min(127.0f, c)));
  }
  return s;
}

// float32 to bfloat16, to nearest, ties to even (finite inputs).
inline bf16_t to_bf16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  b += 0x7fffu + ((b >> 16) & 1u);
  return bf16_t(b >> 16);
}

// Single rows for the ANN graph (graph.hpp's int8 and bf16 storage), compared one pair at a time.
// An int8 row is its scale (float32), the sum of its codes (int32: the VNNI path's correction, see the
// top) and its codes (int8, zero-padded to padded_dim); a bf16 row is its values, padded to an even count.
// The integer dot of two int8 rows is exact when |dot| < 2^31: 127^2 * D < 2^31 for D <= kMaxInt8RowDim.
constexpr std::size_t kInt8RowHeader = 8;
constexpr std::size_t kMaxInt8RowDim = std::size_t(1) << 17;
inline std::size_t int8_row_bytes(std::size_t d) { return kInt8RowHeader + padded_dim(d); }
inline std::size_t bf16_row_values(std::size_t d) { return d + d % 2; }

// x (d float32 values) as an int8 row at out (int8_row_bytes(d) bytes).
inline void int8_row(const float* x, std::size_t d, unsigned char* out) {
  std::int8_t* c = reinterpret_cast<std::int8_t*>(out + kInt8RowHeader);
  std::fill(c, c + padded_dim(d), std::int8_t(0));
  const float s = int8_codes(x, d, c);
  std::int32_t sum = 0;
  for (std::size_t j = 0; j < d; ++j) sum += c[j];
  std::memcpy(out, &s, sizeof(s));
  std::memcpy(out + sizeof(s), &sum, sizeof(sum));
}

// x as a bf16 row at out (bf16_row_values(d) values).
inline void bf16_row(const float* x, std::size_t d, bf16_t* out) {
  for (std::size_t j = 0; j < d; ++j) out[j] = to_bf16(x[j]);
  if (d % 2) out[d] = 0;
}

// An int8 row decoded: out[j] = s * c[j] (float32).
inline void int8_row_values(const unsigned char* row, std::size_t d, float* out) {
  float s;
  std::memcpy(&s, row, sizeof(s));
  const std::int8_t* c = reinterpret_cast<const std::int8_t*>(row + kInt8RowHeader);
  for (std::size_t j = 0; j < d; ++j) out[j] = s * float(c[j]);
}

// The int8 rows' distance from their integer dot and scales: ip = float(dot) * (s_a * s_b) rounded, then
// 1 - ip rounded, on every path (the empty asm keeps the compiler from fusing the two into one FMA where the
// target has one, which would change the last bit from one instruction set to the next).
inline float int8_distance_of(std::int32_t dot, float sa, float sb) {
  float ip = float(dot) * (sa * sb);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(ip));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(ip));
#endif
  return 1.0f - ip;
}

// A bf16 value widened to float32 (exact).
inline float from_bf16(bf16_t h) {
  const std::uint32_t b = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// One instruction set's first-pass kernels. Rows q[i] are padded to dp (a multiple of 4);
// panels start at a panel boundary; out[i * ld + j] for i < nq, j < nc.
struct Kernels {
  const char* name;  // the int8 path's instruction set, and the bf16 path's where it differs
  // int8: q[i] are int8 codes; corr[i] = 128 * sum(q[i]); qs[i], ds[j] the scales.
  void (*int8_scores)(const std::int8_t* const* q, const std::int32_t* corr, const float* qs, std::size_t nq,
                      const std::uint8_t* panels, const float* ds, std::size_t nc, std::size_t dp, float* out,
                      std::size_t ld);
  void (*bf16_scores)(const bf16_t* const* q, std::size_t nq, const bf16_t* panels, std::size_t nc, std::size_t dp,
                      float* out, std::size_t ld);
  // The graph's distance 1 - <a, b> between two int8 rows, int8_distance_of(dot, s_a, s_b) with the exact
  // integer dot (the same value on every path), or two bf16 rows (float32 accumulation, its order the
  // path's); hnswlib's signature: rows a, b and a pointer to their size_t dimension.
  float (*int8_distance)(const void* a, const void* b, const void* pdim);
  float (*bf16_distance)(const void* a, const void* b, const void* pdim);
};

// Portable kernels: detail/quant_portable.hpp, once per instruction set.
namespace generic {
constexpr const char* kName = "generic";
#include "detail/quant_portable.hpp"
}  // namespace generic

#if defined(CROSSEMBED_X86)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr const char* kName = "avx2";
#include "detail/quant_portable.hpp"
}  // namespace avx2
#pragma GCC pop_options

// AVX-512 VNNI (int8) and, where present, AVX-512 BF16: R query rows against 2 panels (32 docs) per
// register block, 2R accumulators, one load per panel and one broadcast per row for each group.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")
namespace vnni {
// acc += the dot of c's u8 and b's s8 quadruples per lane. In asm: GCC 12 gives the intrinsic's
// accumulator a copy per call (vmovdqa around every vpdpbusd of a register block, most of its time).
static inline void dpbusd(__m512i& acc, __m512i c, __m512i b) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(c), "v"(b)); }
// Accumulators of one query row against the two panels.
struct Acc2 {
  __m512i x, y;
};
static inline Acc2 zero2() { return Acc2{_mm512_setzero_si512(), _mm512_setzero_si512()}; }
static inline void step(Acc2& a, __m512i c0, __m512i c1, const std::int8_t* qg) {
  std::int32_t v;
  std::memcpy(&v, qg, 4);
  const __m512i b = _mm512_set1_epi32(v);
  dpbusd(a.x, c0, b);
  dpbusd(a.y, c1, b);
}
static inline void finish(const Acc2& a, std::int32_t corr, float qs, __m512 s0, __m512 s1, std::size_t w, float* o) {
  const __m512i c = _mm512_set1_epi32(corr);
  const __m512 sq = _mm512_set1_ps(qs);
  // masked converts: the unmasked one passes _mm512_undefined_ps(), which GCC 12 flags (simd.hpp, vsqrt)
  const __m512 v0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_cvtepi32_ps(__mmask16(-1), _mm512_sub_epi32(a.x, c)), sq), s0);
  const __m512 v1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_cvtepi32_ps(__mmask16(-1), _mm512_sub_epi32(a.y, c)), sq), s1);
  _mm512_mask_storeu_ps(o, __mmask16(w >= kLanes ? 0xffffu : (1u << w) - 1u), v0);
  if (w > kLanes) _mm512_mask_storeu_ps(o + kLanes, __mmask16(w >= 2 * kLanes ? 0xffffu : (1u << (w - kLanes)) - 1u), v1);
}
// Eight rows (named accumulators: an array of them is kept on the stack) or one.
static void int8_block8(const std::int8_t* const* q, const std::int32_t* corr, const float* qs, const std::uint8_t* P0,
                        const std::uint8_t* P1, const float* ds, std::size_t groups, std::size_t w, float* out,
                        std::size_t ld) {
  Acc2 a0 = zero2(), a1 = zero2(), a2 = zero2(), a3 = zero2(), a4 = zero2(), a5 = zero2(), a6 = zero2(), a7 = zero2();
  for (std::size_t g = 0; g < groups; ++g) {
    const __m512i c0 = _mm512_loadu_si512(P0 + g * 64), c1 = _mm512_loadu_si512(P1 + g * 64);
    step(a0, c0, c1, q[0] + 4 * g);
    step(a1, c0, c1, q[1] + 4 * g);
    step(a2, c0, c1, q[2] + 4 * g);
    step(a3, c0, c1, q[3] + 4 * g);
    step(a4, c0, c1, q[4] + 4 * g);
    step(a5, c0, c1, q[5] + 4 * g);
    step(a6, c0, c1, q[6] + 4 * g);
    step(a7, c0, c1, q[7] + 4 * g);
  }
  const __m512 s0 = _mm512_loadu_ps(ds), s1 = _mm512_loadu_ps(ds + kLanes);
  finish(a0, corr[0], qs[0], s0, s1, w, out);
  finish(a1, corr[1], qs[1], s0, s1, w, out + ld);
  finish(a2, corr[2], qs[2], s0, s1, w, out + 2 * ld);
  finish(a3, corr[3], qs[3], s0, s1, w, out + 3 * ld);
  finish(a4, corr[4], qs[4], s0, s1, w, out + 4 * ld);
  finish(a5, corr[5], qs[5], s0, s1, w, out + 5 * ld);
  finish(a6, corr[6], qs[6], s0, s1, w, out + 6 * ld);
  finish(a7, corr[7], qs[7], s0, s1, w, out + 7 * ld);
}
static void int8_block1(const std::int8_t* const* q, const std::int32_t* corr, const float* qs, const std::uint8_t* P0,
                        const std::uint8_t* P1, const float* ds, std::size_t groups, std::size_t w, float* out,
                        std::size_t) {
  Acc2 a = zero2();
  for (std::size_t g = 0; g < groups; ++g)
    step(a, _mm512_loadu_si512(P0 + g * 64), _mm512_loadu_si512(P1 + g * 64), q[0] + 4 * g);
  finish(a, corr[0], qs[0], _mm512_loadu_ps(ds), _mm512_loadu_ps(ds + kLanes), w, out);
}

static void int8_scores(const std::int8_t* const* q, const std::int32_t* corr, const float* qs, std::size_t nq,
                        const std::uint8_t* panels, const float* ds, std::size_t nc, std::size_t dp, float* out,
                        std::size_t ld) {
  const std::size_t groups = dp / 4, pbytes = groups * 64;
  for (std::size_t p0 = 0; p0 < nc; p0 += 2 * kLanes) {
    const std::uint8_t* P0 = panels + (p0 / kLanes) * pbytes;
    const std::size_t w = std::min(2 * kLanes, nc - p0);
    // A lone last panel reads itself twice (the second half is not stored).
    const std::uint8_t* P1 = w > kLanes ? P0 + pbytes : P0;
    const float* dsp = ds + p0;  // the scales are padded to whole pairs of panels
    std::size_t i = 0;
    for (; i + 8 <= nq; i += 8) int8_block8(q + i, corr + i, qs + i, P0, P1, dsp, groups, w, out + i * ld + p0, ld);
    for (; i < nq; ++i) int8_block1(q + i, corr + i, qs + i, P0, P1, dsp, groups, w, out + i * ld + p0, ld);
  }
}

// Two int8 rows: a's codes + 128 (an XOR of the sign bit) as vpdpbusd's unsigned side, b's as the
// signed side, b's stored code sum for the correction; 64 dimensions an instruction, two chains, the
// last group masked (its a lanes read 128, its b lanes 0). The lane sums wrap mod 2^32 and the true dot
// fits an int32 (kMaxInt8RowDim), so the uint32 result is exact.
static float int8_distance(const void* pa, const void* pb, const void* pdim) {
  const std::size_t dp = padded_dim(*static_cast<const std::size_t*>(pdim));
  const unsigned char* a = static_cast<const unsigned char*>(pa);
  const unsigned char* b = static_cast<const unsigned char*>(pb);
  float sa, sb;
  std::int32_t sum_b;
  std::memcpy(&sa, a, sizeof(sa));
  std::memcpy(&sb, b, sizeof(sb));
  std::memcpy(&sum_b, b + sizeof(sb), sizeof(sum_b));
  a += kInt8RowHeader, b += kInt8RowHeader;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
  std::size_t j = 0;
  for (; j + 128 <= dp; j += 128) {
    dpbusd(acc0, _mm512_xor_si512(_mm512_loadu_si512(a + j), flip), _mm512_loadu_si512(b + j));
    dpbusd(acc1, _mm512_xor_si512(_mm512_loadu_si512(a + j + 64), flip), _mm512_loadu_si512(b + j + 64));
  }
  for (; j < dp; j += 64) {
    const __mmask64 m = dp - j >= 64 ? ~__mmask64(0) : (__mmask64(1) << (dp - j)) - 1;
    dpbusd(acc0, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a + j), flip), _mm512_maskz_loadu_epi8(m, b + j));
  }
  // Lanes summed through memory (wrapping, so any order gives the same bits): _mm512_reduce_add_epi32
  // passes an undefined vector that GCC 12 flags as maybe-uninitialized at -O1 (the sanitizer build).
  alignas(64) std::uint32_t lanes[16];
  _mm512_store_si512(lanes, _mm512_add_epi32(acc0, acc1));
  std::uint32_t raw = 0;
  for (const std::uint32_t v : lanes) raw += v;
  return int8_distance_of(std::int32_t(raw - 128u * std::uint32_t(sum_b)), sa, sb);
}
}  // namespace vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")
namespace bf16 {
// acc += the dot of c's and b's bf16 pairs per lane (in asm for the reason vnni::dpbusd is).
static inline void dpbf16(__m512& acc, __m512i c, __m512i b) { asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(c), "v"(b)); }
struct Acc2 {
  __m512 x, y;
};
static inline Acc2 zero2() { return Acc2{_mm512_setzero_ps(), _mm512_setzero_ps()}; }
static inline void step(Acc2& a, __m512i c0, __m512i c1, const bf16_t* qg) {
  std::int32_t v;
  std::memcpy(&v, qg, 4);
  const __m512i b = _mm512_set1_epi32(v);
  dpbf16(a.x, c0, b);
  dpbf16(a.y, c1, b);
}
static inline void finish(const Acc2& a, std::size_t w, float* o) {
  _mm512_mask_storeu_ps(o, __mmask16(w >= kLanes ? 0xffffu : (1u << w) - 1u), a.x);
  if (w > kLanes) _mm512_mask_storeu_ps(o + kLanes, __mmask16(w >= 2 * kLanes ? 0xffffu : (1u << (w - kLanes)) - 1u), a.y);
}
// Eight rows (named accumulators, as in vnni) or one.
static void bf16_block8(const bf16_t* const* q, const bf16_t* P0, const bf16_t* P1, std::size_t groups, std::size_t w,
                        float* out, std::size_t ld) {
  Acc2 a0 = zero2(), a1 = zero2(), a2 = zero2(), a3 = zero2(), a4 = zero2(), a5 = zero2(), a6 = zero2(), a7 = zero2();
  for (std::size_t g = 0; g < groups; ++g) {
    const __m512i c0 = _mm512_loadu_si512(P0 + g * 32), c1 = _mm512_loadu_si512(P1 + g * 32);
    step(a0, c0, c1, q[0] + 2 * g);
    step(a1, c0, c1, q[1] + 2 * g);
    step(a2, c0, c1, q[2] + 2 * g);
    step(a3, c0, c1, q[3] + 2 * g);
    step(a4, c0, c1, q[4] + 2 * g);
    step(a5, c0, c1, q[5] + 2 * g);
    step(a6, c0, c1, q[6] + 2 * g);
    step(a7, c0, c1, q[7] + 2 * g);
  }
  finish(a0, w, out);
  finish(a1, w, out + ld);
  finish(a2, w, out + 2 * ld);
  finish(a3, w, out + 3 * ld);
  finish(a4, w, out + 4 * ld);
  finish(a5, w, out + 5 * ld);
  finish(a6, w, out + 6 * ld);
  finish(a7, w, out + 7 * ld);
}
static void bf16_block1(const bf16_t* const* q, const bf16_t* P0, const bf16_t* P1, std::size_t groups, std::size_t w,
                        float* out, std::size_t) {
  Acc2 a = zero2();
  for (std::size_t g = 0; g < groups; ++g)
    step(a, _mm512_loadu_si512(P0 + g * 32), _mm512_loadu_si512(P1 + g * 32), q[0] + 2 * g);
  finish(a, w, out);
}

static void bf16_scores(const bf16_t* const* q, std::size_t nq, const bf16_t* panels, std::size_t nc, std::size_t dp,
                        float* out, std::size_t ld) {
  const std::size_t groups = dp / 2, pvals = groups * 32;
  for (std::size_t p0 = 0; p0 < nc; p0 += 2 * kLanes) {
    const bf16_t* P0 = panels + (p0 / kLanes) * pvals;
    const std::size_t w = std::min(2 * kLanes, nc - p0);
    const bf16_t* P1 = w > kLanes ? P0 + pvals : P0;
    std::size_t i = 0;
    for (; i + 8 <= nq; i += 8) bf16_block8(q + i, P0, P1, groups, w, out + i * ld + p0, ld);
    for (; i < nq; ++i) bf16_block1(q + i, P0, P1, groups, w, out + i * ld + p0, ld);
  }
}

// _mm512_reduce_add_ps's order (halves, quarters, pairs) through memory: the intrinsic passes an
// undefined vector that GCC 12 flags as maybe-uninitialized at -O1 (the sanitizer build).
static inline float reduce_add(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = (l[i + 12] + l[i + 4]) + (l[i + 8] + l[i]);
  return (t[2] + t[0]) + (t[3] + t[1]);
}

// Two bf16 rows: 32 values an instruction, two chains, the last group masked (zeros add 0).
static float bf16_distance(const void* pa, const void* pb, const void* pdim) {
  const std::size_t n = bf16_row_values(*static_cast<const std::size_t*>(pdim));
  const bf16_t* a = static_cast<const bf16_t*>(pa);
  const bf16_t* b = static_cast<const bf16_t*>(pb);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  std::size_t j = 0;
  for (; j + 64 <= n; j += 64) {
    dpbf16(acc0, _mm512_loadu_si512(a + j), _mm512_loadu_si512(b + j));
    dpbf16(acc1, _mm512_loadu_si512(a + j + 32), _mm512_loadu_si512(b + j + 32));
  }
  for (; j < n; j += 32) {
    const __mmask32 m = n - j >= 32 ? ~__mmask32(0) : (__mmask32(1) << (n - j)) - 1;
    dpbf16(acc0, _mm512_maskz_loadu_epi16(m, a + j), _mm512_maskz_loadu_epi16(m, b + j));
  }
  return 1.0f - reduce_add(_mm512_add_ps(acc0, acc1));
}
}  // namespace bf16
#pragma GCC pop_options
#endif

// The first-pass kernels for this CPU, chosen once: int8 on VNNI, bf16 on AVX-512 BF16, else AVX2,
// else portable (CROSSEMBED_SIMD=generic|avx2 caps the level, as for the float kernels).
inline Kernels select_kernels() {
#if defined(CROSSEMBED_X86)
  const char* cap = std::getenv("CROSSEMBED_SIMD");
  const int level = !cap ? 2 : std::strcmp(cap, "generic") == 0 ? 0 : std::strcmp(cap, "avx2") == 0 ? 1 : 2;
  __builtin_cpu_init();
  Kernels k = generic::table();
  if (level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) k = avx2::table();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  if (level >= 2 && avx512 && __builtin_cpu_supports("avx512vnni")) {
    k.int8_scores = &vnni::int8_scores;
    k.int8_distance = &vnni::int8_distance;
    k.name = "avx512vnni";
  }
  if (level >= 2 && avx512 && __builtin_cpu_supports("avx512bf16")) {
    k.bf16_scores = &bf16::bf16_scores;
    k.bf16_distance = &bf16::bf16_distance;
    k.name = k.int8_scores == &vnni::int8_scores ? "avx512vnni+avx512bf16" : "avx2+avx512bf16";
  }
  return k;
#else
  return generic::table();
#endif
}

inline const Kernels& kernels() {
  static const Kernels chosen = select_kernels();
  return chosen;
}

}  // namespace quant

// Documents as int8 or bf16 codes (see the top), with the float32 means (caller-owned, e.g. a
// memory-mapped file, read only for rescoring) behind them.
class QuantizedDocs {
 public:
  enum class Code { int8, bf16 };

  QuantizedDocs(const float* means, std::size_t n, std::size_t d, Code code, int num_threads)
      : means_(means), n_(n), d_(d), dp_(quant::padded_dim(d)), code_(code) {
    const std::size_t n_panels = (n + quant::kLanes - 1) / quant::kLanes;
    // Scales padded to whole pairs of panels (the AVX-512 kernel loads 32 at a time).
    const std::size_t n_pad = (n_panels + 1) / 2 * 2 * quant::kLanes;
    if (code == Code::int8) {
      i8_.resize(n_panels * dp_ * quant::kLanes);
      scale_.assign(n_pad, 0.0f);
    } else {
      h_.resize(n_panels * dp_ * quant::kLanes);
    }
    parallel_for(std::int64_t(n_panels), n >= 8192 ? num_threads : 1, [&](std::int64_t p, int) {
      std::vector<std::int8_t> c(dp_);
      for (std::size_t l = 0; l < quant::kLanes; ++l) {
        const std::size_t j = std::size_t(p) * quant::kLanes + l;
        if (code_ == Code::int8) {
          std::fill(c.begin(), c.end(), std::int8_t(0));
          if (j < n_) scale_[j] = quant::int8_codes(means_ + j * d_, d_, c.data());
          std::uint8_t* P = i8_.data() + std::size_t(p) * dp_ * quant::kLanes;
          for (std::size_t k = 0; k < dp_; ++k) P[(k / 4) * 64 + l * 4 + k % 4] = std::uint8_t(c[k] + 128);
        } else {
          quant::bf16_t* P = h_.data() + std::size_t(p) * dp_ * quant::kLanes;
          for (std::size_t k = 0; k < dp_; ++k)
            P[(k / 2) * 32 + l * 2 + k % 2] = j < n_ && k < d_ ? quant::to_bf16(means_[j * d_ + k]) : 0;
        }
      }
    });
  }

  std::size_t size() const { return n_; }
  std::size_t dim() const { return d_; }
  // Bytes held: the codes and the scales (the means are the caller's).
  std::size_t nbytes() const { return i8_.size() + h_.size() * sizeof(quant::bf16_t) + scale_.size() * sizeof(float); }

  // The m best docs per query by code score (ids ascending per row is not promised: best first), (q, m).
  void candidates(const float* x, std::size_t q, std::size_t m, std::int64_t* out_idx, float* out_approx,
                  int num_threads) const {
    if (q == 0) return;
    std::vector<TopK> lists = first_pass(x, q, m, num_threads);
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t i, int) {
      std::vector<float> s(m);
      write_topk(lists[std::size_t(i)], m, out_approx ? out_approx + std::size_t(i) * m : s.data(),
                 out_idx + std::size_t(i) * m);
    });
  }

  // Top-k by exact float32 inner product among each query's m first-pass candidates (k <= m <= n).
  void topk(const float* x, std::size_t q, std::size_t k, std::size_t m, float* out_scores, std::int64_t* out_idx,
            int num_threads) const {
    if (q == 0) return;
    std::vector<TopK> lists = first_pass(x, q, m, num_threads);
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t ii, int) {
      const std::size_t i = std::size_t(ii);
      const std::vector<Scored>& items = lists[i].items();
      std::vector<const float*> rows(items.size());
      for (std::size_t t = 0; t < items.size(); ++t) rows[t] = means_ + std::size_t(items[t].index) * d_;
      // The candidates packed as GEMM panels and scored by the float32 micro-kernel: per entry one FMA
      // chain over the dimensions in order, the bits of the float32 top-k.
      const simd::Panels<float> packed(rows.data(), rows.size(), d_);
      std::vector<float> exact(rows.size());
      const float* xi = x + i * d_;
      if (!rows.empty()) simd::gemm(&xi, 1, packed, 0, rows.size(), exact.data(), rows.size());
      TopK best(k);
      for (std::size_t t = 0; t < items.size(); ++t) best.push(exact[t], items[t].index);
      write_topk(best, k, out_scores + i * k, out_idx + i * k);
    });
  }

 private:
  // 256 queries a block: the codes (D bytes a doc) stream from memory once per block, not four times.
  static constexpr std::size_t kQueryBlock = 256, kDocTile = 256;  // kDocTile: whole pairs of panels

  // Each query's m best docs by code score (a heap per query, ties to the lower index).
  std::vector<TopK> first_pass(const float* x, std::size_t q, std::size_t m, int num_threads) const {
    const quant::Kernels& K = quant::kernels();
    // The queries' codes: int8 with their scale and correction, or bf16.
    std::vector<std::int8_t> qc(code_ == Code::int8 ? q * dp_ : 0);
    std::vector<quant::bf16_t> qh(code_ == Code::bf16 ? q * dp_ : 0);
    std::vector<float> qs(q);
    std::vector<std::int32_t> corr(q);
    std::vector<const std::int8_t*> qcp(q);
    std::vector<const quant::bf16_t*> qhp(q);
    for (std::size_t i = 0; i < q; ++i) {
      if (code_ == Code::int8) {
        qs[i] = quant::int8_codes(x + i * d_, d_, qc.data() + i * dp_);
        std::int32_t sum = 0;
        for (std::size_t j = 0; j < d_; ++j) sum += qc[i * dp_ + j];
        corr[i] = 128 * sum;
        qcp[i] = qc.data() + i * dp_;
      } else {
        for (std::size_t j = 0; j < d_; ++j) qh[i * dp_ + j] = quant::to_bf16(x[i * d_ + j]);
        qhp[i] = qh.data() + i * dp_;
      }
    }
    SweepPlan plan(q, n_, kQueryBlock, kDocTile);
    plan.split_columns(4096, num_threads);
    const std::size_t n_chunks = plan.n_chunks();
    std::vector<TopK> partial(q * n_chunks);
    parallel_for(plan.n_tasks(), num_threads, [&](std::int64_t task, int tid) {
      const Block b = plan.block(task, tid);
      std::vector<float> tile((b.r1 - b.r0) * kDocTile);
      std::vector<std::uint32_t> hits(kDocTile);
      for (std::size_t i = b.r0; i < b.r1; ++i) partial[i * n_chunks + b.chunk].reset(m);
      for (std::size_t t0 = b.c0; t0 < b.c1; t0 += kDocTile) {
        const std::size_t t1 = std::min(b.c1, t0 + kDocTile), w = t1 - t0;
        if (code_ == Code::int8) {
          K.int8_scores(qcp.data() + b.r0, corr.data() + b.r0, qs.data() + b.r0, b.r1 - b.r0,
                        i8_.data() + (t0 / quant::kLanes) * dp_ * quant::kLanes, scale_.data() + t0, w, dp_,
                        tile.data(), kDocTile);
        } else {
          K.bf16_scores(qhp.data() + b.r0, b.r1 - b.r0, h_.data() + (t0 / quant::kLanes) * dp_ * quant::kLanes, w,
                        dp_, tile.data(), kDocTile);
        }
        for (std::size_t i = b.r0; i < b.r1; ++i) {
          TopK& heap = partial[i * n_chunks + b.chunk];
          const float* row = tile.data() + (i - b.r0) * kDocTile;
          const std::size_t hit = simd::select_at_least(row, w, heap.threshold(), hits.data());
          for (std::size_t r = 0; r < hit; ++r) heap.push(row[hits[r]], std::int64_t(t0 + hits[r]));
        }
      }
    });
    std::vector<TopK> lists(q);
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t i, int) {
      TopK& merged = partial[std::size_t(i) * n_chunks];
      for (std::size_t ch = 1; ch < n_chunks; ++ch) merged.merge(partial[std::size_t(i) * n_chunks + ch]);
      lists[std::size_t(i)] = std::move(merged);
    });
    return lists;
  }

  const float* means_;
  std::size_t n_, d_, dp_;
  Code code_;
  BigVector<std::uint8_t> i8_;  // int8 panels (codes + 128)
  BigVector<quant::bf16_t> h_;  // bf16 panels
  std::vector<float> scale_;    // per-doc int8 scale, padded to whole pairs of panels
};

}  // namespace crossembed
