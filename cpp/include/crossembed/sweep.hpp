// One tiled GEMM sweep for every all-pairs kernel, with result handlers.
//
//   tile(i, j) = <rows[i], column j of the panels>,  i in a row block, j in a column tile
//
// The rows are cut into blocks of `row_block`, the columns into chunks (a
// multiple of `col_tile`); one task is (row block, column chunk). Each task
// walks its chunk tile by tile: the packed micro-kernel fills the tile, then
// the handler gets it while it is still in cache. This is the split faiss
// makes between its distance loops and its ResultHandlers: the sweep owns
// tiling, threading and the GEMM; the handler owns what happens to a tile
// (top-k heaps, dense writes, CSLS passes).
//
// Handler (a template parameter: no virtual calls in the inner loop):
//   auto bh = h.begin_block(const Block&);     per task; bh holds the task's state
//   T* bh.tile_buffer(c0, ld)                  where to put the tile (nullptr: sweep's scratch, ld = col_tile)
//   bh.add_tile(c0, c1, const T* tile, ld)     columns [c0, c1) of rows [r0, r1); tile row i - r0
//   bh.end_block()
// Block handlers derive from BlockHandlerBase for the defaults. They must not
// throw: they run inside the parallel region.
//
// Every tile entry is one FMA chain over k in order (see detail/isa_impl.hpp),
// so results do not depend on the tiling, the chunking or the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"

namespace crossembed {

struct Block {
  std::size_t r0, r1;  // rows [r0, r1)
  std::size_t c0, c1;  // columns [c0, c1) of this task
  std::size_t chunk;   // index of the column chunk (0 when columns are not split)
  int tid;             // worker slot, < SweepPlan::slots(num_threads)
};

class SweepPlan {
 public:
  // col_tile and chunk: multiples of every panel width (64 is), or >= n_cols.
  // chunk 0: one chunk holding every column.
  SweepPlan(std::size_t n_rows, std::size_t n_cols, std::size_t row_block, std::size_t col_tile, std::size_t chunk = 0)
      : n_rows_(n_rows), n_cols_(n_cols), row_block_(row_block), col_tile_(col_tile) {
    set_chunk(chunk);
  }

  // Few row blocks for the cores: also split the columns (in chunks of at
  // least `min_chunk`) so that every core has work. Only for handlers that
  // keep per-chunk state and merge it exactly afterwards.
  void split_columns(std::size_t min_chunk, int num_threads) {
    const std::size_t nt = std::size_t(resolve_threads(num_threads));
    const std::size_t nrb = n_row_blocks();
    std::size_t n_chunks = 1;
    if (nrb < 2 * nt) {
      const std::size_t want = (4 * nt + nrb - 1) / nrb;
      n_chunks = std::max<std::size_t>(1, std::min(want, (n_cols_ + min_chunk - 1) / min_chunk));
    }
    set_chunk(((n_cols_ + n_chunks - 1) / n_chunks + col_tile_ - 1) / col_tile_ * col_tile_);
  }

  std::size_t n_rows() const { return n_rows_; }
  std::size_t n_cols() const { return n_cols_; }
  std::size_t col_tile() const { return col_tile_; }
  std::size_t n_row_blocks() const { return (n_rows_ + row_block_ - 1) / row_block_; }
  std::size_t n_chunks() const { return n_chunks_; }
  std::int64_t n_tasks() const { return std::int64_t(n_row_blocks() * n_chunks_); }
  // Worker slots parallel_for uses for this plan (size of per-thread state).
  int slots(int num_threads) const { return worker_slots(n_tasks(), num_threads); }

  Block block(std::int64_t task, int tid) const {
    const std::size_t rb = std::size_t(task) / n_chunks_, ch = std::size_t(task) % n_chunks_;
    const std::size_t r0 = rb * row_block_, c0 = ch * chunk_;
    return {r0, std::min(n_rows_, r0 + row_block_), c0, std::min(n_cols_, c0 + chunk_), ch, tid};
  }

 private:
  void set_chunk(std::size_t chunk) {
    chunk_ = chunk == 0 ? std::max<std::size_t>(n_cols_, 1) : chunk;
    n_chunks_ = std::max<std::size_t>(1, (n_cols_ + chunk_ - 1) / chunk_);
  }

  std::size_t n_rows_, n_cols_, row_block_, col_tile_, chunk_ = 0, n_chunks_ = 1;
};

template <class T>
struct BlockHandlerBase {
  T* tile_buffer(std::size_t, std::size_t&) { return nullptr; }
  void end_block() {}
};

// rows: n_rows pointers to d-long rows; cols: the packed right-hand side (P = T,
// or float16 panels for float rows, widened in the micro-kernel).
template <class T, class P, class Handler>
void sweep(const T* const* rows, const simd::Panels<P>& cols, const SweepPlan& plan, int num_threads, Handler& h) {
  parallel_for(plan.n_tasks(), num_threads, [&](std::int64_t task, int tid) {
    const Block b = plan.block(task, tid);
    auto bh = h.begin_block(b);
    std::vector<T> scratch;
    for (std::size_t t0 = b.c0; t0 < b.c1; t0 += plan.col_tile()) {
      const std::size_t t1 = std::min(b.c1, t0 + plan.col_tile());
      std::size_t ld = 0;
      T* tile = bh.tile_buffer(t0, ld);
      if (!tile) {
        if (scratch.empty()) scratch.resize((b.r1 - b.r0) * plan.col_tile());
        tile = scratch.data();
        ld = plan.col_tile();
      }
      simd::gemm(rows + b.r0, b.r1 - b.r0, cols, t0, t1 - t0, tile, ld);
      bh.add_tile(t0, t1, static_cast<const T*>(tile), ld);
    }
    bh.end_block();
  });
}

}  // namespace crossembed
