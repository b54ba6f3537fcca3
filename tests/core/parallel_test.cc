// ParallelFor / ParallelForDynamic: every item exactly once on any thread count, thread indices
// in range, and a ParallelFor nested in a parallel body runs whole on its calling thread.
#include "core/parallel.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ParallelTest, DynamicRunsEveryItemOnceAndNestedLoopsRunWhole) {
  for (int threads : {1, 2, 3}) {
    ScopedNumThreads tc(threads);
    const int64_t n = 17;
    std::vector<std::atomic<int>> seen(n);
    std::vector<int64_t> inner_sum(n, 0);
    std::atomic<int> bad_thread{0};
    ParallelForDynamic(n, [&](int64_t i, int thread) {
      if (thread < 0 || thread >= threads) ++bad_thread;
      ++seen[i];
      // A nested ParallelFor covers its whole range on this thread.
      ParallelFor(100, 1, [&](int64_t b, int64_t e, int t) {
        if (t != 0) ++bad_thread;
        for (int64_t k = b; k < e; ++k) inner_sum[i] += k;
      });
    });
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(seen[i].load(), 1) << threads << " threads, item " << i;
      EXPECT_EQ(inner_sum[i], 4950) << threads << " threads, item " << i;
    }
    EXPECT_EQ(bad_thread.load(), 0);
  }
  ParallelForDynamic(0, [](int64_t, int) { FAIL() << "no items"; });
}

}  // namespace
}  // namespace tessera
