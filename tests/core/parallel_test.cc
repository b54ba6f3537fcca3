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

// RunPair: on a 2-thread pool the two jobs run at once, each seeing one thread, and the caller's
// count is 2 again after; not worth it (or another count): one after the other with the pool as
// it is.
TEST(ParallelTest, RunPairRunsBothJobsOnOneThreadEach) {
  ScopedNumThreads two(2);
  int seen_a = 0, seen_b = 0;
  RunPair(
      true, [&] { seen_a = NumThreads(); }, [&] { seen_b = NumThreads(); });
  EXPECT_EQ(seen_a, 1);
  EXPECT_EQ(seen_b, 1);
  EXPECT_EQ(NumThreads(), 2);
  std::vector<int> order;
  RunPair(
      false, [&] { order.push_back(NumThreads()); }, [&] { order.push_back(10 + NumThreads()); });
  EXPECT_EQ(order, (std::vector<int>{2, 12}));
  ScopedNumThreads three(3);
  order.clear();
  RunPair(
      true, [&] { order.push_back(NumThreads()); }, [&] { order.push_back(10 + NumThreads()); });
  EXPECT_EQ(order, (std::vector<int>{3, 13}));
}

}  // namespace
}  // namespace tessera
