// Kernel 4: geodesic distances in the Lorentz model (curvature -c).
//
// Points are space components x; x_t = sqrt(1/c + |x|^2). Distances use the
// cancellation-free form
//   d = (2/sqrt c) asinh( sqrt(c) sqrt(|x-y|^2 - (x_t-y_t)^2) / 2 ),
//   x_t - y_t = (|x|^2 - |y|^2) / (x_t + y_t),
// with |x-y|^2 from the Gram trick (one GEMM) for well-separated pairs and
// from the coordinates, in double, for pairs whose Gram form would cancel
// (|x-y|^2 < 5% of |x|^2 + |y|^2). float32 uses vectorised asinh; float64
// is scalar.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "topk.hpp"

namespace crossembed {
namespace detail {

template <class T>
struct LorentzSide {
  std::vector<double> norm2, time;  // |x|^2, x_t (double for the exact path)
  std::vector<T> norm2_t, time_t;   // the same in T for the fast path
  std::vector<const T*> rows;
  LorentzSide(const T* x, std::size_t n, std::size_t d, double c)
      : norm2(n), time(n), norm2_t(n), time_t(n), rows(n) {
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < d; ++j) s += double(x[i * d + j]) * double(x[i * d + j]);
      norm2[i] = s;
      time[i] = std::sqrt(1.0 / c + s);
      norm2_t[i] = T(s);
      time_t[i] = T(time[i]);
      rows[i] = x + i * d;
    }
  }
};

template <class T>
double lorentz_exact(const T* x, const T* y, std::size_t d, double xt, double yt, double c) {
  // |x-y|^2 and |x|^2 - |y|^2 = (x-y).(x+y) from the coordinates: no cancellation.
  double sq = 0, ndiff = 0;
  for (std::size_t t = 0; t < d; ++t) {
    const double diff = double(x[t]) - double(y[t]);
    sq += diff * diff;
    ndiff += diff * (double(x[t]) + double(y[t]));
  }
  const double dt = ndiff / (xt + yt);
  const double q = std::max(0.0, sq - dt * dt);
  return 2.0 / std::sqrt(c) * std::asinh(std::sqrt(c * q) / 2.0);
}

// Distances of x-row i against y columns [c0, c1), given their dot products.
template <class T>
void lorentz_row(const LorentzSide<T>& X, const LorentzSide<T>& Y, std::size_t i, std::size_t c0, std::size_t c1,
                 const T* dots, std::size_t d, double c, T* out) {
  if constexpr (std::is_same<T, float>::value) {
    simd::isa().lorentz_row_from_dots(dots, c1 - c0, X.norm2_t[i], X.time_t[i], Y.norm2_t.data() + c0,
                                      Y.time_t.data() + c0, float(c), out);
    for (std::size_t j = c0; j < c1; ++j)
      if (std::isnan(out[j - c0]))
        out[j - c0] = float(lorentz_exact(X.rows[i], Y.rows[j], d, X.time[i], Y.time[j], c));
  } else {
    for (std::size_t j = c0; j < c1; ++j) {
      const double nsum = X.norm2[i] + Y.norm2[j];
      const double dd = nsum - 2.0 * dots[j - c0];
      if (dd < 0.05 * nsum) {
        out[j - c0] = lorentz_exact(X.rows[i], Y.rows[j], d, X.time[i], Y.time[j], c);
      } else {
        const double dt = (X.norm2[i] - Y.norm2[j]) / (X.time[i] + Y.time[j]);
        const double q = std::max(0.0, dd - dt * dt);
        out[j - c0] = 2.0 / std::sqrt(c) * std::asinh(std::sqrt(c * q) / 2.0);
      }
    }
  }
}

// For every row block x column tile: distances of row i against columns
// [c0, c1) are written to dest(i, c0, scratch) (the output itself for the
// dense kernel, a scratch row for top-k), then on_row(i, c0, c1, that pointer).
template <class T, class Dest, class OnRow>
void lorentz_sweep(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, double c,
                   int num_threads, Dest&& dest, OnRow&& on_row) {
  const LorentzSide<T> X(x, nx, d, c), Y(y, ny, d, c);
  const simd::Panels<T> py(Y.rows.data(), ny, d);
  constexpr std::size_t kRows = 32, kCols = 512;  // kCols: a multiple of every panel width
  const std::size_t nblocks = (nx + kRows - 1) / kRows;
  parallel_for(std::int64_t(nblocks), num_threads, [&](std::int64_t b, int) {
    const std::size_t r0 = std::size_t(b) * kRows, r1 = std::min(nx, r0 + kRows);
    std::vector<T> tile((r1 - r0) * kCols), scratch(kCols);
    for (std::size_t c0 = 0; c0 < ny; c0 += kCols) {
      const std::size_t c1 = std::min(ny, c0 + kCols);
      simd::gemm(X.rows.data() + r0, r1 - r0, py, c0, c1 - c0, tile.data(), kCols);
      for (std::size_t i = r0; i < r1; ++i) {
        T* out = dest(i, c0, scratch.data());
        lorentz_row(X, Y, i, c0, c1, tile.data() + (i - r0) * kCols, d, c, out);
        on_row(i, c0, c1, out);
      }
    }
  });
}

}  // namespace detail

template <class T>
void lorentz_pairwise(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, double c, T* out,
                      int num_threads) {
  detail::lorentz_sweep(
      x, nx, y, ny, d, c, num_threads, [&](std::size_t i, std::size_t c0, T*) { return out + i * ny + c0; },
      [](std::size_t, std::size_t, std::size_t, const T*) {});
}

// Smallest-distance-first; ties to the lower index.
template <class T>
void lorentz_topk(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, std::size_t k, double c,
                  T* out_dist, std::int64_t* out_idx, int num_threads) {
  // Heaps rank by -distance, kept in double so float64 distances lose nothing.
  std::vector<BasicTopK<double>> heaps(nx, BasicTopK<double>(k));
  detail::lorentz_sweep(x, nx, y, ny, d, c, num_threads, [](std::size_t, std::size_t, T* scratch) { return scratch; },
                        [&](std::size_t i, std::size_t c0, std::size_t c1, const T* dist) {
                          for (std::size_t j = c0; j < c1; ++j) heaps[i].push(-double(dist[j - c0]), std::int64_t(j));
                        });
  for (std::size_t i = 0; i < nx; ++i) {
    const auto& items = heaps[i].sorted();
    for (std::size_t r = 0; r < k; ++r) {
      out_dist[i * k + r] = T(-items[r].score);
      out_idx[i * k + r] = items[r].index;
    }
  }
}

}  // namespace crossembed
