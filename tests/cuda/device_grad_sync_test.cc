// DeviceGradSync with the CUDA stager (copies on the comm stream, events polled) over the world
// of one: gradients written by work on the compute stream before MarkReady are what is copied,
// and the sums (here the values themselves) come back into the device gradients in stream order.
// Several ranks sharing the GPU are bench/gpu_check.sh's job (mpi2 / mpi4). Skips without a device.
#include <vector>

#include "core/pinned.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "sharding/device_grad_sync.h"

namespace tessera {
namespace {

using cuda_testing::ToDevice;
using cuda_testing::ToHost;

class DeviceGradSyncCudaTest : public cuda_testing::CudaTest {};

TEST_F(DeviceGradSyncCudaTest, CopiesLandAndSumsComeBackOverSteps) {
  auto world = CreateSingleProcessCommunicator();
  // Two buckets of 1 KiB: a bucket closes once it holds bucket_bytes (sharding/grad_buckets.cc),
  // so the large tensor goes first (small first would share one bucket with it).
  std::vector<std::vector<float>> host = {std::vector<float>(70000, 2.0f),
                                          std::vector<float>(3, 1.0f)};
  std::vector<Buffer> dev;
  std::vector<DeviceGradTensor> views;
  for (auto& h : host) dev.push_back(ToDevice(h));
  for (size_t i = 0; i < dev.size(); ++i) {
    views.push_back({dev[i].data<float>(), static_cast<int64_t>(host[i].size())});
  }
  auto stager = CreateCudaGradStager(gpu());
  ASSERT_TRUE(stager.ok()) << stager.status();
  auto s = DeviceGradSync::Create(world.get(), views, std::move(stager).value(),
                                  BucketedAllReduceOptions{1024});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->num_buckets(), 2);
  for (int step = 0; step < 3; ++step) {
    // A copy queued on the compute stream before MarkReady stands in for backward's kernel.
    for (size_t i = 0; i < host.size(); ++i) {
      for (float& x : host[i]) x = static_cast<float>(step * 10 + i + 1);
      ASSERT_TRUE(CudaCopyToDevice(gpu(), dev[i].raw(), host[i].data(),
                                   host[i].size() * sizeof(float))
                      .ok());
      if (step > 0) {
        ASSERT_TRUE((*s)->MarkReady(dev[i].data<float>()).ok());
      }
    }
    ASSERT_TRUE((*s)->Finish().ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_EQ(ToHost<float>(dev[i], static_cast<int64_t>(host[i].size())), host[i])
          << "step " << step << " tensor " << i;
    }
  }
}

TEST_F(DeviceGradSyncCudaTest, EventsReportTheCommStream) {
  auto e = CudaEvent::Create();
  ASSERT_TRUE(e.ok()) << e.status();
  auto done = e->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);  // never recorded
  std::vector<float> big(1 << 20, 3.0f);
  Buffer d = ToDevice(big);
  auto pinned = PinnedBuffer::Allocate(big.size() * sizeof(float));
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(CudaCommWaitsForCompute(gpu()).ok());
  ASSERT_TRUE(CudaCommCopyToHost(gpu(), pinned->data(), d.raw(), big.size() * sizeof(float)).ok());
  ASSERT_TRUE(e->RecordOnComm(gpu()).ok());
  ASSERT_TRUE(e->Wait().ok());
  done = e->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ(pinned->as<float>()[12345], 3.0f);
}

}  // namespace
}  // namespace tessera
