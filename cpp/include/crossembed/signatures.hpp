// Kernel 2: scale-free anchor signatures (GEH geometric hashing).
//
//   d(x, a) = 1 - cos(x, a),  k = exp(-(d - min_a d) / sigma),  row / |row|
//
// The shift by the row's smallest distance cancels in the normalisation but
// keeps exp() from underflowing to an all-zero row for tiny sigma. Fused: one
// tile of cosines per row block (the shared sweep, GEMM against pre-normalised
// anchors), then exp and normalisation while the tile is still in cache.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"

namespace crossembed {

inline double row_norm2(const float* x, std::size_t d) {
  double s = 0;  // in double: squares of |x| ~ 3e38 or of subnormals stay finite and non-zero
  for (std::size_t j = 0; j < d; ++j) s += double(x[j]) * x[j];
  return s;
}

// Row i of x scaled to unit norm into out (in double: 1/|x| of a subnormal
// row overflows float); a zero row stays zero (cosine 0 to everything).
inline void unit_row(const float* x, std::size_t d, double norm2, float* out) {
  const double inv = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
  for (std::size_t j = 0; j < d; ++j) out[j] = float(double(x[j]) * inv);
}

inline std::vector<float> unit_rows(const float* x, std::size_t n, std::size_t d) {
  std::vector<float> out(n * d);
  for (std::size_t i = 0; i < n; ++i) unit_row(x + i * d, d, row_norm2(x + i * d, d), out.data() + i * d);
  return out;
}

// Median of 1 - cos over pairs i < j of anchors; 1.0 when undefined or (numerically) zero.
// Rows of pairs go to threads (row i fills its own slice of dist, so the values and their
// order do not depend on the thread count): a GEH round calls this for 512 anchors, 1.5 s
// of a 40 s fit single-threaded.
inline double median_anchor_distance(const float* anchors, std::size_t a, std::size_t d, int num_threads = 1) {
  if (a < 2) return 1.0;
  const std::vector<float> u = unit_rows(anchors, a, d);
  std::vector<double> dist(a * (a - 1) / 2);
  parallel_for(std::int64_t(a), num_threads, [&](std::int64_t ii, int) {
    const std::size_t i = std::size_t(ii);
    double* out = dist.data() + i * a - i * (i + 1) / 2;  // pairs (i, j > i) after rows 0..i-1
    for (std::size_t j = i + 1; j < a; ++j) {
      double c = 0;
      for (std::size_t t = 0; t < d; ++t) c += double(u[i * d + t]) * u[j * d + t];
      out[j - i - 1] = 1.0 - c;
    }
  });
  const std::size_t m = dist.size();
  std::nth_element(dist.begin(), dist.begin() + m / 2, dist.end());
  double med = dist[m / 2];
  if (m % 2 == 0) {
    const double lo = *std::max_element(dist.begin(), dist.begin() + m / 2);
    med = 0.5 * (med + lo);
  }
  return med > 1e-6 ? med : 1.0;  // float32 rounding leaves ~1e-8 for identical anchors
}

namespace detail {

// Cosines land in the output rows themselves (one tile spans every anchor),
// then exp and normalisation run in place. Each block first takes its rows'
// norms (in double, each row's sum in order: the same bits whichever block or
// thread), so nothing walks the input before the sweep. Rows whose norm is far
// from 1 (subnormal entries, |x| ~ 3e38) would overflow the float dot products
// or their 1/|x|: their tile row is recomputed from a copy normalised in
// double, scored with scale 1 (one FMA chain per entry, as the sweep's GEMM).
struct SignatureHandler {
  const float* const* rows;
  std::size_t d, a;
  const simd::Panels<float>& anchors;  // unit rows, packed
  float inv_sigma;
  float* out;
  std::atomic<bool>* nonfinite;  // set when a row of X holds a NaN or inf

  struct OnBlock : BlockHandlerBase<float> {
    const SignatureHandler& h;
    Block b;
    std::vector<float> scale;
    OnBlock(const SignatureHandler& h_, const Block& b_) : h(h_), b(b_), scale(b.r1 - b.r0) {}
    float* tile_buffer(std::size_t c0, std::size_t& ld) {
      ld = h.a;
      return h.out + b.r0 * h.a + c0;
    }
    void add_tile(std::size_t, std::size_t, const float*, std::size_t) {
      constexpr std::size_t kLanes = 8;  // rows summed side by side: 8 independent chains, each in order
      const std::size_t n = b.r1 - b.r0;
      std::vector<double> s2(n, 0.0);
      for (std::size_t r0 = 0; r0 < n; r0 += kLanes) {
        const std::size_t m = std::min(kLanes, n - r0);
        const float* src[kLanes];  // a short last group repeats its first row (sums not kept)
        for (std::size_t r = 0; r < kLanes; ++r) src[r] = h.rows[b.r0 + r0 + (r < m ? r : 0)];
        double acc[kLanes] = {};  // in registers: a vector's slots went through memory on every add
        for (std::size_t j = 0; j < h.d; ++j)
          for (std::size_t r = 0; r < kLanes; ++r) acc[r] += double(src[r][j]) * src[r][j];
        for (std::size_t r = 0; r < m; ++r) {
          s2[r0 + r] = acc[r];
          // A NaN or inf entry makes its row's sum NaN or inf (finite squares in double cannot
          // overflow): the finiteness check of X, in the pass that reads it anyway.
          if (!std::isfinite(acc[r])) h.nonfinite->store(true, std::memory_order_relaxed);
        }
      }
      std::vector<float> unit;
      for (std::size_t r = 0; r < n; ++r) {
        const double q = s2[r];
        if (q > 0 && (q < 1e-30 || q > 1e30)) {
          unit.resize(h.d);
          const float* xi = h.rows[b.r0 + r];
          unit_row(xi, h.d, row_norm2(xi, h.d), unit.data());
          const float* one = unit.data();
          simd::gemm(&one, 1, h.anchors, 0, h.a, h.out + (b.r0 + r) * h.a, h.a);
          scale[r] = 1.0f;
        } else {
          scale[r] = q > 0 ? float(1.0 / std::sqrt(q)) : 0.0f;
        }
      }
      simd::isa().signature_rows(h.out + b.r0 * h.a, n, h.a, scale.data(), h.inv_sigma);
    }
  };
  OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
};

}  // namespace detail

// out (n, a) float32.
// Returns false (out then holds garbage) when a row of x holds a NaN or inf.
inline bool anchor_signatures(const float* x, std::size_t n, const float* anchors, std::size_t a, std::size_t d,
                              double sigma, float* out, int num_threads) {
  if (n == 0) return true;
  const std::vector<float> ua = unit_rows(anchors, a, d);
  const simd::Panels<float> panels(ua.data(), a, d);
  const auto rows = simd::Panels<float>::row_pointers(x, n, d);
  constexpr std::size_t kRows = 64;
  const SweepPlan plan(n, a, kRows, a);  // one tile of all anchors per row block
  // 1/sigma capped at the float range: sigma = 1e-40 must not turn 0 * inf into NaN
  const float inv_sigma = float(std::min(1.0 / sigma, 3.0e38));
  std::atomic<bool> nonfinite{false};
  detail::SignatureHandler h{rows.data(), d, a, panels, inv_sigma, out, &nonfinite};
  sweep(rows.data(), panels, plan, num_threads, h);
  return !nonfinite.load();
}

// The same signatures from cosines already computed: row i of out (n, v) is
// built from c[i, cols[0..v)] of c (n, p), exactly as anchor_signatures
// builds a row from its tile of cosines. A GEH round computes each side's
// cosines to the whole pool once; its ~20 views each read their anchors'
// columns here instead of a GEMM apiece.
inline void signatures_from_cosines(const float* c, std::size_t n, std::size_t p, const std::int64_t* cols,
                                    std::size_t v, double sigma, float* out, int num_threads) {
  if (n == 0 || v == 0) return;
  const float inv_sigma = float(std::min(1.0 / sigma, 3.0e38));
  const float one = 1.0f;
  parallel_for(std::int64_t(n), num_threads, [&](std::int64_t ii, int) {
    const std::size_t i = std::size_t(ii);
    const float* ci = c + i * p;
    float* oi = out + i * v;
    for (std::size_t t = 0; t < v; ++t) oi[t] = ci[std::size_t(cols[t])];
    simd::isa().signature_rows(oi, 1, v, &one, inv_sigma);
  });
}

}  // namespace crossembed
