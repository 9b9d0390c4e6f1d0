// Kernel 1: batched probit similarity between diagonal Gaussians.
//
//   mu_s   = <mu_q, mu_c>
//   sig2_s = <mu_q^2, v_c> + <v_q, mu_c^2 + v_c>
//   score  = mu_s / sqrt(1 + pi/8 * sig2_s)
//
// The doc side is prepared once (ProbitDocs): means packed into GEMM panels, the stacked variance block
// [v_c | mu_c^2 + v_c] (so sig2_s is one 2D-long dot with [mu_q^2 | v_q]) and
// per-doc bounds. top_k sweeps (query block x doc tile) tiles (sweep.hpp),
// computes mu_s for a tile with the register-blocked GEMM, and only evaluates sig2_s for candidates whose score
// upper bound (from min/max variances) can still enter the query's heap. The
// pruning is exact: a skipped candidate provably scores below the k-th best.
// All paths (top_k, rerank, dense) compute mu_s with the same micro-kernel and
// sig2_s with the same dot, so they agree bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"
#include "topk.hpp"

namespace crossembed {

constexpr double kProbitScale = 0.39269908169872414;  // pi / 8

struct ProbitQueries {
  std::size_t q = 0, d = 0;
  const float* mu = nullptr;     // (q, d), caller-owned
  std::vector<const float*> rows;  // row pointers into mu, for the sweep
  std::vector<float> stacked;    // (q, 2d): [mu^2 | v]
  std::vector<double> norm2;     // |mu|^2
  std::vector<double> vmin, vmax;

  ProbitQueries(const float* mu_q, const float* v_q, std::size_t q_, std::size_t d_) : q(q_), d(d_), mu(mu_q) {
    rows = simd::Panels<float>::row_pointers(mu_q, q, d);
    stacked.resize(q * 2 * d);
    norm2.resize(q);
    vmin.resize(q);
    vmax.resize(q);
    for (std::size_t i = 0; i < q; ++i) {
      const float* m = mu_q + i * d;
      const float* v = v_q + i * d;
      float* s = stacked.data() + i * 2 * d;
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
    }
  }
};

class ProbitDocs {
 public:
  ProbitDocs(const float* mu_c, const float* v_c, std::size_t n, std::size_t d)
      : n_(n), d_(d), means_(mu_c, n, d), stacked_(n * 2 * d), mass_(n), vmin_(n), vmax_(n) {
    constexpr std::size_t kBlock = 1024;
    parallel_for(std::int64_t((n + kBlock - 1) / kBlock), 0, [&](std::int64_t b, int) {
      for (std::size_t i = std::size_t(b) * kBlock; i < std::min(n, std::size_t(b + 1) * kBlock); ++i) {
        const float* m = mu_c + i * d;
        const float* v = v_c + i * d;
        float* s = stacked_.data() + i * 2 * d;
        double mass = 0, lo = INFINITY, hi = 0;
        for (std::size_t j = 0; j < d; ++j) {
          s[j] = v[j];
          s[d + j] = m[j] * m[j] + v[j];
          mass += double(m[j]) * m[j] + v[j];
          lo = std::min<double>(lo, v[j]);
          hi = std::max<double>(hi, v[j]);
        }
        mass_[i] = mass;
        vmin_[i] = lo;
        vmax_[i] = hi;
      }
    });
  }

  std::size_t size() const { return n_; }
  std::size_t dim() const { return d_; }
  const float* stacked(std::size_t i) const { return stacked_.data() + i * 2 * d_; }

  static float score_from(float mu_s, float sig2) {
    return mu_s / std::sqrt(1.0f + static_cast<float>(kProbitScale) * sig2);
  }

  // Upper bound on the score a candidate with mean product mu_s can reach.
  // Computed in double with slack for float rounding of sig2 (all its terms
  // are >= 0, so its relative error is below ~2d*eps).
  double score_upper_bound(const ProbitQueries& Q, std::size_t qi, std::size_t ci, float mu_s) const {
    const double slack = std::min(0.5, 1e-6 * double(2 * d_) + 1e-6);
    if (mu_s > 0) {
      const double lb = (vmin_[ci] * Q.norm2[qi] + Q.vmin[qi] * mass_[ci]) * (1.0 - slack);
      return mu_s / std::sqrt(1.0 + kProbitScale * lb) * (1.0 + 1e-6);
    }
    const double ub = (vmax_[ci] * Q.norm2[qi] + Q.vmax[qi] * mass_[ci]) * (1.0 + slack);
    return mu_s / std::sqrt(1.0 + kProbitScale * ub) * (1.0 - 1e-6);
  }

  float score_pair(const ProbitQueries& Q, std::size_t qi, std::size_t ci, float mu_s) const {
    const float sig2 = simd::isa().dot_f32(Q.stacked.data() + qi * 2 * d_, stacked(ci), 2 * d_);
    return score_from(mu_s, sig2);
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
    parallel_for(std::int64_t(q), num_threads, [&](std::int64_t ii, int) {
      const std::size_t i = std::size_t(ii);
      // Gather the candidates' means and score them with the same micro-kernel
      // as top_k, so both paths give identical scores.
      std::vector<std::int64_t> ids;
      for (std::size_t r = 0; r < m; ++r)
        if (cand[i * m + r] >= 0) ids.push_back(cand[i * m + r]);
      std::vector<float> rows(ids.size() * d_), mus(ids.size());
      for (std::size_t r = 0; r < ids.size(); ++r)
        for (std::size_t t = 0; t < d_; ++t) rows[r * d_ + t] = means_.get(std::size_t(ids[r]), t);
      TopK heap(k);
      if (!ids.empty()) {
        const simd::Panels<float> panel(rows.data(), ids.size(), d_);
        const float* qrow = Q.mu + i * d_;
        simd::gemm(&qrow, 1, panel, 0, ids.size(), mus.data(), ids.size());
      }
      for (std::size_t r = 0; r < ids.size(); ++r) heap.push(score_pair(Q, i, std::size_t(ids[r]), mus[r]), ids[r]);
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

  // top_k: one heap per (query, doc chunk). The cheap bound (a positive score
  // is <= mu_s) and the exact one (score_upper_bound) skip the variance dot
  // for candidates that cannot enter the heap.
  struct TopKHandler {
    const ProbitDocs& D;
    const ProbitQueries& Q;
    std::size_t k, n_chunks;
    std::vector<TopK>& partial;

    struct OnBlock : BlockHandlerBase<float> {
      const TopKHandler& h;
      Block b;
      OnBlock(const TopKHandler& h_, const Block& b_) : h(h_), b(b_) {
        for (std::size_t i = b.r0; i < b.r1; ++i) h.partial[i * h.n_chunks + b.chunk].reset(h.k);
      }
      void add_tile(std::size_t t0, std::size_t t1, const float* tile, std::size_t ld) {
        for (std::size_t i = b.r0; i < b.r1; ++i) {
          TopK& heap = h.partial[i * h.n_chunks + b.chunk];
          const float* row = tile + (i - b.r0) * ld;
          float thr = heap.threshold();
          for (std::size_t j = 0; j < t1 - t0; ++j) {
            const std::size_t ci = t0 + j;
            // Cheap test first: the denominator is >= 1, so a positive score is <= mu_s.
            if (row[j] > 0 && double(row[j]) * (1.0 + 1e-6) < thr) continue;
            if (heap.full() && h.D.score_upper_bound(h.Q, i, ci, row[j]) < thr) continue;
            heap.push(h.D.score_pair(h.Q, i, ci, row[j]), std::int64_t(ci));
            thr = heap.threshold();
          }
        }
      }
    };
    OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
  };

  // scores: every (query, doc) gets its variance term and score.
  struct DenseHandler {
    const ProbitDocs& D;
    const ProbitQueries& Q;
    float *out, *out_mu, *out_sig2;

    struct OnBlock : BlockHandlerBase<float> {
      const DenseHandler& h;
      Block b;
      OnBlock(const DenseHandler& h_, const Block& b_) : h(h_), b(b_) {}
      void add_tile(std::size_t t0, std::size_t t1, const float* tile, std::size_t ld) {
        const auto& I = simd::isa();
        const std::size_t n = h.D.n_, d = h.D.d_;
        for (std::size_t i = b.r0; i < b.r1; ++i)
          for (std::size_t j = t0; j < t1; ++j) {
            const float a = tile[(i - b.r0) * ld + j - t0];
            const float s2 = I.dot_f32(h.Q.stacked.data() + i * 2 * d, h.D.stacked(j), 2 * d);
            h.out[i * n + j] = score_from(a, s2);
            if (h.out_mu) h.out_mu[i * n + j] = a;
            if (h.out_sig2) h.out_sig2[i * n + j] = s2;
          }
      }
    };
    OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
  };

  std::size_t n_, d_;
  simd::Panels<float> means_;  // mu_c packed for the GEMM micro-kernel
  std::vector<float> stacked_;
  std::vector<double> mass_, vmin_, vmax_;
};

}  // namespace crossembed
