// Small helpers shared by the CPU kernels of embedding/: a fixed split of n items into chunks
// (one per thread), portable function multiversioning and software prefetch of rows.
// Header-only; not part of the public interface.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

// Compiles the marked function for AVX-512, AVX2 and baseline x86-64 and picks one at load time
// (GCC/Clang ifunc), so the binary runs on any x86-64 while hot loops use the widest vectors.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(__clang__)
#define TESSERA_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_TARGET_CLONES
#endif

#if defined(__GNUC__)
#define TESSERA_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TESSERA_ALWAYS_INLINE inline
#endif

namespace tessera::embedding_internal {

// The number of chunks ParallelFor would use for n items of at least min_chunk each.
inline int NumChunks(int64_t n, int64_t min_chunk) {
  if (n <= 0) return 0;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  return static_cast<int>(std::min<int64_t>(NumThreads(), (n + min_chunk - 1) / min_chunk));
}

// Calls fn(c) for every chunk c in [0, chunks), in parallel, and waits. A chunk's work must not
// depend on which thread runs it, so results never depend on scheduling. `fn` is captured by
// reference so that std::function keeps the closure inline (no heap allocation per call).
template <typename Fn>
void RunChunks(int chunks, Fn& fn) {
  if (chunks <= 0) return;
  if (chunks == 1) {
    fn(0);
    return;
  }
  auto call = [&fn](int64_t begin, int64_t end, int) {
    for (int64_t c = begin; c < end; ++c) fn(static_cast<int>(c));
  };
  ParallelFor(chunks, 1, call);
}

// Prefetches every cache line of the `bytes` bytes at `p`: __builtin_prefetch's read/write
// flag kRw and locality kLocality (3: into L1, 2: into L2).
template <int kRw, int kLocality>
TESSERA_ALWAYS_INLINE void PrefetchLines(const void* p, int64_t bytes) {
  uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  uintptr_t last = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) - 1;
  for (uintptr_t q = first; q <= last; q += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(q), kRw, kLocality);
  }
}

// Into L1, read or write intent.
TESSERA_ALWAYS_INLINE void PrefetchBytes(const void* p, int64_t bytes, bool write) {
  if (write) {
    PrefetchLines<1, 3>(p, bytes);
  } else {
    PrefetchLines<0, 3>(p, bytes);
  }
}

// Into L2 only, read intent.
TESSERA_ALWAYS_INLINE void PrefetchBytesL2(const void* p, int64_t bytes) {
  PrefetchLines<0, 2>(p, bytes);
}

// How many rows ahead to prefetch: enough rows that ~4 KiB (64 lines) are requested ahead of
// use, at least 4 and at most 32 rows (dim 16: 32 rows, 64: 16, 128: 8). Chosen on the
// 1 GiB Zipf benchmark, where 4 KiB beat 1-2 KiB at dims 64 and 128 (bench/embedding_lookup_bench).
inline int64_t PrefetchRowsAhead(int64_t row_bytes) {
  return std::clamp<int64_t>(4096 / std::max<int64_t>(row_bytes, 1), 4, 32);
}

}  // namespace tessera::embedding_internal
