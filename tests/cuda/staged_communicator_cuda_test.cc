// StagedCommunicator with the CUDA copier (pinned staging, copies on the compute stream) over
// the world of one: device buffers in, the same values out, receive gaps untouched. Several
// ranks sharing one GPU through MPI are bench/gpu_check.sh's job. Skips without a device.
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "sharding/staged_communicator.h"

namespace tessera {
namespace {

using cuda_testing::ToDevice;
using cuda_testing::ToHost;

class StagedCommunicatorCudaTest : public cuda_testing::CudaTest {
 protected:
  std::unique_ptr<StagedCommunicator> Make() {
    auto copier = CreateCudaStagingCopier(gpu());
    EXPECT_TRUE(copier.ok()) << copier.status();
    auto c = StagedCommunicator::Create(CreateSingleProcessCommunicator(),
                                        std::move(copier).value());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(c).value();
  }
};

TEST_F(StagedCommunicatorCudaTest, AllToAllVAndAllGatherVOnDeviceBuffers) {
  auto comm = Make();
  std::vector<float> send = {0, 0, 1, 2, 3};
  Buffer d_send = ToDevice(send);
  Buffer d_recv = ToDevice(std::vector<float>{-1, -1, -1, -1, -1, -1});
  const std::vector<int64_t> n = {3}, sd = {2}, rd = {1};
  ASSERT_TRUE(comm->AllToAllV<float>(d_send.data<float>(), n, sd, d_recv.data<float>(), n, rd)
                  .ok());
  EXPECT_EQ(ToHost<float>(d_recv, 6), (std::vector<float>{-1, 1, 2, 3, -1, -1}));

  Buffer d_gather = ToDevice(std::vector<float>{-1, -1, -1, -1});
  ASSERT_TRUE(comm->AllGatherV(d_send.data<float>() + 2, 2 * sizeof(float),
                               d_gather.data<float>(), std::vector<int64_t>{2 * sizeof(float)},
                               std::vector<int64_t>{sizeof(float)})
                  .ok());
  EXPECT_EQ(ToHost<float>(d_gather, 4), (std::vector<float>{-1, 1, 2, -1}));
}

TEST_F(StagedCommunicatorCudaTest, AllReduceAndBroadcastOnDeviceBuffers) {
  auto comm = Make();
  Buffer d = ToDevice(std::vector<float>{1.5f, -2.0f, 3.25f});
  ASSERT_TRUE(comm->AllReduce(d.data<float>(), 3, ReduceOp::kAvg).ok());
  EXPECT_EQ(ToHost<float>(d, 3), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  Buffer i = ToDevice(std::vector<int64_t>{9, -4});
  ASSERT_TRUE(comm->AllReduce(i.data<int64_t>(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost<int64_t>(i, 2), (std::vector<int64_t>{9, -4}));
  ASSERT_TRUE(comm->Broadcast(d.data<float>(), 3 * sizeof(float), 0).ok());
  EXPECT_EQ(ToHost<float>(d, 3), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  // A larger all-to-all after small ones: the pinned staging grows.
  std::vector<float> big(1 << 20);
  for (size_t k = 0; k < big.size(); ++k) big[k] = static_cast<float>(k);
  Buffer d_big = ToDevice(big);
  Buffer d_out = ToDevice(std::vector<float>(big.size(), 0.0f));
  const std::vector<int64_t> cnt = {static_cast<int64_t>(big.size())}, zero = {0};
  ASSERT_TRUE(
      comm->AllToAllV<float>(d_big.data<float>(), cnt, zero, d_out.data<float>(), cnt, zero).ok());
  EXPECT_EQ(ToHost<float>(d_out, static_cast<int64_t>(big.size())), big);
}

}  // namespace
}  // namespace tessera
