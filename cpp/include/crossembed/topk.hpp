// Bounded top-k selection under a total order: higher score first, ties to the
// lower index. Because the order is total, the selected set does not depend on
// the order candidates arrive in, which keeps results identical across tilings
// and thread counts.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
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

// The k best (score, index) items of each of n lists, like BasicTopK, by
// reservoir in flat arrays: an admitted item is appended to its list's slot of
// 2k; when the slot fills, nth_element keeps the k best and the k-th best
// becomes the bar a new item must beat. O(1) amortised per admitted item
// against a heap's O(log k) (the row and column lists of a GEH round admit
// millions), and 8-byte items in one array with the thresholds side by side
// (for SIMD scans): a push touches its list's tail and nothing else cold. The kept sets are BasicTopK's, since the order is total and a bar
// only turns away items that k kept ones beat. Indices must be below 2^32.
class TopKTable {
 public:
  struct Item {
    float score;
    std::uint32_t index;
  };
  TopKTable(std::size_t n, std::size_t k)
      : k_(k),
        cap_(2 * k),
        count_(k ? n : 0, 0),
        items_(n * cap_),
        bar_(k ? n : 0, -std::numeric_limits<float>::infinity()),
        bar_index_(k ? n : 0, std::numeric_limits<std::uint32_t>::max()),
        thr_(n, k ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity()) {}

  // Per list, the score a new item must reach: the list's own bar (ties by
  // index; -inf until k items were kept) or a higher one from raise(); +inf for k = 0.
  const float* thresholds() const { return thr_.data(); }
  // Lets list `key` turn away items below `score`: the caller knows k items
  // at least that good that end up in the same final list (another part's bar).
  void raise(std::size_t key, float score) { thr_[key] = std::max(thr_[key], score); }
  // The list's own bar score (-inf until k items were kept).
  float bar(std::size_t key) const { return bar_[key]; }
  // Item (score, index) for list `key`, whose caller saw score >= thresholds()[key].
  void push(std::size_t key, float score, std::uint32_t index) {
    if (score == bar_[key] && index > bar_index_[key]) return;
    Item* slot = items_.data() + key * cap_;
    slot[count_[key]++] = Item{score, index};
    if (count_[key] == cap_) compact(key);
  }
  void push_checked(std::size_t key, float score, std::uint32_t index) {
    if (k_ > 0 && score >= thr_[key]) push(key, score, index);
  }
  // Every item of other's list `key` into this one's (lists of disjoint parts merge exactly).
  void merge(std::size_t key, const TopKTable& other) {
    const Item* slot = other.items_.data() + key * cap_;
    for (std::uint32_t t = 0; t < other.count_[key]; ++t) push_checked(key, slot[t].score, slot[t].index);
  }
  // List `key`'s k best (fewer if fewer came) as a BasicTopK.
  BasicTopK<float> finish(std::size_t key) const {
    BasicTopK<float> out(k_);
    if (k_ == 0) return out;
    const Item* slot = items_.data() + key * cap_;
    for (std::uint32_t t = 0; t < count_[key]; ++t) out.push(slot[t].score, std::int64_t(slot[t].index));
    return out;
  }

 private:
  // One integer per item, larger = better under the total order: the score's
  // bits made monotone (-0 first made +0: they compare equal), then the index
  // reversed. Items of one list have distinct indices, so keys are distinct.
  static std::uint64_t rank_key(const Item& it) {
    const float s = it.score + 0.0f;
    std::uint32_t b;
    std::memcpy(&b, &s, sizeof(b));
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return (std::uint64_t(b) << 32) | std::uint64_t(0xffffffffu - it.index);
  }
  // Keeps the k best of the full slot in its first k places: quickselect whose
  // partitions write each item to both ends of a scratch copy and advance one
  // end (no branch on the compare, a coin flip; no store a later load waits on).
  void compact(std::size_t key) {
    Item* a = items_.data() + key * cap_;
    static thread_local std::vector<Item> scratch;  // lists of one table compact on several threads
    if (scratch.size() < cap_) scratch.resize(cap_);
    Item* tmp = scratch.data();
    std::size_t lo = 0, hi = cap_;
    while (hi - lo > 16) {
      const std::uint64_t x = rank_key(a[lo]), y = rank_key(a[lo + (hi - lo) / 2]), z = rank_key(a[hi - 1]);
      const std::uint64_t pivot = std::max(std::min(x, y), std::min(std::max(x, y), z));  // median of three
      std::size_t front = lo, back = hi - 1;
      for (std::size_t i = lo; i < hi; ++i) {
        const Item it = a[i];
        const bool better = rank_key(it) > pivot;
        tmp[front] = it;
        tmp[back] = it;
        front += better;
        back -= !better;
      }
      std::copy(tmp + lo, tmp + hi, a + lo);
      // The median of three distinct keys has one above it and is not above itself: lo < front < hi.
      if (front == k_) break;
      (front > k_ ? hi : lo) = front;
    }
    if (hi - lo <= 16)
      std::sort(a + lo, a + hi, [](const Item& u, const Item& v) { return rank_key(u) > rank_key(v); });
    std::size_t worst = 0;
    for (std::size_t t = 1; t < k_; ++t)
      if (rank_key(a[t]) < rank_key(a[worst])) worst = t;
    count_[key] = std::uint32_t(k_);
    bar_[key] = a[worst].score;
    bar_index_[key] = a[worst].index;
    raise(key, bar_[key]);
  }
  std::size_t k_, cap_;
  std::vector<std::uint32_t> count_;
  std::vector<Item> items_;
  std::vector<float> bar_;
  std::vector<std::uint32_t> bar_index_;
  std::vector<float> thr_;
};

using TopK = BasicTopK<float>;
using Scored = BasicScored<float>;

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
