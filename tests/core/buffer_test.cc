#include "core/buffer.h"

#include "core/cuda_runtime.h"
#include "core/parallel.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(BufferTest, AllocateZeroedAlignedAndMove) {
  auto b = Buffer::Allocate(Device::kCpu, DType::kF32, {3, 5});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->numel(), 15);
  EXPECT_EQ(b->bytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->raw()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(b->data<float>()[i], 0.0f);
  Buffer moved = std::move(*b);
  EXPECT_TRUE(b->empty());
  EXPECT_EQ(moved.numel(), 15);
  EXPECT_TRUE(moved.owning());
}

TEST(BufferTest, LargeAllocationUsesZeroedPages) {
  Buffer b = Buffer::Host(DType::kF32, {1 << 20});
  float* p = b.data<float>();
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[(1 << 20) - 1], 0.0f);
  p[12345] = 1.5f;
  EXPECT_EQ(p[12345], 1.5f);
}

TEST(BufferTest, NegativeShapeIsAnError) {
  auto b = Buffer::Allocate(Device::kCpu, DType::kF32, {3, -1});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BufferTest, CudaWithoutDeviceFailsCleanly) {
  if (CudaCompiled()) GTEST_SKIP() << "CUDA path compiled; covered by the CUDA tests";
  auto b = Buffer::Allocate(Device::kCuda, DType::kF32, {4});
  EXPECT_FALSE(b.ok());
}

TEST(ParallelTest, ChunksCoverRangeOnceInOrder) {
  for (int threads = 1; threads <= 5; ++threads) {
    int64_t prev_end = 0;
    for (int t = 0; t < threads; ++t) {
      int64_t b, e;
      ChunkRange(17, threads, t, &b, &e);
      EXPECT_EQ(b, prev_end);
      prev_end = e;
    }
    EXPECT_EQ(prev_end, 17);
  }
  std::vector<int> hits(1000, 0);
  ParallelFor(1000, 10, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

}  // namespace
}  // namespace tessera
