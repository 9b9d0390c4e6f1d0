// Thread-count resolution and a deterministic parallel-for.
//
// OpenMP when the build found it (dynamic schedule), otherwise std::thread
// workers pulling task ids from an atomic counter. Task bodies must not throw:
// kernels validate everything before entering a parallel region.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(CROSSEMBED_HAVE_OPENMP)
#include <omp.h>
#endif

namespace crossembed {

inline int max_threads() {
#if defined(CROSSEMBED_HAVE_OPENMP)
  return omp_get_max_threads();
#else
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
#endif
}

// 0 (or negative) means "all cores".
inline int resolve_threads(int requested) { return requested > 0 ? requested : max_threads(); }

// Calls fn(task, thread_id) for task in [0, n_tasks). thread_id < resolve_threads(num_threads).
template <class Fn>
void parallel_for(std::int64_t n_tasks, int num_threads, Fn&& fn) {
  if (n_tasks <= 0) return;
  int nt = resolve_threads(num_threads);
  if (nt > n_tasks) nt = static_cast<int>(n_tasks);
  if (nt <= 1) {
    for (std::int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
#if defined(CROSSEMBED_HAVE_OPENMP)
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (std::int64_t t = 0; t < n_tasks; ++t) fn(t, omp_get_thread_num());
#else
  std::atomic<std::int64_t> next{0};
  auto worker = [&](int tid) {
    for (std::int64_t t = next.fetch_add(1); t < n_tasks; t = next.fetch_add(1)) fn(t, tid);
  };
  std::vector<std::thread> pool;
  pool.reserve(nt - 1);
  for (int i = 1; i < nt; ++i) pool.emplace_back(worker, i);
  worker(0);
  for (auto& th : pool) th.join();
#endif
}

// Number of worker slots parallel_for may use (for per-thread scratch).
inline int worker_slots(std::int64_t n_tasks, int num_threads) {
  int nt = resolve_threads(num_threads);
  if (n_tasks > 0 && nt > n_tasks) nt = static_cast<int>(n_tasks);
  return nt < 1 ? 1 : nt;
}

}  // namespace crossembed
