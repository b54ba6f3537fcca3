// What one 2-thread parallel region costs (ParallelFor over two items of no work) after the
// calling thread ran alone for `gap_us` microseconds: the fork and join the parallel thresholds
// of core/parallel.h are sized against. The pool's wait comes from the environment as libgomp
// reads it at load (tools/omp_wait.h): compare
//   OMP_WAIT_POLICY=PASSIVE build/bin/core_fork_join_bench     (the pool sleeps between regions)
//   GOMP_SPINCOUNT=100000 build/bin/core_fork_join_bench       (what the binaries pick on idle
//                                                                cores: spin, then sleep)
// Time: the region alone (manual time), not the gap.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

#include "core/parallel.h"

namespace tessera {
namespace {

void BM_ForkJoinAfterGap(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const auto gap = std::chrono::microseconds(state.range(0));
  ScopedNumThreads two(2);
  volatile int64_t sink = 0;
  for (auto _ : state) {
    const auto until = Clock::now() + gap;
    while (Clock::now() < until) {
    }
    const auto t0 = Clock::now();
    ParallelFor(2, 1, [&](int64_t b, int64_t e, int) { sink = sink + (e - b); });
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
}
BENCHMARK(BM_ForkJoinAfterGap)
    ->ArgName("gap_us")
    ->Arg(0)
    ->Arg(20)
    ->Arg(200)
    ->Arg(1000)
    ->Arg(3000)
    ->UseManualTime();

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
