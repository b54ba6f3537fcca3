// CtxArray and Mirror (sharding/internal/ctx_array.h), the ctx-memory buffers of the sharded
// phases. Mirror of zero elements must hand back the mirror's own storage, never null and never
// the caller's host pointer: on a CUDA context the owner path passes it to a kernel as device
// memory, and the CUDA forward refused null indices where the CPU twin accepted them (the
// review's L1). The CPU context runs the same branch; the CUDA half skips without a device
// (bench/gpu_check.sh runs this binary on the GPU with the other sharding_*_cuda_test).
#include "sharding/internal/ctx_array.h"

#include <memory>
#include <vector>

#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "gtest/gtest.h"

namespace tessera::internal {
namespace {

void CheckMirrorOnContext(const DeviceContext& ctx) {
  CtxArray<int64_t> mirror;
  // Zero elements: from a null pointer (an empty vector) and from a stale host pointer (a
  // cleared vector keeps its capacity).
  std::vector<int64_t> empty;
  auto a = Mirror(ctx, empty, &mirror, "the test's ids");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NE(*a, nullptr);
  EXPECT_EQ(*a, mirror.data());
  std::vector<int64_t> cleared = {1, 2, 3};
  cleared.clear();
  auto b = Mirror(ctx, cleared.data(), 0, &mirror, "the test's ids");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*b, cleared.data());
  EXPECT_EQ(*b, mirror.data());

  // Elements: the host pointer itself on a CPU context (no copy), a copy on CUDA; either way
  // the values read back through CopyToHost.
  std::vector<int64_t> ids = {5, 7, 11, 13};
  auto c = Mirror(ctx, ids, &mirror, "the test's ids");
  ASSERT_TRUE(c.ok()) << c.status();
  if (ctx.is_cuda()) {
    EXPECT_EQ(*c, mirror.data());
  } else {
    EXPECT_EQ(*c, ids.data());
  }
  std::vector<int64_t> back(ids.size(), -1);
  ASSERT_TRUE(CopyToHost(ctx, back.data(), *c, 4).ok());
  EXPECT_EQ(back, ids);

  // CopyFromHost into ctx memory and back.
  CtxArray<float> buf;
  auto d = buf.Reserve(ctx, 3, "the test's floats");
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<float> vals = {0.5f, -2.0f, 3.25f};
  ASSERT_TRUE(CopyFromHost(ctx, *d, vals.data(), 3).ok());
  std::vector<float> got(3, 0.0f);
  ASSERT_TRUE(CopyToHost(ctx, got.data(), static_cast<const float*>(*d), 3).ok());
  EXPECT_EQ(got, vals);
}

TEST(CtxArrayTest, MirrorOfZeroElementsIsTheMirrorsStorageOnTheCpu) {
  CheckMirrorOnContext(DeviceContext::Cpu());
}

TEST(CtxArrayTest, MirrorOfZeroElementsIsDeviceMemoryOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CPU half above still ran";
  auto cuda = CudaContext::Create(CudaContextOptions{});
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  CheckMirrorOnContext((*cuda)->context());
}

}  // namespace
}  // namespace tessera::internal
