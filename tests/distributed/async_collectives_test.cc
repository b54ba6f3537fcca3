// Nonblocking collectives of the MPI backend and the bucketed dense all-reduce under 4 ranks:
// several in flight at once, finished in any order, interleaved with blocking collectives on the
// same communicator, give the same bits as the blocking AllReduce / AllToAllV; buckets of any
// size give the bits of one flat all-reduce; bad use is rejected by name.
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "noisy_floats.h"
#include "sharding/communicator.h"
#include "sharding/grad_buckets.h"
#include "sharding/process_grid.h"

namespace tessera {
namespace {

using ::tessera::testing::NoisyFloats;
using ::tessera::testing::World;

TEST(AsyncCollectivesTest, AllReduceInFlightMatchesBlockingBits) {
  Communicator& w = *World();
  const int me = w.rank();
  const std::vector<int64_t> sizes = {1, 3, 1000, 4099, 0, 77};
  std::vector<std::vector<float>> want, got;
  for (size_t i = 0; i < sizes.size(); ++i) {
    want.push_back(NoisyFloats(sizes[i], 100 * i + me));
    got.push_back(want.back());
    ASSERT_TRUE(w.AllReduce(want.back().data(), sizes[i], i % 2 ? ReduceOp::kAvg : ReduceOp::kSum)
                    .ok());
  }
  w.ResetStats();
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto p = w.StartAllReduce(got[i].data(), sizes[i], i % 2 ? ReduceOp::kAvg : ReduceOp::kSum);
    ASSERT_TRUE(p.ok()) << p.status();
    pending.push_back(std::move(*p));
    if (i == 2) {
      // A blocking collective on the same communicator while three are in flight.
      int64_t one = 1;
      ASSERT_TRUE(w.AllReduce(&one, 1, ReduceOp::kSum).ok());
      EXPECT_EQ(one, 4);
    }
  }
  // Finish in reverse order on even ranks, in order on odd ones, with Test polls in between.
  for (auto& p : pending) ASSERT_TRUE(p->Test().ok());
  for (size_t k = 0; k < pending.size(); ++k) {
    size_t i = me % 2 == 0 ? pending.size() - 1 - k : k;
    ASSERT_TRUE(pending[i]->Wait().ok());
    auto done = pending[i]->Test();
    ASSERT_TRUE(done.ok());
    EXPECT_TRUE(*done);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "all-reduce " << i << " on rank " << me;
  }
  int64_t bytes = 0;
  for (int64_t n : sizes) bytes += 2 * 3 * n * 4 / 4;
  EXPECT_EQ(w.stats().bytes_of(CollectiveKind::kAllReduce), bytes + 2 * 3 * 8 / 4);
}

TEST(AsyncCollectivesTest, AllToAllVInFlightMatchesBlocking) {
  Communicator& w = *World();
  const int p = w.size(), me = w.rank();
  std::vector<int64_t> sc(p), sd(p), rc(p), rd(p);
  for (int r = 0; r < p; ++r) {
    sc[r] = 4 * (me + 2 * r + 1);
    rc[r] = 4 * (r + 2 * me + 1);
  }
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
  std::vector<int32_t> send((sd.back() + sc.back()) / 4);
  std::iota(send.begin(), send.end(), 1000 * me);
  std::vector<int32_t> want((rd.back() + rc.back()) / 4), got1(want.size()),
      got2(want.size());
  ASSERT_TRUE(w.AllToAllV(static_cast<const void*>(send.data()), sc, sd,
                          static_cast<void*>(want.data()), rc, rd)
                  .ok());
  auto a = w.StartAllToAllV(send.data(), sc, sd, got1.data(), rc, rd);
  ASSERT_TRUE(a.ok());
  float x = 1.0f + me;
  auto b = w.StartAllReduce(&x, 1, ReduceOp::kSum);
  ASSERT_TRUE(b.ok());
  auto c = w.StartAllToAllV(send.data(), sc, sd, got2.data(), rc, rd);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Wait().ok());
  ASSERT_TRUE((*b)->Wait().ok());
  ASSERT_TRUE((*a)->Wait().ok());
  EXPECT_EQ(got1, want);
  EXPECT_EQ(got2, want);
  EXPECT_EQ(x, 10.0f);
  // Bad spans are rejected before anything starts.
  std::vector<int64_t> three(3, 0);
  auto bad = w.StartAllToAllV(send.data(), three, three, got1.data(), three, three);
  EXPECT_FALSE(bad.ok());
}

TEST(AsyncCollectivesTest, SubCommunicatorsRunIndependently) {
  auto grid = ProcessGrid::Create(World(), ProcessGridOptions{2, GridLayout::kReplicasAdjacent});
  ASSERT_TRUE(grid.ok());
  Communicator& g = grid->sharding_group();
  Communicator& rep = grid->replica_group();
  std::vector<float> a = NoisyFloats(513, 7 + World()->rank());
  std::vector<float> b = NoisyFloats(33, 9 + World()->rank());
  std::vector<float> wa = a, wb = b;
  ASSERT_TRUE(g.AllReduce(wa.data(), 513, ReduceOp::kSum).ok());
  ASSERT_TRUE(rep.AllReduce(wb.data(), 33, ReduceOp::kSum).ok());
  auto pa = g.StartAllReduce(a.data(), 513, ReduceOp::kSum);
  auto pb = rep.StartAllReduce(b.data(), 33, ReduceOp::kSum);
  ASSERT_TRUE(pa.ok() && pb.ok());
  ASSERT_TRUE((*pb)->Wait().ok());
  ASSERT_TRUE((*pa)->Wait().ok());
  EXPECT_EQ(a, wa);
  EXPECT_EQ(b, wb);
}

// Gradient tensors of a small MLP-like model, in backward order.
std::vector<std::vector<float>> Tensors(int me) {
  std::vector<std::vector<float>> t;
  const int64_t sizes[] = {1, 64, 8, 512, 16, 2048, 13};
  for (int i = 0; i < 7; ++i) t.push_back(NoisyFloats(sizes[i], 31 * i + me));
  return t;
}

TEST(BucketedAllReduceTest, AnyBucketSizeGivesTheFlatAllReduceBits) {
  Communicator& w = *World();
  const int me = w.rank();
  // The reference: one flat all-reduce of all tensors.
  std::vector<std::vector<float>> ref = Tensors(me);
  std::vector<float> flat;
  for (auto& t : ref) flat.insert(flat.end(), t.begin(), t.end());
  ASSERT_TRUE(w.AllReduce(flat.data(), static_cast<int64_t>(flat.size()), ReduceOp::kSum).ok());
  for (int64_t bucket : {int64_t{1}, int64_t{100}, int64_t{4096}, int64_t{25} << 20}) {
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> t = Tensors(me);
      std::vector<absl::Span<float>> spans;
      for (auto& x : t) spans.push_back(absl::MakeSpan(x));
      auto r = BucketedAllReduce::Create(&w, spans, BucketedAllReduceOptions{bucket});
      ASSERT_TRUE(r.ok()) << r.status();
      if (bucket == 1) EXPECT_EQ((*r)->num_buckets(), 7);
      if (bucket == (int64_t{25} << 20)) EXPECT_EQ((*r)->num_buckets(), 1);
      // Step 0 marks in backward order; step 1 marks out of order and leaves tensor 4 unmarked
      // (Finish starts what is left).
      std::vector<int> order = step == 0 ? std::vector<int>{0, 1, 2, 3, 4, 5, 6}
                                         : std::vector<int>{1, 0, 3, 2, 6, 5};
      for (int i : order) ASSERT_TRUE((*r)->MarkReady(spans[i].data()).ok());
      ASSERT_TRUE((*r)->Finish().ok());
      if (bucket == 1 && step == 0) EXPECT_EQ((*r)->started_early_last_step(), 7);
      if (bucket == 1 && step == 1) EXPECT_EQ((*r)->started_early_last_step(), 4);
      size_t at = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        for (size_t k = 0; k < t[i].size(); ++k) {
          ASSERT_EQ(t[i][k], flat[at + k]) << "bucket " << bucket << " tensor " << i;
        }
        at += t[i].size();
      }
    }
  }
}

TEST(BucketedAllReduceTest, BadUseIsRejected) {
  Communicator& w = *World();
  std::vector<float> a(4), b(4);
  auto r = BucketedAllReduce::Create(&w, {absl::MakeSpan(a), absl::MakeSpan(b)},
                                     BucketedAllReduceOptions{8});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->MarkReady(0).ok());
  absl::Status twice = (*r)->MarkReady(0);
  EXPECT_NE(twice.message().find("marked twice"), std::string::npos) << twice;
  float other = 0;
  EXPECT_NE((*r)->MarkReady(&other).message().find("unknown tensor"), std::string::npos);
  EXPECT_NE((*r)->MarkReady(5).message().find("out of range"), std::string::npos);
  ASSERT_TRUE((*r)->Finish().ok());
  auto zero = BucketedAllReduce::Create(&w, {absl::MakeSpan(a)}, BucketedAllReduceOptions{0});
  EXPECT_NE(zero.status().message().find("bucket_bytes"), std::string::npos);
  auto dup = BucketedAllReduce::Create(&w, {absl::MakeSpan(a), absl::MakeSpan(a)});
  EXPECT_NE(dup.status().message().find("repeats"), std::string::npos);
}

}  // namespace
}  // namespace tessera
