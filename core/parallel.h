// CPU parallelism: one OpenMP thread pool shared with OpenBLAS (both use libgomp, so they do
// not oversubscribe the cores). Work is split into fixed contiguous chunks by thread index, so
// the same thread count gives the same partition, and reductions that combine per-thread partials
// in thread order give the same bits run after run.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera {

// The least work worth a parallel region: below it the fork and join of the region cost more than
// the second thread saves, so the work stays on the calling thread ("never slower with more
// threads"). What a fork and join costs depends on how the pool's threads wait between regions
// (tools/omp_wait.h chooses it per run):
// - asleep (OMP_WAIT_POLICY=PASSIVE, where other work shares the cores): a futex wake and, in a
//   VM, an inter-processor interrupt: 20-60 us on 2 loaded Zen 4 cores, 50-115 us on 2 quiet
//   Xeon cores (bench/core_fork_join_bench.cc; docs/PERFORMANCE.md "CPU speed on an AMX
//   machine"), so a thread's share must be worth ~100 us: kParallelMinBytes of traffic for
//   streaming passes (~10 GB/s on one core), kParallelMinMacs for compute-bound loops. The
//   default.
// - spinning (GOMP_SPINCOUNT, where the job owns idle cores): 1-6 us, so the thresholds are
//   kSpinGrainDivisor times smaller (SetParallelForkCheap(true), which the binaries call).
// A region's partition never changes the bits (results do not depend on the thread count), so
// neither does the grain.
inline constexpr int64_t kParallelMinBytes = int64_t{1} << 20;
inline constexpr int64_t kParallelMinMacs = int64_t{1} << 20;
inline constexpr int64_t kSpinGrainDivisor = 16;
// 1 while the pool sleeps between regions, kSpinGrainDivisor while it spins.
int64_t ParallelGrainDivisor();
void SetParallelForkCheap(bool cheap);
// A minimum chunk (items, bytes or multiply-adds) chosen for a sleeping pool, scaled to the
// pool's wait (at least 1).
inline int64_t ScaledMinChunk(int64_t sleeping) {
  const int64_t v = sleeping / ParallelGrainDivisor();
  return v > 0 ? v : 1;
}
inline int64_t ParallelMinBytes() { return ScaledMinChunk(kParallelMinBytes); }
inline int64_t ParallelMinMacs() { return ScaledMinChunk(kParallelMinMacs); }
// min_chunk for ParallelFor over n items of `bytes_per_item` each: ParallelMinBytes() per chunk.
inline int64_t MinChunkForBytes(int64_t bytes_per_item) {
  return (ParallelMinBytes() + bytes_per_item - 1) / (bytes_per_item > 0 ? bytes_per_item : 1);
}

// Threads used by ParallelFor and by OpenBLAS. Default: OMP_NUM_THREADS or the core count.
int NumThreads();
// Sets the thread count for both our loops and OpenBLAS; n >= 1.
void SetNumThreads(int n);

// Calls fn(begin, end, thread) for contiguous chunks covering [0, n), chunk t going to thread t
// of min(NumThreads(), ceil(n / min_chunk)) threads. Blocks until all chunks are done.
// fn must not throw.
void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t begin, int64_t end, int thread)>& fn);

// Calls fn(i, thread) for every i in [0, n) on min(NumThreads(), n) threads, handing the items
// out one at a time in increasing i as threads come free (dynamic scheduling): for independent
// items of uneven cost (order them costliest first) whose results must not depend on the thread
// that runs them. Blocks until all items are done. fn must not throw.
void ParallelForDynamic(int64_t n, const std::function<void(int64_t i, int thread)>& fn);
// Runs a() and b() at once, one on each thread of a 2-thread pool, each seeing NumThreads() == 1
// (a library call inside runs on its own thread alone: oneDNN and OpenBLAS read that count), when
// `worth` (the caller's size test) and the pool has exactly two threads; otherwise a() then b()
// on the calling thread with the pool as it is. For two independent jobs of about equal cost
// whose own parallel split scales worse than two at once (a layer's weight- and input-gradient
// products: equal multiply-adds). a and b must not throw.
void RunPair(bool worth, const std::function<void()>& a, const std::function<void()>& b);
// Inside a ParallelFor / ParallelForDynamic body, ParallelFor runs fn(0, n, 0) on the calling
// thread (no nested teams): callers whose results do not depend on the thread count see the
// same bits.
// Sets the thread count (SetNumThreads) for its lifetime and restores the previous one after:
// tests and benchmarks that run the same work on several thread counts.
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n) : saved_(NumThreads()) { SetNumThreads(n); }
  ~ScopedNumThreads() { SetNumThreads(saved_); }
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int saved_;
};
// The chunk [begin, end) that thread t of `threads` gets for n items (the split ParallelFor uses).
void ChunkRange(int64_t n, int threads, int t, int64_t* begin, int64_t* end);

}  // namespace tessera
