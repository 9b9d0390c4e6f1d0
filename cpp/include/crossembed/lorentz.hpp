// Kernel 4: geodesic distances in the Lorentz model (curvature -c).
//
// Points are space components x; x_t = sqrt(1/c + |x|^2). Distances are
//   d = (2/sqrt c) asinh( sqrt(c q) / 2 ),  q = |x-y|^2 - (x_t-y_t)^2 >= 0,
// with q written as a sum of two non-negative terms, so that it keeps its
// relative precision for every input (nearby points, points far out along
// one ray at different radii, points at the origin):
//   q = Q_tan + dr^2 (T - R)(T + R) / T^2,
//   Q_tan = |x-y|^2 - dr^2 = 2 (|x||y| - x.y) = |x||y| |x/|x| - y/|y||^2,
//   dr = |x| - |y| = (x-y).(x+y) / (|x| + |y|),
//   T = x_t + y_t, R = |x| + |y|, T - R = (1/c) (1/(x_t+|x|) + 1/(y_t+|y|)).
// (Subtracting (x_t-y_t)^2 from |x-y|^2 directly cancels catastrophically
// when |x| != |y| along nearly one direction: [1e4, 0] vs [2e4, 0] is ln 2.)
// Fast path: Q_tan = 2 (|x||y| - x.y) from the Gram matrix (one GEMM), valid
// while x.y <= 0.95 |x||y|. Other pairs are recomputed from the coordinates
// in double (long double for float64 inputs): Q_tan = |x-y|^2 - dr^2 where
// tangential separation dominates, else |x||y| |xh - yh|^2 from the unit
// vectors (radial separation dominates; whichever form rounds less). Both
// float32 and float64 rows are vectorised (asinh through a vector log).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"
#include "topk.hpp"

namespace crossembed {
namespace detail {

template <class T>
struct LorentzSide {
  std::vector<double> norm, time, inv_tr;  // |x|, x_t, 1/(x_t+|x|)
  std::vector<T> norm_t, time_t, inv_tr_t;           // the same in T for the fast path
  std::vector<const T*> rows;
  LorentzSide(const T* x, std::size_t n, std::size_t d, double c)
      : norm(n), time(n), inv_tr(n), norm_t(n), time_t(n), inv_tr_t(n), rows(n) {
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < d; ++j) s += double(x[i * d + j]) * double(x[i * d + j]);
      norm[i] = std::sqrt(s);
      time[i] = std::sqrt(1.0 / c + s);
      inv_tr[i] = 1.0 / (time[i] + norm[i]);
      norm_t[i] = T(norm[i]);
      time_t[i] = T(time[i]);
      inv_tr_t[i] = T(inv_tr[i]);
      rows[i] = x + i * d;
    }
  }
};

// q's radial term dr^2 (T - R)(T + R) / T^2, ordered so that nothing overflows.
template <class W>
W lorentz_radial(W dr, W rx, W ry, W tx, W ty, W ax, W ay, W c) {
  const W big_t = tx + ty, big_r = rx + ry;
  return dr * dr * ((ax + ay) / c) * ((big_t + big_r) / big_t / big_t);
}

template <class W>
W lorentz_from_q(W q, W c) {
  return W(2) / std::sqrt(c) * std::asinh(std::sqrt(c * q) / W(2));
}

// From the coordinates (see the header comment), in W: double for float
// inputs (their 24-bit products are exact there), long double for double
// inputs, because the two forms of Q_tan each leave ~eps |x||y| or ~eps |x-y|^2
// and q itself can be ~|x-y|^2 / (c |x|^2) (nearby points far out on one ray).
template <class T>
double lorentz_exact(const T* x, const T* y, std::size_t d, double c_in) {
  using W = typename std::conditional<std::is_same<T, double>::value, long double, double>::type;
  const W c = W(c_in), eps = std::numeric_limits<W>::epsilon();
  W sx = 0, sy = 0;
  for (std::size_t t = 0; t < d; ++t) {
    sx += W(x[t]) * W(x[t]);
    sy += W(y[t]) * W(y[t]);
  }
  const W rx = std::sqrt(sx), ry = std::sqrt(sy);
  const W ix = rx > 0 ? 1 / rx : W(0), iy = ry > 0 ? 1 / ry : W(0);
  W sq = 0, ndiff = 0, chord = 0;
  for (std::size_t t = 0; t < d; ++t) {
    const W xv = W(x[t]), yv = W(y[t]);
    const W diff = xv - yv, h = xv * ix - yv * iy;
    sq += diff * diff;
    ndiff += diff * (xv + yv);
    chord += h * h;
  }
  const W big_r = rx + ry;
  const W dr = big_r > 0 ? ndiff / big_r : W(0);
  const W sub = sq - dr * dr;
  // Rounding error of each form, over eps: sq for the difference;
  // 2 sqrt(|x||y| Q_tan) + eps |x||y| for the unit-vector chord. Take the smaller.
  const W rxy = rx * ry, pos = sub > 0 ? sub : W(0);
  const W q_tan = sq <= 2 * std::sqrt(rxy * pos) + eps * rxy ? sub : rxy * chord;
  const W tx = std::sqrt(1 / c + sx), ty = std::sqrt(1 / c + sy);
  const W q = (q_tan > 0 ? q_tan : W(0)) + lorentz_radial<W>(dr, rx, ry, tx, ty, 1 / (tx + rx), 1 / (ty + ry), c);
  return double(lorentz_from_q<W>(q, c));
}

// Distances of x-row i against y columns [c0, c1), given their dot products.
template <class T>
void lorentz_row(const LorentzSide<T>& X, const LorentzSide<T>& Y, std::size_t i, std::size_t c0, std::size_t c1,
                 const T* dots, std::size_t d, double c, T* out) {
  if constexpr (std::is_same<T, float>::value) {
    simd::isa().lorentz_row_from_dots(dots, c1 - c0, X.norm_t[i], X.time_t[i], X.inv_tr_t[i], Y.norm_t.data() + c0,
                                      Y.time_t.data() + c0, Y.inv_tr_t.data() + c0, float(c), out);
    for (std::size_t j = c0; j < c1; ++j)
      if (!std::isfinite(out[j - c0])) out[j - c0] = float(lorentz_exact(X.rows[i], Y.rows[j], d, c));
  } else {
    simd::isa().lorentz_row_from_dots_f64(dots, c1 - c0, X.norm[i], X.time[i], X.inv_tr[i], Y.norm.data() + c0,
                                          Y.time.data() + c0, Y.inv_tr.data() + c0, c, out);
    for (std::size_t j = c0; j < c1; ++j)
      if (!std::isfinite(out[j - c0])) out[j - c0] = lorentz_exact(X.rows[i], Y.rows[j], d, c);
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
