// Storage for the large packed arrays (document panels, stacked rows, codes).
//
// Two things make a fresh 100 MB std::vector slow to fill, and neither is the
// copy: value-initialisation writes every byte once, serially, before the
// parallel packing writes it again; and each first touch of a 4 KiB page is a
// fault (a virtual machine's are dearer still), which took most of
// ProbitDocs' preparation. BigAllocator default-initialises (a resize leaves
// trivial values unwritten: the packing pass is the first touch, in parallel)
// and, for blocks of at least kHugeBytes on Linux, aligns them to 2 MiB and
// asks for transparent huge pages (madvise; the kernel may decline, and the
// memory is then ordinary pages): one fault per 2 MiB. numpy does the same for
// its large arrays.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace crossembed {

template <class T>
struct BigAllocator {
  using value_type = T;
  static constexpr std::size_t kHugeBytes = std::size_t(4) << 20, kHugeAlign = std::size_t(2) << 20;

  BigAllocator() = default;
  template <class U>
  BigAllocator(const BigAllocator<U>&) {}

  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
    void* p = nullptr;
    if (bytes >= kHugeBytes) {
      if (posix_memalign(&p, kHugeAlign, bytes) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
    } else {
      const std::size_t align = alignof(T) > 64 ? alignof(T) : 64;
      if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) throw std::bad_alloc();
    }
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }

  // Default-initialisation for resize(n) and vector(n): trivial types stay unwritten.
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <class U>
  bool operator==(const BigAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const BigAllocator<U>&) const {
    return false;
  }
};

// A vector whose resize leaves trivial values unwritten (see the top): the caller writes every element.
template <class T>
using BigVector = std::vector<T, BigAllocator<T>>;

}  // namespace crossembed
