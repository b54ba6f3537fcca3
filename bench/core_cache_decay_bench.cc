// How long the last-level cache keeps a buffer this thread wrote when the thread then touches no
// memory for `gap_us` microseconds: the time to read a 4 MiB buffer (larger than a core's L2)
// right after writing it, after the gap, and (gap_us -1) after an eviction pass of 256 MiB
// instead of the write (the buffer in memory). On a host shared with other tenants the LLC
// empties with time as well as with the step's own traffic; tessera-plan calibrate's eviction
// passes (tools/plan_calibrate.h evict_bytes / light_evict_bytes) stand in for both.
//   build/bin/core_cache_decay_bench
// Time: the read alone (manual time).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera {
namespace {

void BM_ReadAfterGap(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kBytes = int64_t{4} << 20, kEvictBytes = int64_t{256} << 20, kLine = 64;
  const int64_t gap_us = state.range(0);
  std::vector<char> buf(kBytes, 1), evict(gap_us < 0 ? kEvictBytes : 0, 1);
  volatile int64_t sink = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < static_cast<int64_t>(evict.size()); i += kLine) evict[i]++;
    if (gap_us >= 0) {
      for (int64_t i = 0; i < kBytes; i += kLine) buf[i]++;
      const auto until = Clock::now() + std::chrono::microseconds(gap_us);
      while (Clock::now() < until) {
      }
    }
    const auto t0 = Clock::now();
    int64_t sum = 0;
    for (int64_t i = 0; i < kBytes; i += kLine) sum += buf[i];
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    sink = sink + sum;
  }
}
BENCHMARK(BM_ReadAfterGap)
    ->ArgName("gap_us")
    ->Arg(-1)
    ->Arg(0)
    ->Arg(1000)
    ->Arg(4000)
    ->Arg(16000)
    ->Arg(64000)
    ->UseManualTime();

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
