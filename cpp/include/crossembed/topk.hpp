// Bounded top-k selection under a total order: higher score first, ties to the
// lower index. Because the order is total, the selected set does not depend on
// the order candidates arrive in, which keeps results identical across tilings
// and thread counts.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace crossembed {

template <class S>
struct BasicScored {
  S score;
  std::int64_t index;
};

// a ranks before b
template <class S>
inline bool better(const BasicScored<S>& a, const BasicScored<S>& b) {
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

template <class S>
struct Better {
  bool operator()(const BasicScored<S>& a, const BasicScored<S>& b) const { return better(a, b); }
};

// Keeps the k best items seen; the worst kept item sits at heap.front().
template <class S>
class BasicTopK {
 public:
  using Scored = BasicScored<S>;
  explicit BasicTopK(std::size_t k = 0) : k_(k) { items_.reserve(k); }

  void reset(std::size_t k) {
    k_ = k;
    items_.clear();
    items_.reserve(k);
  }
  bool full() const { return items_.size() >= k_; }
  // Score a new item must beat (ties by index); -inf while not full.
  S threshold() const { return full() && k_ > 0 ? items_.front().score : -std::numeric_limits<S>::infinity(); }
  bool admits(S score, std::int64_t index) const {
    if (k_ == 0) return false;
    return !full() || better(Scored{score, index}, items_.front());
  }
  void push(S score, std::int64_t index) {
    if (!admits(score, index)) return;
    Scored s{score, index};
    if (!full()) {
      items_.push_back(s);
      std::push_heap(items_.begin(), items_.end(), Better<S>{});
    } else {
      std::pop_heap(items_.begin(), items_.end(), Better<S>{});
      items_.back() = s;
      std::push_heap(items_.begin(), items_.end(), Better<S>{});
    }
  }
  // Add every item of `other` (heaps of disjoint parts merge exactly under the total order).
  void merge(const BasicTopK& other) {
    for (const Scored& s : other.items_) push(s.score, s.index);
  }
  // Best first. Leaves the heap empty.
  std::vector<Scored>& sorted() {
    std::sort(items_.begin(), items_.end(), Better<S>{});
    return items_;
  }
  const std::vector<Scored>& items() const { return items_; }
  std::size_t size() const { return items_.size(); }

 private:
  std::size_t k_;
  std::vector<Scored> items_;
};

// Keeps the k best items seen, like BasicTopK, by reservoir: an admitted item is
// appended to a buffer of up to 2k; when the buffer fills, nth_element keeps the
// k best and the k-th best becomes the bar a new item must beat. O(1) amortised
// per admitted item against a heap's O(log k) (the row and column lists of a GEH
// round admit millions); the kept set is the same, since the order is total and
// the bar only turns away items that k kept ones beat.
template <class S>
class BasicTopKBuffer {
 public:
  using Scored = BasicScored<S>;
  explicit BasicTopKBuffer(std::size_t k = 0) : k_(k) {}

  // Score a new item must reach (ties by index); -inf until k items were kept.
  S threshold() const { return bar_.score; }
  void push(S score, std::int64_t index) {
    const Scored s{score, index};
    if (k_ == 0 || !better(s, bar_)) return;
    if (items_.empty()) items_.reserve(2 * k_);
    items_.push_back(s);
    if (items_.size() >= 2 * k_) compact();
  }
  void merge(const BasicTopKBuffer& other) {
    for (const Scored& s : other.items_) push(s.score, s.index);
  }
  // The k best (fewer if fewer came) as a BasicTopK.
  BasicTopK<S> finish() {
    compact();
    BasicTopK<S> out(k_);
    for (const Scored& s : items_) out.push(s.score, s.index);
    return out;
  }

 private:
  void compact() {
    if (items_.size() < k_ || k_ == 0) return;
    std::nth_element(items_.begin(), items_.begin() + std::ptrdiff_t(k_ - 1), items_.end(), Better<S>{});
    items_.resize(k_);
    bar_ = items_[k_ - 1];
  }
  std::size_t k_;
  Scored bar_{-std::numeric_limits<S>::infinity(), std::numeric_limits<std::int64_t>::max()};
  std::vector<Scored> items_;
};

using TopK = BasicTopK<float>;
using Scored = BasicScored<float>;
using TopKBuffer = BasicTopKBuffer<float>;

// Writes the k best of `heap` (best first) padded with (-inf, -1).
inline void write_topk(TopK& heap, std::size_t k, float* scores, std::int64_t* indices) {
  auto& items = heap.sorted();
  for (std::size_t r = 0; r < k; ++r) {
    if (r < items.size()) {
      scores[r] = items[r].score;
      indices[r] = items[r].index;
    } else {
      scores[r] = -std::numeric_limits<float>::infinity();
      indices[r] = -1;
    }
  }
}

}  // namespace crossembed
