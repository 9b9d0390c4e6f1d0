// Run-time instruction-set dispatch.
//
// The shipped build targets the x86-64 baseline (no -march=native); the same
// primitives (detail/isa_impl.hpp, templates over float/double) are compiled
// three times, each in its own namespace inside a `#pragma GCC target` region
// - AVX-512, AVX2+FMA and generic - and `isa()` picks the best table the CPU
// supports, once. (Including one file per ISA is the form GCC guarantees: a
// target attribute cannot depend on a template parameter, and an intrinsic
// cannot be inlined into code compiled without its target.) Only the innermost loops
// live there; all kernel logic (tiling, heaps, threading) is ISA-free.
//
// AArch64 has two tables, both on the base ISA (Advanced SIMD is part of every
// AArch64 CPU, so nothing is checked at run time): neon (fused multiply-adds,
// hardware float16 widening, a larger register block; the default) and generic
// (multiply, round, add: on AArch64 the build passes -ffp-contract=off, so the
// compiler fuses nothing the source does not). Other processors get generic,
// in GCC vector extensions.
#pragma once
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CROSSEMBED_X86 1
#include <immintrin.h>
#elif defined(__GNUC__) && defined(__aarch64__)
#define CROSSEMBED_AARCH64 1
#include <arm_neon.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "buffer.hpp"
#include "parallel.hpp"

namespace crossembed {
namespace simd {

// IEEE binary16 values are held as their bit patterns (ProbitDocs' float16
// storage); the kernels widen them to float32 exactly as they load them.
using half_t = std::uint16_t;

// The primitives a kernel may call, as one table per instruction set.
struct Isa {
  const char* name;
  float (*dot_f32)(const float*, const float*, std::size_t);
  double (*dot_f64)(const double*, const double*, std::size_t);
  // out[t] = dot_f32(x, Y + rows[t] * d, d) for t < m (the same values, several chains at once)
  void (*gather_dots_f32)(const float* x, const float* Y, std::size_t d, const std::int64_t* rows, std::size_t m,
                          float* out);
  std::size_t (*panel_width_f32)();
  std::size_t (*panel_width_f64)();
  void (*gemm_f32)(const float* const*, std::size_t, const float*, std::size_t, std::size_t, float*, std::size_t);
  void (*gemm_f64)(const double* const*, std::size_t, const double*, std::size_t, std::size_t, double*, std::size_t);
  float (*dot_tree_f32)(const float*, const float*, std::size_t);
  void (*pair_dots_f32)(const float* const*, std::size_t, const float*, std::size_t, std::size_t, float*, std::size_t);
  // out[t] = dot_tree_f32(a[t], b[t], n) for t < m (the same values, several chains at once)
  void (*tree_dots_f32)(const float* const* a, const float* const* b, std::size_t m, std::size_t n, float* out);
  // The same four with float16 right-hand sides (float32 queries, float32 accumulation).
  void (*gemm_f16)(const float* const*, std::size_t, const half_t*, std::size_t, std::size_t, float*, std::size_t);
  float (*dot_tree_f16)(const float*, const half_t*, std::size_t);
  void (*pair_dots_f16)(const float* const*, std::size_t, const half_t*, std::size_t, std::size_t, float*, std::size_t);
  void (*tree_dots_f16)(const float* const* a, const half_t* const* b, std::size_t m, std::size_t n, float* out);
  void (*signature_rows)(float*, std::size_t, std::size_t, const float*, float);
  // Positions j < n with x[j] >= bar, ascending, written to out; returns how many.
  std::size_t (*select_at_least)(const float* x, std::size_t n, float bar, std::uint32_t* out);
  // Positions j < n with x[j] >= bar or x[j] >= bars[j], ascending, written to out; returns how many.
  std::size_t (*select_at_least_either)(const float* x, std::size_t n, float bar, const float* bars,
                                        std::uint32_t* out);
  void (*lorentz_row_from_dots)(const float*, std::size_t, float, float, float, const float*, const float*,
                                const float*, float, float*);
  void (*lorentz_row_from_dots_f64)(const double*, std::size_t, double, double, double, const double*,
                                    const double*, const double*, double, double*);
  // The ANN graph's distance 1 - <a, b> in hnswlib's signature (rows a, b; a pointer to their size_t
  // length), on float32 or float16 rows (widened exactly, float32 accumulation); float16 rows widened.
  float (*ip_distance_f32)(const void*, const void*, const void*);
  float (*ip_distance_f16)(const void*, const void*, const void*);
  void (*widen_f16)(const half_t*, std::size_t, float*);
};

// Tree dots (dot_tree_f32, pair_dots_f32) take lengths that are a multiple of
// this (every ISA's float lanes divide it): pad with zeros.
constexpr std::size_t kTreePad = 16;

// One namespace per instruction set: what differs, then the shared
// implementation compiled under that ISA's target flags.
#if defined(CROSSEMBED_X86)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
namespace avx512 {
constexpr const char* kName = "avx512";
using VF = __m512;
using VD = __m512d;
constexpr int kMR = 8, kNRV = 2, kPR = 4, kPC = 4;
static inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VD vfma(VD a, VD b, VD c) { return _mm512_fmadd_pd(a, b, c); }
// Masked form with every lane on: _mm512_sqrt_ps passes _mm512_undefined_ps(),
// which GCC 12 flags as maybe-uninitialized at -O1 (the sanitizer build).
static inline VF vsqrt(VF a) { return _mm512_mask_sqrt_ps(a, __mmask16(-1), a); }
static inline VD vsqrt(VD a) { return _mm512_mask_sqrt_pd(a, __mmask8(-1), a); }
static inline VF load_half(const half_t* p) {  // 16 halves, unaligned, widened exactly
  __m256i h;
  std::memcpy(&h, p, sizeof(h));
  return _mm512_maskz_cvtph_ps(__mmask16(-1), h);  // masked, for the reason vsqrt is
}
static inline std::uint32_t mask_ge(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
#include "detail/isa_impl.hpp"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
constexpr const char* kName = "avx2";
using VF = __m256;
using VD = __m256d;
constexpr int kMR = 6, kNRV = 2, kPR = 3, kPC = 3;
static inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VD vfma(VD a, VD b, VD c) { return _mm256_fmadd_pd(a, b, c); }
static inline VF vsqrt(VF a) { return _mm256_sqrt_ps(a); }
static inline VD vsqrt(VD a) { return _mm256_sqrt_pd(a); }
static inline VF load_half(const half_t* p) {  // 8 halves (F16C)
  __m128i h;
  std::memcpy(&h, p, sizeof(h));
  return _mm256_cvtph_ps(h);
}
static inline std::uint32_t mask_ge(VF a, VF b) {
  return std::uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ)));
}
#include "detail/isa_impl.hpp"
}  // namespace avx2
#pragma GCC pop_options
#endif

#if defined(CROSSEMBED_AARCH64)
// AArch64 Advanced SIMD: 4 float / 2 double lanes, 32 registers (room for an
// 8 x 2-vector GEMM block), FMLA for vfma (explicit: the build does not contract).
namespace neon {
constexpr const char* kName = "neon";
typedef float VF __attribute__((vector_size(16)));
typedef double VD __attribute__((vector_size(16)));
constexpr int kMR = 8, kNRV = 2, kPR = 4, kPC = 4;
static inline VF vfma(VF a, VF b, VF c) { return (VF)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b); }
static inline VD vfma(VD a, VD b, VD c) { return (VD)vfmaq_f64((float64x2_t)c, (float64x2_t)a, (float64x2_t)b); }
static inline VF vsqrt(VF a) { return (VF)vsqrtq_f32((float32x4_t)a); }
static inline VD vsqrt(VD a) { return (VD)vsqrtq_f64((float64x2_t)a); }
// 4 halves widened by FCVTL: exact, subnormal halves included (FPCR.FZ16, which
// would flush them, is clear under Linux and crossembed never sets it).
static inline VF load_half(const half_t* p) { return (VF)vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline std::uint32_t mask_ge(VF a, VF b) {
  const uint32x4_t ge = vcgeq_f32((float32x4_t)a, (float32x4_t)b);
  return (vgetq_lane_u32(ge, 0) & 1) | (vgetq_lane_u32(ge, 1) & 2) | (vgetq_lane_u32(ge, 2) & 4) |
         (vgetq_lane_u32(ge, 3) & 8);
}
#include "detail/isa_impl.hpp"
}  // namespace neon
#endif

// Generic: SSE2 on x86-64, Advanced SIMD on AArch64, GCC vector extensions
// elsewhere; no FMA: multiply, round, add.
namespace generic {
constexpr const char* kName = "generic";
#if defined(CROSSEMBED_X86)
using VF = __m128;
using VD = __m128d;
#else
typedef float VF __attribute__((vector_size(16)));
typedef double VD __attribute__((vector_size(16)));
#endif
constexpr int kMR = 4, kNRV = 2, kPR = 2, kPC = 3;
static inline VF vfma(VF a, VF b, VF c) { return a * b + c; }
static inline VD vfma(VD a, VD b, VD c) { return a * b + c; }
#if defined(CROSSEMBED_X86)
static inline VF vsqrt(VF a) { return _mm_sqrt_ps(a); }
static inline VD vsqrt(VD a) { return _mm_sqrt_pd(a); }
#elif defined(CROSSEMBED_AARCH64)
static inline VF vsqrt(VF a) { return (VF)vsqrtq_f32((float32x4_t)a); }
static inline VD vsqrt(VD a) { return (VD)vsqrtq_f64((float64x2_t)a); }
#else
static inline VF vsqrt(VF a) {  // correctly rounded per lane, as the vector instructions are
  for (int l = 0; l < 4; ++l) a[l] = std::sqrt(a[l]);
  return a;
}
static inline VD vsqrt(VD a) {
  for (int l = 0; l < 2; ++l) a[l] = std::sqrt(a[l]);
  return a;
}
#endif
// 4 halves in integer arithmetic (exact, and unaffected by the
// denormals-are-zero flag): a normal half moves its exponent and mantissa
// into float position and rebiases (+112 = 127 - 15); a subnormal (or zero)
// is its 10-bit mantissa times 2^-24.
static inline VF load_half(const half_t* p) {
  typedef std::uint32_t U4 __attribute__((vector_size(16)));
#if defined(CROSSEMBED_X86)
  // 4 halves into the low 64 bits (an unaligned, may-alias load), zero-extended to 32-bit lanes
  const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const U4 h = (U4)_mm_unpacklo_epi16(raw, _mm_setzero_si128());
#else
  typedef std::uint16_t H4 __attribute__((vector_size(8)));
  H4 raw;
  std::memcpy(&raw, p, sizeof(raw));
  const U4 h = __builtin_convertvector(raw, U4);
#endif
  const U4 mag = h & 0x7fffu;
  const U4 normal = (mag << 13) + (112u << 23);
  const VF sub = __builtin_convertvector(mag, VF) * (1.0f / 16777216.0f);
  const U4 bits = mag < 0x400u ? (U4)sub : normal;
  return (VF)(bits | ((h & 0x8000u) << 16));
}
static inline std::uint32_t mask_ge(VF a, VF b) {  // bit l: a[l] >= b[l] (false for NaN)
  std::uint32_t m = 0;
  for (int l = 0; l < 4; ++l) m |= std::uint32_t(a[l] >= b[l]) << l;
  return m;
}
#include "detail/isa_impl.hpp"
}  // namespace generic

inline Isa select_isa() {
#if defined(CROSSEMBED_X86)
  // CROSSEMBED_SIMD=generic|avx2|avx512 caps the level (tests, reproducibility).
  const char* cap = std::getenv("CROSSEMBED_SIMD");
  const int cap_level = !cap ? 2 : std::strcmp(cap, "generic") == 0 ? 0 : std::strcmp(cap, "avx2") == 0 ? 1 : 2;
  __builtin_cpu_init();
  if (cap_level >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return avx512::table();
  // F16C (float16 loads) ships on every AVX2 CPU; checked all the same.
  if (cap_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return avx2::table();
#elif defined(CROSSEMBED_AARCH64)
  // CROSSEMBED_SIMD=generic selects generic; anything else, neon.
  const char* cap = std::getenv("CROSSEMBED_SIMD");
  if (!cap || std::strcmp(cap, "generic") != 0) return neon::table();
#endif
  return generic::table();
}

// Chosen once, on first use; kernels then call through the table.
inline const Isa& isa() {
  static const Isa chosen = select_isa();
  return chosen;
}

// Rows packed into GEMM panels for the selected ISA (see detail/isa_impl.hpp).
template <class T>
struct Panels {
  std::size_t n = 0, d = 0, width = 0;
  BigVector<T> data;
  Panels() = default;
  // Panels for n rows of d with every entry unwritten: the caller stores each row (store_row) and
  // the padding columns (zero_padding), in parallel if it likes (panels of distinct rows are disjoint).
  Panels(std::size_t n_, std::size_t d_) : n(n_), d(d_) {
    const Isa& I = isa();
    // float16 panels (ProbitDocs' float16 storage) have the float32 layout.
    width = std::is_same_v<T, double> ? I.panel_width_f64() : I.panel_width_f32();
    data.resize((n + width - 1) / width * width * d);
  }
  Panels(const T* const* rows, std::size_t n_, std::size_t d_, int num_threads = 1)
      : Panels(n_, d_, [rows, d_](std::size_t j, T* dst) { std::memcpy(dst, rows[j], d_ * sizeof(T)); }, num_threads) {}
  Panels(const T* x, std::size_t n_, std::size_t d_, int num_threads = 1)
      : Panels(n_, d_, [x, d_](std::size_t j, T* dst) { std::memcpy(dst, x + j * d_, d_ * sizeof(T)); },
               num_threads) {}
  // Row j is whatever row_of(j, dst) writes to dst[0..d): derived rows (the
  // probit variance block) are packed without materialising them first.
  // Panels are independent, so they are filled in parallel.
  template <class RowOf>
  Panels(std::size_t n_, std::size_t d_, RowOf row_of, int num_threads) : Panels(n_, d_) {
    const std::size_t n_panels = (n + width - 1) / width;
    parallel_for(std::int64_t(n_panels), num_threads, [&](std::int64_t p, int) {
      std::vector<T> row(d);
      T* P = data.data() + std::size_t(p) * width * d;
      for (std::size_t l = 0; l < width; ++l) {
        const std::size_t j = std::size_t(p) * width + l;
        if (j < n) {
          row_of(j, row.data());
        } else {
          std::fill(row.begin(), row.end(), T(0));  // padding columns
        }
        for (std::size_t k = 0; k < d; ++k) P[k * width + l] = row[k];
      }
    });
  }
  // Row j <- row[0..d) (a column of its panel).
  void store_row(std::size_t j, const T* row) {
    T* P = data.data() + (j / width) * width * d + j % width;
    for (std::size_t k = 0; k < d; ++k) P[k * width] = row[k];
  }
  // Zeros in the last panel's columns past row n.
  void zero_padding() {
    for (std::size_t j = n; j < (n + width - 1) / width * width; ++j) {
      T* P = data.data() + (j / width) * width * d + j % width;
      for (std::size_t k = 0; k < d; ++k) P[k * width] = T(0);
    }
  }
  // Panels starting at row `first` (a multiple of `width`).
  const T* at(std::size_t first) const { return data.data() + (first / width) * width * d; }
  // Entry k of row j.
  T get(std::size_t j, std::size_t k) const { return data[(j / width) * width * d + k * width + j % width]; }

  static std::vector<const T*> row_pointers(const T* x, std::size_t n, std::size_t d) {
    std::vector<const T*> rows(n);
    for (std::size_t i = 0; i < n; ++i) rows[i] = x + i * d;
    return rows;
  }
};

// out[i*ld + j] = <q[i], row j of the panels starting at `first`>, j < nc.
inline void gemm(const float* const* q, std::size_t nq, const Panels<float>& p, std::size_t first, std::size_t nc,
                 float* out, std::size_t ld) {
  isa().gemm_f32(q, nq, p.at(first), nc, p.d, out, ld);
}
inline void gemm(const double* const* q, std::size_t nq, const Panels<double>& p, std::size_t first, std::size_t nc,
                 double* out, std::size_t ld) {
  isa().gemm_f64(q, nq, p.at(first), nc, p.d, out, ld);
}
// float32 rows against float16 panels: the float32 product of the widened values.
inline void gemm(const float* const* q, std::size_t nq, const Panels<half_t>& p, std::size_t first, std::size_t nc,
                 float* out, std::size_t ld) {
  isa().gemm_f16(q, nq, p.at(first), nc, p.d, out, ld);
}

// Positions j < n with x[j] >= bar (ascending) into out; returns how many.
inline std::size_t select_at_least(const float* x, std::size_t n, float bar, std::uint32_t* out) {
  return isa().select_at_least(x, n, bar, out);
}

// Positions j < n with x[j] >= bar or x[j] >= bars[j] (ascending) into out; returns how many.
inline std::size_t select_at_least_either(const float* x, std::size_t n, float bar, const float* bars,
                                          std::uint32_t* out) {
  return isa().select_at_least_either(x, n, bar, bars, out);
}

// Tree dots (see detail/isa_impl.hpp) against float32 or float16 right-hand rows.
inline float dot_tree(const float* a, const float* b, std::size_t n) { return isa().dot_tree_f32(a, b, n); }
inline float dot_tree(const float* a, const half_t* b, std::size_t n) { return isa().dot_tree_f16(a, b, n); }
inline void pair_dots(const float* const* q, std::size_t nq, const float* c, std::size_t nc, std::size_t n,
                      float* out, std::size_t ld) {
  isa().pair_dots_f32(q, nq, c, nc, n, out, ld);
}
inline void pair_dots(const float* const* q, std::size_t nq, const half_t* c, std::size_t nc, std::size_t n,
                      float* out, std::size_t ld) {
  isa().pair_dots_f16(q, nq, c, nc, n, out, ld);
}
inline void tree_dots(const float* const* a, const float* const* b, std::size_t m, std::size_t n, float* out) {
  isa().tree_dots_f32(a, b, m, n, out);
}
inline void tree_dots(const float* const* a, const half_t* const* b, std::size_t m, std::size_t n, float* out) {
  isa().tree_dots_f16(a, b, m, n, out);
}

// float <-> IEEE binary16, in scalar integer arithmetic (packing, the
// probit moments, tests; the kernels widen with load_half). half_bits rounds to
// nearest, ties to even, straight from the double (one rounding: a float
// widens to double exactly), for |x| <= 65504 (the caller checks; beyond,
// the bits are those of an infinity or garbage). Values below 2^-14 become
// subnormal halves (fewer significant bits); below 2^-25, zero.
inline half_t half_bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof(b));
  const auto sign = half_t((b >> 48) & 0x8000u);
  const int e0 = int((b >> 52) & 0x7ff) - 1023;  // x = 1.m * 2^e0 (doubles below 2^-25 round to 0 anyway)
  if (e0 < -25) return sign;
  const int e = std::max(e0, -14);  // the half's exponent; -14 also for subnormals
  const int shift = 42 + (e - e0);  // 52 - 10 mantissa bits, more for subnormals: 42..53
  const std::uint64_t m = (b & ((std::uint64_t(1) << 52) - 1)) | (std::uint64_t(1) << 52);
  std::uint64_t q = m >> shift;
  const std::uint64_t rest = m & ((std::uint64_t(1) << shift) - 1), half_way = std::uint64_t(1) << (shift - 1);
  if (rest > half_way || (rest == half_way && (q & 1))) ++q;  // a carry into the exponent is right
  return half_t(sign | ((std::uint64_t(e + 14) << 10) + q));
}
inline float half_to_float(half_t h) {
  const std::uint32_t mag = h & 0x7fffu, sign = std::uint32_t(h & 0x8000u) << 16;
  float f;
  if (mag < 0x400u) {
    f = float(mag) * (1.0f / 16777216.0f);  // subnormal or zero: mantissa * 2^-24
  } else {
    const std::uint32_t bits = (mag << 13) + (112u << 23);
    std::memcpy(&f, &bits, sizeof(f));
  }
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= sign;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace simd
}  // namespace crossembed
