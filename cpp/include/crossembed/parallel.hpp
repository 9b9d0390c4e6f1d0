// Thread-count resolution and a deterministic parallel-for.
//
// OpenMP when the build found it (dynamic schedule), otherwise std::thread
// workers pulling task ids from an atomic counter. Task bodies must not throw:
// kernels validate everything before entering a parallel region.
//
// fork(): GNU libgomp keeps the bookkeeping of its thread pool across fork()
// but not the pool's threads, so a forked child's first parallel region waits
// forever for workers that do not exist. An atfork handler (install_fork_guard)
// marks every forked child, and every process it forks in turn; there each
// parallel_for runs on one thread, whatever num_threads asks, and never enters
// a parallel region. Results are unchanged: no kernel's output depends on the
// thread count. The mark does not depend on whether the parent ran a kernel:
// the pool may be another library's (torch's bundled libgomp.so.1 and the
// system's are one library by soname, whichever loads first).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define CROSSEMBED_HAVE_ATFORK 1
#endif

#if defined(CROSSEMBED_HAVE_OPENMP)
#include <omp.h>
#endif

namespace crossembed {

namespace detail {

inline std::atomic<bool> forked_child{false};  // set by the atfork handler, inherited by later forks

inline void mark_forked_child() { forked_child.store(true, std::memory_order_relaxed); }

}  // namespace detail

// Registers the atfork handler once (at module load, and at latest before the
// first parallel region); false if that failed: then every kernel runs on one
// thread, as a fork could not be recognised.
inline bool install_fork_guard() {
#if defined(CROSSEMBED_HAVE_ATFORK)
  static const bool installed = ::pthread_atfork(nullptr, nullptr, &detail::mark_forked_child) == 0;
  return installed;
#else
  return true;
#endif
}

// True in a process forked after install_fork_guard ran in its parent: kernels run on one thread here.
inline bool single_threaded_after_fork() { return detail::forked_child.load(std::memory_order_relaxed); }

inline int max_threads() {
#if defined(CROSSEMBED_HAVE_OPENMP)
  return omp_get_max_threads();
#else
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
#endif
}

// 0 (or negative) means "all cores". 1 after such a fork (see the top of this file).
inline int resolve_threads(int requested) {
  if (!install_fork_guard() || single_threaded_after_fork()) return 1;
  return requested > 0 ? requested : max_threads();
}

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
