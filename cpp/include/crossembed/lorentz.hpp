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
#include "sweep.hpp"
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

// Tile handler: turns each tile's dot products into distances, row by row,
// into sink.row(i, c0, scratch) (the output itself for the dense kernel, a
// scratch row for top-k), then calls sink.take(i, c0, c1, that row).
template <class T, class Sink>
struct LorentzHandler {
  const LorentzSide<T>& X;
  const LorentzSide<T>& Y;
  std::size_t d;
  double c;
  std::size_t width;  // columns per tile (the scratch row)
  Sink& sink;

  struct OnBlock : BlockHandlerBase<T> {
    const LorentzHandler& h;
    Block b;
    std::vector<T> scratch;
    OnBlock(const LorentzHandler& h_, const Block& b_, std::size_t width) : h(h_), b(b_), scratch(width) {}
    void add_tile(std::size_t c0, std::size_t c1, const T* tile, std::size_t ld) {
      for (std::size_t i = b.r0; i < b.r1; ++i) {
        T* out = h.sink.row(i, c0, scratch.data());
        lorentz_row(h.X, h.Y, i, c0, c1, tile + (i - b.r0) * ld, h.d, h.c, out);
        h.sink.take(i, c0, c1, static_cast<const T*>(out));
      }
    }
  };
  OnBlock begin_block(const Block& b) const { return OnBlock(*this, b, width); }
};

template <class T, class Sink>
void lorentz_sweep(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, double c,
                   int num_threads, Sink& sink) {
  const LorentzSide<T> X(x, nx, d, c), Y(y, ny, d, c);
  const simd::Panels<T> py(Y.rows.data(), ny, d);
  constexpr std::size_t kRows = 32, kCols = 512;  // kCols: a multiple of every panel width
  const SweepPlan plan(nx, ny, kRows, kCols);
  LorentzHandler<T, Sink> h{X, Y, d, c, kCols, sink};
  sweep(X.rows.data(), py, plan, num_threads, h);
}

template <class T>
struct DenseSink {
  T* out;
  std::size_t ny;
  T* row(std::size_t i, std::size_t c0, T*) const { return out + i * ny + c0; }
  void take(std::size_t, std::size_t, std::size_t, const T*) const {}
};

// Heaps rank by -distance, kept in double so float64 distances lose nothing.
template <class T>
struct TopKSink {
  std::vector<BasicTopK<double>>& heaps;
  T* row(std::size_t, std::size_t, T* scratch) const { return scratch; }
  void take(std::size_t i, std::size_t c0, std::size_t c1, const T* dist) const {
    for (std::size_t j = c0; j < c1; ++j) heaps[i].push(-double(dist[j - c0]), std::int64_t(j));
  }
};

}  // namespace detail

template <class T>
void lorentz_pairwise(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, double c, T* out,
                      int num_threads) {
  detail::DenseSink<T> sink{out, ny};
  detail::lorentz_sweep(x, nx, y, ny, d, c, num_threads, sink);
}

// Smallest-distance-first; ties to the lower index.
template <class T>
void lorentz_topk(const T* x, std::size_t nx, const T* y, std::size_t ny, std::size_t d, std::size_t k, double c,
                  T* out_dist, std::int64_t* out_idx, int num_threads) {
  std::vector<BasicTopK<double>> heaps(nx, BasicTopK<double>(k));
  detail::TopKSink<T> sink{heaps};
  detail::lorentz_sweep(x, nx, y, ny, d, c, num_threads, sink);
  for (std::size_t i = 0; i < nx; ++i) {
    const auto& items = heaps[i].sorted();
    for (std::size_t r = 0; r < k; ++r) {
      out_dist[i * k + r] = T(-items[r].score);
      out_idx[i * k + r] = items[r].index;
    }
  }
}

}  // namespace crossembed
