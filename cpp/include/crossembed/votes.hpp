// Vote bookkeeping for GEH: a hash map from pair (i, j) to its vote count,
// Otsu's threshold. (Promotion is greedy_one_to_one in greedy.hpp.)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace crossembed {

class VoteTable {
 public:
  // One view's proposals: each pair gets one vote (duplicates within a view count once).
  void add(const std::int64_t* pairs, std::size_t p) {
    std::unordered_set<std::uint64_t> seen;
    seen.reserve(p * 2);
    for (std::size_t t = 0; t < p; ++t) {
      const std::uint64_t key = pack(pairs[2 * t], pairs[2 * t + 1]);
      if (seen.insert(key).second) ++votes_[key];
    }
    ++n_views_;
  }
  std::int64_t n_views() const { return n_views_; }
  std::size_t size() const { return votes_.size(); }
  std::int64_t votes(std::int64_t i, std::int64_t j) const {
    auto it = votes_.find(pack(i, j));
    return it == votes_.end() ? 0 : it->second;
  }
  // All pairs sorted by (i, j) with their votes.
  void items(std::vector<std::int64_t>& pairs, std::vector<std::int64_t>& counts) const {
    std::vector<std::uint64_t> keys;
    keys.reserve(votes_.size());
    for (const auto& kv : votes_) keys.push_back(kv.first);
    std::sort(keys.begin(), keys.end());
    pairs.resize(keys.size() * 2);
    counts.resize(keys.size());
    for (std::size_t t = 0; t < keys.size(); ++t) {
      pairs[2 * t] = std::int64_t(keys[t] >> 32);
      pairs[2 * t + 1] = std::int64_t(keys[t] & 0xffffffffu);
      counts[t] = votes_.at(keys[t]);
    }
  }

  // Indices are < 2^32 (checked at the Python boundary), so (i, j) packs into
  // one key whose numeric order is the (i, j) lexicographic order.
  static std::uint64_t pack(std::int64_t i, std::int64_t j) {
    return (std::uint64_t(i) << 32) | (std::uint64_t(j) & 0xffffffffu);
  }

 private:
  std::unordered_map<std::uint64_t, std::int64_t> votes_;
  std::int64_t n_views_ = 0;
};

// Otsu on `bins` equal-width bins over [min, max]: the upper edge of the bin
// ending the lower class that maximises the between-class variance (first max).
inline double otsu_threshold(const double* v, std::size_t n, int bins) {
  if (n == 0) return 0.0;
  const double lo = *std::min_element(v, v + n), hi = *std::max_element(v, v + n);
  if (!(hi > lo)) return lo;
  // Scale-free: bins are found on v * s (s = 1/2 near the top of the double
  // range, so that hi - lo cannot overflow) and the class means are taken in
  // bin units (centre of bin b = b + 1/2). Those sums are exact, so nothing
  // over- or underflows at 1e+-300 and equal splits compare equal.
  const double s = std::max(std::fabs(lo), std::fabs(hi)) > 1e300 ? 0.5 : 1.0;
  const double los = lo * s, span = hi * s - los;
  std::vector<double> hist(std::size_t(bins), 0.0);
  for (std::size_t t = 0; t < n; ++t) {
    const double u = std::floor((v[t] * s - los) / span * bins);
    const int b = u < 0 ? 0 : (u >= bins ? bins - 1 : int(u));
    hist[std::size_t(b)] += 1.0;
  }
  double total_mass = 0, total_sum = 0;
  for (int b = 0; b < bins; ++b) {
    total_mass += hist[std::size_t(b)];
    total_sum += hist[std::size_t(b)] * (b + 0.5);
  }
  double w0 = 0, s0 = 0, best = -1.0;
  int best_b = 0;
  for (int b = 0; b < bins - 1; ++b) {
    w0 += hist[std::size_t(b)];
    s0 += hist[std::size_t(b)] * (b + 0.5);
    const double w1 = total_mass - w0;
    if (w0 == 0 || w1 == 0) continue;
    const double m0 = s0 / w0, m1 = (total_sum - s0) / w1;
    const double between = w0 * w1 * (m0 - m1) * (m0 - m1);
    if (between > best) {
      best = between;
      best_b = b;
    }
  }
  return (los + (best_b + 1) * (span / bins)) / s;
}

}  // namespace crossembed
