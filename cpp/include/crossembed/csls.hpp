// Kernel 3: CSLS mutual top-k between two signature sets, made one-to-one.
//
//   s_ij = <SA_i, SB_j>,  CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)
//   r_A(i) = mean of row i's csls_k largest s_ij (r_B per column likewise)
//
// One pass of the shared tiled sweep (sweep.hpp) over A rows x B panels with the
// BestPerRowAndColumn handler keeps the max(csls_k, k) best similarities per
// row and per column: they give r_A and r_B, and the CSLS
// top-k of every row and column whose list certifies it; the few others are
// swept again alone (csls_mutual_topk). Column lists are per thread and merged
// exactly, so nothing N_A x N_B is allocated and the result does not depend on
// the thread count; ties go to the lower index everywhere.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
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
// of value(s, i, j). The row lists belong to the task's rows; the column lists
// are per worker slot and merged exactly afterwards. Each tile row's values go
// through a SIMD scan against the row's threshold and every column's: only the
// entries that can enter a list (few, once the lists fill) reach the scalar
// pushes. Row blocks are tall (kRows) so that a column's list, cold in memory,
// is visited once per block for all the block's pushes to it.
// The identity score (lists of plain similarities): the handler scans the tile in place.
struct SameScore {
  float operator()(float s, std::size_t, std::size_t) const { return s; }
};

// Tile handler keeping the best `k_row` values per row and `k_col` per column
// of value(s, i, j). The row lists belong to the task's rows; the column lists
// are per worker slot and merged exactly afterwards. Each tile row's values go
// through a SIMD scan against the row's threshold and every column's: only the
// entries that can enter a list (few, once the lists fill) reach the scalar
// pushes. Row blocks are tall (kRows) so that a column's list, cold in memory,
// is visited once per block for all the block's pushes to it. At the end of a
// block its slot publishes its column bars and takes the others' (a bar of any
// slot is a valid threshold for all: k items at least as good reach the
// merge), so that a column split over slots admits about what one list would.
// A bar read before another slot raised it is only a lower threshold: the lists
// and so the results do not depend on the timing.
template <class Value>
struct BestPerRowAndColumn {
  const Value& value;
  TopKTable& rows;
  std::vector<TopKTable>& cols;  // [slot]
  std::vector<std::atomic<float>>& published;  // [slot * n_cols + column]: that slot's bar

  struct OnBlock : BlockHandlerBase<float> {
    const BestPerRowAndColumn& h;
    Block b;
    std::vector<float> vals;
    std::vector<std::uint32_t> hits;
    OnBlock(const BestPerRowAndColumn& h_, const Block& b_) : h(h_), b(b_) {}
    void add_tile(std::size_t c0, std::size_t c1, const float* tile, std::size_t ld) {
      TopKTable& ct = h.cols[std::size_t(b.tid)];
      const float* cthr = ct.thresholds();
      const float* rthr = h.rows.thresholds();
      const std::size_t w = c1 - c0;
      hits.resize(w);
      for (std::size_t i = b.r0; i < b.r1; ++i) {
        const float* v = tile + (i - b.r0) * ld;
        if constexpr (!std::is_same_v<Value, SameScore>) {
          vals.resize(w);
          for (std::size_t t = 0; t < w; ++t) vals[t] = h.value(v[t], i, c0 + t);
          v = vals.data();
        }
        const std::size_t m = simd::select_at_least_either(v, w, rthr[i], cthr + c0, hits.data());
        for (std::size_t r = 0; r < m; ++r) {
          const std::size_t t = hits[r], j = c0 + t;
          if (v[t] >= rthr[i]) h.rows.push(i, v[t], std::uint32_t(j));
          if (v[t] >= cthr[j]) ct.push(j, v[t], std::uint32_t(i));
        }
      }
    }
    void end_block() {
      if (h.published.empty()) return;
      TopKTable& ct = h.cols[std::size_t(b.tid)];
      const std::size_t n = h.published.size() / h.cols.size();
      for (std::size_t j = b.c0; j < b.c1; ++j) h.published[std::size_t(b.tid) * n + j].store(ct.bar(j), std::memory_order_relaxed);
      for (std::size_t t = 0; t < h.cols.size(); ++t)
        for (std::size_t j = b.c0; j < b.c1; ++j) ct.raise(j, h.published[t * n + j].load(std::memory_order_relaxed));
    }
  };
  OnBlock begin_block(const Block& b) const { return OnBlock(*this, b); }
};

// One sweep of A rows x B panels through BestPerRowAndColumn.
template <class Value>
void best_per_row_and_column(const std::vector<const float*>& xa, const simd::Panels<float>& pb, std::size_t k_row,
                             std::size_t k_col, int num_threads, const Value& value, std::vector<TopK>& rows,
                             std::vector<TopK>& cols) {
  constexpr std::size_t kRows = 256, kCols = 256;  // kCols: a multiple of every panel width
  const std::size_t na = xa.size(), nb = pb.n;
  if (na >= std::numeric_limits<std::uint32_t>::max() || nb >= std::numeric_limits<std::uint32_t>::max())
    throw std::length_error("top-k lists hold row numbers below 2^32 - 1");
  const SweepPlan plan(na, nb, kRows, kCols);
  const std::size_t slots = std::size_t(plan.slots(num_threads));
  TopKTable row_lists(na, k_row);
  std::vector<TopKTable> col_lists(slots, TopKTable(nb, k_col));
  std::vector<std::atomic<float>> published(k_col && slots > 1 ? slots * nb : 0);
  for (auto& bar : published) bar.store(-std::numeric_limits<float>::infinity(), std::memory_order_relaxed);
  BestPerRowAndColumn<Value> h{value, row_lists, col_lists, published};
  sweep(xa.data(), pb, plan, num_threads, h);
  rows.resize(na);
  cols.resize(nb);
  parallel_for(std::int64_t(na), num_threads,
               [&](std::int64_t i, int) { rows[std::size_t(i)] = row_lists.finish(std::size_t(i)); });
  if (!k_col) return;
  parallel_for(std::int64_t(nb), num_threads, [&](std::int64_t jj, int) {
    const std::size_t j = std::size_t(jj);
    for (std::size_t t = 1; t < slots; ++t) col_lists[0].merge(j, col_lists[t]);
    cols[j] = col_lists[0].finish(j);
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
      xa, pb, k_row, k_col, num_threads, detail::SameScore{}, rows, cols);
  parallel_for(std::int64_t(na), num_threads, [&](std::int64_t i, int) {
    write_topk(rows[std::size_t(i)], k_row, row_scores + std::size_t(i) * k_row, row_idx + std::size_t(i) * k_row);
  });
  parallel_for(std::int64_t(nb), num_threads, [&](std::int64_t j, int) {
    write_topk(cols[std::size_t(j)], k_col, col_scores + std::size_t(j) * k_col, col_idx + std::size_t(j) * k_col);
  });
}

namespace detail {

// One side of csls_mutual_topk: row i of `self` against every row j of `other`,
// CSLS(i, j) = 2 s_ij - r_A - r_B with r_self[i] and r_other[j] in their places.
struct CslsSide {
  const std::vector<const float*>& x_self;
  const std::vector<const float*>& x_other;
  const std::vector<double>& r_self;
  const std::vector<double>& r_other;
  bool a_side;  // self is A (its r comes first in csls_value)
  std::size_t d;
  int num_threads;

  float value(float s, std::size_t i, std::size_t j) const {
    return a_side ? csls_value(s, r_self[i], r_other[j]) : csls_value(s, r_other[j], r_self[i]);
  }
  // The least a column's r could be for the bound (see certify).
  float bound(float s_worst, std::size_t i, double r_least) const {
    return a_side ? csls_value(s_worst, r_self[i], r_least) : csls_value(s_worst, r_least, r_self[i]);
  }

  // Each row's CSLS top-kk from its similarity list (sorted, best first, m >=
  // kk entries). A column j off the list has s_ij <= s_m, the list's worst, so
  // CSLS(i, j) <= bound(s_m, i, min r_other) (csls_value rounds monotonically).
  // Rows whose kk-th best is not strictly above that bound (a tie could hide a
  // lower index off the list), and whose list does not hold every column, are
  // certified in two more steps: first against the columns of least r (scored
  // exactly, so the bound may use the next r up), then, for rows still open,
  // against every column.
  std::vector<TopK> top_k(const std::vector<TopK>& lists, std::size_t kk, const simd::Panels<float>* p_other) const {
    const std::size_t n = lists.size(), n_other = x_other.size();
    std::vector<TopK> out(n, TopK(kk));
    parallel_for(std::int64_t(n), num_threads, [&](std::int64_t ii, int) {
      const std::size_t i = std::size_t(ii);
      for (const Scored& c : lists[i].items()) out[i].push(value(c.score, i, std::size_t(c.index)), c.index);
    });
    std::vector<double> r_sorted(r_other);
    std::sort(r_sorted.begin(), r_sorted.end());
    auto open_at = [&](const std::vector<std::size_t>& rows, double r_least) {
      std::vector<std::size_t> open;
      for (std::size_t i : rows) {
        const auto& cand = lists[i].items();
        if (cand.size() < n_other && !(out[i].items().front().score > bound(cand.back().score, i, r_least)))
          open.push_back(i);
      }
      return open;
    };
    std::vector<std::size_t> all(n);
    for (std::size_t i = 0; i < n; ++i) all[i] = i;
    std::vector<std::size_t> open = open_at(all, r_sorted.front());
    if (open.empty()) return out;

    // The columns of least r, as many as minimise the work left: |low| x |open|
    // products now plus n_other per row still open after them.
    double best_cost = double(open.size()) * double(n_other), best_cut = r_sorted.front();
    for (std::size_t p = std::max<std::size_t>(1, n_other / 256); p < n_other / 2; p *= 2) {
      const double cut = r_sorted[p];
      const double cost = double(p) * double(open.size()) + double(open_at(open, cut).size()) * double(n_other);
      if (cost < best_cost) best_cost = cost, best_cut = cut;
    }
    if (best_cut > r_sorted.front()) {
      std::vector<std::size_t> low;
      std::vector<char> is_low(n_other, 0);
      for (std::size_t j = 0; j < n_other; ++j)
        if (r_other[j] < best_cut) low.push_back(j), is_low[j] = 1;
      std::vector<const float*> xl(low.size()), xo(open.size());
      for (std::size_t t = 0; t < low.size(); ++t) xl[t] = x_other[low[t]];
      for (std::size_t u = 0; u < open.size(); ++u) xo[u] = x_self[open[u]];
      const simd::Panels<float> pl(xl.data(), low.size(), d);
      std::vector<TopK> exact, none;
      best_per_row_and_column(
          xo, pl, std::min(kk, low.size()), 0, num_threads,
          [&](float s, std::size_t u, std::size_t t) { return value(s, open[u], low[t]); }, exact, none);
      parallel_for(std::int64_t(open.size()), num_threads, [&](std::int64_t uu, int) {
        const std::size_t u = std::size_t(uu), i = open[u];
        TopK merged(kk);  // low is increasing, so its local indices rank ties as the global ones
        for (const Scored& c : exact[u].items()) merged.push(c.score, std::int64_t(low[std::size_t(c.index)]));
        for (const Scored& c : lists[i].items())
          if (!is_low[std::size_t(c.index)]) merged.push(value(c.score, i, std::size_t(c.index)), c.index);
        out[i] = std::move(merged);
      });
      open = open_at(open, best_cut);
      if (open.empty()) return out;
    }

    std::optional<simd::Panels<float>> packed;
    if (!p_other) p_other = &packed.emplace(x_other.data(), n_other, d);
    std::vector<const float*> xo(open.size());
    for (std::size_t u = 0; u < open.size(); ++u) xo[u] = x_self[open[u]];
    std::vector<TopK> exact, none;
    best_per_row_and_column(
        xo, *p_other, kk, 0, num_threads, [&](float s, std::size_t u, std::size_t j) { return value(s, open[u], j); },
        exact, none);
    for (std::size_t u = 0; u < open.size(); ++u) out[open[u]] = std::move(exact[u]);
    return out;
  }
};

}  // namespace detail

// SA (na, d), SB (nb, d); masks: 1 = excluded. One sweep keeps each row's and
// each column's max(csls_k, k) best similarities; r_A and r_B come
// from them, and so does each side's CSLS top-k wherever a bound certifies it
// (CslsSide::top_k). The rows and columns left open get their exact CSLS top-k
// from sweeps of those rows (columns) alone, with the same similarity bits (a
// product's FMA chain does not depend on which side is packed), so the result
// is that of scoring every pair.
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
  std::vector<TopK> lists_a, lists_b;
  detail::best_per_row_and_column(
      xa, pb, std::max(kca, kka), std::max(kcb, kkb), num_threads,
      detail::SameScore{}, lists_a, lists_b);
  std::vector<double> ra(na), rb(nb);
  for (std::size_t i = 0; i < na; ++i) ra[i] = detail::mean_best(lists_a[i], kca);
  for (std::size_t j = 0; j < nb; ++j) rb[j] = detail::mean_best(lists_b[j], kcb);

  const std::vector<TopK> rows = detail::CslsSide{xa, xb, ra, rb, true, d, num_threads}.top_k(lists_a, kka, &pb);
  const std::vector<TopK> cols = detail::CslsSide{xb, xa, rb, ra, false, d, num_threads}.top_k(lists_b, kkb, nullptr);

  // Mutual pairs, then greedy one-to-one by CSLS.
  detail::MutualPairs mutual;
  for (std::size_t i = 0; i < na; ++i) mutual.add_mutual(i, rows[i].items(), cols);
  return detail::greedy_mutual(mutual, na, nb, ia.data(), ib.data());
}

namespace detail {
// The kc-th largest of s[0..c) (kc in 1..c). A candidate row is short (GEH lists 64), where
// counting, for each value in turn, those above it and those not below it (two compares per
// pair, vectorised) finds it several times faster than nth_element's partitioning; longer
// rows, and rows holding a NaN (no value then passes the count), take nth_element on scratch.
inline float kth_largest(const float* s, std::size_t c, std::size_t kc, float* scratch) {
  if (c <= 128) {
    // lists come best first, so the kc-th largest usually sits near position kc - 1: look there first
    for (std::size_t step = 0; step < 2 * c; ++step) {
      const std::size_t t = step % 2 ? kc - 1 + (step + 1) / 2 : kc - 1 - step / 2;
      if (t >= c) continue;  // past either end (t wraps below 0)
      const float x = s[t];
      int above = 0, not_below = 0;  // int: the compares vectorise into 32-bit lanes
      for (std::size_t u = 0; u < c; ++u) {
        above += s[u] > x;
        not_below += s[u] >= x;
      }
      if (std::size_t(above) < kc && kc <= std::size_t(not_below)) return x;
    }
  }
  std::copy(s, s + c, scratch);
  std::nth_element(scratch, scratch + (kc - 1), scratch + c, [](float a, float b) { return a > b; });
  return scratch[kc - 1];
}

// Mean of the kc largest of s[0..c) (kc in 1..c) without sorting the row: v =
// the kc-th largest (kth_largest), then the values above v summed in
// float64 in their order in s, plus the kc - #above copies of v. The value
// depends on the order of s (the candidate list's), not on how the selection
// permutes the copy; distributed.csls_from_candidate_dots repeats it step for step.
inline double mean_of_best(const float* s, std::size_t c, std::size_t kc, float* scratch) {
  const float v = kth_largest(s, c, kc, scratch);
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
