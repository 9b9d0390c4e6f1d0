// Kernel 1: batched probit similarity between diagonal Gaussians.
//
//   mu_s   = <mu_q, mu_c>
//   sig2_s = <mu_q^2, v_c> + <v_q, mu_c^2 + v_c>  = <[mu_q^2 | v_q], [v_c | mu_c^2 + v_c]>
//   score  = mu_s / sqrt(1 + pi/8 * sig2_s)
//
// The doc side is prepared once (ProbitDocs): means packed into GEMM panels,
// the stacked variance rows [v_c | mu_c^2 + v_c] (zero-padded to a multiple of
// simd::kTreePad) and per-doc bounds. top_k sweeps (query block x doc tile)
// tiles (sweep.hpp): mu_s for the tile with the register-blocked GEMM, then
// sig2_s only for candidates whose score upper bound can still enter the
// query's heap. The bound needs a lower bound on sig2_s = <x, y>, x = [mu_q^2 |
// v_q], y = [v_c | mu_c^2 + v_c]: per half h of length d, with means xb, yb and
// centred norms xr = |x_h - xb|, yr = |y_h - yb|, <x_h, y_h> = d xb yb +
// <x_h - xb, y_h - yb> >= d xb yb - xr yr (Cauchy-Schwarz). Variances spread
// over a range (U(0, 0.5)) make the min-variance bound (vmin_c |mu_q|^2 +
// vmin_q sum(mu_c^2 + v_c)) ~0 while this one is ~2/3 of sig2_s; the larger of
// the two is used. A tile's docs share one such bound (their smallest means,
// largest centred norms), which turns into a per-row bar on mu_s for the SIMD
// scan. Pruning is exact: a skipped candidate provably scores below the k-th
// best. Where many candidates survive (the first tiles, before the heaps
// fill), the tile's sig2_s are computed at
// GEMM speed, kPR x kPC pairs per register block (pair_dots); where it is
// tight, one dot per surviving pair. Both give sig2_s as the same tree dot
// (detail/isa_impl.hpp), so top_k, rerank and the dense scores agree bit for
// bit, whichever path a tile took, for any tiling and thread count.
//
// No variance (a deterministic embedder): when every v_c is 0 the stacked rows
// are not stored (4 D bytes a doc instead of 12 D), and a query with v_q = 0
// scores mu_s exactly (sig2_s = 0, the denominator is 1): its top-k is the
// inner-product top-k, a SIMD threshold scan of each GEMM tile. A query with
// variance against such docs rebuilds the stacked rows [0 | mu_c^2] it needs
// from the mean panels: the values the stored rows would hold.
//
// Storage: float32 (ProbitDocs, 12 D bytes a doc) or IEEE float16
// (ProbitDocsF16, 6 D bytes). float16 rounds every stored value once, at
// packing, to nearest (ties to even): mu_h = fp16(mu_c), v_h = fp16(v_c), and
// the second moment s_h = fp16(mu_h^2 + v_h), from the rounded values (exact
// in double, then one rounding). The micro-kernels widen the halves to
// float32 as they load them (exact) and accumulate in float32 in the same
// order, so a float16 doc is scored exactly as the float32 kernel scores
// float32 copies of (mu_h, v_h, s_h). The pruning bounds (mass, vmin, vmax)
// come from the stored values, so pruning stays exact. Every stored value
// must be <= 65504 in magnitude (the caller checks: max_second_moment);
// variances below 2^-14 keep fewer significant bits (subnormal halves), and
// below 2^-25 they become 0.
#pragma once
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"
#include "topk.hpp"

namespace crossembed {

constexpr double kProbitScale = 0.39269908169872414;  // pi / 8

// Length of a stacked variance row of dimension d (2d, zero-padded).
inline std::size_t probit_stacked_len(std::size_t d) {
  return (2 * d + simd::kTreePad - 1) / simd::kTreePad * simd::kTreePad;
}

// Mean and centred norm of each half of a stacked row (length 2d), for the
// Cauchy-Schwarz lower bound on sig2_s (see the top). Computed in double from
// the stored values, two passes (no cancellation in the centred norm).
struct HalfMoments {
  double mean[2] = {0, 0}, spread[2] = {0, 0};
  template <class S>
  static HalfMoments of(const S* row, std::size_t d) {
    HalfMoments m;
    for (int h = 0; h < 2; ++h) {
      const S* x = row + std::size_t(h) * d;
      const double mean = d ? sum(x, d, 0.0) / double(d) : 0.0;
      m.mean[h] = mean;
      m.spread[h] = std::sqrt(sum(x, d, mean, true));
    }
    return m;
  }
  // Lower bound on <x, y> over both halves, for rows of dimension d (may be 0, never above the dot
  // of the exact values: the 1e-12 terms cover the rounding of these double sums).
  static double lower_bound(const HalfMoments& x, const HalfMoments& y, std::size_t d) {
    double lb = 0;
    for (int h = 0; h < 2; ++h) {
      const double centred = double(d) * x.mean[h] * y.mean[h], worst = x.spread[h] * y.spread[h];
      lb += std::max(0.0, centred * (1 - 1e-12) - worst * (1 + 1e-12));
    }
    return lb;
  }
  // The bound for any y in a set, from the set's smallest means and largest spreads.
  void widen(const HalfMoments& y) {
    for (int h = 0; h < 2; ++h) {
      mean[h] = std::min(mean[h], y.mean[h]);
      spread[h] = std::max(spread[h], y.spread[h]);
    }
  }

 private:
  // sum of x_j - c (squared if `squares`) in eight running sums, a fixed order.
  template <class S>
  static double sum(const S* x, std::size_t d, double c, bool squares = false) {
    constexpr std::size_t L = 8;
    double acc[L] = {};
    std::size_t j = 0;
    if (squares) {
      for (; j + L <= d; j += L)
        for (std::size_t l = 0; l < L; ++l) acc[l] += (value(x[j + l]) - c) * (value(x[j + l]) - c);
      for (; j < d; ++j) acc[0] += (value(x[j]) - c) * (value(x[j]) - c);
    } else {
      for (; j + L <= d; j += L)
        for (std::size_t l = 0; l < L; ++l) acc[l] += value(x[j + l]) - c;
      for (; j < d; ++j) acc[0] += value(x[j]) - c;
    }
    double total = 0;
    for (std::size_t l = 0; l < L; ++l) total += acc[l];
    return total;
  }
  static double value(float v) { return v; }
  static double value(simd::half_t v) { return simd::half_to_float(v); }
};

struct ProbitQueries {
  std::size_t q = 0, d = 0, len = 0;
  std::vector<const float*> rows;   // row pointers into mu_q (caller-owned), for the sweep
  std::vector<float> stacked;       // (q, len): [mu^2 | v | 0]
  std::vector<const float*> vrows;  // row pointers into stacked
  std::vector<double> norm2;        // |mu|^2
  std::vector<double> vmin, vmax;
  std::vector<HalfMoments> halves;  // of [mu^2 | v] as stored in `stacked`, for the centred bound

  ProbitQueries(const float* mu_q, const float* v_q, std::size_t q_, std::size_t d_)
      : q(q_), d(d_), len(probit_stacked_len(d_)), stacked(q_ * len), norm2(q_), vmin(q_), vmax(q_), halves(q_) {
    rows = simd::Panels<float>::row_pointers(mu_q, q, d);
    vrows = simd::Panels<float>::row_pointers(stacked.data(), q, len);
    for (std::size_t i = 0; i < q; ++i) {
      const float* m = mu_q + i * d;
      const float* v = v_q + i * d;
      float* s = stacked.data() + i * len;
      double n2 = 0, lo = INFINITY, hi = 0;
      for (std::size_t j = 0; j < d; ++j) {
        s[j] = m[j] * m[j];
        s[d + j] = v[j];
        n2 += double(m[j]) * m[j];
        lo = std::min<double>(lo, v[j]);
        hi = std::max<double>(hi, v[j]);
      }
      norm2[i] = n2;
      vmin[i] = lo;
      vmax[i] = hi;
      halves[i] = HalfMoments::of(s, d);
    }
  }
};

// S: how the documents are stored, float or simd::half_t (see the top).
template <class S>
class ProbitDocsT {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, simd::half_t>, "float32 or float16 storage");
  static constexpr bool kHalf = std::is_same_v<S, simd::half_t>;

 public:
  // One parallel pass over the documents (blocks of whole panels): each row is read once and
  // written to its mean panel and its stacked row, with its bounds, from the values as stored.
  // The inputs' summary (input_stats) comes from the same pass: the Python layer validates with it
  // and drops the object if the inputs were bad, so non-finite inputs must pass here harmlessly.
  ProbitDocsT(const float* mu_c, const float* v_c, std::size_t n, std::size_t d)
      : n_(n), d_(d), len_(probit_stacked_len(d)), means_only_(all_zero(v_c, n * d)), means_(n, d),
        mass_(n), vmin_(n), vmax_(n), halves_(n) {
    if (!means_only_) stacked_.resize(n * len_);
    constexpr std::size_t kBlock = 1024;  // a multiple of every panel width
    const std::size_t n_blocks = (n + kBlock - 1) / kBlock;
    std::vector<InputStats> block_stats(n_blocks);
    std::vector<double> block_max(n_blocks, 0.0);
    // A few thousand rows pack in well under a millisecond: a thread team there costs more than it saves,
    // and on a busy machine (a server's search thread beside its event loop) waits for a core.
    const int threads = n >= kParallelRows ? 0 : 1;
    parallel_for(std::int64_t(n_blocks), threads, [&](std::int64_t b, int) {
      std::vector<S> scratch(means_only_ ? len_ : 0);  // the stacked row of means-only docs, for its bounds
      std::vector<S> mean_row(kHalf ? d : 0);
      InputStats st;
      double top = 0;
      for (std::size_t i = std::size_t(b) * kBlock; i < std::min(n, std::size_t(b + 1) * kBlock); ++i) {
        const float* m = mu_c + i * d;
        const float* v = v_c + i * d;
        S* row = means_only_ ? scratch.data() : stacked_.data() + i * len_;
        double mass = 0;
        if constexpr (kHalf) {
          double lo = INFINITY, hi = 0;
          for (std::size_t j = 0; j < d; ++j) {
            mean_row[j] = simd::half_bits(m[j]);
            const double mh = simd::half_to_float(mean_row[j]);
            const simd::half_t vh = simd::half_bits(v[j]);
            const double vd = simd::half_to_float(vh), second = mh * mh + vd;
            const simd::half_t sh = simd::half_bits(second);
            row[j] = vh;
            row[d + j] = sh;
            mass += simd::half_to_float(sh);
            lo = std::min(lo, vd);
            hi = std::max(hi, vd);
            top = std::max(top, second);
          }
          means_.store_row(i, mean_row.data());
          vmin_[i] = lo;
          vmax_[i] = hi;
        } else {
          for (std::size_t j = 0; j < d; ++j) {
            row[j] = v[j];
            row[d + j] = m[j] * m[j] + v[j];
          }
          means_.store_row(i, m);
          const RowSums r = row_sums(m, v, d);
          mass = r.mass;
          vmin_[i] = r.vmin;
          vmax_[i] = r.vmax;
          top = std::max(top, r.top);
        }
        std::fill(row + 2 * d, row + len_, S(0));
        mass_[i] = mass;
        halves_[i] = HalfMoments::of(row, d);
        st.add(m, v, d);
      }
      block_stats[std::size_t(b)] = st;
      block_max[std::size_t(b)] = top;
    });
    means_.zero_padding();
    for (std::size_t b = 0; b < n_blocks; ++b) {
      max_second_ = std::max(max_second_, block_max[b]);
      stats_.merge(block_stats[b]);
    }
  }

  // What the Python layer checks, from the constructor's pass: whether every input is finite, the
  // smallest variance and the largest |mean| and variance.
  struct InputStats {
    bool finite = true;
    float min_v = INFINITY, max_abs_mu = 0, max_v = 0;
    void add(const float* m, const float* v, std::size_t d) {
      float lo = min_v, am = max_abs_mu, hi = max_v;
      int nan = 0;
      for (std::size_t j = 0; j < d; ++j) {
        const float a = std::fabs(m[j]);
        am = a > am ? a : am;  // a NaN never wins these: counted apart
        lo = v[j] < lo ? v[j] : lo;
        hi = v[j] > hi ? v[j] : hi;
        nan |= int(m[j] != m[j]) | int(v[j] != v[j]);
      }
      finite = finite && !nan && am <= FLT_MAX && lo >= -FLT_MAX && hi <= FLT_MAX;
      min_v = lo;
      max_abs_mu = am;
      max_v = hi;
    }
    void merge(const InputStats& o) {
      finite = finite && o.finite;
      min_v = std::min(min_v, o.min_v);
      max_abs_mu = std::max(max_abs_mu, o.max_abs_mu);
      max_v = std::max(max_v, o.max_v);
    }
  };
  const InputStats& input_stats() const { return stats_; }

  std::size_t size() const { return n_; }
  std::size_t dim() const { return d_; }
  // Whether every stored variance is 0 (no stacked rows are kept).
  bool means_only() const { return means_only_; }
  const S* stacked(std::size_t i) const { return stacked_.data() + i * len_; }
  // Stacked rows [first, first + count) into out ((count, len_)): stored, or rebuilt from the mean
  // panels for means-only docs exactly as the constructor would have stored them ([0 | mu^2 | 0]).
  const S* stacked_rows(std::size_t first, std::size_t count, std::vector<S>& out) const {
    if (!means_only_) return stacked(first);
    out.assign(count * len_, S(0));
    for (std::size_t r = 0; r < count; ++r) {
      S* s = out.data() + r * len_;
      for (std::size_t j = 0; j < d_; ++j) {
        const S m = means_.get(first + r, j);
        if constexpr (kHalf) {
          const double mh = simd::half_to_float(m);
          s[d_ + j] = simd::half_bits(mh * mh);
        } else {
          s[d_ + j] = m * m;
        }
      }
    }
    return out.data();
  }
  // Whether query qi scores mu_s exactly against these docs (no variance on either side).
  bool plain(const ProbitQueries& Q, std::size_t qi) const { return means_only_ && Q.vmax[qi] == 0; }
  // Bytes held: mean panels, stacked rows and the per-doc bounds.
  std::size_t nbytes() const {
    return (means_.data.size() + stacked_.size()) * sizeof(S) + 3 * n_ * sizeof(double);
  }
  // Largest mu^2 + v over the docs (float16: of the rounded mu_h, v_h, before
  // s_h is rounded; beyond 65504, s_h is not a finite half).
  double max_second_moment() const { return max_second_; }

  static float score_from(float mu_s, float sig2) {
    return mu_s / std::sqrt(1.0f + static_cast<float>(kProbitScale) * sig2);
  }

  // Upper bound on the score a candidate with mean product mu_s can reach.
  // Computed in double with slack for float rounding of sig2 (all its terms
  // are >= 0, so its relative error is below ~2d*eps).
  double score_upper_bound(const ProbitQueries& Q, std::size_t qi, std::size_t ci, float mu_s) const {
    if (mu_s > 0) return positive_upper_bound(mu_s, sig2_lower_bound(Q, qi, ci));
    const double ub = (vmax_[ci] * Q.norm2[qi] + Q.vmax[qi] * mass_[ci]) * (1.0 + sig2_slack());
    return mu_s / std::sqrt(1.0 + kProbitScale * ub) * (1.0 - 1e-6);
  }
  // A lower bound on the float sig2 the kernel computes for (qi, ci).
  double sig2_lower_bound(const ProbitQueries& Q, std::size_t qi, std::size_t ci) const {
    const double by_min = vmin_[ci] * Q.norm2[qi] + Q.vmin[qi] * mass_[ci];
    return std::max(by_min, HalfMoments::lower_bound(Q.halves[qi], halves_[ci], d_)) * (1.0 - sig2_slack());
  }
  // What every doc of a range shares for the bound: its smallest means and mass, largest spreads.
  struct RangeMoments {
    HalfMoments halves;
    double vmin = 0, mass = 0;
  };
  RangeMoments range_moments(std::size_t t0, std::size_t t1) const {
    RangeMoments r{halves_[t0], vmin_[t0], mass_[t0]};
    for (std::size_t c = t0 + 1; c < t1; ++c) {
      r.halves.widen(halves_[c]);
      r.vmin = std::min(r.vmin, vmin_[c]);
      r.mass = std::min(r.mass, mass_[c]);
    }
    return r;
  }
  // The same for every doc of a range at once (a tile's bar for the SIMD scan).
  double sig2_lower_bound(const ProbitQueries& Q, std::size_t qi, const RangeMoments& r) const {
    const double by_min = r.vmin * Q.norm2[qi] + Q.vmin[qi] * r.mass;
    return std::max(by_min, HalfMoments::lower_bound(Q.halves[qi], r.halves, d_)) * (1.0 - sig2_slack());
  }

  float sig2(const ProbitQueries& Q, std::size_t qi, std::size_t ci) const {
    if (!means_only_) return simd::dot_tree(Q.vrows[qi], stacked(ci), len_);
    if (Q.vmax[qi] == 0) return 0.0f;  // every product of the tree dot is +0
    std::vector<S> row;
    return simd::dot_tree(Q.vrows[qi], stacked_rows(ci, 1, row), len_);
  }

  // Fused top-k over all docs. scores/indices are (q, k), best first.
  void topk(const float* mu_q, const float* v_q, std::size_t q, std::size_t k, float* out_scores,
            std::int64_t* out_idx, int num_threads) const {
    if (q == 0) return;
    const ProbitQueries Q(mu_q, v_q, q, d_);
    SweepPlan plan(q, n_, kQueryBlock, kDocTile);
    // Few query blocks: also split the docs so every core has work; partial
    // heaps merge exactly under the total order, so the result is unchanged.
    plan.split_columns(4096, num_threads);
    const std::size_t n_chunks = plan.n_chunks();
    std::vector<TopK> partial(q * n_chunks);
    TopKHandler h{*this, Q, k, n_chunks, partial};
    sweep(Q.rows.data(), means_, plan, num_threads, h);
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t i, int) {
      TopK& merged = partial[std::size_t(i) * n_chunks];
      for (std::size_t ch = 1; ch < n_chunks; ++ch)
        merged.merge(partial[std::size_t(i) * n_chunks + ch]);
      write_topk(merged, k, out_scores + std::size_t(i) * k, out_idx + std::size_t(i) * k);
    });
  }

  // Rerank given candidate rows (the ANN path). cand is (q, m); -1 is padding.
  void rerank(const float* mu_q, const float* v_q, std::size_t q, const std::int64_t* cand, std::size_t m,
              std::size_t k, float* out_scores, std::int64_t* out_idx, int num_threads) const {
    if (q == 0) return;
    const ProbitQueries Q(mu_q, v_q, q, d_);
    const std::size_t w = means_.width;
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t ii, int) {
      const std::size_t i = std::size_t(ii);
      // Score each candidate against its whole stored panel (one query row
      // times `w` lanes: the same FMA count as one scalar dot, but contiguous
      // loads) with the micro-kernel top_k uses, so both paths give identical
      // scores. Sorted ids let candidates that share a panel share the product.
      std::vector<std::int64_t> ids;
      for (std::size_t r = 0; r < m; ++r)
        if (cand[i * m + r] >= 0) ids.push_back(cand[i * m + r]);
      std::sort(ids.begin(), ids.end());
      std::vector<float> lanes(w);
      std::size_t panel_first = n_;  // none computed yet
      const bool no_var = plain(Q, i);
      TopK heap(k);
      for (const std::int64_t id : ids) {
        const std::size_t j = std::size_t(id), first = j - j % w;
        if (first != panel_first) {
          simd::gemm(&Q.rows[i], 1, means_, first, std::min(w, n_ - first), lanes.data(), w);
          panel_first = first;
        }
        const float mu_s = lanes[j - first];
        heap.push(no_var ? mu_s : score_from(mu_s, sig2(Q, i, j)), id);
      }
      write_topk(heap, k, out_scores + i * k, out_idx + i * k);
    });
  }

  // Dense scores; mu_s / sig2 are written when non-null.
  void scores(const float* mu_q, const float* v_q, std::size_t q, float* out, float* out_mu, float* out_sig2,
              int num_threads) const {
    if (q == 0 || n_ == 0) return;
    const ProbitQueries Q(mu_q, v_q, q, d_);
    // One doc tile per task: dense output needs no per-row state across tiles.
    const SweepPlan plan(q, n_, kQueryBlock, kDocTile, kDocTile);
    DenseHandler h{*this, Q, out, out_mu, out_sig2};
    sweep(Q.rows.data(), means_, plan, num_threads, h);
  }

 private:
  static constexpr std::size_t kQueryBlock = 64, kDocTile = 256;  // kDocTile: a multiple of every panel width
  // A tile's variance terms are computed whole once 1 in kDenseShare of its pairs needs them.
  static constexpr std::size_t kDenseShare = 4;

  static constexpr std::size_t kParallelRows = 8192;

  // Whether every entry is 0 (blocks in parallel; a nonzero entry ends a block's scan).
  static bool all_zero(const float* v, std::size_t count) {
    constexpr std::size_t kChunk = std::size_t(1) << 20;
    const std::size_t n_chunks = (count + kChunk - 1) / kChunk;
    std::vector<char> zero(n_chunks, 1);
    parallel_for(std::int64_t(n_chunks), count >= kChunk ? 0 : 1, [&](std::int64_t c, int) {
      const float* p = v + std::size_t(c) * kChunk;
      zero[std::size_t(c)] = std::all_of(p, p + std::min(kChunk, count - std::size_t(c) * kChunk), is_zero);
    });
    return std::all_of(zero.begin(), zero.end(), [](char z) { return z != 0; });
  }

  // A float32 doc's bounds, in double from the stored values: mass = sum(mu^2 + v), the smallest
  // and largest v, the largest mu^2 + v. Eight running sums (the order is fixed: the bounds, not the
  // scores, depend on it, and their slack covers any order's rounding).
  struct RowSums {
    double mass, vmin, vmax, top;
  };
  static RowSums row_sums(const float* m, const float* v, std::size_t d) {
    constexpr std::size_t L = 8;
    double acc[L] = {}, top[L] = {};
    float lo[L], hi[L];
    for (std::size_t l = 0; l < L; ++l) lo[l] = hi[l] = d ? v[0] : 0.0f;
    std::size_t j = 0;
    for (; j + L <= d; j += L)
      for (std::size_t l = 0; l < L; ++l) {
        const double second = double(m[j + l]) * m[j + l] + v[j + l];
        acc[l] += second;
        top[l] = second > top[l] ? second : top[l];
        lo[l] = v[j + l] < lo[l] ? v[j + l] : lo[l];
        hi[l] = v[j + l] > hi[l] ? v[j + l] : hi[l];
      }
    for (; j < d; ++j) {
      const double second = double(m[j]) * m[j] + v[j];
      acc[0] += second;
      top[0] = std::max(top[0], second);
      lo[0] = std::min(lo[0], v[j]);
      hi[0] = std::max(hi[0], v[j]);
    }
    RowSums r{0, double(d ? lo[0] : INFINITY), double(hi[0] > 0 ? hi[0] : 0.0f), 0};
    for (std::size_t l = 0; l < L; ++l) {
      r.mass += acc[l];
      r.top = std::max(r.top, top[l]);
      r.vmin = std::min(r.vmin, double(lo[l]));
      r.vmax = std::max(r.vmax, double(hi[l]));
    }
    return r;
  }

  // sig2 of the block's rows against a whole doc tile, kPR x kPC pairs at a time.
  struct VarianceTile {
    std::vector<float> values;  // (rows, kDocTile)
    std::vector<S> rebuilt;     // the tile's stacked rows, for means-only docs
    explicit VarianceTile(const Block& b) : values((b.r1 - b.r0) * kDocTile) {}
    void compute(const ProbitDocsT& D, const ProbitQueries& Q, const Block& b, std::size_t t0, std::size_t t1) {
      const bool all_plain = D.means_only_ && std::all_of(Q.vmax.begin() + std::ptrdiff_t(b.r0),
                                                          Q.vmax.begin() + std::ptrdiff_t(b.r1), is_zero);
      if (all_plain) {  // what pair_dots would give: sums of +0
        std::fill(values.begin(), values.end(), 0.0f);
        return;
      }
      const S* rows = D.stacked_rows(t0, t1 - t0, rebuilt);
      simd::pair_dots(Q.vrows.data() + b.r0, b.r1 - b.r0, rows, t1 - t0, D.len_, values.data(), kDocTile);
    }
    float at(const Block& b, std::size_t i, std::size_t j) const { return values[(i - b.r0) * kDocTile + j]; }
  };

  // The cheap test: the denominator is >= 1, so a positive score is <= mu_s,
  // and a score with mu_s <= 0 is <= 0.
  static bool below(float mu_s, float thr) { return mu_s > 0 ? double(mu_s) * (1.0 + 1e-6) < thr : thr > 0; }
  static bool is_zero(double v) { return v == 0; }
  double sig2_slack() const { return std::min(0.5, 1e-6 * double(2 * d_) + 1e-6); }
  // The score bound for mu_s > 0 given a lower bound on sig2.
  static double positive_upper_bound(float mu_s, double sig2_lb) {
    return mu_s / std::sqrt(1.0 + kProbitScale * sig2_lb) * (1.0 + 1e-6);
  }
  // The bar on mu_s below which a candidate whose sig2 is at least sig2_lb cannot reach thr.
  static float scan_bar(float thr, double sig2_lb) {
    if (!(thr > 0)) return -INFINITY;
    return std::nextafter(static_cast<float>(double(thr) * std::sqrt(1.0 + kProbitScale * sig2_lb) / (1.0 + 1e-6)),
                          -INFINITY);
  }

  // top_k: one heap per (query, doc chunk). The cheap test and the exact
  // bound (score_upper_bound) skip the variance term of candidates that cannot
  // enter the heap.
  struct TopKHandler {
    const ProbitDocsT& D;
    const ProbitQueries& Q;
    std::size_t k, n_chunks;
    std::vector<TopK>& partial;

    struct OnBlock : BlockHandlerBase<float> {
      const TopKHandler& h;
      Block b;
      VarianceTile var;
      std::vector<std::uint32_t> hits;           // positions in a row's tile the scan passed
      std::vector<std::uint32_t> cand_row, cand_col;  // (row - r0, position in the tile) needing sig2
      std::vector<const float*> lhs;
      std::vector<const S*> rhs;
      std::vector<float> cand_sig2;
      OnBlock(const TopKHandler& h_, const Block& b_) : h(h_), b(b_), var(b_), hits(kDocTile) {
        for (std::size_t i = b.r0; i < b.r1; ++i) h.partial[i * h.n_chunks + b.chunk].reset(h.k);
      }
      bool skip(const TopK& heap, std::size_t i, std::size_t ci, float mu_s, float thr) const {
        return below(mu_s, thr) || (heap.full() && h.D.score_upper_bound(h.Q, i, ci, mu_s) < thr);
      }
      void add_tile(std::size_t t0, std::size_t t1, const float* tile, std::size_t ld) {
        const std::size_t w = t1 - t0;
        // 1. The candidates that need their variance term: each row's tile goes through a SIMD
        // scan against the row's bar (from the bound every doc of the tile shares), and what
        // passes, through the per-doc bound, against the row's heap as the tile starts.
        const RangeMoments shared = h.D.range_moments(t0, t1);
        cand_row.clear();
        cand_col.clear();
        for (std::size_t i = b.r0; i < b.r1; ++i) {
          TopK& heap = h.partial[i * h.n_chunks + b.chunk];
          const float* row = tile + (i - b.r0) * ld;
          if (h.D.plain(h.Q, i)) {  // score = mu_s: an inner-product top-k
            const std::size_t m = simd::select_at_least(row, w, heap.threshold(), hits.data());
            for (std::size_t r = 0; r < m; ++r) heap.push(row[hits[r]], std::int64_t(t0 + hits[r]));
            continue;
          }
          const float thr = heap.threshold();
          const float bar = thr > 0 ? scan_bar(thr, h.D.sig2_lower_bound(h.Q, i, shared)) : -INFINITY;
          const std::size_t m = simd::select_at_least(row, w, bar, hits.data());
          for (std::size_t r = 0; r < m; ++r) {
            if (skip(heap, i, t0 + hits[r], row[hits[r]], thr)) continue;
            cand_row.push_back(std::uint32_t(i - b.r0));
            cand_col.push_back(hits[r]);
          }
        }
        const std::size_t n_cand = cand_row.size();
        if (n_cand == 0) return;
        // 2. Their sig2_s, as the same tree dots either way: the whole tile in register blocks
        // (pair_dots, the fastest per pair) when a large share survives, as it does while the
        // heaps fill; otherwise only the candidates' pairs, four FMA chains at a time.
        const bool dense = kDenseShare * n_cand >= (b.r1 - b.r0) * w;
        if (dense) {
          var.compute(h.D, h.Q, b, t0, t1);
        } else {
          const S* rows = h.D.stacked_rows(t0, w, var.rebuilt);
          lhs.resize(n_cand);
          rhs.resize(n_cand);
          cand_sig2.resize(n_cand);
          for (std::size_t c = 0; c < n_cand; ++c) {
            lhs[c] = h.Q.vrows[b.r0 + cand_row[c]];
            rhs[c] = rows + std::size_t(cand_col[c]) * h.D.len_;
          }
          simd::tree_dots(lhs.data(), rhs.data(), n_cand, h.D.len_, cand_sig2.data());
        }
        // 3. Their scores into the heaps.
        for (std::size_t c = 0; c < n_cand; ++c) {
          const std::size_t i = b.r0 + cand_row[c], j = cand_col[c];
          const float s2 = dense ? var.at(b, i, j) : cand_sig2[c];
          h.partial[i * h.n_chunks + b.chunk].push(score_from(tile[(i - b.r0) * ld + j], s2), std::int64_t(t0 + j));
        }
      }
    };
    OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
  };

  // scores: every (query, doc) gets its variance term and score.
  struct DenseHandler {
    const ProbitDocsT& D;
    const ProbitQueries& Q;
    float *out, *out_mu, *out_sig2;

    struct OnBlock : BlockHandlerBase<float> {
      const DenseHandler& h;
      Block b;
      VarianceTile var;
      OnBlock(const DenseHandler& h_, const Block& b_) : h(h_), b(b_), var(b_) {}
      void add_tile(std::size_t t0, std::size_t t1, const float* tile, std::size_t ld) {
        const std::size_t n = h.D.n_;
        var.compute(h.D, h.Q, b, t0, t1);
        for (std::size_t i = b.r0; i < b.r1; ++i)
          for (std::size_t j = t0; j < t1; ++j) {
            const float a = tile[(i - b.r0) * ld + j - t0];
            const float s2 = var.at(b, i, j - t0);
            h.out[i * n + j] = score_from(a, s2);
            if (h.out_mu) h.out_mu[i * n + j] = a;
            if (h.out_sig2) h.out_sig2[i * n + j] = s2;
          }
      }
    };
    OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
  };

  std::size_t n_, d_, len_;
  bool means_only_;         // every v_c is 0: stacked_ is empty
  simd::Panels<S> means_;   // mu_c packed for the GEMM micro-kernel
  BigVector<S> stacked_;    // (n, len_): [v_c | mu_c^2 + v_c | 0]
  std::vector<double> mass_, vmin_, vmax_;  // sum of the stored mu_c^2 + v_c; min / max stored v_c
  std::vector<HalfMoments> halves_;         // of each stored (or rebuilt) stacked row
  double max_second_ = 0;
  InputStats stats_;
};

using ProbitDocs = ProbitDocsT<float>;
using ProbitDocsF16 = ProbitDocsT<simd::half_t>;

}  // namespace crossembed
