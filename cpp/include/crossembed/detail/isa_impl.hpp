// Per-ISA primitives. No include guard on purpose: simd.hpp includes this file
// once per instruction set, each time inside that ISA's namespace and inside
// its `#pragma GCC target` region, after defining there only what differs:
//   kName, VF / VD (float / double vectors), kMR x kNRV (GEMM micro-kernel shape),
//   kPR x kPC (pair_dots block),
//   vfma(a, b, c) = a * b + c (one rounding where the ISA has FMA), vsqrt(VF), vsqrt(VD),
//   load_half(p) = WF float16 values (half_t bits) widened to a VF (exact),
//   mask_ge(a, b) = lane mask, bit l set when a[l] >= b[l] (false for NaN).
// Everything below - templates too - is defined inside the region, so every
// instantiation carries that ISA's target flags (GCC refuses to build an
// intrinsic or a wide vector operation into a function without them, so a
// slip would not compile). Plain functions on raw pointers only.
//
// Reproducibility: every primitive computes each output from its own inputs in
// a fixed order, independent of tiling and threads, so kernel results do not
// depend on num_threads.

template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  using type = VF;
};
template <>
struct VecOf<double> {
  using type = VD;
};
template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
constexpr std::size_t kWidth = sizeof(Vec<T>) / sizeof(T);  // lanes
constexpr std::size_t WF = kWidth<float>;
typedef int VI __attribute__((vector_size(sizeof(VF))));

template <class V, class T>
static inline V load(const T* p) {  // unaligned
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
// Every lane x. x - (+0) is x for every x, -0 included, so the compiler drops
// the subtraction; V{} + x turns -0 into +0, and that addition stayed in the
// GEMM's inner loop, one more instruction per broadcast.
template <class V, class T>
static inline V splat(T x) {
  return x - V{};
}
static inline VF splatf(float x) { return splat<VF>(x); }
// A vector of right-hand values: float32 / float64 as they are, float16 (V = VF) widened exactly on load.
template <class V, class T>
static inline V load_rhs(const T* p) {
  if constexpr (std::is_same_v<T, half_t>) {
    return load_half(p);
  } else {
    return load<V>(p);
  }
}
static inline VF zerof() { return VF{}; }

template <class V, class S>
static inline S hsum(V v) {
  S s = v[0];
  for (std::size_t l = 1; l < sizeof(V) / sizeof(S); ++l) s += v[l];
  return s;
}

// ----------------------------------------------------------------- dot products
template <class T>
static T dot(const T* a, const T* b, std::size_t d) {
  using V = Vec<T>;
  constexpr std::size_t W = kWidth<T>;
  const std::size_t dv = d - d % W;
  V acc = V{};
  for (std::size_t i = 0; i < dv; i += W) acc = vfma(load<V>(a + i), load<V>(b + i), acc);
  T tail = 0;
  for (std::size_t i = dv; i < d; ++i) tail += a[i] * b[i];
  return hsum<V, T>(acc) + tail;
}

// out[t] = dot(x, Y + rows[t] * d, d) for t < m, bit for bit: each pair is the
// same single FMA chain and the same horizontal sum. One chain is latency
// bound (d / W dependent FMAs); kChains pairs at a time overlap their chains
// and share the loads of x.
static void gather_dots(const float* x, const float* Y, std::size_t d, const std::int64_t* rows, std::size_t m,
                        float* out) {
  constexpr std::size_t kChains = 8;
  const std::size_t dv = d - d % WF;
  std::size_t t0 = 0;
  for (; t0 + kChains <= m; t0 += kChains) {
    const float* y[kChains];
    for (std::size_t c = 0; c < kChains; ++c) y[c] = Y + std::size_t(rows[t0 + c]) * d;
    VF acc[kChains];
    for (std::size_t c = 0; c < kChains; ++c) acc[c] = zerof();
    for (std::size_t i = 0; i < dv; i += WF) {
      const VF xv = load<VF>(x + i);
      for (std::size_t c = 0; c < kChains; ++c) acc[c] = vfma(xv, load<VF>(y[c] + i), acc[c]);
    }
    for (std::size_t c = 0; c < kChains; ++c) {
      float tail = 0;
      for (std::size_t i = dv; i < d; ++i) tail += x[i] * y[c][i];
      out[t0 + c] = hsum<VF, float>(acc[c]) + tail;
    }
  }
  for (; t0 < m; ++t0) out[t0] = dot<float>(x, Y + std::size_t(rows[t0]) * d, d);
}

// dst[i] = the float32 value of the float16 src[i], i < n (exact).
static void widen_f16(const half_t* src, std::size_t n, float* dst) {
  const std::size_t nv = n - n % WF;
  for (std::size_t i = 0; i < nv; i += WF) {
    const VF v = load_half(src + i);
    __builtin_memcpy(dst + i, &v, sizeof(VF));
  }
  if (nv < n) {
    half_t t[WF] = {};
    __builtin_memcpy(t, src + nv, (n - nv) * sizeof(half_t));
    const VF v = load_half(t);
    __builtin_memcpy(dst + nv, &v, (n - nv) * sizeof(float));
  }
}

// ----------------------------------------------------------------- panel GEMM
// The right-hand rows of a product are packed once into column panels of
// NR = kNRV vectors: panel p stores, for each k, the k-th entries of rows
// p*NR .. p*NR+NR-1 side by side (zero-padded). The micro-kernel broadcasts
// one left-hand entry and multiplies it into kNRV vectors, so it needs no
// horizontal sums: out[i][j] is one FMA chain over k = 0..d-1 in order,
// whatever the tile, panel or thread - results are reproducible bit for bit.
template <class T>
static std::size_t panel_width() {
  return kNRV * kWidth<T>;
}

// out[i * ld + j] = <q[i], column j of the panels> for i < nq, j < nc, MR
// left-hand rows at a time. The value of out[i][j] does not depend on MR.
// P: the panels' element type, T or (with T = float) half_t, widened on load,
// so a float16 panel gives exactly the product of its float32 copy.
template <class T, int MR, class P = T>
static void gemm_rows(const T* const* q, std::size_t nq, const P* panels, std::size_t nc, std::size_t d, T* out,
                      std::size_t ld) {
  using V = Vec<T>;
  constexpr std::size_t W = kWidth<T>, nr = kNRV * W;
  for (std::size_t p0 = 0; p0 < nc; p0 += nr) {
    const P* pp = panels + (p0 / nr) * d * nr;
    const std::size_t ncols = std::min(nr, nc - p0);
    for (std::size_t i0 = 0; i0 < nq; i0 += MR) {
      const T* qp[MR];
      for (int a = 0; a < MR; ++a) qp[a] = q[std::min<std::size_t>(i0 + a, nq - 1)];
      V acc[MR][kNRV];
      for (int a = 0; a < MR; ++a)
        for (int v = 0; v < kNRV; ++v) acc[a][v] = V{};
      for (std::size_t k = 0; k < d; ++k) {
        V b[kNRV];
        for (int v = 0; v < kNRV; ++v) b[v] = load_rhs<V>(pp + k * nr + v * W);
        for (int a = 0; a < MR; ++a) {
          const V qa = splat<V>(qp[a][k]);
          for (int v = 0; v < kNRV; ++v) acc[a][v] = vfma(qa, b[v], acc[a][v]);
        }
      }
      for (int a = 0; a < MR && i0 + a < nq; ++a) {
        T* o = out + (i0 + a) * ld + p0;
        if (ncols == nr) {
          __builtin_memcpy(o, acc[a], sizeof(acc[a]));
        } else {
          T tmp[nr];
          __builtin_memcpy(tmp, acc[a], sizeof(acc[a]));
          for (std::size_t j = 0; j < ncols; ++j) o[j] = tmp[j];
        }
      }
    }
  }
}

// One left-hand row (rerank) runs with one row of accumulators, not kMR copies of it.
template <class T, class P = T>
static void gemm_panel(const T* const* q, std::size_t nq, const P* panels, std::size_t nc, std::size_t d, T* out,
                       std::size_t ld) {
  if (nq == 1) return gemm_rows<T, 1>(q, nq, panels, nc, d, out, ld);
  gemm_rows<T, kMR>(q, nq, panels, nc, d, out, ld);
}

// ----------------------------------------------------------------- tree dots
// A dot product whose value is the same whether it is computed alone or
// inside a block of pairs: lane l of one vector accumulator sums the entries
// k = l (mod W) in order (one FMA chain), then the lanes are added by halving
// (l + W/2, then l + W/4, ...). Lengths are multiples of W (callers pad with
// zeros, which leave every chain unchanged). The probit variance term is this
// dot, alone for the few candidates that survive pruning and in register
// blocks of kPR x kPC pairs (pair_dots) when most of a tile survives.
template <class V>  // V = VF (a template so that only this ISA's branch is compiled)
static inline float hsum_tree(V v) {
  // Each step adds the upper half of the live lanes onto the lower half: the
  // sums of the scalar loop t[l] += t[l + h], h = W/2, W/4, ..., 1. Shuffles,
  // not memcpy: an accumulator whose address is taken stays out of registers.
  typedef float F8 __attribute__((vector_size(32)));
  typedef float F4 __attribute__((vector_size(16)));
  F4 x4;
  if constexpr (sizeof(V) == 64) {
    const F8 x8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    x4 = __builtin_shufflevector(x8, x8, 0, 1, 2, 3) + __builtin_shufflevector(x8, x8, 4, 5, 6, 7);
  } else if constexpr (sizeof(V) == 32) {
    x4 = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  } else {
    x4 = v;
  }
  const float a = x4[0] + x4[2], b = x4[1] + x4[3];
  return a + b;
}

// R: the right-hand rows' element type, float or half_t (widened on load).
template <class R>
static float dot_tree(const float* a, const R* b, std::size_t n) {
  VF acc = zerof();
  for (std::size_t i = 0; i < n; i += WF) acc = vfma(load<VF>(a + i), load_rhs<VF>(b + i), acc);
  return hsum_tree(acc);
}

// out[i * ld + j] = dot_tree(q[i], c + j * n, n) for i < nq, j < nc: kPR x kPC
// pairs at a time share their loads (kPR + kPC loads for kPR * kPC FMAs).
template <class R>
static void pair_dots(const float* const* q, std::size_t nq, const R* c, std::size_t nc, std::size_t n, float* out,
                      std::size_t ld) {
  for (std::size_t j0 = 0; j0 < nc; j0 += kPC) {
    const R* cp[kPC];
    for (int b = 0; b < kPC; ++b) cp[b] = c + std::min<std::size_t>(j0 + b, nc - 1) * n;
    for (std::size_t i0 = 0; i0 < nq; i0 += kPR) {
      const float* qp[kPR];
      for (int a = 0; a < kPR; ++a) qp[a] = q[std::min<std::size_t>(i0 + a, nq - 1)];
      VF acc[kPR][kPC];
      for (int a = 0; a < kPR; ++a)
        for (int b = 0; b < kPC; ++b) acc[a][b] = zerof();
      for (std::size_t k = 0; k < n; k += WF) {
        VF y[kPC];
        for (int b = 0; b < kPC; ++b) y[b] = load_rhs<VF>(cp[b] + k);
        for (int a = 0; a < kPR; ++a) {
          const VF x = load<VF>(qp[a] + k);
          for (int b = 0; b < kPC; ++b) acc[a][b] = vfma(x, y[b], acc[a][b]);
        }
      }
      for (int a = 0; a < kPR && i0 + a < nq; ++a)
        for (int b = 0; b < kPC && j0 + b < nc; ++b) out[(i0 + a) * ld + j0 + b] = hsum_tree(acc[a][b]);
    }
  }
}

// out[t] = dot_tree(a[t], b[t], n) for t < m: four pairs' chains at a time, so
// their FMA latencies overlap (the pairs a tile's pruning leaves, which share
// no block structure). Each pair's chain and lane sums are dot_tree's.
template <class R>
static void tree_dots(const float* const* a, const R* const* b, std::size_t m, std::size_t n, float* out) {
  std::size_t t = 0;
  for (; t + 4 <= m; t += 4) {
    VF c0 = zerof(), c1 = zerof(), c2 = zerof(), c3 = zerof();
    for (std::size_t i = 0; i < n; i += WF) {
      c0 = vfma(load<VF>(a[t] + i), load_rhs<VF>(b[t] + i), c0);
      c1 = vfma(load<VF>(a[t + 1] + i), load_rhs<VF>(b[t + 1] + i), c1);
      c2 = vfma(load<VF>(a[t + 2] + i), load_rhs<VF>(b[t + 2] + i), c2);
      c3 = vfma(load<VF>(a[t + 3] + i), load_rhs<VF>(b[t + 3] + i), c3);
    }
    out[t] = hsum_tree(c0);
    out[t + 1] = hsum_tree(c1);
    out[t + 2] = hsum_tree(c2);
    out[t + 3] = hsum_tree(c3);
  }
  for (; t < m; ++t) out[t] = dot_tree(a[t], b[t], n);
}

// ----------------------------------------------------------------- graph distance
// 1 - <a, b> in hnswlib's distance signature (graph.hpp): a and b are rows of
// *dim values (size_t), float32 or float16 (T = half_t, widened exactly).
// Four float32 FMA chains over blocks of 4 WF values (their latencies
// overlap), the rest in the first two (the last partial vector from
// zero-padded copies: the padding adds 0 * 0), then (c0 + c1) + (c2 + c3)
// and the lanes by halving. A fixed order: the value depends only on a, b.
template <class T>
static float ip_distance(const void* pa, const void* pb, const void* pdim) {
  const T* a = static_cast<const T*>(pa);
  const T* b = static_cast<const T*>(pb);
  const std::size_t d = *static_cast<const std::size_t*>(pdim);
  VF c0 = zerof(), c1 = zerof(), c2 = zerof(), c3 = zerof();
  std::size_t i = 0;
  for (; i + 4 * WF <= d; i += 4 * WF) {
    c0 = vfma(load_rhs<VF>(a + i), load_rhs<VF>(b + i), c0);
    c1 = vfma(load_rhs<VF>(a + i + WF), load_rhs<VF>(b + i + WF), c1);
    c2 = vfma(load_rhs<VF>(a + i + 2 * WF), load_rhs<VF>(b + i + 2 * WF), c2);
    c3 = vfma(load_rhs<VF>(a + i + 3 * WF), load_rhs<VF>(b + i + 3 * WF), c3);
  }
  for (; i + WF <= d; i += WF) c0 = vfma(load_rhs<VF>(a + i), load_rhs<VF>(b + i), c0);
  if (i < d) {
    T ta[WF] = {}, tb[WF] = {};
    __builtin_memcpy(ta, a + i, (d - i) * sizeof(T));
    __builtin_memcpy(tb, b + i, (d - i) * sizeof(T));
    c1 = vfma(load_rhs<VF>(ta), load_rhs<VF>(tb), c1);
  }
  return 1.0f - hsum_tree((c0 + c1) + (c2 + c3));
}

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
  const VF sq = vsqrt(s);
  const VF u = z + z2 / (sq + 1.0f);
  const VF w = u + 1.0f;
  const VF wm1 = w - 1.0f;
  const VF lg = vlog(w);
  const VF safe = wm1 == zerof() ? splatf(1.0f) : wm1;
  return wm1 == zerof() ? u : lg * (u / safe);
}

// Anchor-signature rows in place: row i holds dot products with unit anchors;
// cos = row * row_scale[i], k = exp((cos - max cos) * inv_sigma), then the
// row is divided by its L2 norm (>= 1: the max entry is exp(0)). The cosines
// are stored before the max is taken, so the largest one gives exactly
// exp(0) = 1 (a product contracted into an fma with the subtraction would
// leave its rounding error, which a tiny sigma blows up to an all-zero row).
static void signature_rows(float* rows, std::size_t n, std::size_t a, const float* row_scale, float inv_sigma) {
  const std::size_t av = a - a % WF;
  for (std::size_t i = 0; i < n; ++i) {
    float* r = rows + i * a;
    const float sc = row_scale[i];
    VF vmax = splatf(-INFINITY);
    for (std::size_t j = 0; j < av; j += WF) {
      const VF v = load<VF>(r + j) * sc;
      __builtin_memcpy(r + j, &v, sizeof(VF));
      vmax = v > vmax ? v : vmax;
    }
    float cmax = -INFINITY;
    for (std::size_t l = 0; l < WF; ++l) cmax = vmax[l] > cmax ? vmax[l] : cmax;
    for (std::size_t j = av; j < a; ++j) {
      volatile float v = r[j] * sc;  // rounded and stored: no contraction below
      r[j] = v;
      cmax = std::max(cmax, r[j]);
    }
    VF ss = zerof();
    for (std::size_t j = 0; j < av; j += WF) {
      const VF e = vexp((load<VF>(r + j) - cmax) * inv_sigma);
      __builtin_memcpy(r + j, &e, sizeof(VF));
      ss = vfma(e, e, ss);
    }
    float tail = 0.0f;
    for (std::size_t j = av; j < a; ++j) {
      r[j] = std::exp(std::max(-87.0f, (r[j] - cmax) * inv_sigma));
      tail += r[j] * r[j];
    }
    const float inv = 1.0f / std::sqrt(hsum<VF, float>(ss) + tail);
    for (std::size_t j = 0; j < av; j += WF) {
      const VF v = load<VF>(r + j) * inv;
      __builtin_memcpy(r + j, &v, sizeof(VF));
    }
    for (std::size_t j = av; j < a; ++j) r[j] *= inv;
  }
}

// Lorentz distances of one row x against many y from their dot products.
// Distances of one x point to a row of y points from their dot products, with
// the cancellation-free decomposition of q = |x-y|^2 - (x_t-y_t)^2
// (r = |x|, dr = r_x - r_y, T = x_t + y_t, R = r_x + r_y):
//   q = 2 (r_x r_y - x.y) + dr^2 (T - R)(T + R) / T^2,
//   T - R = (1/c) (a_x + a_y),  a = 1 / (x_t + |x|).
// Both terms are >= 0, so nothing cancels between them; the only cancellation
// left is r_x r_y - x.y for nearly parallel x and y, so pairs with
// x.y > 0.95 r_x r_y (and pairs next to the origin, whose squares would be
// subnormal) get NaN: the caller recomputes those from coordinates.
static void lorentz_row_from_dots(const float* dots, std::size_t n, float rx, float tx, float ax, const float* ry,
                                  const float* ty, const float* ay, float c, float* out) {
  const float two_over_sqrt_c = 2.0f / std::sqrt(c);
  const float half_sqrt_c = 0.5f * std::sqrt(c);
  const float inv_c = 1.0f / c;
  const std::size_t nv = n - n % WF;
  const VF nan = splatf(__builtin_nanf(""));
  for (std::size_t j = 0; j < nv; j += WF) {
    const VF dot = load<VF>(dots + j), r = load<VF>(ry + j);
    const VF rxy = rx * r;
    VF q1 = 2.0f * (rxy - dot);
    q1 = q1 < zerof() ? zerof() : q1;
    const VF dr = rx - r, big_t = tx + load<VF>(ty + j), big_r = rx + r;
    const VF q = q1 + dr * dr * ((ax + load<VF>(ay + j)) * inv_c) * ((big_t + big_r) / big_t / big_t);
    VF dist = two_over_sqrt_c * vasinh_pos(half_sqrt_c * vsqrt(q));
    dist = dot > 0.95f * rxy ? nan : dist;
    dist = big_r < 1e-18f ? nan : dist;
    __builtin_memcpy(out + j, &dist, sizeof(VF));
  }
  for (std::size_t j = nv; j < n; ++j) {
    const float rxy = rx * ry[j];
    if (dots[j] > 0.95f * rxy || rx + ry[j] < 1e-18f) {
      out[j] = __builtin_nanf("");
      continue;
    }
    const float q1 = std::max(0.0f, 2.0f * (rxy - dots[j]));
    const float dr = rx - ry[j], big_t = tx + ty[j], big_r = rx + ry[j];
    const float q = q1 + dr * dr * ((ax + ay[j]) * inv_c) * ((big_t + big_r) / big_t / big_t);
    out[j] = two_over_sqrt_c * std::asinh(half_sqrt_c * std::sqrt(q));
  }
}

// ----------------------------------------------------------------- float64 Lorentz rows
typedef long long VL __attribute__((vector_size(sizeof(VD))));

// Natural log for normal x > 0: x = 2^e m, m in [sqrt(1/2), sqrt(2)), f = m - 1,
// s = f / (2 + f), log m = f - f^2/2 + s (f^2/2 + R(s^2)) with fdlibm's
// minimax R (error < 1 ulp), ln 2 split in a high and a low part.
static inline VD vlog_d(VD x) {
  const VL bits = (VL)x;
  VL e = ((bits >> 52) & 0x7ff) - 1022;
  VD m = (VD)((bits & 0x000fffffffffffffLL) | 0x3fe0000000000000LL);  // [0.5, 1)
  const VL small = m < splat<VD>(0.70710678118654752440);
  e = e + small;  // small lanes are -1
  m = small ? m + m : m;
  const VD f = m - 1.0;
  const VD hfsq = 0.5 * f * f;
  const VD s = f / (f + 2.0);
  const VD z = s * s, w = z * z;
  const VD t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  const VD t2 = z * (6.666666666666735130e-01 +
                     w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  const VD r = t1 + t2;
  const VD ef = __builtin_convertvector(e, VD);
  return ef * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + r) + ef * 1.90821492927058770002e-10)) - f);
}

// asinh(z) for z >= 0, as vasinh_pos in float64.
static inline VD vasinh_pos_d(VD z) {
  const VD z2 = z * z;
  const VD u = z + z2 / (vsqrt(z2 + 1.0) + 1.0);
  const VD w = u + 1.0;
  const VD wm1 = w - 1.0;
  const VD zero = VD{};
  const VD safe = wm1 == zero ? splat<VD>(1.0) : wm1;
  const VD lg = vlog_d(wm1 == zero ? splat<VD>(1.0) : w);
  return wm1 == zero ? u : lg * (u / safe);
}

// lorentz_row_from_dots in float64: the same decomposition; pairs with
// x.y > 0.95 |x||y| or |x| + |y| < 1e-140 get NaN for the exact fallback.
static void lorentz_row_from_dots_f64(const double* dots, std::size_t n, double rx, double tx, double ax,
                                      const double* ry, const double* ty, const double* ay, double c, double* out) {
  constexpr std::size_t WD = kWidth<double>;
  const double two_over_sqrt_c = 2.0 / std::sqrt(c), half_sqrt_c = 0.5 * std::sqrt(c), inv_c = 1.0 / c;
  const std::size_t nv = n - n % WD;
  const VD nan = splat<VD>(__builtin_nan("")), zero = VD{};
  for (std::size_t j = 0; j < nv; j += WD) {
    const VD dot = load<VD>(dots + j), r = load<VD>(ry + j);
    const VD rxy = rx * r;
    VD q1 = 2.0 * (rxy - dot);
    q1 = q1 < zero ? zero : q1;
    const VD dr = rx - r, big_t = tx + load<VD>(ty + j), big_r = rx + r;
    const VD q = q1 + dr * dr * ((ax + load<VD>(ay + j)) * inv_c) * ((big_t + big_r) / big_t / big_t);
    VD dist = two_over_sqrt_c * vasinh_pos_d(half_sqrt_c * vsqrt(q));
    dist = dot > 0.95 * rxy ? nan : dist;
    dist = big_r < 1e-140 ? nan : dist;
    __builtin_memcpy(out + j, &dist, sizeof(VD));
  }
  for (std::size_t j = nv; j < n; ++j) {
    const double rxy = rx * ry[j];
    if (dots[j] > 0.95 * rxy || rx + ry[j] < 1e-140) {
      out[j] = __builtin_nan("");
      continue;
    }
    const double q1 = std::max(0.0, 2.0 * (rxy - dots[j]));
    const double dr = rx - ry[j], big_t = tx + ty[j], big_r = rx + ry[j];
    const double q = q1 + dr * dr * ((ax + ay[j]) * inv_c) * ((big_t + big_r) / big_t / big_t);
    out[j] = two_over_sqrt_c * std::asinh(half_sqrt_c * std::sqrt(q));
  }
}

// ----------------------------------------------------------------- selection
// Positions of the entries that reach a bar: the top-k handlers' scan of a
// score tile, where few entries pass, one compare per vector.
static std::size_t select_at_least(const float* x, std::size_t n, float bar, std::uint32_t* out) {
  const VF b = splatf(bar);
  std::size_t m = 0, i = 0;
  for (; i + WF <= n; i += WF) {
    for (std::uint32_t bits = mask_ge(load<VF>(x + i), b); bits; bits &= bits - 1)
      out[m++] = std::uint32_t(i + std::size_t(__builtin_ctz(bits)));
  }
  for (; i < n; ++i)
    if (x[i] >= bar) out[m++] = std::uint32_t(i);
  return m;
}

// The same against a bar per position too (a row's threshold and each column's).
static std::size_t select_at_least_either(const float* x, std::size_t n, float bar, const float* bars,
                                          std::uint32_t* out) {
  const VF b = splatf(bar);
  std::size_t m = 0, i = 0;
  for (; i + WF <= n; i += WF) {
    const VF v = load<VF>(x + i);
    for (std::uint32_t bits = mask_ge(v, b) | mask_ge(v, load<VF>(bars + i)); bits; bits &= bits - 1)
      out[m++] = std::uint32_t(i + std::size_t(__builtin_ctz(bits)));
  }
  for (; i < n; ++i)
    if (x[i] >= bar || x[i] >= bars[i]) out[m++] = std::uint32_t(i);
  return m;
}

// This ISA's entry points. Its code may use the ISA's instructions: call it
// only once the CPU is known to support them (select_isa).
static Isa table() {
  return Isa{kName,
             &dot<float>,
             &dot<double>,
             &gather_dots,
             &panel_width<float>,
             &panel_width<double>,
             &gemm_panel<float>,
             &gemm_panel<double>,
             &dot_tree<float>,
             &pair_dots<float>,
             &tree_dots<float>,
             &gemm_panel<float, half_t>,
             &dot_tree<half_t>,
             &pair_dots<half_t>,
             &tree_dots<half_t>,
             &signature_rows,
             &select_at_least,
             &select_at_least_either,
             &lorentz_row_from_dots,
             &lorentz_row_from_dots_f64,
             &ip_distance<float>,
             &ip_distance<half_t>,
             &widen_f16};
}
