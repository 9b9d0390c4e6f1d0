// Greedy one-to-one matching of scored pairs.
//
//   order the pairs (a_t, b_t, s_t) with s_t > threshold by s desc, then a asc, then b asc;
//   take a pair when neither a_t nor b_t is taken (or excluded) yet; stop after `limit` pairs.
//
// The order is total on (s, a, b), so the matching does not depend on the
// order the pairs arrive in. Used by CSLS (mutual pairs -> one-to-one) and by
// GEH's vote promotion: both must break ties the same way.
#pragma once
#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <vector>

namespace crossembed {

// Rows taken so far: a flag array for ids below `dense_size` (CSLS knows its
// row count), a hash set for anything else (vote indices go up to 2^32).
class RowSet {
 public:
  explicit RowSet(std::size_t dense_size = 0) : dense_(dense_size, 0) {}
  bool contains(std::int64_t i) const {
    return std::uint64_t(i) < dense_.size() ? dense_[std::size_t(i)] != 0 : sparse_.count(i) != 0;
  }
  void insert(std::int64_t i) {
    if (std::uint64_t(i) < dense_.size())
      dense_[std::size_t(i)] = 1;
    else
      sparse_.insert(i);
  }

 private:
  std::vector<char> dense_;
  std::unordered_set<std::int64_t> sparse_;
};

// pairs (p, 2) row-major, scores (p,). Rows already in used_a / used_b are
// never taken; both sets are updated. Returns the positions t of the taken
// pairs in taking order. limit < 0: no limit.
template <class S>
std::vector<std::size_t> greedy_one_to_one(const std::int64_t* pairs, const S* scores, std::size_t p, S threshold,
                                           RowSet& used_a, RowSet& used_b, std::int64_t limit = -1) {
  std::vector<std::size_t> order;
  order.reserve(p);
  for (std::size_t t = 0; t < p; ++t)
    if (scores[t] > threshold) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    if (scores[x] != scores[y]) return scores[x] > scores[y];
    if (pairs[2 * x] != pairs[2 * y]) return pairs[2 * x] < pairs[2 * y];
    return pairs[2 * x + 1] < pairs[2 * y + 1];
  });
  std::vector<std::size_t> taken;
  for (std::size_t t : order) {
    if (limit >= 0 && std::int64_t(taken.size()) >= limit) break;
    const std::int64_t a = pairs[2 * t], b = pairs[2 * t + 1];
    if (used_a.contains(a) || used_b.contains(b)) continue;
    used_a.insert(a);
    used_b.insert(b);
    taken.push_back(t);
  }
  return taken;
}

}  // namespace crossembed
