// CudaContext, the stream-ordered helpers and PinnedBuffer. The first two tests run everywhere:
// without a device, creating a context must fail with a clear error instead of crashing.
#include <cstring>
#include <vector>

#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/pinned.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;

TEST(CudaContextNoDevice, CreateFailsClearlyWithoutADevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto c = CudaContext::Create(CudaContextOptions{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_NE(c.status().message().find("visible CUDA devices"), std::string::npos) << c.status();
  EXPECT_FALSE(CudaDeviceForLocalRank(0).ok());
}

TEST(CudaContextNoDevice, HelpersRejectACpuContext) {
  const DeviceContext cpu = DeviceContext::Cpu();
  char byte = 0;
  const absl::Status st = CudaCopyToDevice(cpu, &byte, &byte, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(CudaSynchronize(cpu).ok());
}

TEST_F(CudaTest, ContextHoldsStreamsAndHandle) {
  const DeviceContext& ctx = gpu();
  EXPECT_TRUE(ctx.is_cuda());
  EXPECT_NE(ctx.compute_stream, nullptr);
  EXPECT_NE(ctx.comm_stream, nullptr);
  EXPECT_NE(ctx.compute_stream, ctx.comm_stream);
  EXPECT_NE(ctx.cublas_handle, nullptr);
  EXPECT_EQ(ctx.cuda_device, 0);
  auto d = CudaDeviceForLocalRank(CudaDeviceCount() + 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 1 % CudaDeviceCount());
}

TEST_F(CudaTest, RejectsAnOrdinalOutOfRange) {
  CudaContextOptions o;
  o.device = CudaDeviceCount();
  auto c = CudaContext::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaTest, PinnedRoundTripThroughStreamOrderedScratch) {
  const DeviceContext& ctx = gpu();
  constexpr size_t kN = 1 << 20;
  auto src = PinnedBuffer::Allocate(kN * sizeof(float));
  ASSERT_TRUE(src.ok()) << src.status();
  auto dst = PinnedBuffer::Allocate(kN * sizeof(float));
  ASSERT_TRUE(dst.ok()) << dst.status();
  for (size_t i = 0; i < kN; ++i) src->as<float>()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  std::memset(dst->data(), 0xFF, kN * sizeof(float));
  auto a = CudaMallocAsync(ctx, kN * sizeof(float));
  auto b = CudaMallocAsync(ctx, kN * sizeof(float));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(CudaMemsetAsync(ctx, *b, 0xFF, kN * sizeof(float)).ok());
  ASSERT_TRUE(CudaCopyToDevice(ctx, *a, src->data(), kN * sizeof(float)).ok());
  ASSERT_TRUE(CudaCopyDeviceToDevice(ctx, *b, *a, kN * sizeof(float)).ok());
  ASSERT_TRUE(CudaCopyToHost(ctx, dst->data(), *b, kN * sizeof(float)).ok());
  EXPECT_EQ(std::memcmp(src->data(), dst->data(), kN * sizeof(float)), 0);
  ASSERT_TRUE(CudaFreeAsync(ctx, *a).ok());
  ASSERT_TRUE(CudaFreeAsync(ctx, *b).ok());
  ASSERT_TRUE(CudaSynchronizeAll(ctx).ok());
  // Reserve grows and never shrinks.
  ASSERT_TRUE(src->Reserve(16).ok());
  EXPECT_EQ(src->bytes(), kN * sizeof(float));
  ASSERT_TRUE(src->Reserve(2 * kN * sizeof(float)).ok());
  EXPECT_EQ(src->bytes(), 2 * kN * sizeof(float));
}

TEST_F(CudaTest, LegacyStreamCopiesSeeComputeStreamWork) {
  // CudaMemcpy (legacy default stream) after work queued on the compute stream must see it: the
  // context's streams are blocking streams on purpose (core/cuda_context_cuda.cu).
  const DeviceContext& ctx = gpu();
  constexpr size_t kBytes = 64 << 20;
  auto p = CudaMallocAsync(ctx, kBytes);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(CudaMemsetAsync(ctx, *p, 0x3C, kBytes).ok());
  std::vector<unsigned char> host(kBytes, 0);
  ASSERT_TRUE(CudaMemcpy(host.data(), *p, kBytes).ok());
  EXPECT_EQ(host.front(), 0x3C);
  EXPECT_EQ(host.back(), 0x3C);
  ASSERT_TRUE(CudaFreeAsync(ctx, *p).ok());
  ASSERT_TRUE(CudaSynchronize(ctx).ok());
}

}  // namespace
}  // namespace tessera
