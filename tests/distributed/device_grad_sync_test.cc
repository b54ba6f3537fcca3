// DeviceGradSync under 4 ranks with the host stager (copies land only when polled, after a set
// number of polls, as a GPU's copy engine gets to them later): any bucket size and any landing
// delay give the bits of one flat all-reduce, written back into the "device" gradients; buckets
// start before Finish only once their copies have landed; bad use is rejected by name.
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "noisy_floats.h"
#include "sharding/communicator.h"
#include "sharding/device_grad_sync.h"

namespace tessera {
namespace {

using ::tessera::testing::NoisyFloats;
using ::tessera::testing::World;

// The gradients of a small model, in backward order.
std::vector<std::vector<float>> Grads(int me, int step) {
  std::vector<std::vector<float>> t;
  const int64_t sizes[] = {1, 64, 8, 512, 16, 2048, 13};
  for (int i = 0; i < 7; ++i) t.push_back(NoisyFloats(sizes[i], 1000 * step + 31 * i + me));
  return t;
}

std::vector<DeviceGradTensor> Views(std::vector<std::vector<float>>& g) {
  std::vector<DeviceGradTensor> v;
  for (auto& x : g) v.push_back({x.data(), static_cast<int64_t>(x.size())});
  return v;
}

// The bucket layout tests/cuda/device_grad_sync_test.cc relies on: a bucket closes once it holds
// bucket_bytes, so 3 floats then 70,000 share one bucket of 1 KiB and 70,000 then 3 make two.
TEST(DeviceGradSyncTest, BucketsCloseOnceTheyHoldBucketBytes) {
  Communicator& w = *World();
  for (bool small_first : {true, false}) {
    std::vector<std::vector<float>> g = {std::vector<float>(small_first ? 3 : 70000, 1.0f),
                                         std::vector<float>(small_first ? 70000 : 3, 2.0f)};
    auto s = DeviceGradSync::Create(&w, Views(g), CreateHostGradStager(1),
                                    BucketedAllReduceOptions{1024});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->num_buckets(), small_first ? 1 : 2);
    ASSERT_TRUE((*s)->Finish().ok());
  }
}

TEST(DeviceGradSyncTest, AnyBucketSizeAndLandingDelayGiveTheFlatAllReduceBits) {
  Communicator& w = *World();
  const int me = w.rank();
  for (int polls : {1, 2, 1000}) {
    for (int64_t bucket : {int64_t{1}, int64_t{100}, int64_t{25} << 20}) {
      // One set of "device" gradients, reused over three steps as a model's are.
      std::vector<std::vector<float>> g = Grads(me, 0);
      auto s = DeviceGradSync::Create(&w, Views(g), CreateHostGradStager(polls),
                                      BucketedAllReduceOptions{bucket});
      ASSERT_TRUE(s.ok()) << s.status();
      if (bucket == 1) {
        EXPECT_EQ((*s)->num_buckets(), 7);
      }
      for (int step = 0; step < 3; ++step) {
        std::vector<std::vector<float>> fresh = Grads(me, step);
        for (size_t i = 0; i < g.size(); ++i) g[i] = fresh[i];  // same storage, new values
        std::vector<float> flat;
        for (auto& t : fresh) flat.insert(flat.end(), t.begin(), t.end());
        ASSERT_TRUE(w.AllReduce(flat.data(), static_cast<int64_t>(flat.size()), ReduceOp::kSum)
                        .ok());
        // Step 0 marks in backward order, step 1 out of order with tensor 4 never marked,
        // step 2 marks nothing (the first step of a model: Finish copies all).
        const std::vector<int> order = step == 0   ? std::vector<int>{0, 1, 2, 3, 4, 5, 6}
                                       : step == 1 ? std::vector<int>{1, 0, 3, 2, 6, 5}
                                                   : std::vector<int>{};
        for (int i : order) ASSERT_TRUE((*s)->MarkReady(g[i].data()).ok());
        if (step == 1) {
          ASSERT_TRUE((*s)->Poll().ok());
        }
        ASSERT_TRUE((*s)->Finish().ok());
        if (bucket == 1 && step == 0) {
          // polls 1: each copy lands at once and its bucket starts; 2: each lands at the next
          // mark (the last one at Finish); 1000: none before Finish.
          EXPECT_EQ((*s)->started_early_last_step(), polls == 1 ? 7 : polls == 2 ? 6 : 0);
        }
        if (step == 2) {
          EXPECT_EQ((*s)->started_early_last_step(), 0);
        }
        size_t at = 0;
        for (size_t i = 0; i < g.size(); ++i) {
          for (size_t k = 0; k < g[i].size(); ++k) {
            ASSERT_EQ(g[i][k], flat[at + k])
                << "polls " << polls << " bucket " << bucket << " step " << step << " tensor "
                << i << " [" << k << "]";
          }
          at += g[i].size();
        }
      }
    }
  }
}

TEST(DeviceGradSyncTest, ACopyReadsTheGradientWhenItLands) {
  // The stager's copy reads device memory when it lands, not when it is queued: what a kernel
  // queued before MarkReady writes is what is summed, however late the copy runs.
  Communicator& w = *World();
  std::vector<std::vector<float>> g = {std::vector<float>(5, 0.0f)};
  auto s = DeviceGradSync::Create(&w, Views(g), CreateHostGradStager(1000));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->MarkReady(g[0].data()).ok());
  for (float& x : g[0]) x = 1.0f + static_cast<float>(w.rank());  // "the kernel runs late"
  ASSERT_TRUE((*s)->Finish().ok());
  const float want = static_cast<float>(w.size() * (w.size() + 1) / 2);
  for (float x : g[0]) EXPECT_EQ(x, want);
}

TEST(DeviceGradSyncTest, BadUseIsRejected) {
  Communicator& w = *World();
  std::vector<std::vector<float>> g = {std::vector<float>(4), std::vector<float>(4)};
  auto s = DeviceGradSync::Create(&w, Views(g), CreateHostGradStager(1));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->MarkReady(g[0].data()).ok());
  EXPECT_NE((*s)->MarkReady(g[0].data()).message().find("marked twice"), std::string::npos);
  float other = 0;
  EXPECT_NE((*s)->MarkReady(&other).message().find("unknown tensor"), std::string::npos);
  ASSERT_TRUE((*s)->Finish().ok());
  std::vector<DeviceGradTensor> dup = {{g[0].data(), 4}, {g[0].data(), 4}};
  EXPECT_NE(DeviceGradSync::Create(&w, dup, CreateHostGradStager(1)).status().message().find(
                "repeats"),
            std::string::npos);
  std::vector<DeviceGradTensor> empty = {{g[0].data(), 0}};
  EXPECT_NE(DeviceGradSync::Create(&w, empty, CreateHostGradStager(1)).status().message().find(
                "empty"),
            std::string::npos);
  EXPECT_NE(DeviceGradSync::Create(&w, Views(g), CreateHostGradStager(1),
                                   BucketedAllReduceOptions{0})
                .status()
                .message()
                .find("bucket_bytes"),
            std::string::npos);
  EXPECT_NE(DeviceGradSync::Create(&w, Views(g), nullptr).status().message().find("null stager"),
            std::string::npos);
  EXPECT_FALSE(CreateCudaGradStager(DeviceContext::Cpu()).ok());
}

}  // namespace
}  // namespace tessera
