// Per-ISA primitives. This file has no include guard on purpose: simd.hpp
// includes it once per instruction set inside `#pragma GCC target` regions,
// with CE_NS naming the namespace and CE_* macros naming the vector type and
// its load/FMA intrinsics. Everything here is plain functions on raw pointers.
//
// Reproducibility: every primitive computes each output from its own inputs in
// a fixed order, independent of tiling and threads, so kernel results do not
// depend on num_threads.

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

// ----------------------------------------------------------------- panel GEMM
// The right-hand rows of a product are packed once into column panels of
// NR = CE_NRV vectors: panel p stores, for each k, the k-th entries of rows
// p*NR .. p*NR+NR-1 side by side (zero-padded). The micro-kernel broadcasts
// one left-hand entry and multiplies it into CE_NRV vectors, so it needs no
// horizontal sums: out[i][j] is one FMA chain over k = 0..d-1 in order,
// whatever the tile, panel or thread - results are reproducible bit for bit.
#define CE_PACK_BODY(T, W)                                                             \
  const std::size_t nr = CE_NRV * W;                                                   \
  for (std::size_t p0 = 0; p0 < n; p0 += nr) {                                         \
    T* P = dst + (p0 / nr) * d * nr;                                                   \
    for (std::size_t l = 0; l < nr; ++l) {                                             \
      const T* r = p0 + l < n ? rows[p0 + l] : nullptr;                                \
      for (std::size_t k = 0; k < d; ++k) P[k * nr + l] = r ? r[k] : T(0);             \
    }                                                                                  \
  }

#define CE_GEMM_BODY(T, V, W, LOAD, FMA, ZERO, SPLAT, MR)                              \
  const std::size_t nr = CE_NRV * W;                                                   \
  for (std::size_t p0 = 0; p0 < nc; p0 += nr) {                                        \
    const T* P = panels + (p0 / nr) * d * nr;                                          \
    const std::size_t ncols = std::min(nr, nc - p0);                                   \
    for (std::size_t i0 = 0; i0 < nq; i0 += MR) {                                      \
      const T* qp[MR];                                                                 \
      for (int a = 0; a < MR; ++a) qp[a] = q[std::min<std::size_t>(i0 + a, nq - 1)];   \
      V acc[MR][CE_NRV];                                                               \
      for (int a = 0; a < MR; ++a)                                                     \
        for (int v = 0; v < CE_NRV; ++v) acc[a][v] = ZERO();                           \
      for (std::size_t k = 0; k < d; ++k) {                                            \
        V b[CE_NRV];                                                                   \
        for (int v = 0; v < CE_NRV; ++v) b[v] = LOAD(P + k * nr + v * W);              \
        for (int a = 0; a < MR; ++a) {                                                 \
          const V qa = SPLAT(qp[a][k]);                                                \
          for (int v = 0; v < CE_NRV; ++v) acc[a][v] = FMA(qa, b[v], acc[a][v]);       \
        }                                                                              \
      }                                                                                \
      for (int a = 0; a < MR && i0 + a < nq; ++a) {                                    \
        T* o = out + (i0 + a) * ld + p0;                                               \
        if (ncols == nr) {                                                             \
          __builtin_memcpy(o, acc[a], sizeof(acc[a]));                                 \
        } else {                                                                       \
          T tmp[CE_NRV * W];                                                           \
          __builtin_memcpy(tmp, acc[a], sizeof(acc[a]));                               \
          for (std::size_t j = 0; j < ncols; ++j) o[j] = tmp[j];                       \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
  }

static std::size_t panel_width_f32() { return CE_NRV * WF; }
static std::size_t panel_width_f64() { return CE_NRV * WD; }

static void pack_panels(const float* const* rows, std::size_t n, std::size_t d, float* dst) { CE_PACK_BODY(float, WF) }
static void pack_panels(const double* const* rows, std::size_t n, std::size_t d, double* dst) { CE_PACK_BODY(double, WD) }

// out[i * ld + j] = <q[i], column j of the panels> for i < nq, j < nc.
static void gemm_panel(const float* const* q, std::size_t nq, const float* panels, std::size_t nc, std::size_t d,
                       float* out, std::size_t ld) {
  CE_GEMM_BODY(float, VF, WF, loadf, fmaf_, zerof, splatf, CE_MR)
}
static void gemm_panel(const double* const* q, std::size_t nq, const double* panels, std::size_t nc, std::size_t d,
                       double* out, std::size_t ld) {
  CE_GEMM_BODY(double, VD, WD, loadd, fmad_, zerod, splatd, CE_MR)
}
#undef CE_PACK_BODY
#undef CE_GEMM_BODY

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

// Anchor-signature rows in place: row i holds dot products with unit anchors;
// cos = row * row_scale[i], k = exp((cos - max cos) * inv_sigma), then the
// row is divided by its L2 norm (>= 1: the max entry is exp(0)).
static void signature_rows(float* rows, std::size_t n, std::size_t a, const float* row_scale, float inv_sigma) {
  const std::size_t av = a - a % WF;
  for (std::size_t i = 0; i < n; ++i) {
    float* r = rows + i * a;
    const float sc = row_scale[i];
    VF vmax = splatf(-INFINITY);
    for (std::size_t j = 0; j < av; j += WF) {
      const VF v = loadf(r + j) * sc;
      vmax = v > vmax ? v : vmax;
    }
    float cmax = -INFINITY;
    for (std::size_t l = 0; l < WF; ++l) cmax = vmax[l] > cmax ? vmax[l] : cmax;
    for (std::size_t j = av; j < a; ++j) cmax = std::max(cmax, r[j] * sc);
    VF ss = zerof();
    for (std::size_t j = 0; j < av; j += WF) {
      const VF e = vexp((loadf(r + j) * sc - cmax) * inv_sigma);
      __builtin_memcpy(r + j, &e, sizeof(VF));
      ss = fmaf_(e, e, ss);
    }
    float tail = 0.0f;
    for (std::size_t j = av; j < a; ++j) {
      r[j] = std::exp(std::max(-87.0f, (r[j] * sc - cmax) * inv_sigma));
      tail += r[j] * r[j];
    }
    const float inv = 1.0f / std::sqrt(hsum<VF, float>(ss) + tail);
    for (std::size_t j = 0; j < av; j += WF) {
      const VF v = loadf(r + j) * inv;
      __builtin_memcpy(r + j, &v, sizeof(VF));
    }
    for (std::size_t j = av; j < a; ++j) r[j] *= inv;
  }
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
