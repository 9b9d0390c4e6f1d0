// Kernel 3: CSLS mutual top-k between two signature sets, made one-to-one.
//
//   s_ij = <SA_i, SB_j>,  CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)
//   r_A(i) = mean of row i's csls_k largest s_ij (r_B per column likewise)
//
// Two passes of the shared tiled sweep (sweep.hpp) over A rows x B panels, each
// with the BestPerRowAndColumn handler: the first keeps the csls_k
// best similarities per row and per column (giving r_A, r_B), the second the
// k best CSLS values per row and per column. Column heaps are per thread and
// merged exactly, so nothing N_A x N_B is allocated and the result does not
// depend on the thread count; ties go to the lower index everywhere.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "greedy.hpp"
#include "parallel.hpp"
#include "simd.hpp"
#include "sweep.hpp"
#include "topk.hpp"

namespace crossembed {

struct CslsResult {
  std::vector<std::int64_t> pairs;  // (P, 2) row-major
  std::vector<float> scores;        // (P,)
};

namespace detail {

// CSLS in one symmetric expression, so the A-side and B-side rankings agree
// on every pair's value to the last bit.
inline float csls_value(float s, double r_a, double r_b) { return float(2.0 * s - (r_a + r_b)); }

// Tile handler keeping the best `k_row` values per row and `k_col` per column
// of value(s, i, j). Row buffers belong to the task's rows; column buffers are
// per worker slot (with cached admission thresholds) and merged exactly
// afterwards. Each tile row's values go through a SIMD scan against the row's
// threshold and every column's: only the entries that can enter a buffer
// (few, once the buffers fill) reach the scalar pushes. A side with k = 0
// keeps nothing (its thresholds are +inf).
template <class Value>
struct BestPerRowAndColumn {
  const Value& value;
  std::vector<TopKBuffer>& rows;
  std::vector<std::vector<TopKBuffer>>& col_bufs;  // [slot][column]
  std::vector<std::vector<float>>& col_thr;   // [slot][column]
  bool keep_rows;

  struct OnBlock : BlockHandlerBase<float> {
    const BestPerRowAndColumn& h;
    Block b;
    std::vector<float> vals;
    std::vector<std::uint32_t> hits;
    OnBlock(const BestPerRowAndColumn& h_, const Block& b_) : h(h_), b(b_) {}
    void add_tile(std::size_t c0, std::size_t c1, const float* tile, std::size_t ld) {
      auto& ch = h.col_bufs[std::size_t(b.tid)];
      float* cthr = h.col_thr[std::size_t(b.tid)].data();
      const std::size_t w = c1 - c0;
      vals.resize(w);
      hits.resize(w);
      for (std::size_t i = b.r0; i < b.r1; ++i) {
        const float* row = tile + (i - b.r0) * ld;
        for (std::size_t t = 0; t < w; ++t) vals[t] = h.value(row[t], i, c0 + t);
        TopKBuffer& rh = h.rows[i];
        float rthr = h.keep_rows ? rh.threshold() : INFINITY;
        const std::size_t m = simd::select_at_least_either(vals.data(), w, rthr, cthr + c0, hits.data());
        for (std::size_t r = 0; r < m; ++r) {
          const std::size_t t = hits[r], j = c0 + t;
          if (vals[t] >= rthr) {
            rh.push(vals[t], std::int64_t(j));
            rthr = rh.threshold();
          }
          if (vals[t] >= cthr[j]) {
            ch[j].push(vals[t], std::int64_t(i));
            cthr[j] = ch[j].threshold();
          }
        }
      }
    }
  };
  OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
};

// One sweep of A rows x B panels through BestPerRowAndColumn.
template <class Value>
void best_per_row_and_column(const std::vector<const float*>& xa, const simd::Panels<float>& pb, std::size_t k_row,
                             std::size_t k_col, int num_threads, const Value& value, std::vector<TopK>& rows,
                             std::vector<TopK>& cols) {
  constexpr std::size_t kRows = 64, kCols = 256;  // kCols: a multiple of every panel width
  const std::size_t na = xa.size(), nb = pb.n;
  const SweepPlan plan(na, nb, kRows, kCols);
  const std::size_t slots = std::size_t(plan.slots(num_threads));
  std::vector<TopKBuffer> row_buf(na, TopKBuffer(k_row));
  std::vector<std::vector<TopKBuffer>> col_bufs(slots, std::vector<TopKBuffer>(nb, TopKBuffer(k_col)));
  std::vector<std::vector<float>> col_thr(slots, std::vector<float>(nb, k_col > 0 ? -INFINITY : INFINITY));
  BestPerRowAndColumn<Value> h{value, row_buf, col_bufs, col_thr, k_row > 0};
  sweep(xa.data(), pb, plan, num_threads, h);
  rows.resize(na);
  cols.resize(nb);
  parallel_for(std::int64_t(na), num_threads,
               [&](std::int64_t i, int) { rows[std::size_t(i)] = row_buf[std::size_t(i)].finish(); });
  parallel_for(std::int64_t(nb), num_threads, [&](std::int64_t jj, int) {
    const std::size_t j = std::size_t(jj);
    for (std::size_t t = 1; t < col_bufs.size(); ++t) col_bufs[0][j].merge(col_bufs[t][j]);
    cols[j] = col_bufs[0][j].finish();
  });
}

// Mean of the `kc` best similarities of a heap (summed best-first, in double).
inline double mean_best(TopK& heap, std::size_t kc) {
  const auto& items = heap.sorted();
  double s = 0;
  for (std::size_t t = 0; t < kc; ++t) s += items[t].score;
  return s / double(kc);
}

// Pairs (i, j) with j in row i's top-k and i in column j's, scored by the
// row side (both sides hold the same value: see csls_value).
struct MutualPairs {
  std::vector<std::int64_t> pairs;  // (P, 2)
  std::vector<float> scores;
  void add_mutual(std::size_t i, const std::vector<Scored>& row, const std::vector<TopK>& cols) {
    for (const Scored& sj : row) {
      const auto& back = cols[std::size_t(sj.index)].items();
      if (std::any_of(back.begin(), back.end(), [&](const Scored& si) { return si.index == std::int64_t(i); })) {
        pairs.push_back(std::int64_t(i));
        pairs.push_back(sj.index);
        scores.push_back(sj.score);
      }
    }
  }
};

// Greedy one-to-one by CSLS. Row ids are mapped through id_a / id_b when
// given (compacted active rows; the maps are increasing, so ties break alike).
inline CslsResult greedy_mutual(const MutualPairs& m, std::size_t na, std::size_t nb, const std::int64_t* id_a,
                                const std::int64_t* id_b) {
  RowSet used_a(na), used_b(nb);
  const std::vector<std::size_t> taken = greedy_one_to_one(m.pairs.data(), m.scores.data(), m.scores.size(),
                                                           -std::numeric_limits<float>::infinity(), used_a, used_b);
  CslsResult res;
  for (std::size_t t : taken) {
    const std::int64_t i = m.pairs[2 * t], j = m.pairs[2 * t + 1];
    res.pairs.push_back(id_a ? id_a[i] : i);
    res.pairs.push_back(id_b ? id_b[j] : j);
    res.scores.push_back(m.scores[t]);
  }
  return res;
}

}  // namespace detail

// Each row's k_row best columns and each column's k_col best rows of
// s_ij = <SA_i, SB_j>, from one sweep (GEH's per-round candidate lists: two
// separate top-k searches would compute every s_ij twice). Outputs are
// (na, k_row) and (nb, k_col), best first, ties to the lower index, padded
// with (-inf, -1); k_row <= nb and k_col <= na are the caller's to ensure.
inline void topk_rows_and_columns(const float* SA, std::size_t na, const float* SB, std::size_t nb, std::size_t d,
                                  std::size_t k_row, std::size_t k_col, float* row_scores, std::int64_t* row_idx,
                                  float* col_scores, std::int64_t* col_idx, int num_threads) {
  if (na == 0 || nb == 0) return;
  std::vector<const float*> xa(na), xb(nb);
  for (std::size_t i = 0; i < na; ++i) xa[i] = SA + i * d;
  for (std::size_t j = 0; j < nb; ++j) xb[j] = SB + j * d;
  const simd::Panels<float> pb(xb.data(), nb, d);
  std::vector<TopK> rows, cols;
  detail::best_per_row_and_column(
      xa, pb, k_row, k_col, num_threads, [](float s, std::size_t, std::size_t) { return s; }, rows, cols);
  parallel_for(std::int64_t(na), num_threads, [&](std::int64_t i, int) {
    write_topk(rows[std::size_t(i)], k_row, row_scores + std::size_t(i) * k_row, row_idx + std::size_t(i) * k_row);
  });
  parallel_for(std::int64_t(nb), num_threads, [&](std::int64_t j, int) {
    write_topk(cols[std::size_t(j)], k_col, col_scores + std::size_t(j) * k_col, col_idx + std::size_t(j) * k_col);
  });
}

// SA (na, d), SB (nb, d); masks: 1 = excluded. Two sweeps: the first finds
// r_A and r_B, the second the CSLS top-k of every row and column.
inline CslsResult csls_mutual_topk(const float* SA, std::size_t na_all, const float* SB, std::size_t nb_all,
                                   std::size_t d, std::size_t k, std::size_t csls_k, const std::uint8_t* mask_a,
                                   const std::uint8_t* mask_b, int num_threads) {
  std::vector<std::int64_t> ia, ib;
  for (std::size_t i = 0; i < na_all; ++i)
    if (!mask_a[i]) ia.push_back(std::int64_t(i));
  for (std::size_t j = 0; j < nb_all; ++j)
    if (!mask_b[j]) ib.push_back(std::int64_t(j));
  const std::size_t na = ia.size(), nb = ib.size();
  if (na == 0 || nb == 0) return {};
  std::vector<const float*> xa(na), xb(nb);
  for (std::size_t i = 0; i < na; ++i) xa[i] = SA + std::size_t(ia[i]) * d;
  for (std::size_t j = 0; j < nb; ++j) xb[j] = SB + std::size_t(ib[j]) * d;
  const simd::Panels<float> pb(xb.data(), nb, d);

  const std::size_t kca = std::min(csls_k, nb), kcb = std::min(csls_k, na);
  const std::size_t kka = std::min(k, nb), kkb = std::min(k, na);

  std::vector<TopK> rows, cols;
  detail::best_per_row_and_column(
      xa, pb, kca, kcb, num_threads, [](float s, std::size_t, std::size_t) { return s; }, rows, cols);
  std::vector<double> ra(na), rb(nb);
  for (std::size_t i = 0; i < na; ++i) ra[i] = detail::mean_best(rows[i], kca);
  for (std::size_t j = 0; j < nb; ++j) rb[j] = detail::mean_best(cols[j], kcb);

  detail::best_per_row_and_column(
      xa, pb, kka, kkb, num_threads,
      [&](float s, std::size_t i, std::size_t j) { return detail::csls_value(s, ra[i], rb[j]); }, rows, cols);

  // Mutual pairs, then greedy one-to-one by CSLS.
  detail::MutualPairs mutual;
  for (std::size_t i = 0; i < na; ++i) mutual.add_mutual(i, rows[i].items(), cols);
  return detail::greedy_mutual(mutual, na, nb, ia.data(), ib.data());
}

namespace detail {
// Mean of the kc largest of s[0..c) (kc in 1..c) without sorting the row: v =
// the kc-th largest (nth_element on a copy), then the values above v summed in
// float64 in their order in s, plus the kc - #above copies of v. The value
// depends on the order of s (the candidate list's), not on how the selection
// permutes the copy; distributed.csls_from_candidate_dots repeats it step for step.
inline double mean_of_best(const float* s, std::size_t c, std::size_t kc, float* scratch) {
  std::copy(s, s + c, scratch);
  std::nth_element(scratch, scratch + (kc - 1), scratch + c, [](float a, float b) { return a > b; });
  const float v = scratch[kc - 1];
  double sum = 0;
  std::size_t above = 0;
  for (std::size_t t = 0; t < c; ++t)
    if (s[t] > v) {
      sum += s[t];
      ++above;
    }
  sum += double(kc - above) * double(v);
  return sum / double(kc);
}

// One worker's gather of a row's listed candidates: the rows of cand[0..m) that are not
// -1 padding or flagged in skip_y (may be null), in list order, into js[0..c), and their
// dot products with x into s[0..c). candidate_dots and csls_mutual_topk_candidates both
// score through it, so they see the same bits.
struct ListedDots {
  std::vector<std::int64_t> js;
  std::vector<float> s;
  explicit ListedDots(std::size_t m) : js(m), s(m) {}
  std::size_t gather(const float* x, const float* Y, std::size_t d, const std::int64_t* cand, std::size_t m,
                     const std::uint8_t* skip_y) {
    std::size_t c = 0;
    for (std::size_t t = 0; t < m; ++t) {
      const std::int64_t j = cand[t];
      if (j >= 0 && !(skip_y && skip_y[std::size_t(j)])) js[c++] = j;
    }
    simd::isa().gather_dots_f32(x, Y, d, js.data(), c, s.data());
    return c;
  }
};
}  // namespace detail

// s_it = <X_i, Y_cand[i,t]> for every listed pair, NaN for -1 padding: the
// exact float32 values csls_mutual_topk_candidates scores (the same dot
// routine, whose order of operations does not depend on where the rows live),
// so a sharded caller that merges them reproduces that kernel bit for bit.
inline void candidate_dots(const float* X, std::size_t nx, const float* Y, std::size_t d, const std::int64_t* cand,
                           std::size_t m, float* out, int num_threads) {
  std::vector<detail::ListedDots> scratch(std::size_t(worker_slots(std::int64_t(nx), num_threads)),
                                         detail::ListedDots(m));
  parallel_for(std::int64_t(nx), num_threads, [&](std::int64_t ii, int slot) {
    const std::size_t i = std::size_t(ii);
    detail::ListedDots& row = scratch[std::size_t(slot)];
    row.gather(X + i * d, Y, d, cand + i * m, m, nullptr);
    for (std::size_t t = 0, u = 0; t < m; ++t)
      out[i * m + t] = cand[i * m + t] < 0 ? std::numeric_limits<float>::quiet_NaN() : row.s[u++];
  });
}

// Candidate-restricted variant: s_ij only for the listed pairs (cand_a: for
// each A row, M_A B rows; cand_b: for each B row, M_B A rows; -1 = padding).
// r_A(i) averages the csls_k best similarities among row i's candidates
// (0 when it has none), r_B likewise; each side's CSLS top-k is taken among
// its own candidates; mutual pairs are made one-to-one as above. Costs
// O((N_A M_A + N_B M_B) d) instead of O(N_A N_B d).
inline CslsResult csls_mutual_topk_candidates(const float* SA, std::size_t na, const float* SB, std::size_t nb,
                                              std::size_t d, const std::int64_t* cand_a, std::size_t ma,
                                              const std::int64_t* cand_b, std::size_t mb, std::size_t k,
                                              std::size_t csls_k, const std::uint8_t* mask_a,
                                              const std::uint8_t* mask_b, int num_threads) {
  // Each row's valid candidate edges in a flat (n, m) store, in list order (no per-row heaps:
  // every candidate is kept anyway), and r = the mean of its csls_k best (mean_of_best).
  struct Edges {
    std::vector<Scored> e;
    std::vector<std::size_t> count;
    std::vector<double> r;
  };
  auto side = [&](const float* X, std::size_t nx, const float* Y, const std::int64_t* cand, std::size_t m,
                  const std::uint8_t* mask_x, const std::uint8_t* mask_y) {
    Edges out{std::vector<Scored>(nx * m), std::vector<std::size_t>(nx, 0), std::vector<double>(nx, 0.0)};
    const std::size_t slots = std::size_t(worker_slots(std::int64_t(nx), num_threads));
    std::vector<detail::ListedDots> scratch(slots, detail::ListedDots(m));
    std::vector<std::vector<float>> best(slots, std::vector<float>(m));
    parallel_for(std::int64_t(nx), num_threads, [&](std::int64_t ii, int slot) {
      const std::size_t i = std::size_t(ii);
      if (mask_x[i]) return;
      detail::ListedDots& listed = scratch[std::size_t(slot)];
      const std::size_t c = listed.gather(X + i * d, Y, d, cand + i * m, m, mask_y);
      Scored* row = out.e.data() + i * m;
      for (std::size_t t = 0; t < c; ++t) row[t] = Scored{listed.s[t], listed.js[t]};
      out.count[i] = c;
      const std::size_t kc = std::min(csls_k, c);
      if (!kc) return;
      out.r[i] = detail::mean_of_best(listed.s.data(), c, kc, best[std::size_t(slot)].data());
    });
    return out;
  };
  const Edges ea = side(SA, na, SB, cand_a, ma, mask_a, mask_b);
  const Edges eb = side(SB, nb, SA, cand_b, mb, mask_b, mask_a);
  // CSLS top-k per row among its candidates.
  const std::size_t m_max = std::max(ma, mb);
  const std::size_t kk = std::min(k, m_max);
  auto top = [&](const Edges& self, std::size_t m, const std::vector<double>& r_other, bool a_side) {
    std::vector<TopK> out(self.count.size(), TopK(kk));
    std::vector<std::vector<Scored>> scratch(std::size_t(worker_slots(std::int64_t(out.size()), num_threads)),
                                             std::vector<Scored>(m_max));
    parallel_for(std::int64_t(out.size()), num_threads, [&](std::int64_t ii, int slot) {
      const std::size_t i = std::size_t(ii), c = self.count[i];
      const Scored* row = self.e.data() + i * m;
      Scored* v = scratch[std::size_t(slot)].data();
      for (std::size_t t = 0; t < c; ++t) {
        const double ro = r_other[std::size_t(row[t].index)];
        v[t] = Scored{a_side ? detail::csls_value(row[t].score, self.r[i], ro)
                             : detail::csls_value(row[t].score, ro, self.r[i]),
                      row[t].index};
      }
      const std::size_t keep = std::min(kk, c);
      std::partial_sort(v, v + keep, v + c, Better<float>{});
      for (std::size_t t = 0; t < keep; ++t) out[i].push(v[t].score, v[t].index);
      out[i].sorted();
    });
    return out;
  };
  std::vector<TopK> ta = top(ea, ma, eb.r, true), tb = top(eb, mb, ea.r, false);
  detail::MutualPairs mutual;
  for (std::size_t i = 0; i < na; ++i) mutual.add_mutual(i, ta[i].items(), tb);
  return detail::greedy_mutual(mutual, na, nb, nullptr, nullptr);
}

}  // namespace crossembed
