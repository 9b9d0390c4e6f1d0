// Kernel 3: CSLS mutual top-k between two signature sets, made one-to-one.
//
//   s_ij = <SA_i, SB_j>,  CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)
//   r_A(i) = mean of row i's csls_k largest s_ij (r_B per column likewise)
//
// One tiled GEMM pass keeps, per A row, its best M similarities and, per B
// column, its best M (per-thread column heaps, merged exactly afterwards).
// r_A and r_B come straight from those heaps. The CSLS top-k of a row is then
// searched among its kept candidates; it is provably complete when even the
// best unseen column (similarity <= the row's M-th best, r_B >= min r_B)
// cannot reach the k-th CSLS value. Rows/columns where that fails are
// recomputed exactly in a second, much smaller pass. Nothing N_A x N_B is
// ever allocated; ties go to the lower index everywhere.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"
#include "topk.hpp"

namespace crossembed {

struct CslsResult {
  std::vector<std::int64_t> pairs;  // (P, 2) row-major
  std::vector<float> scores;        // (P,)
};

namespace detail {

// Row-vs-all similarity sweep: calls on_tile(row_begin, row_end, col_begin,
// col_end, tile, ld, thread) for every tile of rows(q) x rows(c).
template <class OnTile>
void similarity_sweep(const std::vector<const float*>& q, const std::vector<const float*>& c, std::size_t d,
                      int num_threads, OnTile&& on_tile) {
  constexpr std::size_t kRows = 64, kCols = 256;
  const auto& I = simd::isa();
  const std::size_t nblocks = (q.size() + kRows - 1) / kRows;
  parallel_for(std::int64_t(nblocks), num_threads, [&](std::int64_t b, int tid) {
    const std::size_t r0 = std::size_t(b) * kRows, r1 = std::min(q.size(), r0 + kRows);
    std::vector<float> tile((r1 - r0) * kCols);
    for (std::size_t c0 = 0; c0 < c.size(); c0 += kCols) {
      const std::size_t c1 = std::min(c.size(), c0 + kCols);
      I.tile_dot_f32(q.data() + r0, r1 - r0, c.data() + c0, c1 - c0, d, tile.data(), kCols);
      on_tile(r0, r1, c0, c1, tile.data(), kCols, tid);
    }
  });
}

// Mean of the `kc` best similarities held (sorted best-first) in `items`.
inline double mean_best(const std::vector<Scored>& items, std::size_t kc) {
  double s = 0;
  for (std::size_t t = 0; t < kc; ++t) s += items[t].score;
  return s / double(kc);
}

// CSLS top-kk of each "row" (side X) given its best-M similarity candidates.
// Returns the rows whose candidate set cannot certify the answer.
inline std::vector<std::size_t> csls_from_candidates(std::vector<TopK>& cand, const std::vector<double>& r_self,
                                                     const std::vector<double>& r_other, std::size_t n_other,
                                                     std::size_t kk, std::vector<std::vector<std::int64_t>>& top) {
  const double r_other_min = r_other.empty() ? 0.0 : *std::min_element(r_other.begin(), r_other.end());
  std::vector<std::size_t> unresolved;
  top.assign(cand.size(), {});
  for (std::size_t i = 0; i < cand.size(); ++i) {
    const auto& items = cand[i].items();  // sorted best-first by the caller
    TopK best(kk);
    for (const Scored& s : items)
      best.push(float(2.0 * s.score - r_self[i] - r_other[std::size_t(s.index)]), s.index);
    const bool complete = items.size() >= n_other;
    if (!complete) {
      const double bound = 2.0 * items.back().score - r_self[i] - r_other_min;
      if (!(best.full() && float(bound) < best.threshold())) {  // float(): rounding is monotone
        unresolved.push_back(i);
        continue;
      }
    }
    for (const Scored& s : best.sorted()) top[i].push_back(s.index);
  }
  return unresolved;
}

// Exact CSLS top-kk for the listed rows of X against all of Y.
inline void csls_exact_rows(const std::vector<std::size_t>& rows, const std::vector<const float*>& x,
                            const std::vector<const float*>& y, std::size_t d, const std::vector<double>& r_x,
                            const std::vector<double>& r_y, std::size_t kk, int num_threads,
                            std::vector<std::vector<std::int64_t>>& top) {
  if (rows.empty()) return;
  std::vector<const float*> sub(rows.size());
  for (std::size_t t = 0; t < rows.size(); ++t) sub[t] = x[rows[t]];
  std::vector<TopK> heaps(rows.size(), TopK(kk));
  similarity_sweep(sub, y, d, num_threads, [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1,
                                               const float* tile, std::size_t ld, int) {
    for (std::size_t i = r0; i < r1; ++i)
      for (std::size_t j = c0; j < c1; ++j)
        heaps[i].push(float(2.0 * tile[(i - r0) * ld + j - c0] - r_x[rows[i]] - r_y[j]), std::int64_t(j));
  });
  for (std::size_t t = 0; t < rows.size(); ++t) {
    top[rows[t]].clear();
    for (const Scored& s : heaps[t].sorted()) top[rows[t]].push_back(s.index);
  }
}

}  // namespace detail

// SA (na, d), SB (nb, d); masks: 1 = excluded.
inline CslsResult csls_mutual_topk(const float* SA, std::size_t na_all, const float* SB, std::size_t nb_all,
                                   std::size_t d, std::size_t k, std::size_t csls_k, const std::uint8_t* mask_a,
                                   const std::uint8_t* mask_b, int num_threads) {
  CslsResult res;
  std::vector<std::int64_t> ia, ib;
  for (std::size_t i = 0; i < na_all; ++i)
    if (!mask_a[i]) ia.push_back(std::int64_t(i));
  for (std::size_t j = 0; j < nb_all; ++j)
    if (!mask_b[j]) ib.push_back(std::int64_t(j));
  const std::size_t na = ia.size(), nb = ib.size();
  if (na == 0 || nb == 0) return res;
  std::vector<const float*> xa(na), xb(nb);
  for (std::size_t i = 0; i < na; ++i) xa[i] = SA + std::size_t(ia[i]) * d;
  for (std::size_t j = 0; j < nb; ++j) xb[j] = SB + std::size_t(ib[j]) * d;

  const std::size_t kca = std::min(csls_k, nb), kcb = std::min(csls_k, na);
  const std::size_t kka = std::min(k, nb), kkb = std::min(k, na);
  const std::size_t ma = std::min(nb, std::max(kca, kka) + 8), mb = std::min(na, std::max(kcb, kkb) + 8);

  // Pass 1: best-M similarities per row (exact) and per column (per thread).
  const int slots = worker_slots(std::int64_t((na + 63) / 64), num_threads);
  std::vector<TopK> row_best(na, TopK(ma));
  std::vector<std::vector<TopK>> col_best(static_cast<std::size_t>(slots));
  for (auto& v : col_best) v.assign(nb, TopK(mb));
  detail::similarity_sweep(xa, xb, d, num_threads, [&](std::size_t r0, std::size_t r1, std::size_t c0,
                                                       std::size_t c1, const float* tile, std::size_t ld, int tid) {
    auto& cols = col_best[std::size_t(tid)];
    for (std::size_t i = r0; i < r1; ++i) {
      const float* row = tile + (i - r0) * ld;
      TopK& rh = row_best[i];
      for (std::size_t j = c0; j < c1; ++j) {
        const float s = row[j - c0];
        rh.push(s, std::int64_t(j));
        cols[j].push(s, std::int64_t(i));
      }
    }
  });
  std::vector<TopK>& col_merged = col_best[0];
  for (std::size_t t = 1; t < col_best.size(); ++t)
    for (std::size_t j = 0; j < nb; ++j)
      for (const Scored& s : col_best[t][j].items()) col_merged[j].push(s.score, s.index);
  col_best.resize(1);

  std::vector<double> ra(na), rb(nb);
  for (std::size_t i = 0; i < na; ++i) ra[i] = detail::mean_best(row_best[i].sorted(), kca);
  for (std::size_t j = 0; j < nb; ++j) rb[j] = detail::mean_best(col_merged[j].sorted(), kcb);

  // CSLS top-k per row and per column, certified from the candidates or recomputed.
  std::vector<std::vector<std::int64_t>> top_a, top_b;
  auto bad_a = detail::csls_from_candidates(row_best, ra, rb, nb, kka, top_a);
  auto bad_b = detail::csls_from_candidates(col_merged, rb, ra, na, kkb, top_b);
  row_best.clear();
  row_best.shrink_to_fit();
  col_best.clear();
  detail::csls_exact_rows(bad_a, xa, xb, d, ra, rb, kka, num_threads, top_a);
  detail::csls_exact_rows(bad_b, xb, xa, d, rb, ra, kkb, num_threads, top_b);

  // Mutual pairs, then greedy one-to-one by CSLS (ties: lower i, then lower j).
  struct Cand {
    double score;
    std::int64_t i, j;
  };
  std::vector<Cand> mutual;
  const auto& I = simd::isa();
  for (std::size_t i = 0; i < na; ++i)
    for (std::int64_t j : top_a[i]) {
      const auto& back = top_b[std::size_t(j)];
      if (std::find(back.begin(), back.end(), std::int64_t(i)) == back.end()) continue;
      const double s = I.dot_f32(xa[i], xb[std::size_t(j)], d);
      mutual.push_back({2.0 * s - ra[i] - rb[std::size_t(j)], std::int64_t(i), j});
    }
  std::sort(mutual.begin(), mutual.end(), [](const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.i != b.i) return a.i < b.i;
    return a.j < b.j;
  });
  std::vector<char> used_a(na, 0), used_b(nb, 0);
  for (const Cand& c : mutual) {
    if (used_a[std::size_t(c.i)] || used_b[std::size_t(c.j)]) continue;
    used_a[std::size_t(c.i)] = used_b[std::size_t(c.j)] = 1;
    res.pairs.push_back(ia[std::size_t(c.i)]);
    res.pairs.push_back(ib[std::size_t(c.j)]);
    res.scores.push_back(float(c.score));
  }
  return res;
}

}  // namespace crossembed
