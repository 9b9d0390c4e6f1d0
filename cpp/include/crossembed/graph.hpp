// An HNSW graph over document means whose stored vectors are the index's only
// copy of the means.
//
//   distance(x, y) = 1 - <x, y>        (inner product; smaller is nearer)
//
// hnswlib's HierarchicalNSW<float> (cpp/third_party/hnswlib, v0.8.0; its
// random draws take a lock, see its README) over MeanSpace, whose vectors are
// float32, IEEE float16 (simd::half_t bits, each value rounded once with
// simd::half_bits), int8 codes or bfloat16 (quantized.hpp's int8_row /
// bf16_row). The distance runs on the run-time selected instruction set
// (simd.hpp isa(): ip_distance_f32 / _f16; quantized.hpp kernels():
// int8_distance / bf16_distance): hnswlib's own spaces use only what the
// compile flags allow, and the shipped build targets the x86-64 baseline.
// float16 and bf16 distances widen both sides exactly and accumulate in
// float32; int8 distances are an exact integer dot times the two row scales.
// A float16, int8 or bf16 graph stores each query the way it stores its
// vectors before it searches - symmetric: the int8 query gets its own row
// scale, so every distance of a search, like every distance of an insertion,
// is one integer dot (on clustered 384-d means, the top 20 by symmetric int8
// scores hold the exact top 10 as often as the top 20 by float32 queries
// against int8 documents do) - and the graph gives candidates that the caller
// reranks exactly (rows() reads the stored vectors back: exact for float32
// and float16, the decoded codes s * c for int8, so an int8 or bf16 graph's
// caller keeps its float32 vectors elsewhere).
//
// Labels are the caller's slot numbers (int64 >= 0). add() of a label already
// present - deleted or not - rewrites its vector in place, re-links it and
// undeletes it (hnswlib's addPoint with replace_deleted = false); deleted
// labels are never returned by knn() and cannot be read by rows().
//
// knn() takes the search breadth ef as an argument (hnswlib's ef_ member is
// shared state): it repeats hnswlib's searchKnn - greedy descent through the
// upper layers, then searchBaseLayerST(entry, q, max(ef, k), filter) - so
// concurrent searches with different ef need no lock.
//
// Threads: knn, rows, save and nbytes share a readers-writer lock; add,
// mark_deleted and resize take it exclusively. Every check runs before any
// parallel work; an exception inside a parallel region (out of memory) is
// caught, the first message kept, and thrown after the loop (the rows added
// before it stay added).
//
// Files are hnswlib's saveIndex format. load() validates the header and the
// link-list sizes against the file's length before hnswlib allocates anything,
// and the loaded links (neighbour ids, levels, list lengths) before anyone
// searches: a truncated, garbage or wrong-dimension file is an exception,
// never a crash or a huge allocation. The file records the bytes of a vector,
// not dim and storage (dim 2d in float16 reads a dim d float32 file): the
// caller keeps those.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// hnswlib's SSE switch (on wherever __SSE__ is) compiles its own SIMD spaces,
// unused here (MeanSpace dispatches at run time), and software prefetches of
// the next neighbour's vector and visited flag while a node's links are read:
// those hide much of a hop's cache misses. They also read the link one past
// the end of a list, whose value only feeds a prefetch (which never faults):
// inside the level-0 block that word is in bounds, but for an upper-layer list
// (its own small allocation) it is 4 bytes past the end, within malloc's
// padding. The sanitizer build would report that read, so it turns them off.
#if defined(__SANITIZE_ADDRESS__)
#define CROSSEMBED_HNSW_NO_PREFETCH
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CROSSEMBED_HNSW_NO_PREFETCH
#endif
#endif
#if defined(CROSSEMBED_HNSW_NO_PREFETCH) && !defined(NO_MANUAL_VECTORIZATION)
#define NO_MANUAL_VECTORIZATION
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // hnswlib's cpuid helpers, unused here
#endif
#include "hnswlib/hnswlib.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include "parallel.hpp"
#include "quantized.hpp"
#include "simd.hpp"

namespace crossembed {

// How a graph stores its vectors (see the top).
enum class Storage { float32, float16, int8, bf16 };

inline const char* storage_name(Storage s) {
  switch (s) {
    case Storage::float32:
      return "float32";
    case Storage::float16:
      return "float16";
    case Storage::int8:
      return "int8";
    case Storage::bf16:
      return "bf16";
  }
  return "?";
}

// The vectors of a graph: dim values in their storage, distance 1 - <x, y>
// (simd.hpp's ip_distance_*, quantized.hpp's int8_distance / bf16_distance, on the instruction set picked
// at run time).
class MeanSpace : public hnswlib::SpaceInterface<float> {
 public:
  MeanSpace(std::size_t dim, Storage storage) : dim_(dim), storage_(storage), dist_(distance(storage)) {}
  // float16 and bf16 rows hold an even count of values (a zero after an odd dim), int8 rows a multiple of 4
  // codes after their 8-byte header: hnswlib lays its link lists out after the vectors, and they must stay
  // 4-byte aligned.
  std::size_t get_data_size() override {
    switch (storage_) {
      case Storage::float32:
        return dim_ * sizeof(float);
      case Storage::float16:
        return (dim_ + dim_ % 2) * sizeof(simd::half_t);
      case Storage::int8:
        return quant::int8_row_bytes(dim_);
      case Storage::bf16:
        return quant::bf16_row_values(dim_) * sizeof(quant::bf16_t);
    }
    return 0;
  }
  hnswlib::DISTFUNC<float> get_dist_func() override { return dist_; }
  void* get_dist_func_param() override { return &dim_; }  // hnswlib's convention: a pointer to the dimension

 private:
  static hnswlib::DISTFUNC<float> distance(Storage s) {
    switch (s) {
      case Storage::float32:
        return simd::isa().ip_distance_f32;
      case Storage::float16:
        return simd::isa().ip_distance_f16;
      case Storage::int8:
        return quant::kernels().int8_distance;
      case Storage::bf16:
        return quant::kernels().bf16_distance;
    }
    return nullptr;
  }

  std::size_t dim_;
  Storage storage_;
  hnswlib::DISTFUNC<float> dist_;
};

class MeanGraph {
 public:
  using Hnsw = hnswlib::HierarchicalNSW<float>;
  // hnswlib's internal ids are 32-bit and its visited lists are sized by an int.
  static constexpr std::size_t kMaxElements = std::size_t(std::numeric_limits<int>::max());
  static constexpr std::size_t kMaxM = 10000;                     // hnswlib caps M here
  static constexpr float kFloat16Max = 65504.0f;                  // largest finite float16
  static constexpr std::int64_t kMaxLabel = std::numeric_limits<std::int64_t>::max();

  // An empty graph for max_elements vectors (at least 1) of dim values.
  MeanGraph(std::size_t dim, Storage storage, std::size_t max_elements, std::size_t M, std::size_t ef_construction,
            std::size_t random_seed)
      : space_(new MeanSpace(check_dim(dim, storage), storage)), dim_(dim), storage_(storage) {
    if (M < 2 || M > kMaxM) throw std::invalid_argument("M must be in [2, 10000]");
    if (ef_construction < 1) throw std::invalid_argument("ef_construction must be >= 1");
    hnsw_.reset(new Hnsw(space_.get(), std::max<std::size_t>(1, check_capacity(max_elements)), M, ef_construction,
                         random_seed));
  }

  // The graph saved at path by save(); dim and storage must match the file's
  // vectors, max_elements (at least the stored count) is the capacity.
  static std::unique_ptr<MeanGraph> load(const std::string& path, std::size_t dim, Storage storage,
                                         std::size_t max_elements) {
    std::unique_ptr<MeanGraph> g(new MeanGraph(dim, storage));
    const std::size_t count = check_file(path, g->space_->get_data_size(), dim, storage);
    std::unique_ptr<Hnsw> h(new Hnsw(g->space_.get()));
    try {
      h->loadIndex(path, g->space_.get(), std::max<std::size_t>({1, count, check_capacity(max_elements)}));
    } catch (...) {
      h->cur_element_count = 0;  // a partial load: clear() must not walk levels it never read (leaks instead)
      throw;
    }
    g->hnsw_ = std::move(h);
    g->check_links();
    return g;
  }

  std::size_t dim() const { return dim_; }
  Storage storage() const { return storage_; }
  std::size_t count() const { return hnsw_->cur_element_count; }  // labels held, deleted ones included
  std::size_t deleted() const { return hnsw_->num_deleted_; }
  std::size_t max_elements() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return hnsw_->max_elements_;
  }
  std::size_t M() const { return hnsw_->M_; }
  std::size_t ef_construction() const { return hnsw_->ef_construction_; }

  // Adds (or rewrites) n rows of x (float32, n x dim) under labels[0..n) (distinct, >= 0).
  void add(const float* x, const std::int64_t* labels, std::size_t n, int num_threads) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    Hnsw& h = *hnsw_;
    check_new_labels(labels, n);
    check_range(x, n * dim_);
    std::size_t start = 0;
    if (n > 0 && h.cur_element_count == 0) {  // the entry point first, alone (as hnswlib's own bindings do)
      std::vector<std::uint64_t> row(row_words());
      h.addPoint(stored(x, row.data()), hnswlib::labeltype(labels[0]), false);
      start = 1;
    }
    const std::size_t slots = std::size_t(worker_slots(std::int64_t(n - start), num_threads));
    std::vector<std::vector<std::uint64_t>> rows(slots, std::vector<std::uint64_t>(row_words()));
    Errors errors;
    parallel_for(std::int64_t(n - start), num_threads, [&](std::int64_t t, int tid) {
      if (errors.failed()) return;
      try {
        const std::size_t i = start + std::size_t(t);
        h.addPoint(stored(x + i * dim_, rows[std::size_t(tid)].data()), hnswlib::labeltype(labels[i]), false);
      } catch (const std::exception& e) {
        errors.record(e.what());
      }
    });
    errors.rethrow();
  }

  // Marks labels deleted: each must be present and not deleted (checked first, nothing changes otherwise).
  void mark_deleted(const std::int64_t* labels, std::size_t n) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    std::vector<std::int64_t> sorted(labels, labels + n);
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw std::invalid_argument("labels has a repeated entry");
    for (std::size_t i = 0; i < n; ++i) live_id(labels[i]);
    for (std::size_t i = 0; i < n; ++i) hnsw_->markDelete(hnswlib::labeltype(labels[i]));
  }

  // New capacity (at least count() and 1).
  void resize(std::size_t max_elements) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    check_capacity(max_elements);
    if (max_elements < hnsw_->cur_element_count)
      throw std::invalid_argument("max_elements must be >= the number of labels held (" +
                                  std::to_string(std::size_t(hnsw_->cur_element_count)) + ")");
    hnsw_->resizeIndex(std::max<std::size_t>(1, max_elements));
  }

  // The k nearest live labels of each of nq queries (float32, nq x dim), best
  // first (ties to the lower label), searching ef (>= k used) candidates deep;
  // only labels l < n_allowed with allowed[l] when allowed is given. Rows with
  // fewer results end in label -1, distance +inf.
  void knn(const float* q, std::size_t nq, std::size_t k, std::size_t ef, const bool* allowed, std::size_t n_allowed,
           std::int64_t* out_labels, float* out_dist, int num_threads) const {
    if (k < 1) throw std::invalid_argument("k must be >= 1");
    if (ef < 1) throw std::invalid_argument("ef must be >= 1");
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const std::size_t slots = std::size_t(worker_slots(std::int64_t(nq), num_threads));
    std::vector<std::vector<std::uint64_t>> rows(slots, std::vector<std::uint64_t>(row_words()));
    Errors errors;
    parallel_for(std::int64_t(nq), num_threads, [&](std::int64_t i, int tid) {
      std::int64_t* lab = out_labels + std::size_t(i) * k;
      float* dist = out_dist + std::size_t(i) * k;
      std::fill(lab, lab + k, std::int64_t(-1));
      std::fill(dist, dist + k, std::numeric_limits<float>::infinity());
      if (errors.failed()) return;
      try {
        const void* query = stored(q + std::size_t(i) * dim_, rows[std::size_t(tid)].data());
        search(query, k, ef, allowed, n_allowed, lab, dist);
      } catch (const std::exception& e) {
        errors.record(e.what());
      }
    });
    errors.rethrow();
  }

  // out (n x dim, float32) = the stored vectors of labels[0..n) (float16 and bf16 widened exactly, int8 decoded
  // as s * c).
  void rows(const std::int64_t* labels, std::size_t n, float* out, int num_threads) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    std::vector<hnswlib::tableint> ids(n);
    {
      std::unique_lock<std::mutex> table(hnsw_->label_lookup_lock);
      for (std::size_t i = 0; i < n; ++i) ids[i] = live_id(labels[i]);
    }
    constexpr std::size_t kRowsPerTask = 256;
    const std::size_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
    const int nt = n * dim_ >= (std::size_t(1) << 18) ? num_threads : 1;  // small copies stay on this thread
    const simd::Isa& I = simd::isa();
    parallel_for(std::int64_t(tasks), nt, [&](std::int64_t t, int) {
      const std::size_t end = std::min(n, (std::size_t(t) + 1) * kRowsPerTask);
      for (std::size_t i = std::size_t(t) * kRowsPerTask; i < end; ++i) {
        const char* src = hnsw_->getDataByInternalId(ids[i]);
        float* dst = out + i * dim_;
        switch (storage_) {
          case Storage::float32:
            std::memcpy(dst, src, dim_ * sizeof(float));
            break;
          case Storage::float16:
            I.widen_f16(reinterpret_cast<const simd::half_t*>(src), dim_, dst);
            break;
          case Storage::int8:
            quant::int8_row_values(reinterpret_cast<const unsigned char*>(src), dim_, dst);
            break;
          case Storage::bf16:
            for (std::size_t j = 0; j < dim_; ++j)
              dst[j] = quant::from_bf16(reinterpret_cast<const quant::bf16_t*>(src)[j]);
            break;
        }
      }
    });
  }

  // Writes hnswlib's file to path (then checks that all of it arrived).
  void save(const std::string& path) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    hnsw_->saveIndex(path);  // hnswlib does not check its stream
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in.is_open() || std::size_t(in.tellg()) != hnsw_->indexFileSize())
      throw std::runtime_error("could not write the graph to " + path);
  }

  // Bytes held: the level-0 block (links, vectors, labels), upper-layer links,
  // locks, levels, one visited list (each concurrent search holds another
  // 2 * max_elements bytes while it runs) and an estimate of the label map.
  std::size_t nbytes() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const Hnsw& h = *hnsw_;
    std::size_t upper = 0;
    for (std::size_t i = 0; i < h.cur_element_count; ++i)
      if (h.element_levels_[i] > 0) upper += h.size_links_per_element_ * std::size_t(h.element_levels_[i]) + 1;
    return h.max_elements_ * h.size_data_per_element_ + upper +
           (h.link_list_locks_.size() + h.label_op_locks_.size()) * sizeof(std::mutex) +
           h.element_levels_.size() * sizeof(int) + h.max_elements_ * (sizeof(char*) + sizeof(hnswlib::vl_type)) +
           h.label_lookup_.size() * 32 + h.label_lookup_.bucket_count() * sizeof(void*);
  }

 private:
  MeanGraph(std::size_t dim, Storage storage)
      : space_(new MeanSpace(check_dim(dim, storage), storage)), dim_(dim), storage_(storage) {}

  static std::size_t check_dim(std::size_t dim, Storage storage) {
    if (dim < 1 || dim > (std::size_t(1) << 20)) throw std::invalid_argument("dim must be in [1, 2^20]");
    if (storage == Storage::int8 && dim > quant::kMaxInt8RowDim)
      throw std::invalid_argument("dim must be <= 2^17 with int8 storage (the integer dot must fit 32 bits)");
    return dim;
  }

  // Values the storage cannot hold: beyond float16's range, or rounding to a bfloat16 infinity.
  void check_range(const float* x, std::size_t n) const {
    if (storage_ == Storage::float16)
      for (std::size_t t = 0; t < n; ++t)
        if (!(std::fabs(x[t]) <= kFloat16Max))
          throw std::invalid_argument("data must be finite and within float16's range (|x| <= 65504)");
    if (storage_ == Storage::bf16)
      for (std::size_t t = 0; t < n; ++t)
        if (!std::isfinite(x[t]) || (quant::to_bf16(x[t]) & 0x7f80u) == 0x7f80u)
          throw std::invalid_argument("data must be finite and within bfloat16's range (|x| < 3.39e38)");
  }

  // 8-byte words of a row buffer for stored() (a vector as the graph stores it, and a spare word).
  std::size_t row_words() const { return space_->get_data_size() / 8 + 2; }
  static std::size_t check_capacity(std::size_t max_elements) {
    if (max_elements > kMaxElements) throw std::invalid_argument("max_elements must be <= 2^31 - 1");
    return max_elements;
  }

  // The first error of a parallel loop, thrown after it.
  class Errors {
   public:
    bool failed() const { return failed_.load(std::memory_order_relaxed); }
    void record(const char* what) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_.exchange(true)) message_ = what;
    }
    void rethrow() const {
      if (failed()) throw std::runtime_error(message_);
    }

   private:
    std::atomic<bool> failed_{false};
    std::mutex mutex_;
    std::string message_;
  };

  // Only labels below the mask's length that it allows.
  struct MaskFilter : hnswlib::BaseFilterFunctor {
    const bool* allowed;
    std::size_t n;
    MaskFilter(const bool* a, std::size_t n_) : allowed(a), n(n_) {}
    bool operator()(hnswlib::labeltype label) override { return label < n && allowed[label]; }
  };

  // x (dim float32 values) as the graph stores it: x itself, or its float16 rounding, int8 row or bf16 row
  // written to buf (row_words() words).
  const void* stored(const float* x, std::uint64_t* buf) const {
    switch (storage_) {
      case Storage::float32:
        return x;
      case Storage::float16: {
        simd::half_t* h = reinterpret_cast<simd::half_t*>(buf);
        for (std::size_t t = 0; t < dim_; ++t) h[t] = simd::half_bits(x[t]);
        if (dim_ % 2) h[dim_] = 0;  // the padding half (MeanSpace::get_data_size)
        return h;
      }
      case Storage::int8:
        quant::int8_row(x, dim_, reinterpret_cast<unsigned char*>(buf));
        return buf;
      case Storage::bf16:
        quant::bf16_row(x, dim_, reinterpret_cast<quant::bf16_t*>(buf));
        return buf;
    }
    return x;
  }

  // The internal id of a present, undeleted label (the caller holds label_lookup_lock or the writer lock).
  hnswlib::tableint live_id(std::int64_t label) const {
    const auto it = label < 0 ? hnsw_->label_lookup_.end() : hnsw_->label_lookup_.find(hnswlib::labeltype(label));
    if (it == hnsw_->label_lookup_.end())
      throw std::invalid_argument("labels has an entry that is not in the graph (" + std::to_string(label) + ")");
    if (hnsw_->isMarkedDeleted(it->second))
      throw std::invalid_argument("labels has a deleted entry (" + std::to_string(label) + ")");
    return it->second;
  }

  // Labels of one add: >= 0, distinct, and room for the new ones.
  void check_new_labels(const std::int64_t* labels, std::size_t n) const {
    std::vector<std::int64_t> sorted(labels, labels + n);
    std::sort(sorted.begin(), sorted.end());
    if (n && sorted[0] < 0) throw std::invalid_argument("labels must be >= 0");
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw std::invalid_argument("labels has a repeated entry");
    std::size_t fresh = 0;
    for (const std::int64_t l : sorted) fresh += hnsw_->label_lookup_.count(hnswlib::labeltype(l)) == 0;
    if (hnsw_->cur_element_count + fresh > hnsw_->max_elements_)
      throw std::invalid_argument("max_elements (" + std::to_string(hnsw_->max_elements_) + ") is too small for " +
                                  std::to_string(fresh) + " new labels beside " +
                                  std::to_string(std::size_t(hnsw_->cur_element_count)) + ": resize first");
  }

  // hnswlib's searchKnn with ef as an argument; writes up to k results, best first.
  void search(const void* q, std::size_t k, std::size_t ef, const bool* allowed, std::size_t n_allowed,
              std::int64_t* lab, float* dist) const {
    const Hnsw& h = *hnsw_;
    if (h.cur_element_count == 0) return;
    hnswlib::tableint cur = h.enterpoint_node_;
    float cur_dist = h.fstdistfunc_(q, h.getDataByInternalId(cur), h.dist_func_param_);
    for (int level = h.maxlevel_; level > 0; --level) {
      for (bool changed = true; changed;) {
        changed = false;
        hnswlib::linklistsizeint* list = h.get_linklist(cur, level);
        const int size = h.getListCount(list);
        const hnswlib::tableint* nbr = list + 1;
        for (int j = 0; j < size; ++j) {
          const float d = h.fstdistfunc_(q, h.getDataByInternalId(nbr[j]), h.dist_func_param_);
          if (d < cur_dist) {
            cur_dist = d;
            cur = nbr[j];
            changed = true;
          }
        }
      }
    }
    MaskFilter filter(allowed, n_allowed);
    auto top = (h.num_deleted_ == 0 && !allowed)
                   ? h.searchBaseLayerST<true>(cur, q, std::max(ef, k))
                   : h.searchBaseLayerST<false>(cur, q, std::max(ef, k), allowed ? &filter : nullptr);
    while (top.size() > k) top.pop();
    std::vector<std::pair<float, std::int64_t>> found;
    found.reserve(top.size());
    for (; !top.empty(); top.pop())
      found.emplace_back(top.top().first, std::int64_t(h.getExternalLabel(top.top().second)));
    std::sort(found.begin(), found.end());
    for (std::size_t r = 0; r < found.size(); ++r) {
      dist[r] = found[r].first;
      lab[r] = found[r].second;
    }
  }

  // Reads a graph file's header and link-list sizes and checks them against
  // the file's length and the expected vectors; returns the stored count.
  static std::size_t check_file(const std::string& path, std::size_t data_size, std::size_t dim, Storage storage);
  // Checks every loaded link list (lengths, neighbour ids, levels) and label.
  void check_links() const;
  [[noreturn]] static void corrupt_loaded(const char* why) {
    throw std::runtime_error(std::string("corrupt graph file: ") + why);
  }

  std::unique_ptr<MeanSpace> space_;  // outlives hnsw_, which points into it
  std::unique_ptr<Hnsw> hnsw_;
  std::size_t dim_;
  Storage storage_;
  mutable std::shared_mutex mutex_;
};

namespace graph_detail {

[[noreturn]] inline void corrupt(const std::string& path, const std::string& why) {
  throw std::runtime_error("corrupt or unsupported graph file " + path + ": " + why);
}

// hnswlib's saveIndex header, in its order.
struct FileHeader {
  std::uint64_t offset_level0, max_elements, count, size_data_per_element, label_offset, offset_data;
  std::int32_t maxlevel;
  std::uint32_t enterpoint;
  std::uint64_t maxM, maxM0, M;
  double mult;
  std::uint64_t ef_construction;
  static constexpr std::size_t kBytes = 6 * 8 + 4 + 4 + 3 * 8 + 8 + 8;

  explicit FileHeader(const char* b) {
    std::size_t at = 0;
    auto take = [&](auto& v) {
      std::memcpy(&v, b + at, sizeof(v));
      at += sizeof(v);
    };
    take(offset_level0), take(max_elements), take(count), take(size_data_per_element), take(label_offset);
    take(offset_data), take(maxlevel), take(enterpoint), take(maxM), take(maxM0), take(M), take(mult);
    take(ef_construction);
  }
};
static_assert(sizeof(std::size_t) == 8 && sizeof(std::atomic<std::size_t>) == 8, "hnswlib's file layout on LP64");

}  // namespace graph_detail

inline std::size_t MeanGraph::check_file(const std::string& path, std::size_t data_size, std::size_t dim,
                                         Storage storage) {
  using graph_detail::corrupt;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in.is_open()) throw std::runtime_error("cannot open the graph file " + path);
  const std::uint64_t size = std::uint64_t(in.tellg());
  char raw[graph_detail::FileHeader::kBytes];
  in.seekg(0);
  if (size < sizeof(raw) || !in.read(raw, sizeof(raw))) corrupt(path, "shorter than hnswlib's header");
  const graph_detail::FileHeader f(raw);
  // hnswlib writes maxM = M, maxM0 = 2 M, mult = 1 / ln M: anything else would overrun a link
  // list or draw absurd levels.
  if (f.offset_level0 != 0 || f.M < 2 || f.M > kMaxM || f.maxM != f.M || f.maxM0 != 2 * f.M ||
      !(std::fabs(f.mult * std::log(double(f.M)) - 1.0) < 1e-9) || f.ef_construction < 1 ||
      f.ef_construction > (std::uint64_t(1) << 32))
    corrupt(path, "implausible graph settings in the header");
  const std::uint64_t links0 = f.maxM0 * sizeof(hnswlib::tableint) + sizeof(hnswlib::linklistsizeint);
  if (f.offset_data != links0 || f.size_data_per_element < links0 + sizeof(hnswlib::labeltype) ||
      f.label_offset != f.size_data_per_element - sizeof(hnswlib::labeltype))
    corrupt(path, "inconsistent element layout in the header");
  const std::uint64_t stored = f.label_offset - f.offset_data;
  if (stored != data_size)
    throw std::invalid_argument("the graph file holds " + std::to_string(stored) + "-byte vectors, but dim=" +
                                std::to_string(dim) + " with storage=" + storage_name(storage) + " needs " +
                                std::to_string(data_size) + " bytes (wrong dim or storage)");
  if (f.count > kMaxElements || f.count > (size - sizeof(raw)) / f.size_data_per_element)
    corrupt(path, "its element count does not fit its length (truncated?)");
  const bool empty_ok = f.maxlevel == -1 && f.enterpoint == 0xffffffffu;  // hnswlib's "no entry point yet"
  if (f.count == 0 ? !empty_ok : (f.maxlevel < 0 || f.enterpoint >= f.count))
    corrupt(path, "invalid entry point or top level");
  // The upper-layer link lists: one size each, a multiple of the per-level size, up to maxlevel levels.
  const std::uint64_t links = f.maxM * sizeof(hnswlib::tableint) + sizeof(hnswlib::linklistsizeint);
  std::uint64_t at = sizeof(raw) + f.count * f.size_data_per_element;
  in.seekg(std::streamoff(at));
  for (std::uint64_t i = 0; i < f.count; ++i) {
    std::uint32_t bytes;
    if (size - at < sizeof(bytes) || !in.read(reinterpret_cast<char*>(&bytes), sizeof(bytes)))
      corrupt(path, "truncated link lists");
    at += sizeof(bytes);
    if (bytes % links != 0 || bytes / links > std::uint64_t(f.maxlevel) || bytes > size - at)
      corrupt(path, "invalid link-list size");
    if (i == f.enterpoint && bytes / links != std::uint64_t(f.maxlevel))
      corrupt(path, "the entry point is not on the top level");
    at += bytes;
    if (bytes) in.seekg(std::streamoff(bytes), std::ios::cur);
  }
  if (at != size) corrupt(path, "trailing bytes after the link lists");
  return std::size_t(f.count);
}

inline void MeanGraph::check_links() const {
  const Hnsw& h = *hnsw_;
  const std::size_t n = h.cur_element_count;
  if (h.label_lookup_.size() != n) corrupt_loaded("repeated labels");
  for (std::size_t i = 0; i < n; ++i) {
    const hnswlib::labeltype label = h.getExternalLabel(hnswlib::tableint(i));
    if (label > hnswlib::labeltype(kMaxLabel)) corrupt_loaded("a label beyond int64");
    for (int level = 0; level <= h.element_levels_[i]; ++level) {
      hnswlib::linklistsizeint* list = h.get_linklist_at_level(hnswlib::tableint(i), level);
      const std::size_t size = h.getListCount(list);
      if (size > (level ? h.maxM_ : h.maxM0_)) corrupt_loaded("a link list longer than M allows");
      const hnswlib::tableint* nbr = list + 1;
      for (std::size_t j = 0; j < size; ++j)
        if (nbr[j] >= n || h.element_levels_[nbr[j]] < level) corrupt_loaded("a link to a missing node");
    }
  }
}

}  // namespace crossembed
