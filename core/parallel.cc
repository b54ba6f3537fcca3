#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace tessera {

extern "C" void openblas_set_num_threads(int num_threads);

namespace {
std::atomic<int64_t> grain_divisor{1};
}  // namespace

int64_t ParallelGrainDivisor() { return grain_divisor.load(std::memory_order_relaxed); }
void SetParallelForkCheap(bool cheap) {
  grain_divisor.store(cheap ? kSpinGrainDivisor : 1, std::memory_order_relaxed);
}

int NumThreads() { return omp_get_max_threads(); }

void SetNumThreads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

void ChunkRange(int64_t n, int threads, int t, int64_t* begin, int64_t* end) {
  int64_t base = n / threads, extra = n % threads;
  *begin = t * base + std::min<int64_t>(t, extra);
  *end = *begin + base + (t < extra ? 1 : 0);
}

void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  int threads = static_cast<int>(
      std::min<int64_t>(NumThreads(), (n + min_chunk - 1) / min_chunk));
  if (threads <= 1 || omp_in_parallel()) {
    fn(0, n, 0);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int64_t b, e;
    ChunkRange(n, threads, t, &b, &e);
    if (b < e) fn(b, e, t);
  }
}

void RunPair(bool worth, const std::function<void()>& a, const std::function<void()>& b) {
  if (!worth || NumThreads() != 2 || omp_in_parallel()) {
    a();
    b();
    return;
  }
#pragma omp parallel num_threads(2)
  {
    // The region's implicit tasks have their own thread count; the caller's stays 2.
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    omp_set_num_threads(1);
    if (t == 0) {
      a();
      if (team < 2) b();  // a team of one (should the runtime give fewer threads)
    } else {
      b();
    }
  }
}

void ParallelForDynamic(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(NumThreads(), n));
  if (threads <= 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) fn(i, omp_get_thread_num());
}

}  // namespace tessera
