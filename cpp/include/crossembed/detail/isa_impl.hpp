// Per-ISA primitives. This file has no include guard on purpose: simd.hpp
// includes it once per instruction set inside `#pragma GCC target` regions,
// with CE_NS naming the namespace and CE_* macros naming the vector type and
// its load/FMA intrinsics. Everything here is plain functions on raw pointers.
//
// Reproducibility contract: for one ISA, dot() and tile_dot() give bit-identical
// results for the same pair (same lane split, same FMA chain, same horizontal
// sum, same scalar tail), so scores do not depend on which path or tile or
// thread computed them.

namespace CE_NS {

using VF = CE_VF;
using VD = CE_VD;
typedef int VI __attribute__((vector_size(sizeof(VF))));
constexpr std::size_t WF = sizeof(VF) / sizeof(float);
constexpr std::size_t WD = sizeof(VD) / sizeof(double);

static inline VF loadf(const float* p) { return CE_LOADF(p); }
static inline VD loadd(const double* p) { return CE_LOADD(p); }
static inline VF fmaf_(VF a, VF b, VF c) { return CE_FMAF(a, b, c); }
static inline VD fmad_(VD a, VD b, VD c) { return CE_FMAD(a, b, c); }
static inline VF zerof() { return VF{}; }
static inline VD zerod() { return VD{}; }
static inline VF splatf(float x) { return zerof() + x; }
static inline VD splatd(double x) { return zerod() + x; }

template <class V, class S>
static inline S hsum(V v) {
  S s = v[0];
  for (std::size_t l = 1; l < sizeof(V) / sizeof(S); ++l) s += v[l];
  return s;
}

// ----------------------------------------------------------------- dot products
static inline float dot(const float* a, const float* b, std::size_t d) {
  const std::size_t dv = d - d % WF;
  VF acc = zerof();
  for (std::size_t i = 0; i < dv; i += WF) acc = fmaf_(loadf(a + i), loadf(b + i), acc);
  float tail = 0.0f;
  for (std::size_t i = dv; i < d; ++i) tail += a[i] * b[i];
  return hsum<VF, float>(acc) + tail;
}

static inline double dot(const double* a, const double* b, std::size_t d) {
  const std::size_t dv = d - d % WD;
  VD acc = zerod();
  for (std::size_t i = 0; i < dv; i += WD) acc = fmad_(loadd(a + i), loadd(b + i), acc);
  double tail = 0.0;
  for (std::size_t i = dv; i < d; ++i) tail += a[i] * b[i];
  return hsum<VD, double>(acc) + tail;
}

// out[i * ld + j] = dot(q[i], c[j]) for i < nq, j < nc: a register-blocked
// "inner product" GEMM over rows given by pointers (so gathered rows need no
// copy). Edge blocks repeat the last pointer and drop the extra results.
#define CE_TILE_DOT_BODY(T, V, W, LOAD, FMA, ZERO, QB, NB)                              \
  const std::size_t dv = d - d % W;                                                    \
  for (std::size_t i0 = 0; i0 < nq; i0 += QB) {                                        \
    const T* qp[QB];                                                                   \
    for (int a = 0; a < QB; ++a) qp[a] = q[std::min<std::size_t>(i0 + a, nq - 1)];     \
    for (std::size_t j0 = 0; j0 < nc; j0 += NB) {                                      \
      const T* cp[NB];                                                                 \
      for (int b = 0; b < NB; ++b) cp[b] = c[std::min<std::size_t>(j0 + b, nc - 1)];   \
      V acc[QB][NB];                                                                   \
      for (int a = 0; a < QB; ++a)                                                     \
        for (int b = 0; b < NB; ++b) acc[a][b] = ZERO();                               \
      for (std::size_t k = 0; k < dv; k += W) {                                        \
        V qv[QB];                                                                      \
        for (int a = 0; a < QB; ++a) qv[a] = LOAD(qp[a] + k);                          \
        for (int b = 0; b < NB; ++b) {                                                 \
          const V cv = LOAD(cp[b] + k);                                                \
          for (int a = 0; a < QB; ++a) acc[a][b] = FMA(qv[a], cv, acc[a][b]);          \
        }                                                                              \
      }                                                                                \
      for (int a = 0; a < QB; ++a) {                                                   \
        if (i0 + a >= nq) break;                                                       \
        for (int b = 0; b < NB; ++b) {                                                 \
          if (j0 + b >= nc) break;                                                     \
          T tail = 0;                                                                  \
          for (std::size_t k = dv; k < d; ++k) tail += qp[a][k] * cp[b][k];            \
          out[(i0 + a) * ld + j0 + b] = hsum<V, T>(acc[a][b]) + tail;                  \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
  }

static void tile_dot(const float* const* q, std::size_t nq, const float* const* c, std::size_t nc,
                     std::size_t d, float* out, std::size_t ld) {
  CE_TILE_DOT_BODY(float, VF, WF, loadf, fmaf_, zerof, CE_QB, CE_NB)
}

static void tile_dot(const double* const* q, std::size_t nq, const double* const* c, std::size_t nc,
                     std::size_t d, double* out, std::size_t ld) {
  CE_TILE_DOT_BODY(double, VD, WD, loadd, fmad_, zerod, CE_QB, CE_NB)
}
#undef CE_TILE_DOT_BODY

// ----------------------------------------------------------------- vector math
// exp(x) for x <= 88 (inputs below -87 return exp(-87) ~ 1.6e-38, never 0 or a
// denormal). Cody-Waite reduction + Cephes' degree-6 polynomial, rel. err ~2 ulp.
static inline VF vexp(VF x) {
  x = x < splatf(-87.0f) ? splatf(-87.0f) : x;
  x = x > splatf(88.0f) ? splatf(88.0f) : x;
  const VF magic = splatf(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const VF t = x * 1.44269504088896341f + magic;
  const VF n = t - magic;
  const VI ni = (VI)t - (VI)magic;
  VF r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VF p = splatf(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const VI bits = (ni + 127) << 23;
  return p * (VF)bits;
}

// Natural log for x >= 1e-30 (normal, positive). Cephes logf polynomial.
static inline VF vlog(VF x) {
  VI bits = (VI)x;
  VI e = ((bits >> 23) & 0xff) - 126;
  VF m = (VF)((bits & 0x007fffff) | 0x3f000000);  // mantissa in [0.5, 1)
  const VI small = m < splatf(0.707106781186547524f);
  e = e + small;  // small lanes are -1: one less in the exponent
  m = small ? m + m - 1.0f : m - 1.0f;
  VF z = m * m;
  VF y = splatf(7.0376836292e-2f);
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  VF ef = __builtin_convertvector(e, VF);
  y = y + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  return m + y + ef * 0.693359375f;
}

// asinh(z) for z >= 0 without cancellation: log1p(z + z^2 / (1 + sqrt(1 + z^2))),
// with log1p(u) = log(w) * u / (w - 1), w = 1 + u (exact for the rounding of w).
static inline VF vasinh_pos(VF z) {
  VF z2 = z * z;
  VF s = z2 + 1.0f;
  const VF sq = CE_SQRTF(s);
  const VF u = z + z2 / (sq + 1.0f);
  const VF w = u + 1.0f;
  const VF wm1 = w - 1.0f;
  const VF lg = vlog(w);
  const VF safe = wm1 == zerof() ? splatf(1.0f) : wm1;
  return wm1 == zerof() ? u : lg * (u / safe);
}

// x[i] = exp(x[i]) in place.
static void exp_inplace(float* x, std::size_t n) {
  const std::size_t nv = n - n % WF;
  for (std::size_t i = 0; i < nv; i += WF) {
    VF v = vexp(loadf(x + i));
    __builtin_memcpy(x + i, &v, sizeof(VF));
  }
  for (std::size_t i = nv; i < n; ++i) x[i] = std::exp(x[i] < -87.0f ? -87.0f : x[i]);
}

// Lorentz distances of one row x against many y from their dot products.
// Writes NaN where the points are too close for the Gram form (the caller
// recomputes those from coordinates).
static void lorentz_row_from_dots(const float* dots, std::size_t n, float nx, float xt, const float* ny,
                                  const float* yt, float c, float* out) {
  const float two_over_sqrt_c = 2.0f / std::sqrt(c);
  const float half_sqrt_c = 0.5f * std::sqrt(c);
  const std::size_t nv = n - n % WF;
  const VF nan = splatf(__builtin_nanf(""));
  for (std::size_t j = 0; j < nv; j += WF) {
    const VF dd = (nx + loadf(ny + j)) - 2.0f * loadf(dots + j);
    const VF dt = (nx - loadf(ny + j)) / (xt + loadf(yt + j));
    VF q = dd - dt * dt;
    q = q < zerof() ? zerof() : q;
    const VF z = CE_SQRTF(q);
    VF dist = two_over_sqrt_c * vasinh_pos(half_sqrt_c * z);
    dist = dd < 0.05f * (nx + loadf(ny + j)) ? nan : dist;
    __builtin_memcpy(out + j, &dist, sizeof(VF));
  }
  for (std::size_t j = nv; j < n; ++j) {
    const float dd = (nx + ny[j]) - 2.0f * dots[j];
    if (dd < 0.05f * (nx + ny[j])) {
      out[j] = __builtin_nanf("");
      continue;
    }
    const float dt = (nx - ny[j]) / (xt + yt[j]);
    float q = dd - dt * dt;
    q = q < 0.0f ? 0.0f : q;
    out[j] = two_over_sqrt_c * std::asinh(half_sqrt_c * std::sqrt(q));
  }
}

}  // namespace CE_NS
