// A 64-bit content hash of a byte buffer, at memory speed.
//
//   block b (1 MiB): four multiply-xorshift lanes over its 8-byte words, mixed;
//   hash = fold of the block hashes in block order.
//
// Used to tell whether an array the caller passes again still holds the same
// bytes (probit_topk reuses the prepared documents then). Not cryptographic:
// it guards against in-place edits between calls, not against an adversary.
// The value does not depend on the thread count (blocks are fixed, the fold is
// in order).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.hpp"

namespace crossembed {

namespace detail {
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
}  // namespace detail

inline std::uint64_t content_hash(const void* data, std::size_t bytes, int num_threads) {
  constexpr std::size_t kBlock = std::size_t(1) << 20;
  constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t n_blocks = (bytes + kBlock - 1) / kBlock;
  std::vector<std::uint64_t> part(n_blocks);
  parallel_for(std::int64_t(n_blocks), num_threads, [&](std::int64_t b, int) {
    const unsigned char* q = p + std::size_t(b) * kBlock;
    const std::size_t len = std::min(kBlock, bytes - std::size_t(b) * kBlock);
    std::uint64_t h[4] = {1, 2, 3, 4};
    std::size_t i = 0;
    for (; i + 32 <= len; i += 32)
      for (int l = 0; l < 4; ++l) {
        std::uint64_t w;
        std::memcpy(&w, q + i + 8 * l, 8);
        h[l] = (h[l] ^ w) * kMul;
        h[l] ^= h[l] >> 29;
      }
    std::uint64_t tail = 0;
    for (; i < len; ++i) tail = (tail << 8 | q[i]) * kMul;
    part[std::size_t(b)] = detail::mix64(h[0] ^ detail::mix64(h[1] ^ detail::mix64(h[2] ^ detail::mix64(h[3] ^ tail))));
  });
  std::uint64_t out = detail::mix64(bytes);
  for (const std::uint64_t v : part) out = detail::mix64(out ^ v);
  return out;
}

}  // namespace crossembed
